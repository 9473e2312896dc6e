"""The training step of tiny models, before and after the compiled loops, beside its floor.

``benchmarks/small_models.py`` runs this: for each DMU synthetic preset (3 tasks x 5 cells,
batch 32) and each size E (1: a single run; 51: an ensemble of 51 members), in one process on
one thread, it times

* **before**: the training step as it ran before the compiled loops (``backend="fused"``: each
  cell's previous fast path; an ensemble also steps its members' optimizers one by one);
* **after**: the default step (``backend="auto"``: the compiled loops of
  :mod:`rnnlab.kernels.small`, and an ensemble's stacked optimizer step,
  :mod:`rnnlab.stacked_optim`);
* **floor**: the time a plain scalar compiled loop of the recurrences' arithmetic takes for the
  same step (``benchmarks/small_floor.c``: forward over time and BPTT with every weight gradient,
  one sequence after another, the C library's exp and tanh, -O3 for the generic CPU): the
  "after" step is run with those functions in place of the compiled loops, and only the time
  inside them is counted (so the floor leaves out the input projection, the readout, the loss
  and the optimizer: it is a lower bound for a whole step);
* the evaluation of one run and of an ensemble of 51 (the after path).

Times are this thread's CPU time (``time.thread_time``: on a shared machine it counts what the
step itself computed, not the time others held the core), median over the measured steps.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

#: the DMU synthetic presets: 3 tasks x 5 cells
PRESETS = tuple(
    f"dmu/{task}-{cell}"
    for task in ("adding", "temporal_order", "noisy_sequence")
    for cell in ("rnn", "lstm", "gru", "rhn", "dmu")
)
SIZES = (1, 51)
BATCH = 32


def build_floor(source: Path, out_dir: Path) -> dict:
    """The floor's two libraries (``{"f64": ..., "f32": ...}``), compiled with ``cc -O3``."""
    import torch

    from ..kernels.small_abi import SCALAR_FUNCTIONS, bind, check_source

    cc = shutil.which("cc")
    if cc is None:
        raise RuntimeError("the floor needs a C compiler (cc)")
    check_source(source, SCALAR_FUNCTIONS)  # the floor is called as the scalar loops are: the same prototypes
    libs = {}
    for kind, extra in (("f64", []), ("f32", ["-DSINGLE"])):
        target = out_dir / f"floor-{kind}.so"
        subprocess.run([cc, "-O3", "-std=gnu99", "-shared", "-fPIC", *extra, str(source), "-o", str(target), "-lm"],
                       check=True)  # fmt: skip
        libs[kind] = bind(ctypes.CDLL(str(target)), torch.float32 if kind == "f32" else torch.float64, SCALAR_FUNCTIONS)
    return libs


@contextlib.contextmanager
def lanes_off():
    """While inside, the cells run the scalar compiled loops where they would run the lane kernels
    (:data:`rnnlab.kernels.dispatch.LANES_MAX_WIDTH` emptied): the path before the lane kernels."""
    from ..kernels import dispatch

    real = dispatch.LANES_MAX_WIDTH
    dispatch.LANES_MAX_WIDTH = {}
    try:
        yield
    finally:
        dispatch.LANES_MAX_WIDTH = real


@contextlib.contextmanager
def timed_kernels(libs: dict | None = None):
    """While inside, the compiled loops are ``libs`` (None: the package's own; the floor's
    libraries have the scalar loops only, so with them the lane kernels are off) and the time
    spent in them (each call with its argument checks) accumulates in the yielded list's first
    element."""
    from ..kernels import small

    spent = [0.0]
    real_call, real_libs = small._call, dict(small._libs)
    off = lanes_off() if libs is not None else contextlib.nullcontext()

    def call(name, dtype, *args):
        t = time.thread_time()
        try:
            return real_call(name, dtype, *args)
        finally:
            spent[0] += time.thread_time() - t

    if libs is not None:
        small._libs.update(libs)
    small._call = call
    try:
        with off:
            yield spent
    finally:
        small._call = real_call
        small._libs.clear()
        small._libs.update(real_libs)


