"""Judge prompt templates, stored as TOML data files in ``halujudge/templates/``.

A template has a system turn (possibly empty) and a user turn with the placeholders ``{context}``,
``{question}`` and ``{response}``. Few-shot templates add a ``demonstration`` format and a list of
labelled ``demonstrations`` that are joined into the system turn at ``{demonstrations}``.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources

__all__ = ["Demonstration", "PromptTemplate", "list_templates", "load_template", "render_messages"]

_FIELDS = re.compile(r"\{(context|question|response|verdict|reason|demonstrations)\}")


@dataclass(frozen=True)
class Demonstration:
    """One labelled example shown to the judge inside a few-shot template."""

    context: str
    """The reference material of the example."""
    question: str
    """The question of the example."""
    response: str
    """The candidate answer of the example."""
    label: int
    """1 when the response is hallucinated (shown as ``True``), 0 when faithful (``False``)."""
    reason: str
    """A short justification shown after the verdict."""


@dataclass(frozen=True)
class PromptTemplate:
    """A judge prompt: a system turn, a user turn, and optional demonstrations."""

    name: str
    """Template name (the file stem), e.g. ``"strict_fewshot"``."""
    description: str
    """One line saying what the template is."""
    system: str
    """System turn; empty when the template has none. May contain ``{demonstrations}``."""
    user: str
    """User turn with ``{context}``, ``{question}`` and ``{response}``."""
    demonstration: str = ""
    """Format of one demonstration; placeholders as ``user`` plus ``{verdict}`` and ``{reason}``."""
    demonstrations: tuple[Demonstration, ...] = ()
    """The labelled demonstrations, in the order shown."""


def _fill(text: str, values: dict[str, str]) -> str:
    """Substitute placeholders in one pass, so text inside a value is never substituted again."""
    return _FIELDS.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def list_templates() -> list[str]:
    """Names of the templates shipped with the package, sorted."""
    folder = resources.files("halujudge") / "templates"
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml"))


def load_template(name: str) -> PromptTemplate:
    """Load a shipped template by name.

    Args:
        name: one of [`list_templates`][halujudge.list_templates] (``plain``, ``claims``, ``strict``,
            ``strict_fewshot``).

    Returns:
        The parsed template.

    Raises:
        ValueError: if no template has this name, or the file lacks a required key.
    """
    known = list_templates()
    if name not in known:
        raise ValueError(f"unknown judge template {name!r}; expected one of {known}")
    raw = tomllib.loads((resources.files("halujudge") / "templates" / f"{name}.toml").read_text("utf-8"))
    missing = {"name", "description", "system", "user"} - raw.keys()
    if missing:
        raise ValueError(f"template file {name}.toml lacks the keys {sorted(missing)}")
    demos = tuple(
        Demonstration(d["context"], d["question"], d["response"], int(d["label"]), d["reason"])
        for d in raw.get("demonstrations", [])
    )
    if demos and not raw.get("demonstration"):
        raise ValueError(f"template file {name}.toml has demonstrations but no 'demonstration' format")
    return PromptTemplate(
        name=raw["name"],
        description=raw["description"],
        system=raw["system"].strip(),
        user=raw["user"].strip(),
        demonstration=raw.get("demonstration", "").strip(),
        demonstrations=demos,
    )


def _demonstration_block(template: PromptTemplate) -> str:
    rendered = []
    for demo in template.demonstrations:
        values = {
            "context": demo.context,
            "question": demo.question,
            "response": demo.response,
            "verdict": "True" if demo.label == 1 else "False",
            "reason": demo.reason,
        }
        rendered.append(_fill(template.demonstration, values))
    return "\n\n".join(rendered)


def render_messages(
    template: PromptTemplate, context: str, question: str, answer: str
) -> list[dict[str, str]]:
    """Render one example into chat messages (before the model's chat template is applied).

    Args:
        template: the judge template.
        context: the reference material.
        question: the question (may be empty).
        answer: the candidate answer to judge.

    Returns:
        list[dict[str, str]]: ``[{"role": "system", ...}, {"role": "user", ...}]``, without the system
            message when the template has no system turn.

    Raises:
        TypeError: if a text argument is not a string.
    """
    for label, value in (("context", context), ("question", question), ("answer", answer)):
        if not isinstance(value, str):
            raise TypeError(f"{label} must be a str, got {type(value).__name__}")
    values = {"context": context, "question": question, "response": answer}
    messages = []
    if template.system:
        system = _fill(template.system, {"demonstrations": _demonstration_block(template)})
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": _fill(template.user, values)})
    return messages
