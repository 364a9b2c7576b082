"""The request and response models of ``halluprobe serve``, declared once.

FastAPI validates requests against them and publishes them as the server's OpenAPI schema
(``/openapi.json``); the library fills them (`halluprobe.serving.service`). Scores follow the package's
convention: higher means more likely hallucinated; ``label`` 1 = hallucinated.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def _unicode(text: str) -> str:
    """``text`` when it is valid Unicode: a lone surrogate (JSON can escape one) cannot be tokenised."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"not valid Unicode: a lone surrogate at character {exc.start}") from None
    return text


Text = Annotated[str, AfterValidator(_unicode)]
"""A string that is valid Unicode (refused with 422 otherwise, before it reaches a shared batch)."""


class ScoreItem(BaseModel):
    """One answer to score against its context."""

    model_config = ConfigDict(extra="forbid")

    context: Text = Field(description="The text the answer must be supported by.")
    question: Text = Field("", description="The question the answer replies to (empty: none).")
    answer: Text = Field(description="The answer to check.")


class SpanOut(BaseModel):
    """A predicted hallucinated span of the answer, in characters."""

    start: int = Field(description="First character of the span in the answer.")
    end: int = Field(description="One past its last character (``answer[start:end]`` is the span).")
    text: str = Field(description="``answer[start:end]``.")
    confidence: float = Field(
        description="How sure the detector is that the span is hallucinated, in [0, 1]: the span's own "
        "confidence when the detector gives one, else the mean per-token score of the tokens in the span."
    )


class ItemScore(BaseModel):
    """The verdict on one answer."""

    status: Literal["ok"] = "ok"
    probability: float = Field(description="p(hallucinated) in [0, 1]; higher = more likely hallucinated.")
    label: int = Field(description="1 = hallucinated (probability >= threshold), 0 = supported.")
    threshold: float = Field(description="The detector's threshold, chosen on validation F1.")
    spans: list[SpanOut] = Field(description="Predicted hallucinated spans of the answer.")
    answer_tokens: int = Field(description="Number of answer tokens the proxy read.")


class ItemError(BaseModel):
    """Why one answer of a request was not scored (the other answers are)."""

    status: Literal["error"] = "error"
    error: Literal["too_long", "empty_answer", "failed"] = Field(
        description="'too_long': the example has more tokens than the server reads; 'empty_answer'; "
        "'failed': scoring this answer failed (the others of the batch are scored)."
    )
    message: str = Field(description="One line naming the item and the limit.")


class ScoreResponse(BaseModel):
    """One result per answer of the request, in request order."""

    results: list[ItemScore | ItemError]


class ErrorResponse(BaseModel):
    """A refused request (4xx/5xx)."""

    error: str = Field(description="One line saying what was wrong and what was expected.")


class DetectorCard(BaseModel):
    """What the server scores with."""

    source: str | None = Field(
        description="The name of the detector's folder, never its path (null: built in memory or packaged)."
    )
    proxy: str = Field(description="The proxy model that reads the answers.")
    feature_set: str = Field(description="The detector's feature blocks (e.g. 'A7H64').")
    threshold: float = Field(description="Its decision threshold on p(hallucinated).")
    val_auroc: float | None = Field(description="Its validation AUROC when recorded.")
    training_data: str | None = Field(description="What it was trained on, when the detector file says.")
    layers: list[int] | None = Field(description="Scored proxy layers (null: all).")
    hidden_layers: list[int] = Field(description="Hidden layers it keeps.")
    spans: Literal["token_probe", "token_scores"] = Field(
        description="Where spans come from: a trained token probe, or the per-token scores."
    )
    reads: dict[str, object] = Field(
        description="What the extraction computes for it: layers, tiers, logits, hidden layers."
    )


class Health(BaseModel):
    """``GET /healthz``."""

    status: Literal["ok", "draining"]
    queued: int = Field(description="Answers waiting for or in a forward.")


class StreamStart(BaseModel):
    """First message of ``/v1/stream``: the prompt that the answer's chunks follow."""

    model_config = ConfigDict(extra="forbid")

    context: Text
    question: Text = ""


class StreamChunk(BaseModel):
    """Later messages: ``{"text": ...}`` for each chunk of the answer, then ``{"done": true}``."""

    model_config = ConfigDict(extra="forbid")

    text: Text = ""
    done: bool = False


class StreamEvent(BaseModel):
    """What ``/v1/stream`` sends: the events of ``halluprobe stream --json``, then the closing ``done``."""

    event: Literal["tokens", "done", "error"]
    tokens: list[str] | None = None
    token_ids: list[int] | None = None
    token_scores: list[float] | None = None
    probability: float | None = None
    answer_tokens: int | None = None
    label: int | None = None
    threshold: float | None = None
    message: str | None = None


def one_line(errors: Any, expected: str = "{context, question?, answer} or a list of them") -> str:
    """Pydantic's errors as one line: ``0.answer: Field required; ... (expected ...)``."""
    parts = []
    for err in list(errors)[:3]:
        where = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body",)) or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    if not parts:
        return "malformed request"
    return "; ".join(parts).replace("\n", " ") + f" (expected {expected})"