def _cfg(preset: str, backend: str):
    from .. import config

    return config.load(preset, [f"train.batch_size={BATCH}", f"model.cell_options.backend={backend}"])


@contextlib.contextmanager
def _stepper(preset: str, backend: str, size: int, root: Path, stacked: bool = True):
    """``(step, evaluate)`` callables of a fresh single run (size 1: a group of one, as
    ``rnnlab train`` trains it) or ensemble."""
    from ..ensemble import started
    from ..tasks import build_task

    cfg = _cfg(preset, backend)
    task = build_task(cfg.task)
    with started(cfg, range(size), root, task, batched=size > 1) as group:
        if not stacked:
            group.stacked_step = None
        ms = list(group.members)
        yield (lambda: group.step(ms)), (lambda: group.evaluate(ms))


def _median_step(step, steps: int, warmup: int, clock=time.thread_time) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t = clock()
        step()
        times.append(clock() - t)
    return statistics.median(times)


def interleaved(variants: dict, steps: int, warmup: int):
    """Time ``variants`` (name -> a call returning a tuple of seconds) side by side: each runs
    ``warmup`` times untimed, then once a round for ``steps`` rounds, the order reversed every
    other round. Returns ``med(name, i)``, the median over rounds of the i-th value."""
    for _ in range(warmup):
        for run in variants.values():
            run()
    times: dict = {k: [] for k in variants}
    for r in range(steps):
        for k in list(variants) if r % 2 == 0 else list(variants)[::-1]:
            times[k].append(variants[k]())
    return lambda k, i: statistics.median(x[i] for x in times[k])


def time_preset(preset: str, size: int, floor: dict, steps: int, warmup: int = 2, log=print) -> dict:
    """One row (seconds per step, CPU time, medians over ``steps`` repeats): the whole step
    before, after (the lane kernels where the rule picks them) and with the scalar compiled loops
    (``scalar``: the path before the lane kernels); the time inside the compiled loops of the
    after and scalar steps and inside the floor's; and the evaluation of the after path. The
    variants run interleaved, one step of each per repeat, the order reversed every other repeat
    (a loaded machine slows them alike)."""
    row: dict = {"preset": preset, "members": size}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        tmp = Path(tmp)
        before = stack.enter_context(_stepper(preset, "fused", size, tmp / "before", stacked=False))[0]
        after, evaluate = stack.enter_context(_stepper(preset, "auto", size, tmp / "after"))
        scalar = stack.enter_context(_stepper(preset, "auto", size, tmp / "scalar"))[0]

        def timed(step, libs=None, lanes=True):
            def run():
                with timed_kernels(libs) as spent, contextlib.nullcontext() if lanes else lanes_off():
                    t = time.thread_time()
                    step()
                    whole = time.thread_time() - t
                return whole, spent[0]

            return run

        variants = {
            "before": timed(before),
            "after": timed(after),
            "scalar": timed(scalar, lanes=False),
            "floor": timed(scalar, floor),
        }
        med = interleaved(variants, steps, warmup)
        row.update(
            before_s=med("before", 0),
            after_s=med("after", 0),
            after_kernels_s=med("after", 1),
            scalar_s=med("scalar", 0),
            scalar_kernels_s=med("scalar", 1),
            floor_s=med("floor", 1),
        )
        t = time.thread_time()
        evaluate()
        row["eval_s"] = time.thread_time() - t
    log(
        f"{preset} E={size}: before {row['before_s'] * 1e3:.1f} ms, after {row['after_s'] * 1e3:.1f} ms "
        f"(kernels {row['after_kernels_s'] * 1e3:.1f}), scalar loops {row['scalar_s'] * 1e3:.1f} ms "
        f"(kernels {row['scalar_kernels_s'] * 1e3:.1f}), floor {row['floor_s'] * 1e3:.1f} ms, "
        f"evaluation {row['eval_s'] * 1e3:.0f} ms"
    )
    return row


