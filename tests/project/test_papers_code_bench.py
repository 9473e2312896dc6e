"""benchmarks/papers_code.py's own machinery (the repositories themselves are not here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("papers_code_bench", ROOT / "benchmarks" / "papers_code.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_same_named_modules_of_two_repositories_load_separately(bench, tmp_path):
    """Each repository's ``orthogonal`` is its own; nothing of either stays importable."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "orthogonal_t2probe.py").write_text(f"WHO = {name!r}\n")
    with bench._repo_on_path(tmp_path / "a"):
        from orthogonal_t2probe import WHO as first
    with bench._repo_on_path(tmp_path / "b"):
        from orthogonal_t2probe import WHO as second
    assert (first, second) == ("a", "b")
    assert "orthogonal_t2probe" not in sys.modules and str(tmp_path / "a") not in sys.path


def test_missing_repository_is_one_clear_error(bench, tmp_path, capsys):
    """Checked before the process is touched (threads, allocator)."""
    threads = torch.get_num_threads()
    assert bench.main([str(tmp_path), "--models", "dmu", "--iters", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and str(tmp_path / "dmu") in err and "--models" in err and "\n" not in err
    assert torch.get_num_threads() == threads


def test_torch_solve_shim_matches_linalg_solve(bench, monkeypatch):
    monkeypatch.setattr(torch, "solve", torch.solve)  # restored after the test
    bench._shim_torch_solve(torch)
    A = torch.randn(4, 4, dtype=torch.float64) + 4 * torch.eye(4, dtype=torch.float64)
    B = torch.randn(4, 3, dtype=torch.float64)
    X = torch.solve(B, A)[0]
    torch.testing.assert_close(A @ X, B)


def test_copy_batch_layout(bench):
    x, y = bench._copy_batch(torch, 5)
    L, K = bench.L, bench.K
    idx = x.argmax(-1)
    assert x.shape == (5, L + 2 * K, 10) and torch.all(x.sum(-1) == 1)
    assert torch.all(idx[:, L + K] == 9) and torch.all(idx[:, K : L + K] == 0)
    assert torch.equal(y[:, -K:], idx[:, :K]) and torch.all(y[:, :-K] == 0)
    assert int(idx[:, :K].min()) >= 1 and int(idx[:, :K].max()) <= 8


def test_a_record_is_refused_on_a_busy_machine(bench, tmp_path, monkeypatch, capsys):
    """Checked before the process is touched; no record written."""
    import os

    for name in bench.REPOS.values():
        (tmp_path / name).mkdir()
    monkeypatch.setattr(os, "getloadavg", lambda: (os.cpu_count() + 1.0, 1.0, 1.0))
    threads = torch.get_num_threads()
    out = tmp_path / "rec.json"
    assert bench.main([str(tmp_path), "--iters", "3", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the load average is" in err and "--allow-load" in err
    assert not out.exists() and torch.get_num_threads() == threads


def test_a_record_needs_three_rounds(bench, tmp_path):
    with pytest.raises(SystemExit):
        bench.main([str(tmp_path), "--iters", "2", "--json", str(tmp_path / "rec.json")])


def test_measure_alternates_and_keeps_every_round(bench):
    calls = []

    def step(name):
        def fn():
            calls.append(name)
            return torch.zeros(())

        return fn

    times = bench.measure({k: step(k) for k in ("a", "b", "c")}, 4, log=lambda s: None)
    assert calls[3:] == ["a", "b", "c", "c", "b", "a", "a", "b", "c", "c", "b", "a"]
    assert all(len(v) == 4 for v in times.values())


def test_every_model_says_what_its_reference_step_leaves_out(bench):
    assert set(bench.REFERENCE_STEPS) == set(bench.REPOS) == set(bench.PAPERS)
    assert all("left out" in v or "not run" in v for v in bench.REFERENCE_STEPS.values())
