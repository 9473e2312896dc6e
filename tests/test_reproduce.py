"""The published values, the presets that carry them, and the generated ledger.

The published values are typed once (rnnlab.published); the presets' [paper] numbers and
hyperparameters were typed separately, so a typo in either shows up here. The ledger's status
rules and the claims' verdicts are checked on records built in a temporary directory, and the
committed REPRODUCTION.md against what the command produces from the committed records.
"""

import json
import math
from pathlib import Path

import pytest

from rnnlab import config, published, reproduce
from rnnlab.claims import CLAIMS, dmu_never_reach, dmu_outperforms
from rnnlab.config import tomllib

ROOT = Path(__file__).resolve().parents[1]
PRESETS = set(config.list_presets())


def paper_section(name):
    return tomllib.loads(config.preset_path(name).read_text()).get("paper", {})


def close(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def test_every_published_number_of_a_preset_is_in_the_table():
    """Each number in a preset's [paper] section equals a published row naming that preset."""
    checked = 0
    for name in sorted(PRESETS):
        for metric, value in paper_section(name).items():
            if metric == "source":
                continue
            rows = [r for r in published.ROWS if name in r.presets and r.metric == metric and r.value is not None]
            assert rows, f"{name}: [paper] {metric} = {value} has no published row naming this preset"
            for r in rows:
                assert close(value, r.value), f"{name}: [paper] {metric} = {value}, {r.paper} {r.table} says {r.value}"
            checked += 1
    assert checked >= 90


def test_presets_carry_the_published_numbers_of_their_rows():
    """The converse: a test-metric or timing row with a number names presets that carry it."""
    for r in published.ROWS:
        if r.value is None or not (r.metric.startswith("test/") or r.metric.startswith("time_")):
            continue
        for name in r.presets:
            assert name in PRESETS, f"{r.paper} {r.table} {r.model}: unknown preset {name}"
            got = paper_section(name).get(r.metric)
            assert got is not None and close(got, r.value), (name, r.metric, got, r.value)


def test_every_row_has_a_preset_or_a_reason():
    for r in published.ROWS:
        assert r.paper in published.PAPERS
        assert r.presets or r.reason, f"{r.paper} {r.table} {r.model} {r.size}: neither a preset nor a reason"
        for name in r.presets:
            assert name in PRESETS, f"{r.table} {r.model}: no preset {name}"


def test_every_table_and_figure_of_the_papers_is_covered():
    have = {(r.paper, r.table) for r in published.ROWS}
    expected = {("asrnn", t) for t in ("Table 1", "Table 2", "Table 3", "Table 4", "Table 5", "Fig. 1a", "Fig. 1b",
                                       "Fig. 1c", "Fig. 2")}
    expected |= {("nnrnn", t) for t in ("Table 1", "SM A.3", "Sec. 5.1", "Sec. 5.2", "Fig. 1", "Fig. 2", "Fig. 3", "SM F")}
    expected |= {("dmu", f"Table {t}") for t in ("I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI")}
    expected |= {("dmu", f"Fig. {i}") for i in (3, 4, 5)}
    expected |= {("henaff", f"Fig. {i}") for i in range(1, 7)}
    assert expected <= have, sorted(expected - have)


def test_some_published_values_against_the_paper_text():
    """Spot checks typed from the papers a second time."""
    def one(**kw):
        rows = [r for r in published.ROWS if all(getattr(r, k) == v for k, v in kw.items())]
        assert len(rows) == 1, (kw, rows)
        return rows[0]

    assert one(paper="asrnn", table="Table 1", model="asRNN", size="T=300, 1.32M params").spread == 0.005
    assert one(paper="asrnn", table="Table 3", model="scoRNN", size="L=2000").value == 1.35
    assert one(paper="dmu", table="Table II", model="RHN", size="N=10", metric="test/perplexity").spread == 60.383
    assert one(paper="dmu", table="Table VII", model="DMU-C", task="Ger2Eng", size="N=5", metric="test/accuracy").value == 0.647
    assert one(paper="dmu", table="Table VIII", model="GRU", task="adding").value == 108
    assert one(paper="dmu", table="Table IV", model="Lipschitz RNN [32]", task="psMNIST").value == 0.963


class _Stat:
    """A stand-in for ``reproduce.Group`` in rule tests that read one metric's (mean, std, n)."""

    def __init__(self, preset, mean, std=0.0, n=1, steps="100"):
        self.preset, self.diffs, self.budget, self.records = preset, (), [], [None] * n
        self.s, self._steps = (mean, std, n), steps

    def stat(self, m):
        return self.s

    def steps(self):
        return self._steps


class _Best:
    """A stand-in for ``reproduce.Evidence``: ``best(preset)`` from a dict of groups."""

    def __init__(self, groups: dict):
        self.g = groups

    def best(self, p):
        return self.g.get(p)


def _value_at(cfg: dict, key: str):
    node = cfg
    parts = key.split(".")
    if parts[0] == "task" and parts[1] not in ("name", "options"):
        parts = ["task", "options", *parts[1:]]
    for p in parts:
        node = node[p]
    return node


@pytest.mark.parametrize("preset", sorted({s.preset for s in published.SETTINGS}))
def test_presets_have_the_published_hyperparameters(preset):
    cfg = config.load(preset).to_dict()
    for s in (s for s in published.SETTINGS if s.preset == preset):
        got = _value_at(cfg, s.key)
        assert close(got, s.value), f"{preset}: {s.key} = {got!r}, {s.paper} {s.table} says {s.value!r}"


def test_asrnn_copy_variants_differ_from_the_paper_presets_only_in_eps_and_whh_lr():
    for L in (1000, 2000):
        paper = reproduce._resolved(config.load(f"asrnn/copy-L{L}").to_dict())
        code = reproduce._resolved(config.load(f"asrnn/copy-L{L}-code").to_dict())
        diffs = reproduce._diffs(code, paper)
        assert [d.split(" ")[0] for d in diffs] == ["model.cell_options.eps", "optim.group_lr.orthogonal"]
        assert code["model.cell_options.eps"] == 1e-5 and code["optim.group_lr.orthogonal"] == 2e-5


# --- the ledger on records made here ----------------------------------------------------------
def write_record(root: Path, preset: str, seed: int, test: dict, overrides=(), steps=None, metrics=None,
                 wall=10.0) -> Path:
    cfg = config.load(preset, [*overrides, f"train.seed={seed}"])
    d = root / cfg.name / f"seed{seed}"
    d.mkdir(parents=True)
    (d / "config.json").write_text(cfg.to_json())
    result = {"name": cfg.name, "task": cfg.task.name, "cell": cfg.model.cell, "seed": seed,
              "steps": steps or cfg.train.steps, "final": {}, "test": test, "baseline": {"loss": 0.04},
              "params": {"elements": 108}, "wall_time_s": wall, "conditions": {"threads": 1}}
    (d / "result.json").write_text(json.dumps(result))
    (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in (metrics or [])))
    return d