def run(presets=PRESETS, sizes=SIZES, floor_source: Path | None = None, steps: int = 8, log=print, between=None):
    """Time every preset at every size; returns the rows of the record."""
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        floor = build_floor(Path(floor_source), Path(tmp))
        # the first preset timed in a process ran its E = 1 steps about twice as long as the same
        # preset timed after another (5.9 ms against 2.5 ms for temporal_order-rnn, measured):
        # a discarded round first
        time_preset(presets[0], 1, floor, 2, log=lambda line: None)
        rows = []
        for preset in presets:
            for size in sizes:
                rows.append(time_preset(preset, size, floor, steps if size == 1 else max(3, steps // 2), log=log))
                if between is not None:
                    between()
    return rows


def in_turn(one: dict, eight: dict, key: str = "after_s") -> float:
    """8 runs in turn against one ensemble of 8: 8 times the step ``key`` of the row of one run
    over that of the row of 8 members."""
    return 8 * one[key] / eight[key]


def format_table(rows: list[dict]) -> str:
    """Per training step (ms, CPU time): before, after, the floor, and the ratios; then each
    preset's evaluation, one run against the ensemble."""
    lines = [
        "| preset | E | before (ms) | after (ms) | floor (ms) | before / after | after / floor |",
        "|" + "---|" * 7,
    ]
    for r in rows:
        lines.append(
            f"| {r['preset']} | {r['members']} | {r['before_s'] * 1e3:.1f} | {r['after_s'] * 1e3:.1f} | "
            f"{r['floor_s'] * 1e3:.1f} | {r['before_s'] / r['after_s']:.1f}x | {r['after_s'] / r['floor_s']:.2f} |"
        )
    lanes = [r for r in rows if "scalar_s" in r]
    if lanes:
        lines += [
            "",
            "| preset | E | lane kernels (ms) | scalar loops (ms) | floor (ms) | lanes / floor | scalar / floor "
            "| step, lanes (ms) | step, scalar loops (ms) | step lanes / floor |",
            "|" + "---|" * 10,
        ]
        for r in lanes:
            f = r["floor_s"]
            lines.append(
                f"| {r['preset']} | {r['members']} | {r['after_kernels_s'] * 1e3:.2f} | "
                f"{r['scalar_kernels_s'] * 1e3:.2f} | {f * 1e3:.2f} | {r['after_kernels_s'] / f:.2f} | "
                f"{r['scalar_kernels_s'] / f:.2f} | {r['after_s'] * 1e3:.1f} | {r['scalar_s'] * 1e3:.1f} | "
                f"{r['after_s'] / f:.2f} |"
            )
        by = {(r["preset"], r["members"]): r for r in lanes}
        turns = [(p, by[p, 1], by[p, 8]) for p, e in by if e == 8 and (p, 1) in by]
        if turns:
            lines += [
                "",
                "| preset | 8 runs in turn / one ensemble of 8, lanes | the same, scalar loops |",
                "|---|---|---|",
            ]
            for p, one, eight in turns:
                lines.append(f"| {p} | {in_turn(one, eight):.2f}x | {in_turn(one, eight, 'scalar_s'):.2f}x |")
    evals = {}
    for r in rows:
        evals.setdefault(r["preset"], {})[r["members"]] = r["eval_s"]
    pairs = [(p, e) for p, e in evals.items() if 1 in e and len(e) > 1]
    if pairs:
        big = max(k for k in pairs[0][1] if k != 1)
        lines += [
            "",
            f"| preset | evaluation, one run (ms) | evaluation, ensemble of {big} (ms) | ensemble / one run |",
            "|---|---|---|---|",
        ]
        for p, e in pairs:
            lines.append(f"| {p} | {e[1] * 1e3:.0f} | {e[big] * 1e3:.0f} | {e[big] / e[1]:.1f} |")
    whole = protocol_hours(rows)
    if whole:
        size = max(r["members"] for r in rows)
        lines += [
            "",
            f"Whole protocol, projected from the rows at E = {size} (each preset's full budget of updates at the "
            "after step's time, its validation passes at the measured evaluation, its test pass scaled by set size; "
            f"runs that stop early cost less): **{sum(whole.values()):.2f} CPU-h** for {len(whole)} presets x {size} seeds.",
        ]
    return "\n".join(lines)


def protocol_hours(rows: list[dict]) -> dict:
    """CPU-hours of each preset's whole protocol at its largest timed ensemble (one thread),
    projected from the record: ``train.steps`` updates at ``after_s``, ``steps // eval_every``
    validation passes at ``eval_s`` and one test pass at ``eval_s * test_size / val_size``. Empty
    when the rows lack the ensemble size (a record of E = 1 only)."""
    size = max((r["members"] for r in rows), default=1)
    if size == 1:
        return {}
    out = {}
    for r in rows:
        if r["members"] != size:
            continue
        cfg = _cfg(r["preset"], "auto")
        tc, task = cfg.train, cfg.task
        val, test = task.options.get("val_size"), task.options.get("test_size")
        evals = tc.steps // tc.eval_every if tc.eval_every else 0
        test_pass = r["eval_s"] * test / val if val and test else r["eval_s"]
        out[r["preset"]] = (tc.steps * r["after_s"] + evals * r["eval_s"] + test_pass) / 3600
    return out


# --- the width limits of backend="auto" (rnnlab.kernels.dispatch.AUTO_MAX_WIDTH) -------------

#: cells and widths the limits were measured over
WIDTH_CELLS = ("rnn", "lstm", "gru", "dmu", "rhn")
WIDTHS = (4, 8, 16, 32, 64)


def _layer_step(cell: str, H: int, backend: str, members: int, B: int = BATCH, T: int = 100):
    """A forward and backward of one layer of ``cell`` (input 4, readout 1): one model, or
    ``members`` models as an ensemble (:class:`rnnlab.stacked_model.StackedModel`)."""
    import torch

    from ..model import SequenceModel
    from ..stacked_model import StackedModel

    models = []
    for k in range(members):
        torch.manual_seed(k)
        models.append(SequenceModel(cell, 4, 1, H, cell_options={"backend": backend}))
    x = torch.randn(members, B, T, 4)
    if members == 1:
        m = models[0]

        def step():
            m.zero_grad()
            out, _ = m(x[0])
            out.sum().backward()

        return step
    stacked = StackedModel(models[0])

    def step():
        out, _ = stacked.forward(models, x)
        out.sum().backward()

    return step


def width_rows(cells=WIDTH_CELLS, widths=WIDTHS, sizes=SIZES, steps: int = 3, log=print) -> list[dict]:
    """CPU time of one layer's forward and backward (batch 32, T = 100), the compiled loops
    (``backend="small"``) against the previous fast path (``"fused"``), per cell, width and
    size: where ``backend="auto"`` should switch."""
    import torch

    torch.set_num_threads(1)
    rows = []
    for cell in cells:
        for H in widths:
            for size in sizes:
                small, fused = _layer_step(cell, H, "small", size), _layer_step(cell, H, "fused", size)

                def scalar(small=small):
                    with lanes_off():
                        small()

                t = {k: _median_step(f, steps, 1) for k, f in (("small", small), ("scalar", scalar), ("fused", fused))}
                rows.append({"cell": cell, "width": H, "members": size, **{f"{k}_s": v for k, v in t.items()}})
                log(
                    f"{cell} H={H} E={size}: small / fused {t['small'] / t['fused']:.2f}, "
                    f"small / scalar loops {t['small'] / t['scalar']:.2f}"
                )
    return rows


def format_widths(rows: list[dict]) -> str:
    """``backend="small"`` (the lane kernels where a cell has them), the scalar compiled loops
    (the lane kernels off) and the previous path (``"fused"``), per cell, width and size."""
    lines = [
        "| cell | width | E | compiled loops (ms) | scalar loops (ms) | previous path (ms) | compiled / previous "
        "| compiled / scalar |",
        "|" + "---|" * 8,
    ]
    for r in rows:
        lines.append(
            f"| {r['cell']} | {r['width']} | {r['members']} | {r['small_s'] * 1e3:.1f} | {r['scalar_s'] * 1e3:.1f} | "
            f"{r['fused_s'] * 1e3:.1f} | {r['small_s'] / r['fused_s']:.2f} | {r['small_s'] / r['scalar_s']:.2f} |"
        )
    return "\n".join(lines)
