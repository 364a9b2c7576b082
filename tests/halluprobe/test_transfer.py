"""Leave-one-source-out transfer: no held-out example reaches its own fit; the table and the CLI."""

import csv
import io
import json
from dataclasses import replace

import numpy as np
import pytest
from halluprobe.cli import main
from halluprobe.evaluation import TransferTable, leave_one_source_out
from halluprobe.evaluation._transfer import Pool, anchored_fitter, floor_fitter, judge_fitter, probe_fitter
from halubench_data import Dataset, Example, overlap_scores, write_jsonl

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar".split()


def _source(name, n_groups, seed, shared_group=None):
    """A source whose hallucinated answers bring words the context lacks (the floors' signal)."""
    rng = np.random.default_rng(seed)
    examples = []
    for g in range(n_groups):
        split = "train" if g % 10 < 6 else "validation" if g % 10 < 8 else "test"
        group = shared_group if (shared_group and g == 0) else f"{name}:{g}"
        ctx = " ".join(rng.choice(WORDS, 12))
        for i in range(4):
            label = i % 2
            words = list(rng.choice(ctx.split(), 6))
            if label or rng.random() < 0.2:
                words[rng.integers(6)] = f"novel{rng.integers(10**6)}"
            examples.append(
                Example(f"{name}-{g}-{i}", name, ctx, "What?", " ".join(words), label, group, split)
            )
    return Dataset(tuple(examples), name=name)


def _spy(seen):
    def fit(train: Pool, validation: Pool):
        held = {e.source for e in train.examples} | {e.source for e in validation.examples}
        seen.append((train.examples, validation.examples, held))
        return {"overlap floor": ("floor", lambda pool: overlap_scores(pool.examples))}

    return fit


def test_no_held_out_example_group_or_source_reaches_its_own_fit():
    a, b, c = (
        _source("a", 20, 0, shared_group="shared"),
        _source("b", 20, 1, shared_group="shared"),
        _source("c", 20, 2),
    )
    seen: list = []
    table = leave_one_source_out([a, b, c], fitters=[_spy(seen)], n_bootstrap=50)
    assert table.sources == ["a", "b", "c"] and len(seen) == 3
    for held, (train, val, fit_sources) in zip("abc", seen, strict=True):
        assert held not in fit_sources  # neither the pooled train nor the pooled validation
        assert {e.split for e in train} == {"train"} and {e.split for e in val} == {"validation"}
        assert fit_sources == set("abc") - {held}
        if held in "ab":  # 'a' and 'b' share a group: it stays out of the other's fit
            assert all(e.group != "shared" for e in (*train, *val))
    rows = {(r.source, r.method): r for r in table.rows}
    assert rows["a", "overlap floor"].n == len(a) and rows["c", "overlap floor"].n_positive == len(c) // 2


def test_pooled_fit_weights_every_source_equally():
    pool = Pool(tuple(_source("a", 30, 0)) + tuple(_source("b", 10, 1)), None)
    w, src = pool.weights, np.array(pool.sources)
    assert w[src == "a"].sum() == pytest.approx(w[src == "b"].sum()) and w.mean() == pytest.approx(1.0)


def test_table_deltas_markdown_and_csv():
    srcs = [_source(n, 20, i) for i, n in enumerate("abc")]
    table = leave_one_source_out(srcs, n_bootstrap=50, held_out="test")
    assert isinstance(table, TransferTable)
    for s in table.sources:
        rows = [r for r in table.rows if r.source == s]
        assert max(r.delta_floor for r in rows) == 0.0  # the best floor has Δ 0
        assert all(r.n == sum(e.split == "test" for e in srcs["abc".index(s)]) for r in rows)
        assert all(0 <= r.ece <= 1 and r.f1 <= r.best_f1 + 1e-12 for r in rows)
    md = table.to_markdown()
    assert "| overlap floor |" in md and "Δ floor" in md and "| method | a | b | c |" in md
    parsed = list(csv.DictReader(io.StringIO(table.to_csv())))
    assert len(parsed) == len(table.rows) and {"auroc_lo", "auroc_hi", "delta_floor"} <= set(parsed[0])
    assert {s.method for s in table.summary()} == {"overlap floor", "grounding floor"}
    assert "batch F1 within 0.05" in md and {"batch_f1", "batch_threshold"} <= set(parsed[0])
    for r in table.rows:  # the batch threshold is a probability of the source, its F1 at most the best
        assert 0 <= r.batch_threshold <= 1 and r.batch_f1 <= r.best_f1 + 1e-12


