"""``rnnlab field --known``: each modern model's known behaviour from its paper, checked at a CPU
scale, one record and one table (docs/field-known.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rnnlab import config
from rnnlab import known as K
from rnnlab.cells import CELLS
from rnnlab.cli import main

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "field-known-results.json"
PAGE = ROOT / "docs" / "field-known.md"


def _record(values: dict[str, list[float]], expect: list[K.Expect], budget="table") -> dict:
    return {
        "kind": K.KIND,
        "version": K.RECORD_VERSION,
        "date": "2026-01-01 00:00 UTC",
        "budget": budget,
        "seeds": [0, 1, 2],
        "checks": {
            "c": {
                "model": "M",
                "claim": "a claim",
                "source": "a paper, Table 1",
                "setting": "a setting",
                "preset": "p",
                "params": 100,
                "metric": "test/accuracy",
                "overrides": ["train.steps=1"],
                "arms": {lbl: {"cell": "x", "options": []} for lbl in values if "@" not in lbl},
                "expect": [e.__dict__ for e in expect],
                "extra_eval": {},
                "cpu_s": 60.0,
            }
        },
        "git": {"commit": "0" * 40, "dirty": False},
        "rows": [
            {"task": "c", "cell": lbl, "seed": s, "value": v, "wall_s": 1.0}
            for lbl, vs in values.items()
            for s, v in enumerate(vs)
        ],
        "missing": [],
    }


def test_the_checks_name_registered_cells_and_resolve_as_presets(tmp_path):
    keys = [c.key for c in K.CHECKS]
    assert len(keys) == len(set(keys)) >= 5
    for check in K.CHECKS:
        labels = [a.label for a in check.arms]
        assert len(labels) == len(set(labels)) >= 2 and all(a.cell in CELLS for a in check.arms)
        for e in check.expect:  # every comparison names labels the check records
            assert e.better in check.labels() and (not e.worse or e.worse in check.labels())
            assert (e.floor is None) == bool(e.worse)
        assert check.claim and check.source and check.setting
        for arm in check.arms:
            cfg = config.load(str(K.write_arm(check, arm, check.train, tmp_path)))
            assert cfg.model.cell == arm.cell and cfg.model.params == check.params
            assert cfg.train.steps == int(dict(o.split("=") for o in check.train)["train.steps"])
            for o in (*check.overrides, *arm.options):  # the check's and the arm's settings are written in
                path, value = config.parse_override(o)
                node = config.as_dict(cfg) if path[0] != "task" else {"task": cfg.task.options}
                for p in path if path[0] != "task" else ["task", *path[1:]]:
                    node = node[p]
                assert node == value, o


def test_a_comparison_needs_the_margin_and_every_seed_above():
    e = K.Expect("a", "b", 0.1)
    # means 0.6 vs 0.4 with every seed of a above every seed of b: holds
    assert K.holds(e.__dict__, {"a": [0.55, 0.6, 0.65], "b": [0.35, 0.4, 0.45]}) is True
    # the same means but one seed of a below one of b: fails (no separation)
    assert K.holds(e.__dict__, {"a": [0.3, 0.7, 0.8], "b": [0.35, 0.4, 0.45]}) is False
    # separated but by less than the margin: fails
    assert K.holds(e.__dict__, {"a": [0.46, 0.47, 0.48], "b": [0.40, 0.41, 0.42]}) is False
    assert K.holds(e.__dict__, {"a": [0.5]}) is None  # b has no finished run
    floor = K.Expect("a", floor=0.9)
    assert K.holds(floor.__dict__, {"a": [0.85, 0.95, 0.95]}) is True  # mean 0.917
    assert K.holds(floor.__dict__, {"a": [0.8, 0.9, 0.95]}) is False


def test_a_similarity_needs_the_means_within_the_margin():
    e = K.Expect("a", "b", 0.1, similar=True).__dict__
    assert K.holds(e, {"a": [0.5, 0.6, 0.7], "b": [0.55, 0.65, 0.75]}) is True  # means 0.60 and 0.65
    assert K.holds(e, {"a": [0.5, 0.6, 0.7], "b": [0.65, 0.75, 0.85]}) is False  # 0.60 and 0.75
    assert K.holds(e, {"a": [0.5]}) is None
    assert K.Expect("a", "b", 0.1, similar=True).text() == "a ~ b (means within 0.1)"


def test_the_verdict_and_the_table_read_the_record():
    expect = [K.Expect("a", "b", 0.1), K.Expect("a", floor=0.5)]
    shown = _record({"a": [0.6, 0.7, 0.8], "b": [0.1, 0.2, 0.3]}, expect)
    assert K.verdict(shown, "c") == "shown at this scale"
    assert K.check_record(shown, ["c"]) == []
    table = K.format_table(shown, "docs/r.json")
    row = next(line for line in table.splitlines() if line.startswith("| c (M) |"))
    # the paper's statement and source, our setting, mean ± sample std per arm, the verdict
    assert "a claim (a paper, Table 1)" in row and "a setting" in row
    assert f"a 0.700 ± {math.sqrt(0.01):.3f}; b 0.200 ± 0.100" in row and row.endswith("| shown at this scale |")
    assert "`docs/r.json`" in table and "1.0 CPU-minutes" in table
    weak = _record({"a": [0.4, 0.45, 0.5], "b": [0.1, 0.2, 0.3]}, expect)
    assert K.verdict(weak, "c") == "not shown at this scale (finding): fails a >= 0.5"
    lacking = _record({"a": [0.6, 0.7, 0.8], "b": [0.1]}, expect)
    assert K.check_record(lacking, ["c"]) == ["c/b: 1 of 3 runs and no reason"]
    assert K.check_record({**shown, "version": 0}) == [f"not a known-behaviours record of version {K.RECORD_VERSION}"]
    assert "its numbers and verdicts mean nothing" in K.format_table({**shown, "budget": "tiny"})


def test_a_docs_block_renders_the_record(tmp_path):
    from rnnlab.bench import benchdocs, docsync

    rec = _record({"a": [0.6, 0.7, 0.8], "b": [0.1, 0.2, 0.3]}, [K.Expect("a", "b", 0.1)])
    (tmp_path / "r.json").write_text(json.dumps(rec))
    md = tmp_path / "page.md"
    md.write_text("x\n<!-- bench: field-known r.json -->\nstale\n<!-- /bench -->\n")
    assert docsync.sync(md, check=True) == ["field-known r.json"]
    docsync.sync(md)
    assert benchdocs.render_block("field-known r.json", tmp_path) == K.format_table(rec, "r.json") + "\n"
    assert docsync.sync(md, check=True) == []


def test_a_tiny_run_of_one_check_is_well_formed(tmp_path, capsys):
    out = tmp_path / "known"
    argv = ["field", "--known", "--budget", "tiny", "--checks", "mamba-induction", "--seeds", "0,1"]
    assert main([*argv, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    rec = json.loads((out / "known-results.json").read_text())
    assert K.check_record(rec, ["mamba-induction"]) == [] and list(rec["checks"]) == ["mamba-induction"]
    check = K.check_by_key(["mamba-induction"])[0]
    assert sorted({r["cell"] for r in rec["rows"]}) == sorted(check.labels())
    for r in rec["rows"]:
        assert r["steps"] == 2 and 0.0 <= r["value"] <= 1.0
        assert abs(r["params"] - check.params) <= 0.2 * check.params  # matched by model.params
    # the longer tests: the same checkpoint on tasks 2, 4 and 8 times as long
    assert {tuple(r["eval"]) for r in rec["rows"] if "@" in r["cell"]} == {
        ("task.T=64",),
        ("task.T=128",),
        ("task.T=256",),
    }
    assert text.strip() == K.format_table(rec).strip()
    assert rec["checks"]["mamba-induction"]["runs"] == 4 and rec["checks"]["mamba-induction"]["runs_reused"] == 0
    assert main([*argv, "--out", str(out)]) == 0  # a second call reuses the finished runs
    again = json.loads((out / "known-results.json").read_text())
    assert again["rows"] == rec["rows"] and again["checks"]["mamba-induction"]["runs_reused"] == 4
    # and keeps the CPU time of the call that trained them
    first = rec["checks"]["mamba-induction"]["cpu_s"]
    assert first > 0 and again["checks"]["mamba-induction"]["cpu_s"] == first
    assert again["checks"]["mamba-induction"]["cpu_s_from"] == rec["date"]


def test_a_selected_check_merges_into_the_record_without_running_the_others(tmp_path, capsys):
    """--checks runs only the checks it names and keeps the record's other checks as they are
    (rows, settings, the call that ran them); a record of another budget or seeds is refused."""
    out, record = tmp_path / "known", tmp_path / "r.json"
    base = ["field", "--known", "--budget", "tiny", "--seeds", "0,1", "--out", str(out), "--record", str(record)]
    assert main([*base, "--checks", "lru-gamma-norm"]) == 0
    first = json.loads(record.read_text())
    assert main([*base, "--checks", "s4d-init"]) == 0
    capsys.readouterr()
    merged = json.loads(record.read_text())
    assert list(merged["checks"]) == ["lru-gamma-norm", "s4d-init"]  # CHECKS' order
    assert merged["checks"]["lru-gamma-norm"] == first["checks"]["lru-gamma-norm"]  # kept, not rerun
    assert merged["checks"]["lru-gamma-norm"]["date"] == first["date"]
    assert [r for r in merged["rows"] if r["task"] == "lru-gamma-norm"] == first["rows"]
    assert {r["cell"] for r in merged["rows"] if r["task"] == "s4d-init"} == {"lin", "inv"}
    assert K.check_record(merged, ["lru-gamma-norm", "s4d-init"]) == []
    assert main([*base[:-4], "--seeds", "0", "--out", str(out), "--record", str(record), "--checks", "s4d-init"]) == 2
    err = capsys.readouterr().err
    assert "holds budget 'tiny' with seeds [0, 1]" in err and "would mix them" in err
    assert json.loads(record.read_text()) == merged  # untouched


def test_bad_selections_are_one_line(tmp_path, capsys):
    assert main(["field", "--known", "--checks", "nosuch", "--out", str(tmp_path)]) == 2
    assert "unknown check(s) ['nosuch'] for rnnlab field --known" in capsys.readouterr().err


def test_the_committed_record_is_the_checks_and_the_page_shows_it():
    if not RECORD.exists():
        pytest.skip("docs/field-known-results.json not committed yet (docs/field-known.md gives the command)")
    from rnnlab.bench import benchdocs

    rec = json.loads(RECORD.read_text())
    assert K.check_record(rec) == [] and rec["budget"] == "table" and len(rec["seeds"]) == 3
    assert not (rec.get("git") or {}).get("dirty")
    for check in K.CHECKS:  # the record ran the settings the code states
        info = rec["checks"][check.key]
        assert info["overrides"] == [*check.overrides, *check.train], check.key
        assert info["claim"] == check.claim and info["setting"] == check.setting, check.key
        assert info["source"] == check.source, check.key
    page = PAGE.read_text()
    block = "<!-- bench: field-known field-known-results.json -->\n"
    assert block + benchdocs.render_block("field-known field-known-results.json", PAGE.parent) in page
    assert RECORD.stat().st_size < 200_000
