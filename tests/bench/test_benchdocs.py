"""Timing records that hold: the load check, the captions, and every table and sentence in the
docs generated from its record (rnnlab.bench.benchrecord, rnnlab.bench.benchdocs)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch

import rnnlab.device
from rnnlab.bench import benchdocs, benchrecord, docsync

ROOT = Path(__file__).parents[2]


def _load_targets():
    """The project's targets (``benchmarks/targets.py``), loaded from its file."""
    spec = importlib.util.spec_from_file_location("bench_targets", ROOT / "benchmarks" / "targets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


targets = _load_targets()

#: the timing records in the repository, and the docs that show them
RECORDS = sorted(
    p.relative_to(ROOT).as_posix()
    for p in (ROOT / "docs").glob("*.json")
    if p.name.startswith("speed-results-")
    or p.name
    in (
        "papers-code.json",
        "backend-overhead.json",
        "scan-results.json",
        "allocator-results.json",
        "denormals-results.json",
    )
)

#: records made before records carried their load and CPU model: each is captioned "legacy,
#: load unknown" until it is re-recorded on an idle machine (then it leaves this list)
LEGACY: set[str] = set()

DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]


def _bench_blocks():
    for md in DOCS:
        for m in docsync.BLOCK.finditer(md.read_text()):
            if m.group("kind") == "bench":
                yield md, m.group("args"), m.group("body")


# --- the committed docs and records -------------------------------------------------------


def test_every_run_table_in_the_docs_is_what_its_records_give():
    """A ``<!-- table: DIR -->`` block anywhere in the docs (run records quoted in prose, such as
    docs/asrnn.md's copy evidence) is what its records render today."""
    found = [
        (md, m.group("args"), m.group("body"))
        for md in DOCS
        for m in docsync.BLOCK.finditer(md.read_text())
        if m.group("kind") == "table"
    ]
    assert len(found) >= 3
    stale = [f"{md.relative_to(ROOT)}: {args}" for md, args, body in found if body != docsync.render(args, md.parent)]
    assert not stale, f"stale blocks (run python -m rnnlab.bench.docsync FILE.md): {stale}"


def test_every_value_quoted_in_the_docs_is_what_its_records_give():
    """A number marked ``<!-- value: ... -->`` in prose (docs/reproduce.md's campaign list) is
    what its records give today."""
    found = [
        (md, m.group("args"), m.group("body")) for md in DOCS for m in docsync.VALUE_BLOCK.finditer(md.read_text())
    ]
    assert len(found) >= 15
    stale = [
        f"{md.relative_to(ROOT)}: {args}: {body}"
        for md, args, body in found
        if body != docsync.render_value(args, md.parent)
    ]
    assert not stale, f"stale values (run python -m rnnlab.bench.docsync FILE.md): {stale}"


def test_a_value_block_reduces_the_records_as_read_from_their_files(tmp_path):
    """Against the committed records read directly from their result.json files (not through
    the ledger; plain or stored compressed, through the one reader): each in seed order, mean,
    sample sd in points, min, max, one; bad arguments fail."""
    import statistics

    from rnnlab.rundir import RunFiles, read_stored

    rel = "../records/asrnn-mnist-n122/asrnn-smnist-n122"
    base = ROOT / "docs"
    results = sorted((json.loads(read_stored(f)) for f in RunFiles.below(base / rel)), key=lambda r: r["seed"])
    acc = [r["test"]["test/accuracy"] for r in results]
    assert len(acc) >= 3
    rv = docsync.render_value
    each = rv(f"{rel} test/accuracy .2% each", base)
    assert each == ", ".join(f"{100 * a:.2f}%" for a in acc[:-1]) + f" and {100 * acc[-1]:.2f}%"
    assert rv(f"{rel} test/accuracy .4f mean", base) == f"{statistics.mean(acc):.4f}"
    assert rv(f"{rel} test/accuracy x100:.3f sd", base) == f"{100 * statistics.stdev(acc):.3f}"
    assert rv(f"{rel} test/accuracy .4f min", base) == f"{min(acc):.4f}"
    assert rv(f"{rel} test/accuracy .4f max", base) == f"{max(acc):.4f}"
    assert rv(f"{rel}/seed5545 test/accuracy .4f", base) == f"{acc[1]:.4f}"
    with pytest.raises(ValueError, match="'one' needs exactly one record, found 3"):
        rv(f"{rel} test/accuracy .4f", base)
    with pytest.raises(ValueError, match="HOW one of"):
        rv(f"{rel} test/accuracy .4f median", base)
    with pytest.raises(ValueError, match="values"):
        rv(f"{rel} test/no_such_metric .4f each", base)
    md = tmp_path / "x.md"
    md.write_text(f"accuracy <!-- value: {base / rel}/seed5545 test/accuracy .2% -->old<!-- /value --> here\n")
    assert docsync.sync(md, check=True) == [f"value: {base / rel}/seed5545 test/accuracy .2%"]
    docsync.sync(md)
    assert (
        md.read_text()
        == f"accuracy <!-- value: {base / rel}/seed5545 test/accuracy .2% -->{100 * acc[1]:.2f}%<!-- /value --> here\n"
    )


