"""The fit stage of ``"finetune"``: a fine-tuned reader (`halluprobe.reader`), saved as the run's folder.

The reader reads text itself, so the run has no extraction stage: the stage fine-tunes on the datasets'
training splits (their validation splits choose), scores their test splits when there are any, saves
the reader into the output folder (a detector folder that ``predict``, ``stream`` and ``serve`` read)
and writes ``finetune.json`` beside it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halubench_data import clikit

from halluprobe.pipeline._options import Inputs, TrainOptions
from halluprobe.pipeline._stages import Report

__all__ = ["REPORT", "fit_finetune_stage"]

REPORT = "finetune.json"
"""The run's report inside the output folder (beside the reader's ``detector.json``)."""


@dataclass
class _ReaderFitted:
    reader: Any  # halluprobe.Reader
    test: dict[str, Any] | None

    def save(self, out: Path) -> dict[str, Path]:
        return {"reader": self.reader.save(out)}

    def report(self, out: Path, saved: dict[str, Path]) -> Report:
        from halubench_data.files import atomic_write_text

        r = self.reader
        doc = {"out": str(out), "sources": r.card_["sources"], "validation": r.validation_, "test": self.test,
               "training": r.card_["training"]}  # fmt: skip
        atomic_write_text(out / REPORT, json.dumps(clikit.json_ready(doc), indent=1), overwrite=True)
        return Report(lambda: _summary(r, self.test, out), doc)


def fit_finetune_stage(o: TrainOptions, inputs: Inputs, x: Any) -> _ReaderFitted:
    """Fine-tune a reader on the datasets' training splits (validation splits choose); score their tests."""
    import numpy as np

    from halluprobe.reader import Reader
    from halluprobe.reader._data import as_examples
    from halluprobe.reader._evaluate import evaluate_reader

    f = o.finetune
    examples = [e for ds in inputs.datasets for e in ds]
    rows = [e for e in examples if e.split in ("train", "validation")]
    tests = [e for e in examples if e.split == "test"]
    reader = Reader(
        o.proxy, rank=f.rank, alpha=f.alpha, learning_rate=f.learning_rate, epochs=f.epochs,
        max_batch_tokens=f.max_batch_tokens, pool=f.pool, seed=f.seed, anchor=f.anchor,
        threshold_rule=f.threshold_rule, device=clikit.resolve_device(o.device),
        progress=clikit.show_progress(),
    )  # fmt: skip
    clikit.status(f"fine-tuning on {len(rows)} answers of {len({e.source for e in rows})} source(s)")
    reader.fit(rows, validation=np.array([e.split == "validation" for e in rows]))
    test = None
    if tests:
        test = evaluate_reader(reader, as_examples(tests, None, None), n_bootstrap=f.n_bootstrap, seed=f.seed)
    return _ReaderFitted(reader, test)


def _summary(reader, test, out: Path) -> str:
    v, t = reader.validation_, reader.card_["training"]
    lines = [
        f"reader: {reader.probe_.feature_set}, threshold {reader.scoring_.threshold:.3f} "
        f"({reader.scoring_.threshold_rule})",
        f"training: {t['steps']} steps (best {t['best_step']}), {t['tokens_per_second']:.0f} tokens/s",
        f"validation: AUROC {v['auroc']:.3f}, false alarms {v['false_alarm_rate']:.2f}, "
        f"recall {v['recall']:.2f}",
    ]
    if test:
        lines.append(
            f"test: AUROC {test['auroc']:.3f} [{test['auroc_ci'][0]:.3f}, {test['auroc_ci'][1]:.3f}], F1 "
            f"{test['f1']:.3f}, false alarms {test['false_alarm_rate']:.2f}, recall {test['recall']:.2f}"
            + (f", span F1 {test['span_f1']:.3f}" if "span_f1" in test else "")
        )
    lines.append(f"written: {out} (halluprobe predict {out} --context ... --answer ...)")
    return "\n".join(lines)