def status_of(root, row):
    ev = reproduce.Evidence(*reproduce.load_records([root]))
    return [line[8] for line in reproduce._row_lines(row, ev)]


def smnist_row():
    (row,) = [r for r in published.ROWS if r.table == "Table 4" and r.presets == ("asrnn/smnist-n122",)]
    assert row.value == 0.9889
    return row


def test_status_reproduced_within_two_percent(tmp_path):
    # 2% of 0.9889 is 0.0198: 0.970 is within, 0.968 is not
    write_record(tmp_path / "a", "asrnn/smnist-n122", 0, {"test/accuracy": 0.970})
    write_record(tmp_path / "b", "asrnn/smnist-n122", 0, {"test/accuracy": 0.968})
    assert status_of(tmp_path / "a", smnist_row()) == ["reproduced"]
    assert status_of(tmp_path / "b", smnist_row()) == ["not reproduced"]


def test_status_names_a_reduced_budget_and_another_configuration(tmp_path):
    write_record(tmp_path / "r", "asrnn/smnist-n122", 0, {"test/accuracy": 0.5}, ["train.steps=100"], steps=100)
    write_record(tmp_path / "o", "asrnn/smnist-n122", 0, {"test/accuracy": 0.99}, ["optim.lr=0.1"])
    (st,) = status_of(tmp_path / "r", smnist_row())
    assert st == "reduced budget (train.steps 100 (preset 30030)); not reproduced"
    (st,) = status_of(tmp_path / "o", smnist_row())
    assert st == "another configuration (optim.lr 0.1 (preset 0.0007)); reproduced"


