"""LLM-judge, MiniCheck and HHEM baselines for contextual hallucination detection.

Scores everywhere: higher means more likely hallucinated (P(True) for a judge, one minus the support
probability for a checker). Labels: 1 = hallucinated, 0 = supported. Nothing here imports torch until a
model is loaded or run.
"""

from halujudge.cache import ScoreCache, text_hash
from halujudge.checkers import HHEM, HHEM_PROMPT, MINICHECK_SYSTEM, MiniCheck
from halujudge.evaluation import (
    JudgeRun,
    Scorer,
    TemplateSelection,
    judge_datasets,
    run_evaluation,
    select_template,
)
from halujudge.judge import LLMJudge, VerdictTokens, apply_chat, verdict_token_ids
from halujudge.loading import ModelSource, WeightsNotFoundError, resolve_source
from halujudge.prompt import Demonstration, PromptTemplate, list_templates, load_template, render_messages
from halujudge.text import chunk_document, split_sentences

__version__ = "0.1.0"

__all__ = [
    "HHEM",
    "HHEM_PROMPT",
    "MINICHECK_SYSTEM",
    "Demonstration",
    "JudgeRun",
    "LLMJudge",
    "MiniCheck",
    "ModelSource",
    "PromptTemplate",
    "ScoreCache",
    "Scorer",
    "TemplateSelection",
    "VerdictTokens",
    "WeightsNotFoundError",
    "apply_chat",
    "chunk_document",
    "list_templates",
    "load_template",
    "render_messages",
    "resolve_source",
    "run_evaluation",
    "judge_datasets",
    "select_template",
    "split_sentences",
    "text_hash",
    "verdict_token_ids",
]
