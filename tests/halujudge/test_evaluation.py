import numpy as np
import pytest
from halubench_data import Dataset
from halujudge import LLMJudge, judge_datasets, run_evaluation, select_template
from sklearn.metrics import f1_score, roc_auc_score


class TableScorer:
    """Scores looked up by example id (higher = more likely hallucinated)."""

    def __init__(self, table):
        self.table = table

    def score(self, examples, cache=None, progress=True):
        return np.array([self.table[e.id] for e in examples], dtype=np.float64)


def _dataset(make_example, n_val=10, n_test=12, seed=0, name="toy"):
    rng = np.random.default_rng(seed)
    examples, table = [], {}
    for i in range(n_val + n_test):
        label = int(rng.integers(0, 2)) if i not in (0, 1, n_val, n_val + 1) else i % 2
        ex = make_example(i, label, "validation" if i < n_val else "test")
        examples.append(ex)
        table[ex.id] = float(np.round(0.5 * label + rng.random(), 3))
    return Dataset(tuple(examples), name), table


def test_threshold_by_validation_f1_then_test_metrics(make_example):
    data, table = _dataset(make_example)
    run = run_evaluation(TableScorer(table), data, "table", n_bootstrap=200, progress=False)
    val_s = np.array([table[e.id] for e in data.validation]), data.validation.labels
    f1s = {t: f1_score(val_s[1], val_s[0] >= t) for t in np.unique(val_s[0])}
    best = max(f1s.values())
    assert run.threshold == max(t for t, f in f1s.items() if f >= best - 1e-12)  # ties: the higher threshold
    test_s, test_y = run.test_scores, data.test.labels
    assert run.test_ids == [e.id for e in data.test]
    assert run.result.f1 == pytest.approx(f1_score(test_y, test_s >= run.threshold))
    assert run.result.auroc == pytest.approx(roc_auc_score(test_y, test_s))
    assert run.result.n == len(data.test) and run.result.n_groups == len(set(data.test.groups))


def test_template_with_best_mean_validation_auroc_is_chosen(tiny_qwen2, tiny_tokenizer, make_example):
    judge = LLMJudge(tiny_qwen2, tiny_tokenizer, "plain", model_id="tiny", batch_size=4)
    sets = [_dataset(make_example, 8, 0, seed, f"set{seed}")[0] for seed in (1, 2)]
    names = ["plain", "claims", "strict"]
    chosen = select_template(judge, sets, templates=names, progress=False)
    means = {}
    for name in names:
        scorer = judge.with_template(name)
        per = [
            roc_auc_score(d.validation.labels, scorer.score(d.validation.examples, progress=False))
            for d in sets
        ]
        means[name] = np.mean(per)
        assert chosen.aurocs[name] == pytest.approx(dict(zip(["set1", "set2"], per, strict=True)))
    assert chosen.template == max(names, key=lambda n: means[n])
    assert chosen.mean_auroc == pytest.approx(max(means.values()))


def test_protocol_refuses_splits_it_cannot_use(tiny_qwen2, tiny_tokenizer, make_example):
    only_negatives = Dataset(tuple(make_example(i, 0, "validation") for i in range(4)), "neg")
    with pytest.raises(ValueError, match="no hallucinated example to set a threshold"):
        run_evaluation(TableScorer({}), only_negatives, "x", progress=False)
    judge = LLMJudge(tiny_qwen2, tiny_tokenizer, "plain")
    with pytest.raises(ValueError, match="needs both hallucinated and supported"):
        select_template(judge, [only_negatives], progress=False)
    with pytest.raises(ValueError, match="at least one selection dataset"):
        select_template(judge, [], progress=False)


def test_judge_datasets_chooses_the_template_once_and_scores_every_dataset(
    tiny_qwen2, tiny_tokenizer, make_example
):
    judge = LLMJudge(tiny_qwen2, tiny_tokenizer, "plain", model_id="tiny", batch_size=4)
    sets = [_dataset(make_example, 6, 4, seed, f"set{seed}")[0] for seed in (1, 2)]
    claims = Dataset(sets[1].test.examples, "claims")
    doc = judge_datasets(judge, sets, sets[:1], [claims], progress=False)
    sel = select_template(judge, sets, progress=False)
    assert (doc["template"], doc["mean_auroc"]) == (sel.template, pytest.approx(sel.mean_auroc))
    run = run_evaluation(judge.with_template(sel.template), sets[0], "x", progress=False)
    got = doc["datasets"]["set1"]
    assert got["threshold"] == run.threshold and got["test_ids"] == run.test_ids
    np.testing.assert_allclose(got["validation_scores"], run.validation_scores)
    only = doc["datasets"][claims.name]
    assert set(only) == {"test_ids", "test_scores"} and only["test_ids"] == [e.id for e in claims]