def test_mean_and_std_over_seeds_and_variants_are_named(tmp_path):
    (row,) = [r for r in published.ROWS if r.table == "Fig. 2" and r.paper == "asrnn" and r.model == "asRNN"]
    write_record(tmp_path, "asrnn/copy-L1000-code", 1, {"test/loss": 1.0}, ["task.L=10"], steps=4000)
    write_record(tmp_path, "asrnn/copy-L1000-code", 2, {"test/loss": 3.0}, ["task.L=10"], steps=4000)
    ev = reproduce.Evidence(*reproduce.load_records([tmp_path]))
    lines = reproduce._row_lines(row, ev)
    assert [ln[9] for ln in lines] == ["`asrnn/copy-L1000`", "`asrnn/copy-L1000-code` (variant)"]
    assert lines[0][8] == "not run yet"
    assert lines[1][3] == "2 +- 1.414 (2 seeds)"  # mean 2, sample std sqrt(2)
    assert lines[1][8].startswith("reduced budget (task.L 10 (preset 1000))")


def dmu_metrics(first_step_at: dict[float, int], steps=1000, every=10):
    """val/loss falling to each threshold at the given step (10 steps = 1 epoch of 200 sequences)."""
    rows = []
    for s in range(every, steps + 1, every):
        loss = 0.05
        for th, at in sorted(first_step_at.items(), reverse=True):
            if s >= at:
                loss = th * 0.99
        rows.append({"step": s, "val/loss": loss})
    return rows


def test_dmu_threshold_claims_follow_the_records(tmp_path):
    fast = dmu_metrics({1e-2: 50, 1e-3: 100, 1e-4: 150, 1e-5: 200, 1e-6: 250})
    slow = dmu_metrics({1e-2: 400})
    never = dmu_metrics({})
    for m, rows in (("dmu", fast), ("gru", slow), ("lstm", slow), ("rnn", never), ("rhn", never)):
        for seed in (0, 1, 2, 3):  # 4 of 4 against 0 of 4 is significant (p = 1/70); 2 of 2 is not
            write_record(tmp_path / "good", f"dmu/adding-{m}", seed, {"test/loss": 0.01}, metrics=rows)
            write_record(tmp_path / "bad", f"dmu/adding-{m}", seed, {"test/loss": 0.01},
                         metrics=never if m == "dmu" else fast)
    good = reproduce.Evidence(*reproduce.load_records([tmp_path / "good"]))
    bad = reproduce.Evidence(*reproduce.load_records([tmp_path / "bad"]))
    rule = dmu_outperforms("adding", "dmu", ("rnn", "lstm", "gru", "rhn"))
    assert rule(good)[0] == "confirmed" and rule(bad)[0] == "refuted"
    assert dmu_never_reach("adding", ("rnn", "rhn"))(good)[0] == "confirmed"
    assert dmu_never_reach("adding", ("rnn", "rhn"))(bad)[0] == "refuted"
    assert "dmu 1e-02: 100% (ep 5)" in rule(good)[1]  # step 50 x batch 20 / 200 sequences
    # the ledger row: 4 of the paper's 51 runs, first epochs
    (row,) = [r for r in published.ROWS if r.table == "Fig. 3" and r.model == "DMU"]
    (line,) = reproduce._row_lines(row, good)
    assert line[3].startswith("1e-02: 4/4, median epoch 5; 1e-04: 4/4, median epoch 15; 1e-06: 4/4, median epoch 25")
    assert "4 of the paper's 51 runs" in line[8]