def test_the_batch_threshold_reads_no_label_of_the_held_out_source():
    srcs = [_source(n, 20, i) for i, n in enumerate("abc")]
    flipped = Dataset(tuple(replace(e, label=1 - e.label) for e in srcs[2]), name="c")
    rows = {}
    for case, c in (("as given", srcs[2]), ("labels flipped", flipped)):
        table = leave_one_source_out([srcs[0], srcs[1], c], n_bootstrap=20)
        rows[case] = {r.method: r for r in table.rows if r.source == "c"}
    for method, r in rows["as given"].items():
        assert r.batch_threshold == rows["labels flipped"][method].batch_threshold
        assert r.batch_f1 != rows["labels flipped"][method].batch_f1  # the F1 itself does read them


def test_refuses_one_source_and_duplicate_ids():
    a = _source("a", 10, 0)
    with pytest.raises(ValueError, match="at least two sources"):
        leave_one_source_out([a])
    with pytest.raises(ValueError, match="occurs twice"):
        leave_one_source_out([a, a])


def test_probe_fitter_scores_held_out_records(record_factory):
    srcs = [_source(n, 20, i) for i, n in enumerate("abc")]
    rng = np.random.default_rng(0)
    records = {}
    for e in (e for ds in srcs for e in ds):
        r = record_factory(e.id, rng, nl=2, h=4)
        r.logit_pooled[:] += 1.5 * e.label
        records[e.id] = r
    table = leave_one_source_out(srcs, records, fitters=[floor_fitter, probe_fitter(["L9"], list(range(8)))],
                                 n_bootstrap=50)  # fmt: skip
    probe = [r for r in table.rows if r.method == "L9"]
    assert [r.kind for r in probe] == ["probe"] * 3 and all(r.auroc > 0.8 for r in probe)
    forked = leave_one_source_out(srcs, records, fitters=[floor_fitter, probe_fitter(["L9"], list(range(8)))],
                                  n_bootstrap=50, jobs=2)  # fmt: skip
    assert forked.rows == table.rows  # the same table whatever the number of worker processes
    assert forked.reliability.keys() == table.reliability.keys()
    for m, curve in table.reliability.items():
        assert forked.reliability[m].ece == curve.ece
    with pytest.raises(ValueError, match="jobs must be an int >= 1"):
        leave_one_source_out(srcs, records, jobs=0)
    with pytest.raises(ValueError, match="needs proxy records"):
        leave_one_source_out(srcs, fitters=[probe_fitter(["L9"], list(range(8)))])


def test_anchored_candidates_score_the_mix_of_the_floor_and_a_probe(record_factory):
    from halluprobe.features._grounding import fill_grounding

    srcs = [_source(n, 20, i) for i, n in enumerate("abc")]
    rng = np.random.default_rng(1)
    records = {}
    for ds in srcs:
        recs = []
        for e in ds:
            r = record_factory(e.id, rng, nl=2, h=4)
            r.logit_pooled[:] += 0.8 * e.label  # a weaker proxy signal beside the words' novelty
            recs.append(r)
        records.update({r.id: r for r in fill_grounding(recs, list(ds))})
    fitters = [floor_fitter, anchored_fitter(["O+L9@0", "O+L9@1", "O+L9"], list(range(8)))]
    table = leave_one_source_out(srcs, records, fitters=fitters, n_bootstrap=50)
    rows = {(r.source, r.method): r for r in table.rows}
    for s in table.sources:
        # weight 0 is the overlap floor itself (z-scoring keeps its order); weight 1 the probe alone
        assert rows[s, "O+L9@0"].auroc == pytest.approx(rows[s, "overlap floor"].auroc)
        assert rows[s, "O+L9"].kind == "probe" and rows[s, "O+L9@1"].auroc > 0.6
    for bad, match in (("O+GL9@0.3", "brings G itself"), ("L9", "not an anchored"), ("O+L9@2", "outside")):
        with pytest.raises(ValueError, match=match):
            anchored_fitter([bad], [])


