"""``rnnlab field``: every cell on every long-memory task at matched sizes, one record, one figure,
one table (docs/field.md); and ``rnnlab compare --modern``."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from conftest import DATA_ROOT
from rnnlab import compare as C
from rnnlab import config
from rnnlab import field as F
from rnnlab.cells import CELLS
from rnnlab.cli import main

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "field-results.json"


def _record(rows, tasks=None, cells=("a", "b", "c"), seeds=(0, 1), missing=()):
    tasks = tasks or {"t": {"metric": "test/loss", "higher": False, "preset": "p", "overrides": []}}
    return {
        "kind": "rnnlab field table",
        "version": F.RECORD_VERSION,
        "date": "2026-01-01 00:00 UTC",
        "budget": "tiny",
        "seeds": list(seeds),
        "cells": list(cells),
        "tasks": tasks,
        "git": {"commit": "0" * 40, "dirty": False},
        "rows": [{"task": t, "cell": c, "seed": s, "value": v, "wall_s": 1.0, "ensemble": 1} for t, c, s, v in rows],
        "missing": list(missing),
    }


def test_the_table_is_every_registered_cell_on_the_papers_and_the_fields_tasks():
    assert F.field_cells() == list(CELLS) and len(CELLS) >= 30
    assert set(F.FIELD_TASKS) <= set(C.TASKS) and "ptb_char" not in F.FIELD_TASKS
    for budget in F.BUDGETS.values():
        assert set(budget) == set(F.FIELD_TASKS)
        # the budget shrinks updates, batches and evaluation sets, never the papers' sequence lengths
        for over in budget.values():
            assert all(o.split("=")[0] in ("task.val_size", "task.test_size") or o.startswith("train.") for o in over)


def test_every_cell_configures_on_every_task_sized_to_the_home_budget(tmp_path):
    """Each generated preset resolves (the cell swapped into the home preset, sized with
    model.params); the home cell keeps its own options and learning-rate groups."""
    for key in F.FIELD_TASKS:
        task = C.TASKS[key]
        made = F.write_presets(task, F.field_cells(), 1000, tmp_path / key)
        assert [c for c, _ in made] == F.field_cells()
        home = C._preset_data(task.preset)
        over = list(F.BUDGETS["table"][key])
        own = config.load(task.preset, over)
        for cell, path in made:
            cfg = config.load(str(path), over)
            assert cfg.model.cell == cell and cfg.model.params == 1000
            assert cfg.task == own.task  # the task untouched: its lengths are the papers'
            if cell == home["model"]["cell"]:
                assert cfg.model.cell_options == own.model.cell_options and cfg.optim == own.optim


def test_a_tiny_table_is_well_formed(tmp_path, capsys, monkeypatch):
    out, cells, tasks = tmp_path / "field", ["lstm", "lru"], ["adding", "temporal_order", "psmnist"]
    monkeypatch.setitem(F.PRICED_OUT, "tiny", {("lru", "temporal_order"): "about 9 CPU-hours (a test's price)"})
    argv = ["field", "--budget", "tiny", "--cells", ",".join(cells), "--tasks", ",".join(tasks)]
    argv += ["--seeds", "0,1", "--out", str(out), "--data-dir", str(tmp_path / "nodata")]
    assert main(argv) == 0
    text = capsys.readouterr().out
    rec = json.loads((out / "field-results.json").read_text())
    assert F.check_record(rec, cells, tasks) == []
    assert rec["cells"] == cells and list(rec["tasks"]) == tasks and rec["budget"] == "tiny"
    why = {(m["cell"], m["task"]): m["reason"] for m in rec["missing"]}
    assert set(why) == {(c, "psmnist") for c in cells} | {("lru", "temporal_order")}
    assert all("data absent" in why[(c, "psmnist")] and "--data-dir" in why[(c, "psmnist")] for c in cells)
    assert why[("lru", "temporal_order")] == (
        "priced out of the tiny budget: about 9 CPU-hours (a test's price); `--priced-out` trains it"
    )
    assert sorted((r["cell"], r["task"]) for r in rec["rows"]) == sorted(
        [(c, t) for c, t in [("lstm", "adding"), ("lstm", "temporal_order"), ("lru", "adding")] for _ in (0, 1)]
    )
    for r in rec["rows"]:
        budget = rec["tasks"][r["task"]]["params"]
        assert math.isfinite(r["value"]) and r["steps"] == 2 and len(r["config_key"]) == 12
        assert abs(r["params"] - budget) <= 0.2 * budget  # matched to the home model's count
        # seeds as one ensemble where the cell has a batched path of its own (lstm), else one by one
        assert r["ensemble"] == (1 if r["cell"] == "lru" else 2)
    # the printed table: a row per cell, a column per task, the baselines and the budget
    assert text.strip() == F.format_table(rec).strip()
    body = [line for line in text.splitlines() if line.startswith("| ")]
    assert [line.split(" | ")[0][2:] for line in body[1:3]] == sorted(cells, key=lambda c: _mean_rank(rec, c))
    assert "memoryless baseline" in text and "early learning, not final ability" in text
    assert all(f" {t} (" in body[0] for t in tasks)
    png = (out / "field-results.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) < 300_000
    # a second call reuses every finished run
    assert main(argv) == 0
    assert json.loads((out / "field-results.json").read_text())["rows"] == rec["rows"]


def test_an_ensemble_too_big_for_the_memory_trains_its_seeds_one_by_one(tmp_path, monkeypatch):
    import rnnlab.ensemble

    def refuse(cfg, n, task, device):
        raise config.ConfigError(f"an ensemble of {n} members needs more memory than is free (a test's refusal)")

    monkeypatch.setattr(rnnlab.ensemble, "check_members_fit", refuse)
    rec = F.run_field(["lstm"], ["adding"], "tiny", [0, 1], tmp_path / "f", log=lambda *a: None)
    assert [(r["seed"], r["ensemble"]) for r in rec["rows"]] == [(0, 1), (1, 1)] and rec["missing"] == []


def _mean_rank(rec, cell):
    ranks = [v for (c, _), v in F.ranks(rec).items() if c == cell]
    return sum(ranks) / len(ranks)


def test_ranks_follow_the_metric_and_share_ties():
    tasks = {
        "loss": {"metric": "test/loss", "higher": False, "preset": "p", "overrides": []},
        "acc": {"metric": "test/accuracy", "higher": True, "preset": "p", "overrides": []},
    }
    rows = [("loss", "a", 0, 1.0), ("loss", "a", 1, 3.0), ("loss", "b", 0, 0.5), ("loss", "b", 1, 0.5)]
    rows += [("loss", "c", 0, 2.0), ("loss", "c", 1, 2.0)]
    rows += [("acc", "a", s, 0.9) for s in (0, 1)] + [("acc", "b", s, 0.5) for s in (0, 1)]
    rows += [("acc", "c", s, 0.9) for s in (0, 1)]
    rec = _record(rows, tasks)
    means = F.cell_means(rec)
    assert means[("a", "loss")] == (2.0, math.sqrt(2.0), 2)  # mean and sample standard deviation
    assert F.ranks(rec) == {
        ("b", "loss"): 1,
        ("a", "loss"): 2,  # mean 2.0 ties c
        ("c", "loss"): 2,
        ("a", "acc"): 1,
        ("c", "acc"): 1,
        ("b", "acc"): 3,
    }
    table = F.format_table(rec)
    assert "| a | 2.000 (2) | 0.900 (1) | 1.5 |" in table and "| b | 0.500 (1) | 0.500 (3) | 2.0 |" in table
    # a mean no better than the memoryless baseline is marked (loss 1.0: a and c; accuracy 0.5: b)
    rec["tasks"]["loss"]["baseline"], rec["tasks"]["acc"]["baseline"] = 1.0, 0.5
    table = F.format_table(rec)
    assert "| a | 2.000* (2) | 0.900 (1) | 1.5 |" in table and "| b | 0.500 (1) | 0.500* (3) | 2.0 |" in table
    assert "| memoryless baseline | 1.000 | 0.500 | |" in table


def test_a_docs_block_renders_the_record(tmp_path):
    """docs/field.md's ``<!-- bench: field RECORD -->`` block is the record's table (docsync)."""
    from rnnlab.bench import benchdocs, docsync

    rec = _record([("t", c, s, v) for c, v in (("a", 0.2), ("b", 0.1), ("c", 0.3)) for s in (0, 1)])
    (tmp_path / "r.json").write_text(json.dumps(rec))
    md = tmp_path / "page.md"
    md.write_text("x\n<!-- bench: field r.json -->\nstale\n<!-- /bench -->\n")
    assert docsync.sync(md, check=True) == ["field r.json"]
    docsync.sync(md)
    body = md.read_text().split("-->\n", 1)[1].rsplit("<!--", 1)[0]
    assert body == benchdocs.render_block("field r.json", tmp_path) == F.format_table(rec, "r.json") + "\n"
    assert "| b | 0.100 (1) | 1.0 |" in body and docsync.sync(md, check=True) == []


def test_the_record_check_names_what_the_registry_has_and_the_record_lacks():
    rows = [("t", c, s, 0.1) for c in "abc" for s in (0, 1)]
    good = _record(rows)
    assert F.check_record(good, ["a", "b", "c"], ["t"]) == []
    assert F.check_record(good, ["a", "b", "c", "d"], ["t"])[0].startswith(
        "cells differ from the registry: missing ['d']"
    )
    lacking = copy.deepcopy(good)
    lacking["rows"] = [r for r in lacking["rows"] if not (r["cell"] == "b" and r["seed"] == 1)]
    assert F.check_record(lacking, ["a", "b", "c"], ["t"]) == ["b/t: seeds [0] of [0, 1] and no reason"]
    lacking["missing"] = [{"task": "t", "cell": "b", "seeds": [1], "reason": "diverged"}]
    assert F.check_record(lacking, ["a", "b", "c"], ["t"]) == []
    assert F.check_record({**good, "version": 0}, ["a"], ["t"]) == [
        f"not a field-table record of version {F.RECORD_VERSION}"
    ]


def test_the_committed_record_validates_against_the_registry():
    if not RECORD.exists():
        pytest.skip("docs/field-results.json not committed yet (docs/field.md gives the command)")
    rec = json.loads(RECORD.read_text())
    assert F.check_record(rec, F.field_cells()) == []
    assert rec["budget"] == "table" and not (rec.get("git") or {}).get("dirty")
    for key, info in rec["tasks"].items():
        assert info["overrides"] == list(F.BUDGETS["table"][key]), f"{key}: the record's budget is not the stated one"


def test_the_documented_budget_is_the_budget():
    doc = (ROOT / "docs" / "field.md").read_text()
    assert F.budget_markdown() in doc


def test_bad_selections_are_one_line(tmp_path, capsys):
    assert main(["field", "--cells", "lstm,nosuch", "--out", str(tmp_path)]) == 2
    assert "unknown cell(s) ['nosuch'] for rnnlab field" in capsys.readouterr().err
    assert main(["field", "--tasks", "ptb_char", "--out", str(tmp_path)]) == 2
    assert "unknown task(s) ['ptb_char']" in capsys.readouterr().err
    assert main(["field", "--tasks", ",", "--out", str(tmp_path)]) == 2
    assert "--tasks ',' names nothing" in capsys.readouterr().err


# --- compare --modern --------------------------------------------------------------------------


def test_compare_modern_adds_each_modern_cell_sized_on_the_home_preset(tmp_path):
    task = C.TASKS["adding"]
    plain = C.write_presets(task, "gru", 106, tmp_path / "plain")
    made = C.write_presets(task, "gru", 106, tmp_path / "modern", modern=True)
    assert made[: len(plain)] == [(lbl, p, tmp_path / "modern" / f.name) for lbl, p, f in plain]
    extra = made[len(plain) :]
    assert [lbl for lbl, _, _ in extra] == list(C.MODERN_CELLS)
    for label, preset, path in extra:
        cfg = config.load(str(path))
        assert preset == task.preset and cfg.model.cell == label and cfg.model.params == 106
        assert cfg.optim.group_lr == {} and cfg.task == config.load(task.preset).task
    # a modern cell under test is not listed twice
    assert [lbl for lbl, _, _ in C.write_presets(task, "lru", 106, tmp_path / "m2", modern=True)].count("lru") == 1


def test_compare_modern_runs_the_modern_cells_beside_the_baselines(tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["compare", "gru", "--tasks", "selective_copy", "--seeds", "0", "--out", str(out), "--modern"]
    argv += ["--set", "train.steps=2", "--set", "train.eval_every=2", "--set", "task.val_size=8"]
    argv += ["--set", "task.test_size=8", "--set", "task.L=16", "--set", "task.K=4", "--set", "train.batch_size=4"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "against the papers' baselines and the modern cells" in text
    labels = [line.split(" | ")[1] for line in text.splitlines() if line.startswith("| selective_copy |")]
    assert labels == ["gru", "lstm", *C.MODERN_CELLS]  # the field's tasks: the LSTM's home preset is the baseline
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert all(len(r["values"]) == 1 for r in rows)
    assert [r["published"] for r in rows if r["label"] in C.MODERN_CELLS] == ["-"] * len(C.MODERN_CELLS)


# --- the whole registry at the tiny budget ----------------------------------------------------------


@pytest.mark.slow  # every cell on every task: minutes
def test_every_cell_trains_on_every_task_at_the_tiny_budget(tmp_path):
    data = str(DATA_ROOT) if DATA_ROOT is not None else str(tmp_path / "nodata")  # $RNNLAB_TEST_DATA: psMNIST too
    rec = F.run_field(budget="tiny", seeds=[0, 1], out=tmp_path / "f", data_dir=data, log=lambda *a: None)
    assert F.check_record(rec, F.field_cells()) == []
    # the reasons a point may lack runs: sizing (model.params cannot reach the budget), divergence at
    # two steps (irnn on ListOps), absent data; anything else (a shape error, a crash) is a defect
    expected = ("BudgetError: ", "TrainingDiverged: ", "data absent")
    failed = [m for m in rec["missing"] if not any(e in m["reason"] for e in expected)]
    assert not failed, failed


def test_merge_takes_each_task_from_the_last_record_that_has_it(tmp_path, capsys):
    """``rnnlab field --merge``: parts of one table (the same budget and seeds) become one record,
    each task with its rows, reasons and CPU time from the last part that holds it; nothing trains."""
    info = {"metric": "test/loss", "higher": False, "preset": "p", "overrides": []}
    first = _record(
        [(t, c, s, 0.1 if t == "adding" else 0.2) for t in ("adding", "listops") for c in "abc" for s in (0, 1)],
        tasks={"adding": {**info, "cpu_s": 60.0}, "listops": {**info}},
        missing=[{"task": "listops", "cell": "c", "seeds": [0, 1], "reason": "priced out"}],
    )
    first["rows"] = [r for r in first["rows"] if not (r["task"] == "listops" and r["cell"] == "c")]
    second = _record(
        [("listops", c, s, 0.3) for c in "abc" for s in (0, 1)], tasks={"listops": {**info, "cpu_s": 120.0}}
    )
    second["git"] = {"commit": "1" * 40, "dirty": False}
    second["priced_out_trained"] = True
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for p, rec in zip(paths, (first, second)):
        p.write_text(json.dumps(rec))
    out = tmp_path / "merged.json"
    assert main(["field", "--merge", *map(str, paths), "--record", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert list(merged["tasks"]) == ["adding", "listops"]  # the table's column order
    assert F.check_record(merged, ["a", "b", "c"], ["adding", "listops"]) == []
    assert merged["missing"] == []  # the listops reason went with the first part's listops
    assert sorted((r["task"], r["cell"], r["value"]) for r in merged["rows"]) == sorted(
        [("adding", c, 0.1) for c in "abc" for _ in (0, 1)] + [("listops", c, 0.3) for c in "abc" for _ in (0, 1)]
    )
    assert merged["tasks"]["adding"]["cpu_s"] == 60.0 and merged["tasks"]["listops"]["cpu_s"] == 120.0
    assert merged["tasks"]["listops"]["priced_out_trained"] and not merged["tasks"]["adding"]["priced_out_trained"]
    assert [p["tasks"] for p in merged["parts"]] == [["adding"], ["listops"]]
    assert "adding from 0000000000; listops from 1111111111" in F.format_table(merged)
    assert (tmp_path / "merged.png").read_bytes()[:4] == b"\x89PNG"
    # parts of two tables do not merge
    paths[1].write_text(json.dumps({**second, "seeds": [0, 1, 2]}))
    assert main(["field", "--merge", *map(str, paths), "--record", str(out)]) == 2
    assert "differ in seeds" in capsys.readouterr().err