def test_claims_without_records_are_untested(tmp_path):
    ev = reproduce.Evidence([], [])
    verdicts = {c.text: c.judge(ev)[0] for c in CLAIMS}
    assert set(verdicts.values()) == {"untested"}
    assert {c.paper for c in CLAIMS} == set(published.PAPERS)


def test_collect_copies_only_small_files(tmp_path):
    d = write_record(tmp_path / "runs", "asrnn/smnist-n122", 0, {"test/accuracy": 0.9})
    (d / "checkpoint.pt").write_bytes(b"x" * 100)
    (d / "best.pt").write_bytes(b"x")
    copied = reproduce.collect(tmp_path / "runs", tmp_path / "records")
    assert len(copied) == 1
    assert sorted(p.name for p in copied[0].iterdir()) == ["config.json", "metrics.jsonl", "result.json"]


def test_cli_ledger_and_a_missing_directory(tmp_path, capsys):
    from rnnlab.cli import main

    write_record(tmp_path / "rec", "asrnn/smnist-n122", 0, {"test/accuracy": 0.9889})
    out = tmp_path / "R.md"
    assert main(["reproduce", "ledger", str(tmp_path / "rec"), "-o", str(out)]) == 0
    text = out.read_text()
    assert "| asRNN, sMNIST (n=122, 16K params) | test/accuracy | 0.9889 | 0.9889 +- 0 (1 seed) |" in text
    assert main(["reproduce", "ledger", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such records directory" in err[0]


def test_committed_reproduction_md_is_what_the_command_produces():
    committed = (ROOT / "REPRODUCTION.md").read_text()
    assert reproduce.ledger([ROOT / "records"]) == committed, (
        "REPRODUCTION.md is stale: run `rnnlab reproduce ledger records -o REPRODUCTION.md`")


def test_a_record_written_by_other_code_is_attributed_with_its_differences(tmp_path):
    """A config.json this checkout cannot load (a key from a newer rnnlab) is read as plain
    JSON, attributed to its preset and reported as another configuration, not dropped."""
    d = write_record(tmp_path, "asrnn/smnist-n122", 0, {"test/accuracy": 0.9889})
    cfg = json.loads((d / "config.json").read_text())
    cfg["model"]["future_option"] = 3
    (d / "config.json").write_text(json.dumps(cfg))
    (st,) = status_of(tmp_path, smnist_row())
    assert st == "another configuration (model.future_option 3 (preset None)); reproduced"


def test_a_verdict_on_few_seeds_says_so():
    from rnnlab.claims import with_seed_count

    runs = "`dmu/adding-dmu` x1 (1,000 steps); `dmu/adding-gru` x4 (1,000 steps)"
    assert with_seed_count("confirmed", runs) == "confirmed on 1 seed (fewest per model)"
    assert with_seed_count("refuted", "`a` x2 (10 steps); `b` x2 (10 steps)") == "refuted on 2 seeds"
    assert with_seed_count("confirmed", "`a` x3 (10 steps); `b` x5 (10 steps)") == "confirmed"
    assert with_seed_count("untested", "-") == "untested"
    assert with_seed_count("qualified", "analysis of `nnrnn/copy` (schur)") == "qualified"


def test_claim_verdicts_say_when_runs_are_smaller_than_the_preset(tmp_path):
    """A claim judged on runs with fewer steps than the preset says "at reduced budget"; a copy
    run stopped before solving the task does not refute "solves copy" (only a full run can)."""
    from rnnlab import claims as cl

    class G:
        def __init__(self, preset, diffs, loss, rec):
            self.preset, self.diffs, self.records = preset, diffs, [self]
            self.budget = [d for d in diffs if reproduce._is_budget(d)]  # as reproduce.Group
            self._v = {"test/loss": loss, "test/recall_accuracy": rec, "baseline/loss": 0.02}

        def stat(self, m):
            return self._v[m], 0.0

        def value(self, m):
            return self._v[m]

        def steps(self):
            return "1,000" if self.diffs else "4,000"

    class Ev:
        def __init__(self, groups):
            self.g = groups

        def best(self, p):
            return self.g.get(p)

    short = ("train.steps 1000 (preset 4000)",)
    rule = cl._copy_solved(["a", "b"], 1000)
    assert rule(Ev({"a": G("a", short, 0.01, 0.8)}))[0] == "qualified"  # stopped early: not a refutation
    assert rule(Ev({"a": G("a", (), 0.01, 0.8)}))[0] == "refuted"  # a full run that fails
    assert rule(Ev({"a": G("a", short, 0.01, 0.8), "b": G("b", (), 1e-6, 1.0)}))[0] == "confirmed"
    claim = cl.Claim("x", "x solves copy", rule)
    assert claim.judge(Ev({"a": G("a", short, 0.01, 0.8)}))[0] == "qualified at reduced budget on 1 seed"
    assert reproduce._is_budget("3 of 3 with task.L 100 (preset 500)")  # a pooled group's wording
    assert cl._reduced(G("a", ("3 of 3 with task.L 100 (preset 500)",), 0, 0))
    assert not cl._reduced(G("a", ("optim.lr 0.1 (preset 0.01)",), 0, 0))


def test_beats_within_the_seeds_spread_is_only_qualified():
    from rnnlab import claims as cl

    def Ev(**g):
        return _Best(g)

    def G(preset, mean, std, n):
        return _Stat(preset, mean, std, n)

    rule = cl._beats("a", "b", "test/accuracy", higher=True)
    assert rule(Ev(a=G("a", 0.91, 0.01, 3), b=G("b", 0.90, 0.01, 3)))[0] == "qualified"  # 0.01 <= 2 x 0.01
    assert rule(Ev(a=G("a", 0.95, 0.01, 3), b=G("b", 0.90, 0.01, 3)))[0] == "confirmed"
    assert rule(Ev(a=G("a", 0.85, 0.01, 3), b=G("b", 0.90, 0.01, 3)))[0] == "refuted"
    assert rule(Ev(a=G("a", 0.91, 0.0, 1), b=G("b", 0.90, 0.0, 1)))[0] == "confirmed"  # one seed: no spread to judge by


def test_second_to_a_gated_model_is_qualified_until_every_other_baseline_has_run():
    from rnnlab import claims as cl

    def Ev(**v):
        return _Best({p: _Stat(p, x) for p, x in v.items()})

    rule = cl._second_to("lstm", "as", ["exp", "eu"], "test/bpc")
    assert rule(Ev(lstm=2.0))[0] == cl.UNTESTED
    verdict, text, _ = rule(Ev(lstm=2.0, **{"as": 2.5}))
    assert verdict == "qualified" and "not yet compared with `exp`, `eu`" in text
    verdict, text, _ = rule(Ev(lstm=2.0, exp=2.7, **{"as": 2.5}))
    assert verdict == "qualified" and "`eu`" in text and "`exp`" not in text.split("not yet")[1]
    assert rule(Ev(lstm=2.0, exp=2.7, eu=2.6, **{"as": 2.5}))[0] == "confirmed"
    assert rule(Ev(lstm=2.0, exp=2.4, **{"as": 2.5}))[0] == "refuted"  # a baseline ahead of it
    assert rule(Ev(lstm=2.6, **{"as": 2.5}))[0] == "refuted"  # ahead of the LSTM: not "second"


def test_dmu_outperforms_needs_significantly_more_runs_reaching_or_enough_runs_to_time():
    from rnnlab import claims as cl

    def prof(*per):  # per threshold: (runs reached, of n, median epoch)
        return {t: (k / n, e if k else math.inf, k, n) for t, (k, n, e) in zip(cl.DMU_THRESHOLDS, per)}

    none5 = (0, 5, 0)
    rest = (none5,) * 4
    # Fisher's exact test, one-sided, by hand: 5 of 5 against 0 of 5 is 1 / C(10, 5) = 1/252
    assert cl.fisher_one_sided(5, 5, 0, 5) == pytest.approx(1 / 252)
    assert cl.fisher_one_sided(3, 5, 2, 5) == pytest.approx(0.5)  # C(5,3)C(5,2)+C(5,4)C(5,1)+C(5,5)C(5,0) over C(10,5)
    assert cl._better(prof((5, 5, 40), *rest), prof(none5, *rest))  # p = 0.004: ahead
    assert not cl._better(prof((3, 5, 40), *rest), prof((2, 5, 20), *rest))  # p = 0.5: level
    assert not cl._better(prof((1, 1, 40), *rest), prof((0, 1, 0), *rest))  # one run each: p = 0.5
    # equally often but sooner, on one run each: no evidence of speed, level
    one_fast, one_slow = prof((1, 5, 14), *rest), prof((1, 5, 47), *rest)
    assert not cl._better(one_fast, one_slow) and not cl._better(one_slow, one_fast)
    # equally often and sooner on at least FEW_SEEDS runs each: ahead
    k = cl.FEW_SEEDS
    assert cl._better(prof((k, k, 14), *rest), prof((k, k, 47), *rest))
    # reaches some threshold less often: never ahead
    assert not cl._better(prof((5, 5, 10), (0, 5, 0), *rest[1:]), prof((0, 5, 0), (1, 5, 90), *rest[1:]))


def test_variable_length_copy_claim_needs_the_lstm_solved_and_the_lt_rnns_at_chance():
    from rnnlab import claims as cl

    def Ev(o, i, lstm):
        return _Best({f"henaff/copy_variable-{m}": _Stat(m, v, steps="20,000")
                      for m, v in (("ltornn", o), ("ltirnn", i), ("lstm", lstm))})

    assert cl.henaff_variable(Ev(0.13, 0.12, 0.995))[0] == "confirmed"
    verdict, text, _ = cl.henaff_variable(Ev(0.245, 0.305, 0.629))  # the committed runs' values
    assert verdict == "qualified" and "not solved it in 20,000 steps" in text and "above chance" in text
    assert cl.henaff_variable(Ev(0.13, 0.12, 0.6))[0] == "qualified"
    assert cl.henaff_variable(Ev(0.5, 0.3, 0.55))[0] == "refuted"  # the LSTM not clearly ahead


def test_dmu_similar_means_no_significant_difference_and_names_the_faster():
    from rnnlab import claims as cl

    def group(reached_at):  # first epochs (None: never) of each run at 1e-2; no run goes further
        class G:
            preset, diffs, budget, records = "p", (), [], [None] * len(reached_at)

            def thresholds(self, ths):
                return {t: list(reached_at) if t == 1e-2 else [None] * len(reached_at) for t in ths}

            def steps(self):
                return "1,000"
        return G()

    class Ev:
        def __init__(self, **g):
            self.g = g

        def pooled(self, p):
            return self.g.get(p.split("-")[-1])

    rule = cl.dmu_similar("noisy_sequence", "gru", "dmu", faster="gru")
    # 2 of 5 against 5 of 5: p = 21/252 = 0.083, not a significant difference; DMU sooner
    verdict, text, _ = rule(Ev(gru=group([60, 70, None, None, None]), dmu=group([20, 25, 27, 30, 31])))
    assert verdict == "qualified" and "dmu is faster" in text
    assert rule(Ev(gru=group([20, 25, 27, 30]), dmu=group([60, 70, 75, 80])))[0] == "confirmed"
    # 0 of 6 against 6 of 6: p = 1/924, significant: not similar
    assert rule(Ev(gru=group([None] * 6), dmu=group([20] * 6)))[0] == "refuted"