def test_judge_template_is_chosen_on_the_other_sources():
    srcs = [_source(n, 20, i) for i, n in enumerate("abc")]
    rng = np.random.default_rng(3)
    honest, leaky = {}, {}
    for e in (e for ds in srcs for e in ds):
        honest[e.id] = e.label + rng.normal(0, 0.8)  # informative everywhere, imperfect
        leaky[e.id] = float(e.label if e.source in "ab" else 1 - e.label)  # perfect on 'a', 'b'; wrong on 'c'
    table = leave_one_source_out(srcs, fitters=[judge_fitter({"leaky": leaky, "honest": honest}, "judge")],
                                 n_bootstrap=50)  # fmt: skip
    rows = {r.source: r for r in table.rows}
    assert {r.kind for r in table.rows} == {"judge"}
    assert 0.6 < rows["a"].auroc < 0.99  # validation on 'b' and 'c': leaky averages 0.5, honest wins
    assert rows["c"].auroc == pytest.approx(0.0, abs=1e-9)  # validation on 'a' and 'b' picks leaky
    with pytest.raises(ValueError, match="has no score"):
        leave_one_source_out(srcs, fitters=[judge_fitter({"t": {}})])
    with pytest.raises(ValueError, match="at least one template"):
        judge_fitter({})


@pytest.mark.slow
def test_cli_transfer_floors_only_without_a_proxy(tmp_path, capsys):
    files = []
    for i, name in enumerate("ab"):
        path = tmp_path / f"{name}.jsonl"
        write_jsonl(_source(name, 20, i), path)
        files += ["--dataset", str(path)]
    out = tmp_path / "run"
    argv = ["transfer", *files, "--feature-sets", "none", "--no-published", "--out", str(out), "--json",
            "--n-bootstrap", "50"]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sources"] == ["a", "b"] and {r["method"] for r in doc["rows"]} == {
        "overlap floor",
        "grounding floor",
    }
    assert (out / "transfer.md").read_text().startswith("# Transfer") and (out / "reliability.png").exists()
    curves = json.loads((out / "reliability.json").read_text())  # the diagram's data, to redraw it
    assert set(curves) == {"overlap floor", "grounding floor"}
    ece = {s["method"]: s["pooled_ece"] for s in doc["summary"]}
    for method, c in curves.items():
        scored = sum(r["n"] for r in doc["rows"] if r["method"] == method)  # every held-out answer, pooled
        assert sum(c["counts"]) == scored == 160 and len(c["predicted"]) == len(c["observed"]) == len(
            c["counts"]
        )
        assert c["ece"] == pytest.approx(ece[method])
    assert main(["transfer", files[0], files[1], "--out", str(out), "--overwrite"]) == 2  # one source
    assert "at least two sources" in capsys.readouterr().err


def test_cli_transfer_judge_flags_are_checked_before_any_model_loads(tmp_path, capsys):
    files = []
    for i, name in enumerate("ab"):
        path = tmp_path / f"{name}.jsonl"
        write_jsonl(_source(name, 20, i), path)
        files += ["--dataset", str(path)]
    out = str(tmp_path / "run")
    assert main(["transfer", *files, "--judge-template", "strict", "--out", out]) == 2
    assert "--judge-template needs --judge" in capsys.readouterr().err
    assert main(["transfer", *files, "--judge", "--judge-template", "nosuch", "--out", out]) == 2
    assert "'nosuch': expected one of" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_false_alarms_and_recall_at_the_transferred_threshold():
    """Each row counts the held-out supported and hallucinated answers its threshold flags; the summary
    pools them, and the false-alarm rule keeps the validation rate it names."""
    srcs = [_source(n, 20, i) for i, n in enumerate("abc")]
    table = leave_one_source_out(srcs, n_bootstrap=20, threshold="false-alarm@0.1")
    assert table.threshold_rule == "false-alarm@0.1" and "| false alarms | recall |" in table.to_markdown()
    for s in table.summary():
        rows = [r for r in table.rows if r.method == s.method]
        neg = sum(r.n - r.n_positive for r in rows)
        assert s.pooled_false_alarm_rate == sum(r.false_alarms for r in rows) / neg
        assert s.pooled_recall == sum(r.detected for r in rows) / sum(r.n_positive for r in rows)
    for r in table.rows:
        assert r.false_alarms + r.detected == round(r.flagged * r.n)
        assert 0 <= r.false_alarm_rate <= 1 and 0 <= r.recall <= 1
    loose = leave_one_source_out(srcs, n_bootstrap=20, threshold="false-alarm@0.9")
    strict = {(r.source, r.method): r for r in table.rows}
    assert all(r.false_alarms >= strict[r.source, r.method].false_alarms for r in loose.rows)