def test_a_value_block_that_no_longer_names_one_record_is_a_one_line_error(tmp_path, capsys):
    """A block quoting 'one' record of a preset that has since gained seeds: the command line
    says which block and how to point it at one seed, and leaves the file as it was."""
    rel = ROOT / "records/asrnn-mnist-n122/asrnn-smnist-n122"
    md = tmp_path / "x.md"
    text = f"a <!-- value: {rel} test/accuracy .2% -->old<!-- /value -->\n"
    md.write_text(text)
    assert docsync.main([str(md)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"docsync: error: {md}: value block"), err
    assert "found 3" in err[0] and "DIR/seedNNNN" in err[0], err
    assert md.read_text() == text


def test_every_generated_block_in_the_docs_is_what_its_record_gives():
    found = list(_bench_blocks())
    assert len(found) >= 10
    stale = [
        f"{md.relative_to(ROOT)}: {args}" for md, args, body in found if body != benchdocs.render_block(args, md.parent)
    ]
    assert not stale, f"stale blocks (run python -m rnnlab.bench.docsync FILE.md): {stale}"


def test_every_timing_record_has_its_table_in_the_docs():
    shown = {(md.parent / args.split()[1]).resolve().relative_to(ROOT).as_posix() for md, args, _ in _bench_blocks()}
    assert set(RECORDS) <= shown, sorted(set(RECORDS) - shown)


@pytest.mark.parametrize("record", RECORDS)
def test_every_record_carries_its_load_and_cpu_model_or_is_listed_legacy(record):
    rec = json.loads((ROOT / record).read_text())
    if record in LEGACY:
        assert benchrecord.is_legacy(rec), f"{record} carries its load now: remove it from LEGACY"
        assert "Legacy record" in benchrecord.caption(rec, record)
        return
    cond = benchrecord.conditions_of(rec)
    missing = [k for k in benchrecord.HOST_KEYS if k not in cond]
    assert not missing, f"{record} lacks {missing}: record it again with the current benchmark"
    assert cond["cpu_model"] and len(cond["loadavg_before"]) == 3 and len(cond["loadavg_after"]) == 3


def test_the_3x_target_and_its_verdict_come_from_the_papers_record():
    """No hand-written papers'-code ratio or verdict: every "Nx" near "papers' code" in the
    docs sits in a generated block, and BENCHMARKS.md's target row is generated."""
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert "<!-- bench: benchmarks/targets.py:papers-target docs/papers-code.json -->" in text
    assert "met for asRNN" not in re.sub(r"<!-- bench:.*?<!-- /bench -->", "", text, flags=re.S)
    for md in DOCS:
        outside = re.sub(r"<!-- bench:.*?<!-- /bench -->", "", md.read_text(), flags=re.S)
        for line in outside.splitlines():
            if "papers' code" in line or "papers' own code" in line:
                assert not re.search(r"\b\d\.\d\dx", line), f"{md.name}: a hand-written ratio: {line}"


# --- the load check -----------------------------------------------------------------------


def test_a_busy_machine_is_refused_with_the_load_and_the_fix():
    with pytest.raises(benchrecord.LoadError) as e:
        benchrecord.start(loadavg=(1.3, 1.0, 0.9), cores=2)
    msg = str(e.value)
    assert "1.30" in msg and "1.00" in msg and "0.5 per core on 2 cores" in msg and "--allow-load" in msg
    cond = benchrecord.start(loadavg=(0.9, 1.0, 0.9), cores=2)  # at the limit or below: recorded
    assert cond["load_limit"] == 1.0 and cond["loadavg_before"] == [0.9, 1.0, 0.9]
    assert cond["cpu_model"] and cond["blas"]


@pytest.mark.parametrize(
    "before, during, after, own, loaded",
    [
        (0.1, [1.0], 1.05, 1, False),  # the benchmark's own thread: idle
        (0.1, [], 2.1, 1, True),  # another process came during the run
        (0.1, [2.5], 1.0, 1, True),  # ... and left before its end
        (0.2, [2.9], 2.9, 2, False),  # two workers of its own on 2 cores, limit 1
        (1.5, [], 1.0, 1, True),  # allowed, but busy before
    ],
)
def test_loaded_is_judged_net_of_the_benchmarks_own_load(before, during, after, own, loaded):
    cond = benchrecord.start(allow_load=True, own=own, loadavg=(before, 0, 0), cores=2)
    for v in during:
        benchrecord.sample(cond, loadavg=(v, 0, 0))
    assert benchrecord.finish(cond, loadavg=(after, 0, 0))["loaded"] is loaded


def test_a_loaded_run_is_kept_aside_not_written_unless_allowed(tmp_path):
    cond = benchrecord.finish(benchrecord.start(loadavg=(0.1, 0, 0), cores=2), loadavg=(3.0, 0, 0))
    rec = {"conditions": cond, "rows": [1, 2]}
    out = tmp_path / "r.json"
    with pytest.raises(benchrecord.LoadError, match="--allow-load") as e:
        benchrecord.write(out, rec, cond)
    assert not out.exists() and str(tmp_path / "r.json.loaded") in str(e.value)
    assert json.loads((tmp_path / "r.json.loaded").read_text()) == rec  # nothing measured is lost
    cond["allow_load"] = True
    benchrecord.write(out, rec, cond)
    assert json.loads(out.read_text()) == rec
    caption = benchrecord.caption(rec, "r.json")
    assert caption.startswith("**Loaded machine (`r.json`): load average 0.10 before and 3.00")


def test_every_benchmark_records_through_one_helper(tmp_path, capsys):
    """conditions/publish/exit_code: the record steps the benchmarks share (scan, allocator,
    backend overhead, papers' code, ensemble, speed)."""
    host = benchrecord.start(loadavg=(0.1, 0, 0), cores=2)
    cond = benchrecord.conditions(host, threads=1, loadavg=(0.2, 0, 0))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", cond["date"]) and cond["threads"] == 1
    assert cond["loaded"] is False and cond["loadavg_after"] == [0.2, 0, 0]
    assert not benchrecord.is_legacy({"conditions": cond, "rows": []})
    assert benchrecord.conditions(dict(host), date="then", loadavg=(0.2, 0, 0))["date"] == "then"
    rec, out = {"conditions": cond, "rows": [3]}, tmp_path / "r.json"
    benchrecord.publish(rec, out, "| table |")
    assert capsys.readouterr().out == "| table |\n" and json.loads(out.read_text()) == rec
    benchrecord.publish(rec, None, "again")  # no path: printed only
    assert capsys.readouterr().out == "again\n"
    loaded = benchrecord.conditions(benchrecord.start(loadavg=(0.1, 0, 0), cores=2), loadavg=(3.0, 0, 0))

    def body():
        benchrecord.publish({"conditions": loaded}, tmp_path / "l.json", "t")

    assert benchrecord.exit_code(body) == 2 and "--allow-load" in capsys.readouterr().err
    assert (tmp_path / "l.json.loaded").exists() and not (tmp_path / "l.json").exists()
    assert benchrecord.exit_code(lambda: None) == 0 and benchrecord.exit_code(lambda: 3) == 3
    with pytest.raises(KeyError):  # only the named errors become exit status 2
        benchrecord.exit_code(lambda: {}["x"])
    assert benchrecord.exit_code(lambda: {}["x"], KeyError) == 2


def test_captions_say_idle_loaded_or_legacy():
    idle = benchrecord.finish(benchrecord.start(loadavg=(0.05, 0, 0), cores=2), loadavg=(1.02, 0, 0))
    text = benchrecord.caption({"conditions": idle}, "docs/x.json")
    assert text.startswith("*Record `docs/x.json`, idle machine: load average 0.05 before and 1.02 after")
    assert idle["cpu_model"] in text and idle["blas"] in text
    # the generation and instruction set, as the ledger names a CPU (records.cpu_label)
    assert idle["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert idle["cpu_id"] == rnnlab.device.cpu_id() and (not idle["cpu_id"] or idle["cpu_id"] in text)
    named = {**idle, "cpu_model": "AMD EPYC", "cpu_id": "family 23 model 1", "cpu_capability": "AVX2"}
    assert "; AMD EPYC (family 23 model 1, AVX2), BLAS" in benchrecord.caption({"conditions": named}, "x")
    older = {k: v for k, v in named.items() if k not in ("cpu_id", "cpu_capability")}
    assert "; AMD EPYC, BLAS" in benchrecord.caption({"conditions": older}, "x")  # records before them
    assert benchrecord.is_legacy([{"backend": "x"}]) and benchrecord.is_legacy({"conditions": "text"})
    legacy = benchrecord.caption({"conditions": {"loadavg_end": [1.0, 1.0, 1.0]}}, "old.json")
    assert legacy.startswith("*Legacy record `old.json`, load unknown") and "at its end 1.00" in legacy


# --- the papers' code views ---------------------------------------------------------------


def _papers_record(rounds: dict, loaded: bool | None) -> dict:
    med = {k: sorted(v)[len(v) // 2] for k, v in rounds.items()}
    cond = {"text": "t"}
    if loaded is not None:
        cond = benchrecord.finish(
            benchrecord.start(allow_load=True, loadavg=(0.1, 0, 0), cores=2), loadavg=(3.5 if loaded else 1.0, 0, 0)
        )
    return {"conditions": cond, "rounds_s": rounds, "median_s": med}


def test_papers_ratios_are_medians_of_rounds_and_only_an_idle_record_judges_the_target():
    rounds = {
        "asrnn papers": [3.3, 2.4, 3.0],
        "asrnn rnnlab": [1.0, 1.0, 1.0],
        "dmu papers": [1.2, 1.6, 1.3],
        "dmu rnnlab": [1.0, 1.0, 1.0],
        "nn.LSTM (n=67)": [1.0, 1.0, 1.0],
    }
    idle = _papers_record(rounds, loaded=False)
    assert benchdocs.papers_ratio(idle, "asrnn papers", "asrnn rnnlab") == (3.0, 2.4, 3.3)
    table = benchdocs.papers_table(idle)
    assert "| asrnn (n=138) | 3.000 | 1.000 | 3.00 [2.40-3.30]x |" in table and "dmu (n=82)" in table
    assert "nnrnn" not in table
    assert targets.papers_verdict(idle) == "**met** for asRNN (3.00x); **not met** for DMU (1.30x)"
    sentence = benchdocs.papers_sentence(idle, "p.json")
    assert "idle machine; median [min-max] of 3 alternating rounds" in sentence
    assert "asRNN 3.00 [2.40-3.30]x and DMU 1.30 [1.20-1.60]x" in sentence
    for loaded in (True, None):
        rec = _papers_record(rounds, loaded)
        assert targets.papers_verdict(rec).startswith("**not judged**")
        assert "met for" not in targets.papers_target(rec, "p.json")


def test_a_stale_block_is_reported_and_rewritten(tmp_path):
    rounds = {"asrnn papers": [3.0, 3.0, 3.0], "asrnn rnnlab": [1.0, 1.0, 1.0], "nn.LSTM (n=67)": [1.0] * 3}
    (tmp_path / "p.json").write_text(json.dumps(_papers_record(rounds, loaded=False)))
    md = tmp_path / "x.md"
    md.write_text("a\n<!-- bench: papers p.json -->\n| old | table |\n<!-- /bench -->\nb\n")
    assert docsync.sync(md, check=True) == ["papers p.json"] and "| old | table |" in md.read_text()
    assert docsync.sync(md) == ["papers p.json"] and docsync.sync(md, check=True) == []
    assert "3.00 [3.00-3.00]x" in md.read_text()
    with pytest.raises(ValueError, match="VIEW RECORD"):
        benchdocs.render_block("nope p.json", tmp_path)
    with pytest.raises(ValueError, match="not found"):
        benchdocs.render_block("papers missing.json", tmp_path)


def _scan_record(speedups: dict, loaded=False) -> dict:
    """A scan record whose loop takes 1 s and whose scan gives ``speedups[(B, H)]`` per repeat."""
    cond = benchrecord.finish(
        benchrecord.start(allow_load=True, loadavg=(0.1, 0, 0), cores=2), loadavg=(3.5 if loaded else 1.0, 0, 0)
    )
    rows = [
        {
            "B": B,
            "H": H,
            "T": 1000,
            "auto": "scan",
            "times_s": {"loop": [1.0] * len(r), "fused": [0.8] * len(r), "scan": [1.0 / x for x in r]},
        }
        for (B, H), r in speedups.items()
    ]
    return {"conditions": cond, "rows": rows}


def test_the_scan_table_and_target_come_from_the_per_repeat_ratios():
    rec = _scan_record({(8, 8): [5.0, 6.0, 8.0], (128, 128): [0.4, 0.5, 0.45]})
    table = benchdocs.scan_table(rec)
    assert "| 8 x 8 | 1000 | 1.000 | 0.800 | 0.167 | 1.25 [1.25-1.25]x | 6.00 [5.00-8.00]x | scan |" in table
    assert "0.45 [0.40-0.50]x" in table
    target, measured, status = targets.scan_target_row(rec)
    assert target == "LT-RNN scan at least 5x faster than its loop at T=1000"
    assert measured == "6.00x at B x H = 8 x 8; 0.45x at B x H = 128 x 128"
    assert status == "**not met**: at B x H = 8 x 8 only"
    assert targets.scan_target_row(_scan_record({(8, 8): [5.5] * 3}))[2] == "**met**"
    assert targets.scan_target_row(_scan_record({(8, 8): [4.9] * 3}))[2] == "**not met**"
    assert targets.scan_target_row(_scan_record({(8, 8): [9.0] * 3}, loaded=True))[2].startswith("not judged")
    assert benchdocs.VIEWS["scan"](rec, "s.json").startswith("*Record `s.json`, idle machine")


def test_the_allocator_table_lists_every_row_and_its_errors():
    rows = [
        {
            "cell": "nn.LSTM",
            "hidden": 68,
            "allocator": "default",
            "cpu": 0.9,
            "wall": 0.91,
            "faults": 1e5,
            "peak_mb": 558,
        },
        {"cell": "exprnn", "hidden": 190, "allocator": "env both", "error": "boom"},
    ]
    table = benchdocs.allocator_table({"rows": rows})
    assert "| nn.LSTM n=68 | default | 0.900 (0.910) | 100000 | 558 |" in table
    assert "| exprnn n=190 | env both | error: boom | | |" in table


def test_the_denormals_table_gives_medians_and_the_median_of_per_round_ratios():
    spec = importlib.util.spec_from_file_location("bench_denormals", ROOT / "benchmarks" / "denormals.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = [
        # per-round ratios 8, 2, 5: their median 5 is not the ratio of the medians (2.0 / 0.4)
        {"config": "mnist", "cell": "nn.LSTM", "hidden": 61, "keep": [1.6, 2.0, 5.0], "flush": [0.2, 1.0, 1.0]},
        {"config": "copy", "cell": "asrnn", "hidden": 122, "error": "boom"},
    ]
    table = mod.table({"rows": rows})
    assert "| mnist | nn.LSTM | 61 | 2.000 | 1.000 | 5.00 [2.00-8.00] |" in table
    assert "| copy | asrnn | 122 | error: boom | | |" in table


def test_the_guides_summary_and_memory_sentence_come_from_the_main_record():
    def row(config, label, hidden, fast, base, depth=1, peak=0.0):
        r = {"config": config, "label": label, "hidden": hidden, "depth": depth, "peak_mb": peak}
        r["fast"] = {"cpu": fast[1], "cpu_all": fast}
        if base:
            r["baseline"] = {"cpu": base[1], "cpu_all": base}
        return r

    rec = {
        "rows": [
            row("copy", "asrnn", 138, [0.5, 0.4, 0.6], [1.0, 0.5, 0.5]),  # per-repeat ratios 0.5, 0.8, 1.2
            row("ptb", "asrnn", 1024, [4.0, 4.0, 4.0], [1.0, 1.0, 1.0]),
            row("copy", "dmu", 82, [0.3, 0.3, 0.3], [0.6, 0.6, 0.6], depth=2),
            {"config": "mnist", "label": "dmu", "hidden": 72, "error": "boom"},
            row("long", "exprnn", 190, [1.0] * 3, None, peak=3715.0),
            row("long", "exprnn reference loop", 190, [1.0] * 3, None, peak=9381.0),
            row("long", "nn.LSTM", 68, [1.0] * 3, None, peak=5353.0),
        ]
    }
    table = benchdocs.summary_table(rec).splitlines()
    assert "| `asrnn` (138 / - / 1024) | 0.400 | 0.80 | - | - | 4.000 | 4.00 |" in table
    assert "| `dmu` (82 / - / -, depth 2) | 0.300 | 0.50 | - | - | - | - |" in table  # the error row: no figure
    assert len(table) == 2 + len(benchdocs.SUMMARY_CELLS)
    rec["conditions"] = {}  # legacy: the sentence says so
    sentence = benchdocs.memory_sentence(rec, "m.json")
    assert "peaks 3.6 GiB" in sentence and "needs 9.2 GiB (`nn.LSTM` 5.2 GiB)" in sentence  # MB / 1024
    assert "legacy record" in sentence


# --- issue 20: no long functions in this benchmark code -----------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "src/rnnlab/bench/speed.py",
        "src/rnnlab/bench/benchrecord.py",
        "src/rnnlab/bench/benchdocs.py",
        "benchmarks/papers_code.py",
        "benchmarks/backend_overhead.py",
        "benchmarks/speed.py",
        "benchmarks/scan.py",
        "benchmarks/allocator.py",
        "benchmarks/targets.py",
    ],
)
def test_no_function_is_longer_than_80_lines(path):
    tree = ast.parse((ROOT / path).read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                body = body[1:]  # the docstring does not count
            n = (body[-1].end_lineno - body[0].lineno + 1) if body else 0
            assert n <= 80, f"{path}: {node.name} has {n} lines"


# --- views kept outside the library (``FILE.py:NAME``) ----------------------------------------


def test_a_block_can_name_a_view_of_a_python_file_beside_the_markdown(tmp_path):
    """``<!-- bench: FILE.py:NAME RECORD... -->`` calls ``VIEWS[NAME]`` of FILE.py (relative to
    the Markdown file) with the records, then the paths a reader sees; a wrong file or name is
    a one-line error naming it."""
    (tmp_path / "views.py").write_text(
        "VIEWS = {'count': lambda *a: ' + '.join(f\"{len(r['rows'])} rows ({s})\" for r, s in zip(a[: len(a) // 2], a[len(a) // 2 :]))}\n"
    )
    for name, n in (("a.json", 2), ("b.json", 3)):
        (tmp_path / name).write_text(json.dumps({"rows": [{}] * n}))
    md = tmp_path / "x.md"
    md.write_text("<!-- bench: views.py:count a.json b.json -->\n<!-- /bench -->\n")
    assert docsync.sync(md) == ["views.py:count a.json b.json"]
    assert "2 rows (a.json) + 3 rows (b.json)\n" in md.read_text()
    with pytest.raises(ValueError, match="views file .*nope.py not found"):
        benchdocs.render_block("nope.py:count a.json", tmp_path)
    with pytest.raises(ValueError, match=r"has no view 'other' in its VIEWS; it has \['count'\]"):
        benchdocs.render_block("views.py:other a.json", tmp_path)
    with pytest.raises(ValueError, match="VIEW RECORD"):
        benchdocs.render_block("papers a.json b.json", tmp_path)  # a library view reads one record


def _ensemble_record(ratio: float, loaded=False) -> dict:
    cond = benchrecord.finish(
        benchrecord.start(allow_load=True, loadavg=(0.1, 0, 0), cores=2), loadavg=(3.5 if loaded else 1.0, 0, 0)
    )
    row = {"bench": "dmu-adding", "members": 51, "ensemble_over_one_run": ratio, "speedup": 51 / ratio}
    return {"conditions": cond, "rows": [row]}


def test_the_ensemble_target_is_judged_from_an_idle_record():
    assert "3.90x one run's time (target <= 4x: met), 13.1x" in targets.ensemble_verdict(_ensemble_record(3.9))
    assert "(target <= 4x: not met)" in targets.ensemble_verdict(_ensemble_record(4.3))
    assert "(target <= 4x: not judged: loaded machine)" in targets.ensemble_verdict(_ensemble_record(3.9, True))
    assert "not judged: the record has no" in targets.ensemble_verdict({"conditions": {}, "rows": []})


def _small_record(rows, loaded=False) -> dict:
    cond = benchrecord.finish(
        benchrecord.start(allow_load=True, loadavg=(0.1, 0, 0), cores=2), loadavg=(3.5 if loaded else 1.0, 0, 0)
    )
    return {"conditions": cond, "rows": rows}


def _small_row(preset, members, after, floor, ev):
    return {"preset": preset, "members": members, "after_s": after, "floor_s": floor, "eval_s": ev}


def test_the_small_model_targets_are_judged_preset_by_preset_from_an_idle_record():
    rows = [
        _small_row("dmu/adding-rnn", 1, 2.0, 1.0, 1.0),  # 2.0x the floor: meets E = 1 (<= 2)
        _small_row("dmu/adding-rnn", 8, 4.0, 8.0, 8.0),  # 8 x 2.0 / 4.0 = 4x: meets
        _small_row("dmu/adding-rnn", 51, 20.0, 50.0, 25.0),  # 0.4 of the floor; evaluation 25x
        _small_row("dmu/adding-lstm", 1, 3.0, 1.0, 1.0),  # 3x the floor: misses
        _small_row("dmu/adding-lstm", 8, 8.0, 8.0, 8.0),  # 3x: misses
        _small_row("dmu/adding-lstm", 51, 30.0, 50.0, 30.0),  # 0.6: misses; evaluation 30x: misses
    ]
    got = {t: (m, s) for t, m, s in targets.small_target_rows(_small_record(rows))}
    e51 = got["E = 51: a step at most 0.5x the scalar floor"]
    assert e51 == ("0.40 (adding-rnn) to 0.60 (adding-lstm)", "**not met**: 1 of 2 presets meet it (adding-rnn)")
    assert got["E = 1: a step at most 2x the scalar floor"][0] == "2.00 (adding-rnn) to 3.00 (adding-lstm)"
    eight = got["8 members as one ensemble at least 4x faster than 8 runs in turn"]
    assert eight == ("3.00 (adding-lstm) to 4.00 (adding-rnn)", "**not met**: 1 of 2 presets meet it (adding-rnn)")
    ev = got["an evaluation of 51 members at most 25.5x a lone run's (0.5 a member)"]
    assert ev[0] == "25.0 (adding-rnn) to 30.0 (adding-lstm)"
    assert not any(t.startswith("the whole protocol") for t in got)  # only from all 15 presets
    # every preset within: met; a loaded record judges nothing
    ok = [r for r in rows if r["preset"] == "dmu/adding-rnn"]
    assert {s for _, _, s in targets.small_target_rows(_small_record(ok))} == {"**met**: 1 of 1 presets meet it"}
    loaded = targets.small_target_rows(_small_record(ok, loaded=True))
    assert all(s.startswith("not judged: loaded machine") for _, _, s in loaded)
