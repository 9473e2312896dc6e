"""``rnnlab doctor``: passes on the CPU, and fails (exit 1, naming the path) when a fast path is
made wrong, forward or backward, or when the Triton guard fell back.

The bugs are planted in the fused loop's own helpers (``_activate_``, ``_times_derivative_`` of
:mod:`rnnlab.kernels.families.rnn`), which every elementwise cell's fast path calls, so the
doctor's cells, kernel and train rows meet them as a user would. The full run (every section,
the Triton kernel through the interpreter) is *slow*; the default suite runs a subset.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rnnlab.bench import doctor
from rnnlab.cells import CELLS, layers
from rnnlab.cli import main
from rnnlab.kernels import triton_recurrence as tr
from rnnlab.kernels.families import rnn as recurrence

ROOT = Path(__file__).resolve().parents[2]
SUBSET = ["--sections", "kernel,cell,checkpoint,train", "--cells", "rnn,asrnn,lstm,dmu"]


def _doctor(capsys, *args):
    capsys.readouterr()
    code = main(["doctor", "--device", "cpu", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _rows(text):
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("| path")
    ]


def test_doctor_subset_passes_on_cpu(capsys, tmp_path):
    out_file = tmp_path / "doctor.md"
    code, out, err = _doctor(capsys, "--quick", *SUBSET, "-v", "-o", str(out_file))
    assert code == 0, out[-3000:] + err[-2000:]
    rows = _rows(out)
    assert rows and all(r[4] == "ok" for r in rows), [r for r in rows if r[4] != "ok"]
    paths = {r[0] for r in rows}
    dtypes = {r[1] for r in rows}
    assert dtypes == {"float64", "float32", "bf16-autocast"}
    for key in ("rnn", "asrnn", "lstm", "dmu"):
        assert any(p.startswith(f"cell {key}") for p in paths) and any(p.startswith(f"train {key}") for p in paths)
    checkpoint = "checkpoint rnn nonlinearity=tanh backend=fused lengths checkpoint_chunk=4"
    assert {"kernel elementwise_rnn tanh lengths", "kernel tall_linear", checkpoint} <= paths
    assert "0 mismatched" in out and out_file.read_text().strip() == out.strip()
    # every error is a number below its tolerance, as the table says
    for r in rows:
        assert float(r[2]) <= float(r[3])


def _break_fused_tanh(monkeypatch) -> None:
    """tanh made wrong by 1e-4 of its value in the fused loop's forward (relu left alone)."""
    real = recurrence._activate

    def wrong(z, out, activation, bias, scratch):
        real(z, out, activation, bias, scratch)
        if activation == "tanh":
            out.mul_(1 + 1e-4)

    monkeypatch.setattr(recurrence, "_activate", wrong)


def test_doctor_answers_first_and_shows_only_the_mismatches_without_v(capsys, monkeypatch):
    """Without -v: what was checked, the summary, the mismatched rows only, and where the rest
    is; no ThreadsWarning of rnnlab's own (the checks run tiny layers on two threads)."""
    import warnings

    _break_fused_tanh(monkeypatch)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # the warning's condition, on any host
    monkeypatch.setattr(layers, "_threads_warned", False)  # it is shown once per process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, out, err = _doctor(capsys, "--quick", "--sections", "kernel,cell", "--cells", "rnn")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("rnnlab doctor on cpu") and " mismatched" in lines[1]
    rows = _rows(out)
    assert rows and all(r[4] == "**MISMATCH**" for r in rows)
    assert lines[-1].startswith("(all ") and "printed with -v" in lines[-1]
    assert not [w for w in caught if "ThreadsWarning" in type(w.message).__name__], [str(w.message) for w in caught]
    assert "ThreadsWarning" not in err


def test_doctor_covers_every_cell_family():
    assert {key for key, _ in doctor.PATHS} == set(CELLS)


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_doctor_fails_on_an_injected_mismatch(capsys, monkeypatch, where):
    """tanh made wrong by 1e-4 of its value in the fused loop (forward), or its derivative by
    1e-4 (backward): the rows through it fail and the doctor exits 1 naming them; the rows that
    do not use it (relu, ATen's native RNN) stay ok."""
    if where == "forward":
        _break_fused_tanh(monkeypatch)
    else:
        real = recurrence._times_derivative_

        def wrong(g, h, activation, scratch, grad_b):
            real(g, h, activation, scratch, grad_b)
            if activation == "tanh":
                g.mul_(1 + 1e-4)

        monkeypatch.setattr(recurrence, "_times_derivative_", wrong)
    code, out, _ = _doctor(capsys, "--quick", "--sections", "kernel,cell,train", "--cells", "rnn", "-v")
    assert code == 1
    status = {(r[0], r[1]): r[4] for r in _rows(out)}
    for dt in ("float64", "float32"):
        assert status[("kernel elementwise_rnn tanh lengths", dt)] == "**MISMATCH**"
        assert status[("cell rnn nonlinearity=tanh backend=fused", dt)] == "**MISMATCH**"
        assert status[("kernel elementwise_rnn relu lengths", dt)] == "ok"
        assert status[("cell rnn nonlinearity=relu backend=fused", dt)] == "ok"
        assert status[("cell rnn nonlinearity=tanh backend=native", dt)] == "ok"
    assert status[("train rnn nonlinearity=tanh backend=fused", "float64")] == "**MISMATCH**"
    summary = out.splitlines()[1]  # the answer comes first, under the line naming what was checked
    assert "mismatched: " in summary and "cell rnn nonlinearity=tanh backend=fused (float64)" in summary


