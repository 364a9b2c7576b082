"""The output of each ``halluprobe`` command: its ``--json`` keys (key -> meaning) and the verdict line.

`halubench_data.clikit.add_json_arg` attaches each to its command; the CLI page renders them and every
document written is checked against its schema, so the page, the code and the output cannot disagree.
"""

from __future__ import annotations

EVAL_RESULT = (
    "{f1, auroc, precision, recall, threshold, n, n_positive, n_groups, f1_ci, auroc_ci, precision_ci, "
    "recall_ci, n_bootstrap, confidence} (halubench_data.EvalResult; NaN as null)"
)

EXTRACT = {
    "cache": "the feature-cache folder (OUT/cache)",
    "records": "records in the cache after the run",
    "splits": "{train, validation, test} -> examples extracted or found in the cache",
}
TRAIN = {
    "out": "the report folder",
    "report": "the Markdown report (OUT/report.md)",
    "detectors": "feature set -> folder of its saved detector (for evaluate, predict and stream)",
    "results": "the document written to OUT/results.json: {format, scores, datasets: dataset -> {n_test, "
    f"methods: method -> {{kind, ...}}}}, paired_tests, transfer, selection[, localisation]}}; "
    f"each method's metrics as {EVAL_RESULT}",
}
SELECT = {
    "block": "A7 or L9",
    "features": "the chosen features, in the order they were added",
    "provenance": "how they were chosen, as stored in the selection file: procedure, data, versions, and "
    "A7's forward-selection path [{feature, cv_auroc, C}] or L9's C and CV AUROC per C",
    "selection": "the selection JSON written (for train --a7-selection / --l9-selection)",
}
EVALUATE = {
    "dataset": "the dataset's name",
    "split": "the scored split",
    "detector": "the detector folder",
    "methods": f"{{feature set}} -> {EVAL_RESULT}, at the detector's own threshold",
    "floors": f"grounding floor -> {EVAL_RESULT} on the same examples (halubench_data.floor_results)",
    "best_floor": "{method, auroc} of the floor with the highest AUROC (the Δ floor column), or null",
}
PREDICT = {
    "id": "the input line's 'id' (or its line number) with --input; null for --context/--answer",
    "probability": "p(hallucinated), in [0, 1]",
    "label": "1 = hallucinated (probability >= threshold), 0 = supported",
    "threshold": "the threshold the label follows: the detector's (chosen on validation F1) or --threshold's",
    "spans": "[{start, end, text, confidence}]: predicted hallucinated character spans of the answer (start "
    "and end index its characters, text = answer[start:end]), empty when label is 0: from the detector's "
    "token probe when it has one, else the tokens whose score reaches the threshold, else (a hallucinated "
    "answer with no such token) the characters the context does not support; confidence in [0, 1] is "
    "the mean per-token probability of the span's tokens (the answer's probability for the text-only "
    "spans)",
    "tokens": "with --tokens: [{token, score}] per answer token; else null",
    "error": "with --input, only on a line that was not scored (longer than the proxy's positions): "
    "FILE:LINE and the reason; that line has only id and error, and the command exits with status 2",
}
SERVE = {
    "url": "the address the server listens on (printed once it is about to accept requests)",
    "detector": "the served detector's folder, or null for the packaged general detector",
}
"""Fields of ``halluprobe serve --json`` (one document before the server starts)."""

STREAM = {
    "event": "'tokens' for each update, then one 'done'",
    "tokens": "tokens: the answer tokens added by this update",
    "token_ids": "tokens: their ids",
    "token_scores": "tokens: their per-token scores",
    "probability": "the running p(hallucinated) of the answer so far",
    "answer_tokens": "answer tokens scored so far",
    "label": "done: 1 = hallucinated, 0 = supported",
    "threshold": "done: the detector's threshold",
}


def verdict_line(probability: float, threshold: float, label: int) -> str:
    """``p(hallucinated) = P  threshold T  -> verdict``, with digits enough to show P and T differ.

    Three decimals unless both round alike (p = 0.4993 against 0.4987); then up to eight.
    """
    for digits in range(3, 9):
        p, t = f"{probability:.{digits}f}", f"{threshold:.{digits}f}"
        if p != t:
            break
    verdict = "hallucinated" if label else "supported"
    return f"p(hallucinated) = {p}  threshold {t}  -> {verdict}"
