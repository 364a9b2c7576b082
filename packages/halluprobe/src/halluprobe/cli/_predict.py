"""``halluprobe predict``: its command (`halluprobe.cli` builds its parser and wires it in)."""

from __future__ import annotations

from typing import Any

from halubench_data import clikit

from halluprobe.cli import _schemas as schemas
from halluprobe.cli._inputs import InputRows, check_detector_arg, read_rows


def _prediction_doc(pred, answer: str, item_id: str | None, tokens: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": item_id}
    doc.update(probability=float(pred.probability), label=int(pred.label), threshold=float(pred.threshold))
    doc["spans"] = [
        {
            "start": sp.start,
            "end": sp.end,
            "text": answer[sp.start : sp.end],
            "confidence": float(sp.confidence),
        }
        for sp in pred.spans
    ]
    pairs = zip(pred.tokens, pred.token_scores, strict=True)
    doc["tokens"] = [{"token": t, "score": float(x)} for t, x in pairs] if tokens else None
    return doc


def _check_predict_args(args) -> None:
    """Every flag and path of ``predict``, before torch is imported (errors name the flag)."""
    from halubench_data.io import is_unicode

    if args.input is not None:
        for flag in ("context", "question", "answer"):
            if getattr(args, flag) is not None:  # each line carries its own; never ignore the flag
                raise clikit.UsageError(f"--{flag} does not apply with --input (each line gives its own)")
    elif args.context is None or args.answer is None:
        raise clikit.UsageError("give either --context and --answer, or --input FILE")
    elif args.batch_size is not None:  # one answer is one forward; never ignore the flag
        raise clikit.UsageError("--batch-size applies to --input only (one answer is one forward)")
    args.batch_size = clikit.DEFAULT_BATCH_SIZE if args.batch_size is None else args.batch_size
    if args.batch_size < 1:
        raise clikit.UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.answer is not None and not args.answer.strip():
        raise clikit.UsageError("--answer is empty: nothing to score")
    for flag in ("context", "question", "answer"):
        if not is_unicode(getattr(args, flag) or ""):  # bytes that are not UTF-8 arrive as surrogates
            raise clikit.UsageError(f"--{flag} is not valid Unicode (bytes that are not UTF-8?)")
    clikit.check_device_name(args.device)
    args.threshold = _threshold_arg(args.threshold, args.input is not None)


def _threshold_arg(value: str | None, batch: bool) -> float | str | None:
    """``--threshold`` as `Detector.predict_batch` takes it (None, a float or ``"expected-f1"``)."""
    from halluprobe._threshold import EXPECTED_F1, parse_threshold

    if value == EXPECTED_F1 and not batch:
        raise clikit.UsageError("--threshold expected-f1 applies to --input only (it reads the file)")
    try:
        return parse_threshold(value)
    except ValueError as exc:
        raise clikit.UsageError(f"--{exc}") from None


def _over_length(det, device: str, rows: InputRows, where: str | None) -> dict[int, str]:
    """Rows longer than the proxy's positions: row index -> message naming ``FILE:LINE`` and the id.

    Checked before any forward, with the same rule as every other command (`ProxyExtractor.encode`).
    """
    from types import SimpleNamespace

    ext = det.extractor(device)
    bad = {}
    for i, (item_id, (context, question, answer)) in enumerate(zip(rows.ids, rows.triples, strict=True)):
        name = "--context/--question/--answer" if item_id is None else item_id  # one answer has no id
        try:
            ext.encode(SimpleNamespace(id=name, context=context, question=question, answer=answer))
        except ValueError as exc:
            bad[i] = f"{where}:{rows.lines[i]}: {exc}" if where else str(exc)
    return bad


PROGRESS_CHUNK = 8
"""Forwards (of ``--batch-size`` answers) between two updates of ``predict --input``'s progress bar."""


def _score(det, triples: list, *, device: str, batch_size: int, threshold: float | str | None) -> list:
    """`Detector.predict_batch` of ``triples``, with a progress bar on stderr (not with ``--quiet``).

    The answers go through the proxy in chunks of `PROGRESS_CHUNK` forwards, each grouped by length as
    ``predict_batch`` groups them; the threshold (``expected-f1`` too) is then taken over all of them.
    """
    from tqdm.auto import tqdm

    from halluprobe.detectors._prediction import pending_triples, resolve_threshold

    chunk, pending = batch_size * PROGRESS_CHUNK, []
    shown = clikit.show_progress() and len(triples) > 1
    with tqdm(total=len(triples), desc="answers", unit="answer", disable=not shown) as bar:
        for start in range(0, len(triples), chunk):
            part = triples[start : start + chunk]
            pending += pending_triples(det, part, device=device, batch_size=batch_size)
            bar.update(len(part))
    t = resolve_threshold(threshold, det.probe_.threshold, pending)
    return [p.at(t) for p in pending]


def cmd_predict(args) -> int:
    """``halluprobe predict``: probability, label, spans and per-token scores of one answer or a file.

    With ``--input``, a line longer than the proxy's positions is not scored: a warning names its
    ``FILE:LINE`` and id (with ``--json``, its line carries ``error``), the other lines are scored, and
    the command ends with exit status 2.
    """
    _check_predict_args(args)
    if args.input is not None:
        rows = read_rows(clikit.check_in_file(args.input, "--input"))
        from halluprobe._threshold import check_threshold

        try:  # before the proxy loads: expected-f1 needs enough answers
            check_threshold(args.threshold, len(rows.ids))
        except ValueError as exc:
            raise clikit.UsageError(f"--input {args.input}: {exc}") from None
    else:
        rows = InputRows([None], [(args.context, args.question or "", args.answer)], [0])  # type: ignore[list-item]
    check_detector_arg(args.detector)  # the default one too ($HALLUPROBE_DETECTOR), before torch loads

    device = clikit.resolve_device(args.device)
    clikit.deterministic_kernels(device, args.autotune)
    clikit.quiet_transformers()
    from halluprobe.cli._common import load_detector

    det = load_detector(args.detector)
    bad = _over_length(det, device, rows, None if args.input is None else str(args.input))
    if args.input is None and bad:
        raise ValueError(bad[0])
    good = [i for i in range(len(rows.triples)) if i not in bad]
    scored = _score(
        det,
        [rows.triples[i] for i in good],
        device=device,
        batch_size=args.batch_size,
        threshold=args.threshold,
    )
    preds = dict(zip(good, scored, strict=True))
    for i, item_id in enumerate(rows.ids):
        if i in bad:
            clikit.warn(f"{bad[i]}; not scored")
            if args.json:
                clikit.emit_json({"id": item_id, "error": bad[i]})
            continue
        _print_prediction(args, item_id, rows.triples[i][2], preds[i])
    if bad:
        raise clikit.UsageError(
            f"{len(bad)} of {len(rows.ids)} answers in --input {args.input} were not scored (see the "
            "warnings); the others were"
        )
    return 0


def _print_prediction(args, item_id: str | None, answer: str, pred) -> None:
    if args.json:
        clikit.emit_json(_prediction_doc(pred, answer, item_id, args.tokens))
        return
    head = "" if item_id is None else f"{item_id}: "
    print(head + schemas.verdict_line(pred.probability, pred.threshold, pred.label))
    if args.spans:
        shown = (f"{answer[sp.start : sp.end]!r} ({sp.confidence:.2f})" for sp in pred.spans)
        print("spans: " + (", ".join(shown) or "none"))
    if args.tokens:
        for tok, s in zip(pred.tokens, pred.token_scores, strict=True):
            print(f"{s:6.3f}  {tok!r}")