def test_doctor_fails_when_the_triton_guard_fell_back(capsys, monkeypatch):
    """A shape class whose self-check failed (on a GPU) computed right through the fused loop,
    but the kernel is wrong there: the doctor says so and exits 1."""
    monkeypatch.setattr(
        tr,
        "CHECKED",
        {
            ("cuda:0", "float32", 16, "tanh", False): None,
            ("cuda:0", "float32", 16, "modrelu", True): "max error 3.1e-03 > 1e-04",
        },
    )
    code, out, _ = _doctor(capsys, "--quick", "--sections", "kernel", "--cells", "rnn", "-v")
    assert code == 1
    status = {r[0]: (r[4], r[5]) for r in _rows(out)}
    assert status["triton guard cuda:0 H<=16 tanh"][0] == "ok"
    assert status["triton guard cuda:0 H<=16 modrelu lengths"] == (
        "**MISMATCH**",
        "fell back: max error 3.1e-03 > 1e-04",
    )


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--device", "cuda"], "no CUDA GPU found"),
        (["--sections", "kernel,bogus"], "unknown doctor sections ['bogus']"),
        (["--cells", "lstn"], "unknown cells ['lstn']"),
    ],
)
def test_doctor_bad_arguments_are_one_line(capsys, args, needle):
    code, _, err = _doctor(capsys, *args)
    assert code == 2 and needle in err and err.count("\n") == 1, err


def test_error_measures():
    a = torch.tensor([1.0, 2.0, 3.0])
    assert doctor._error([a], [a]) == 0
    assert doctor._error([a + 0.3], [a]) == pytest.approx(0.1)  # relative to max |reference| = 3
    assert doctor._error([a * 1e-3 + 1e-4], [a * 1e-3]) == pytest.approx(1e-4)  # absolute below scale 1
    assert math.isnan(doctor._error([a * math.nan], [a]))
    assert doctor._error([None, a], [None, a]) == 0
    assert doctor._error([torch.ones(2)], [None]) == 1  # one side reaches a parameter, the other not
    g = torch.linspace(-1, 1, 200)
    flipped = g.clone()
    flipped[3] += 0.3  # one entry across a threshold
    assert doctor._cosine_gap([flipped], [g]) < 2e-2 < doctor._error([flipped], [g]) + 0.3
    assert doctor._cosine_gap([-g], [g]) == pytest.approx(2)
    assert doctor._cosine_gap([g.flip(0) * 0 + g.abs()], [g]) > 0.5
    row = doctor._row("cell", "x", "float32", math.nan)
    assert row.ok is False


# --- slow: everything, with the Triton kernel through the interpreter -----------------------


@pytest.mark.slow
def test_doctor_full_run_on_cpu(capsys):
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'rnnlab[triton]')")
    code, out, err = _doctor(capsys, "-v")  # -v: every row (without it, the answer and the failures)
    assert code == 0, out[-3000:] + err[-2000:]
    rows = _rows(out)
    assert all(r[4] == "ok" for r in rows)
    triton = [r for r in rows if r[0].startswith("triton H=")]
    assert len(triton) == 4 * 2 * 2 * 2  # activations x lengths x forward/backward x float32/float64
    assert all("interpreter" in r[5] for r in triton)
    for key in CELLS:
        assert any(r[0].startswith(f"train {key}") for r in rows)
        assert any(r[0].startswith(f"cell {key}") and r[0].endswith("lengths") for r in rows)


@pytest.mark.slow
def test_kernel_table_through_the_interpreter(tmp_path):
    """The GPU script's kernel table runs (here the interpreter stands in for CUDA: no timing
    or register claim, only that the code path works and the kernel agrees, also forced past
    the limit)."""
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'rnnlab[triton]')")
    code = (
        "import torch, triton; from rnnlab.bench import doctor; "
        "print(doctor.kernel_table(torch.device('cpu'), hiddens=(20, 130), T=3, batch=17, repeats=1))"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("| float")]
    assert len(lines) == 4
    for ln in lines:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert float(cells[-1]) < (1e-5 if cells[0] == "float32" else 1e-12), ln
    assert [ln.split("|")[3].strip() for ln in lines] == ["128", "128", "0", "0"]  # the automatic limits


def test_a_misspelt_rnnlab_triton_is_a_setting_error_not_kernel_mismatches(monkeypatch, capsys, tmp_path):
    """Before: ``RNNLAB_TRITON=bogus rnnlab doctor`` reported 86 rows as kernel mismatches (each
    row's ValueError). Now: one line naming the setting and the values it takes, exit 2, from
    ``rnnlab doctor`` and ``rnnlab train`` alike, before any row runs or anything is written."""
    from rnnlab.cli import main

    monkeypatch.setenv("RNNLAB_TRITON", "bogus")
    for argv in (["doctor", "--quick"], ["train", "demo/lstm", "--set", "train.steps=2", "--runs-dir", str(tmp_path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "RNNLAB_TRITON='bogus' is not understood" in err[0] and "unset it" in err[0], err
    assert not any(tmp_path.iterdir())
