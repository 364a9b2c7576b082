"""The ROC and precision-recall plots of ``halluprobe train``: AUC in the legend, a colour per method."""

import numpy as np
from halluprobe.evaluation._report import curve_entries, plot_curves
from halubench_data.metrics import auroc
from sklearn.metrics import average_precision_score


def _scores(n_methods=13, n=60, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    return {f"method {i}": rng.random(n) + 0.08 * i * y for i in range(n_methods)}, y


def test_legend_gives_auc_and_ap_best_first():
    scores, y = _scores()
    entries = curve_entries(scores, y)
    aucs = [auroc(scores[e.name], y) for e in entries]
    assert aucs == sorted(aucs, reverse=True) and {e.name for e in entries} == set(scores)
    for e, auc in zip(entries, aucs, strict=True):
        assert e.roc_label == f"{e.name} (AUC {auc:.3f})"
        assert e.pr_label == f"{e.name} (AP {average_precision_score(y, scores[e.name]):.3f})"


def test_thirteen_methods_get_thirteen_colours(tmp_path):
    scores, y = _scores(13)
    entries = curve_entries(scores, y)
    assert len({e.color for e in entries}) == 13
    assert len({(e.color, e.linestyle) for e in curve_entries(*_scores(25))}) == 25
    assert plot_curves(tmp_path, scores, y) == ["roc.png", "pr.png"]
    assert (tmp_path / "roc.png").stat().st_size > 0
