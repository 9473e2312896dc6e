"""The speed benchmark: training-iteration time, inference throughput and peak memory of every
registered cell, side by side with ``torch.nn.LSTM`` and with the cell's own reference loop.

One row per (configuration, cell). Each row runs in its own worker process (so peak memory
and allocator state are the row's own) and measures, in that one process,

* the training iteration (forward + backward + RMSprop step, the library's
  :class:`rnnlab.model.SequenceModel` with its linear readout (folding included) and the task's
  cross-entropy) of the cell's default backend ("fast"), of the same model with
  ``backend="reference"`` (the :func:`rnnlab.unroll` loop) and of a ``torch.nn.LSTM`` of
  matched parameter count, interleaved repeat by repeat so that a change in the load of a
  shared machine hits all three alike; medians after warm-up, both in process CPU time and in
  wall time (with one thread, CPU time is the cost of our own code; wall time adds the waits
  for a core when other processes compete for it);
* for cells with a recurrence depth d > 1 (sequential layers per time step: DMU's FNN, RHN's
  micro-layers) the ratio to ``nn.LSTM`` is also given divided by d ("per unit of depth");
* inference throughput (sequences per second of the fast forward under ``torch.no_grad``);
* peak memory: the rise of the process's peak resident set size (``ru_maxrss``) over its
  resident size just before the first training iteration of the fast path, which runs first
  (so this is the fast path's training peak: activations saved for backward, gradients,
  optimizer state, allocator slack);
* minor page faults per training iteration (``ru_minflt``), which show the allocator's cost;
* the matrix-product floor: the time the iteration's matrix products alone take at this
  machine's measured rate, each product shape timed in the same process the fastest way we
  know (``torch.mm`` in either orientation, or in row blocks for tall products)
  (recurrence forward and backward per step, the weight gradients as one product each, input
  projection, readout). It excludes the orthogonal map's own O(n^3) work (matrix exponential
  or Cayley solve and their backward): negligible at n=190 but not at n=1024 (PTB rows);
* that O(n^3) work on its own ("maps s/it"): for every
  :class:`rnnlab.parametrize.Orthogonal` parametrization of the model (expRNN's and scoRNN's
  W_hh, asRNN's W_hh and U_f, nnRNN's P) the map's forward at the current parameter and a
  backward of a fixed random cotangent, timed in the same process interleaved with the
  training iterations, and its share of the fast iteration; cells without maps show "-".

Configurations: ``copy`` (T = L + 2K = 1020, K=10, batch 128, about 22K parameters),
``mnist`` (sequential MNIST: T=784, one pixel per step, readout at the last step, about 16K
parameters), ``ptb`` (character level: T=150, batch 128, 50 one-hot symbols, expRNN n=1024
and every other cell matched to its parameter count), ``mnist-n257``, ``mnist-n364``,
``mnist-n512`` (sequential MNIST at the papers' larger sizes: expRNN at that n sets the budget,
asRNN n=364 at expRNN's n=512 as in its paper; no reference-loop timing), ``mnist-table4`` (sequential
MNIST with each system of the DMU paper's Table IV at the table's size and its preset's options,
coRNN and LEM at their papers'; no reference-loop timing), ``long`` (copy-style input at
T=10,000, for memory) and ``long-last`` (the same with the readout at the last step only). Data are random tokens/pixels of the right shapes: speed does not
depend on the values.

Entry points: :func:`run` (returns rows), :func:`format_table` (markdown), and
``benchmarks/speed.py`` / ``rnnlab bench speed`` for the command line. Nothing runs at import.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict

from ..kernels.host import platform_name
from ..workloads import BASELINE, CONFIGS, MEMORY_EXTRAS, TABLE4_ROWS, TABLE4_SIZES, BenchConfig  # noqa: F401
from . import benchrecord

#: cells whose iteration is "G matrices of (H, H) per step" (for the matrix-product floor):
#: key -> G. Cells not listed get no floor (their structure is not assumed here).
FLOOR_GATES = {"rnn": 1, "irnn": 1, "exprnn": 1, "scornn": 1, "asrnn": 1, "nnrnn": 1, "gru": 3, "lstm": 4, "nn.LSTM": 4}


# --- the cells: registered ones plus labelled variants ----------------------------------


def cell_variants() -> dict[str, tuple[str, dict]]:
    """label -> (CELLS key, constructor options), looked up at run time so cells merged
    later (asRNN, nnRNN, ...) get rows without changes here."""
    from ..cells import CELLS

    out = {BASELINE: ("nn.LSTM", {})}
    for key in CELLS:
        out[key] = (key, {})
        if key == "rnn":
            out["rnn native"] = ("rnn", {"backend": "native"})  # ATen's rnn_tanh
            out["rnn-modrelu"] = ("rnn", {"nonlinearity": "modrelu"})
        if key == "irnn":
            out["irnn native"] = ("irnn", {"backend": "native"})  # ATen's rnn_relu
        if key == "gru":
            out["gru native"] = ("gru", {"backend": "native"})  # ATen's gru
    return out


def _count(key: str, options: dict, cfg: BenchConfig, n: int) -> int:
    """Free parameters (as the papers count them) of cell + linear readout at hidden size n."""
    if key == "nn.LSTM":
        core = 4 * n * (cfg.input_size + n + 2)
    else:
        from ..cells import CELLS

        cell_opts = {k: v for k, v in options.items() if k != "checkpoint_chunk"}  # a layer option
        core = CELLS[key](cfg.input_size, n, **cell_opts).free_parameter_count()
    return core + n * cfg.output_size + cfg.output_size


def match_hidden(key: str, options: dict, cfg: BenchConfig, target: int) -> int:
    """The hidden size whose parameter count is closest to ``target`` (counts are quadratic
    in n for every cell here: fit at n = 4, 6, 8, solve, then check the neighbours)."""
    ys = [_count(key, options, cfg, n) for n in (4, 6, 8)]
    a = (ys[2] - 2 * ys[1] + ys[0]) / 8.0
    b = (ys[1] - ys[0]) / 2.0 - a * 10
    c = ys[0] - 16 * a - 4 * b
    if a > 0:
        n0 = (-b + math.sqrt(max(b * b - 4 * a * (c - target), 0.0))) / (2 * a)
    else:
        n0 = (target - c) / b

    def distance(n):
        try:
            return (abs(_count(key, options, cfg, n) - target), n)
        except ValueError:  # sizes a cell rejects (nnRNN: odd n)
            return (math.inf, n)

    cands = {max(1, int(math.floor(n0)) + d) for d in (-2, -1, 0, 1, 2, 3)}
    return min(cands, key=distance)


# --- the worker (one process per row) ---------------------------------------------------


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _maxrss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # kB on Linux


def _minflt() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _worker(spec: dict) -> dict:
    """One row, in this process: the fast path's first iterations (peak memory), then the
    fast path, its reference loop, the matched ``nn.LSTM`` and the orthogonal maps timed in
    alternating order, repeat by repeat; inference; the matrix-product floor."""
    torch, device = _worker_setup(spec)
    cfg = BenchConfig(**spec["config"])
    data = _bench_data(torch, cfg, device)
    key, options, hidden = spec["key"], spec["options"], spec["hidden"]
    res: dict = {"pid": os.getpid()}
    model, fast_step, fast_infer = _build(torch, cfg, data, device, key, options, hidden)
    # recurrence depth: sequential layers per time step (DMU: FNN layers; RHN: micro-layers)
    res["depth"] = max((int(getattr(m, "depth", 1)) for m in model.modules() if hasattr(m, "backend")), default=1)
    res.update(_first_iterations(torch, device, fast_step, spec["warmup"]))
    variants = _variants(torch, spec, cfg, data, device, model, fast_step)
    if "maps" in variants:
        from .. import parametrize as par

        res["maps_n"] = [p.n for p, _ in par.orthogonal_parametrizations(model)]
    res.update(_time_alternating(variants, spec["warmup"], spec["repeats"], device))
    fast_infer()
    inf = [_timed(fast_infer, device) for _ in range(max(1, spec["repeats"]))]
    res["infer"] = {"wall": statistics.median(v[0] for v in inf), "cpu": statistics.median(v[1] for v in inf)}
    # the matrix-product floor is measured with CPU products: CPU rows only
    res["floor"] = _floor(torch, cfg, spec["gates"], hidden) if spec["gates"] and device.type == "cpu" else None
    if spec["baseline_hidden"] and key != "nn.LSTM" and device.type == "cpu":
        res["baseline_floor"] = _floor(torch, cfg, 4, spec["baseline_hidden"])
    from .. import runtime

    res.update(
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        malloc=runtime.malloc_conditions(),
        denormals=runtime.denormal_conditions(),
        device=str(device),
    )
    return res


def _worker_setup(spec: dict):
    """The allocator (before torch allocates), the thread count and the device of a row."""
    from .. import runtime

    if spec["malloc"] == "tuned":
        runtime.tune_malloc()
    if spec.get("denormals", "flush") == "flush":  # as the trainer does (rnnlab.runtime.tune_process)
        runtime.flush_denormals()
    import torch

    from .. import device as dev

    torch.set_num_threads(spec["threads"])
    return torch, dev.resolve_device(spec.get("device", "cpu"))


def _bench_data(torch, cfg: BenchConfig, device) -> dict:
    """Random inputs and targets of the configuration's shapes, time-major and batch-first."""
    T, B, I, O = cfg.T, cfg.batch, cfg.input_size, cfg.output_size
    g = torch.Generator().manual_seed(0)
    if cfg.tokens:
        x = torch.nn.functional.one_hot(torch.randint(0, I, (T, B), generator=g), I).float()
    else:
        x = torch.rand(T, B, I, generator=g)
    y = torch.randint(0, O, (T, B) if cfg.readout == "all" else (B,), generator=g)
    x, y = x.to(device), y.to(device)
    return {"x": x, "y": y, "x_bf": x.transpose(0, 1), "y_bf": y.t() if cfg.readout == "all" else y}


def _build(torch, cfg: BenchConfig, data: dict, device, key: str, options: dict, hidden: int):
    """(model, training step, inference) of one cell: ``nn.LSTM`` + ``nn.Linear`` (cuDNN on
    CUDA), or the library's :class:`SequenceModel` (readout folding included) fed batch-first."""
    from .. import parametrize as par
    from ..model import SequenceModel

    I, O = cfg.input_size, cfg.output_size
    torch.manual_seed(0)
    if key == "nn.LSTM":
        layer, readout = torch.nn.LSTM(I, hidden), torch.nn.Linear(hidden, O)
        model = torch.nn.ModuleDict({"rnn": layer, "readout": readout}).to(device)

        def forward():
            out = layer(data["x"])[0]
            return readout(out[-1] if cfg.readout == "last" else out), data["y"]
    else:
        model = SequenceModel(key, I, O, hidden, readout=cfg.readout, cell_options=options).to(device)

        def forward():
            return model(data["x_bf"])[0], data["y_bf"]

    opt = torch.optim.RMSprop(model.parameters(), lr=1e-5, alpha=0.9)

    def train_step():
        logits, target = forward()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, O), target.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        par.after_optimizer_step(model)

    def infer():
        with torch.no_grad():
            forward()

    return model, train_step, infer


def _timed(fn, device) -> tuple[float, float, int]:
    """(wall s, process CPU s, minor faults) of one call; on a GPU the queued work is timed."""
    from .. import device as dev

    dev.synchronize(device)
    f0, c0, w0 = _minflt(), time.process_time(), time.perf_counter()
    fn()
    dev.synchronize(device)
    return time.perf_counter() - w0, time.process_time() - c0, _minflt() - f0


def _first_iterations(torch, device, fast_step, warmup: int) -> dict:
    """The fast path's warm-up iterations, run first in the process so that the rise of the
    peak resident size (and of allocated GPU memory) is its own."""
    gpu = device.type == "cuda"
    rss0 = _rss_mb()
    if gpu:
        torch.cuda.reset_peak_memory_stats(device)
        gpu0 = torch.cuda.memory_allocated(device)
    warm = [_timed(fast_step, device) for _ in range(warmup)]
    out = {"peak_mb": _maxrss_mb() - rss0, "first_iteration_s": warm[0][0] if warm else None}
    if gpu:  # the rise of allocated GPU memory over the model, data and optimizer's resting state
        out["peak_gpu_mb"] = (torch.cuda.max_memory_allocated(device) - gpu0) / 2**20
    return out


def _variants(torch, spec: dict, cfg: BenchConfig, data: dict, device, model, fast_step) -> dict:
    """The steps timed side by side: the fast path, the same model through its reference loop,
    a matched ``nn.LSTM``, and the orthogonal maps alone (each only where it applies)."""
    from .. import parametrize as par

    key = spec["key"]
    variants = {"fast": fast_step}
    if spec["reference"] and key != "nn.LSTM":
        cells = [m for m in model.modules() if hasattr(m, "backend")]
        own = [c.backend for c in cells]

        def ref_step():
            for c in cells:
                c.backend = "reference"
            try:
                fast_step()
            finally:
                for c, b in zip(cells, own):
                    c.backend = b

        variants["reference"] = ref_step
    if spec["baseline_hidden"] and key != "nn.LSTM":
        variants["baseline"] = _build(torch, cfg, data, device, "nn.LSTM", {}, spec["baseline_hidden"])[1]
    maps = list(par.orthogonal_parametrizations(model))
    if maps:
        variants["maps"] = _map_step(torch, maps)
    return variants


def _time_alternating(variants: dict, warmup: int, repeats: int, device) -> dict:
    """Each variant warmed up, then timed once per repeat, the order reversed every other
    repeat (so neither a load change nor going first or second favours one); per variant the
    medians and every repeat's times (ratios are taken repeat by repeat)."""
    for name, fn in variants.items():
        if name != "fast":  # the fast path's warm-up ran first (its peak memory)
            for _ in range(warmup):
                fn()
    names = list(variants)
    samples = {name: [] for name in names}
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            samples[name].append(_timed(variants[name], device))
    return {
        name: {
            "wall": statistics.median(v[0] for v in s),
            "cpu": statistics.median(v[1] for v in s),
            "faults": statistics.median(v[2] for v in s),
            "wall_all": [round(v[0], 4) for v in s],
            "cpu_all": [round(v[1], 4) for v in s],
        }
        for name, s in samples.items()
    }


def _map_step(torch, maps):
    """One iteration's worth of the orthogonal maps alone: for every ``Orthogonal``
    parametrization of the model, its forward at the free parameter's current value and a
    backward of a fixed random cotangent (what the training iteration does once per map)."""
    g = torch.Generator().manual_seed(1)
    work = []
    for p, A in maps:
        with torch.no_grad():  # the cotangent has the map's output shape, which need not be A's
            out = p(A)  # (the full-capacity uRNN maps N x N reals to a 2N x 2N real form)
        G = torch.randn(out.shape, generator=g, dtype=out.dtype).to(out.device)
        work.append((p, A, G))

    def step():
        for p, A, G in work:
            leaf = A.detach().requires_grad_(True)
            p(leaf).backward(G)

    return step


def _mm_time(torch, m: int, k: int, n: int, cap_rows: int = 1 << 17) -> float:
    """Median seconds of an (m, k) x (k, n) product done the fastest way we know: the plain
    ``torch.mm``, its transposed orientation ``((k, n)^T (m, k)^T)^T`` and, for tall products,
    row blocks (:func:`rnnlab.kernels.linear.blocked_mm`), whichever is fastest here. Products
    with more than ``cap_rows`` in their long dimension are timed at ``cap_rows`` and scaled
    linearly (same rate)."""
    from ..kernels.linear import blocked_mm

    scale = 1.0
    big = max(m, k, n)
    if big > cap_rows:
        scale = big / cap_rows
        m, k, n = (cap_rows if d == big else d for d in (m, k, n))
    a, b = torch.randn(m, k), torch.randn(k, n)
    at, bt = a.t().contiguous(), b.t().contiguous()
    ways = [lambda: torch.mm(a, b), lambda: torch.mm(bt, at)]
    if m >= 4096:
        ways.append(lambda: blocked_mm(a, b))
    reps = max(3, min(200, int(2e8 / max(1, 2 * m * k * n))))
    best = math.inf
    for fn in ways:
        fn()
        ts = []
        for _ in range(5):
            t = time.process_time()
            for _ in range(reps):
                fn()
            ts.append((time.process_time() - t) / reps)
        best = min(best, statistics.median(ts))
    return best * scale


def _floor(torch, cfg: BenchConfig, G: int, H: int) -> dict:
    """Seconds the matrix products of one training iteration take at the measured rates."""
    T, B, I, O = cfg.T, cfg.batch, cfg.input_size, cfg.output_size
    N = T * B if cfg.readout == "all" else B
    step_fwd = _mm_time(torch, B, H, G * H)
    step_bwd = _mm_time(torch, B, G * H, H)
    parts = {
        "recurrence": T * (step_fwd + step_bwd) + _mm_time(torch, G * H, T * B, H),
        "input": _mm_time(torch, T * B, I, G * H) + _mm_time(torch, G * H, T * B, I),
        "readout": _mm_time(torch, N, H, O) + _mm_time(torch, N, O, H) + _mm_time(torch, O, N, H),
    }
    flops = 2 * (3 * T * B * H * G * H + 2 * T * B * I * G * H + 3 * N * H * O)
    total = sum(parts.values())
    return {"s": total, "parts": parts, "gflop": flops / 1e9, "gflops_rate": flops / total / 1e9}


def _worker_main() -> None:
    """Worker entry: reads a JSON spec on stdin, writes a JSON result on stdout."""
    spec = json.loads(sys.stdin.read())
    try:
        out = _worker(spec)
    except Exception as e:  # report, do not hide: the row shows the error
        out = {"error": f"{type(e).__name__}: {e}"}
    sys.stdout.write("\n@@RESULT@@" + json.dumps(out) + "\n")


def _spawn(spec: dict, timeout: float) -> dict:
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(spec["threads"])
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        p = subprocess.run(
            [sys.executable, "-c", "import rnnlab.bench.speed as s; s._worker_main()"],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if "@@RESULT@@" not in p.stdout:
        return {"error": f"worker exited with {p.returncode}: {p.stderr.strip()[-300:]}"}
    return json.loads(p.stdout.split("@@RESULT@@")[-1])


# --- the driver ---------------------------------------------------------------------------


def plan(configs=("copy", "mnist", "ptb", "long"), cells=None, quick=False) -> list[dict]:
    """The rows to run: one spec per (configuration, cell label)."""
    variants = cell_variants()
    specs = []
    for cname in configs:
        if cname not in CONFIGS:
            raise ValueError(f"unknown speed configuration {cname!r}; expected one of {tuple(CONFIGS)}")
        cfg = CONFIGS[cname]
        size_key, size_opts = variants[cfg.size_cell]
        target = _count(size_key, size_opts, cfg, cfg.size_hidden)
        base_hidden = cfg.fixed.get(BASELINE) or match_hidden("nn.LSTM", {}, cfg, target)
        labels = [l for l in variants if (cfg.cells is None or l in cfg.cells)]
        variants_c = {**variants, **cfg.extras}
        labels += list(cfg.extras)
        if cells:
            labels = [l for l in labels if l in cells or l == BASELINE]
        if quick and cname.startswith("long"):
            labels = [l for l in labels if l in ("exprnn", BASELINE, "exprnn chunk=100")]
        for label in labels:
            key, opts = variants_c[label]
            hidden = cfg.fixed.get(label) or cfg.fixed.get(key) or match_hidden(key, opts, cfg, target)
            long = cfg.T > 2000
            specs.append(
                {
                    "config": asdict(cfg),
                    "label": label,
                    "key": key,
                    "options": opts,
                    "hidden": hidden,
                    "params": _count(key, opts, cfg, hidden),
                    "target_params": target,
                    "gates": FLOOR_GATES.get(key),
                    "baseline_hidden": None if label == BASELINE or not cfg.compare else base_hidden,
                    "reference": cfg.compare and cfg.reference and opts.get("backend") != "reference",
                    "warmup": 1,
                    "repeats": (1 if long else 3)
                    if quick
                    else (cfg.repeats or (2 if long else (3 if cname == "ptb" else 5))),
                }
            )
    return specs


def run(
    configs=("copy", "mnist", "ptb", "long"),
    cells=None,
    quick=False,
    threads=1,
    malloc="tuned",
    timeout=1800.0,
    log=print,
    device: str = "cpu",
    allow_load: bool = True,
    denormals: str = "flush",
) -> dict:
    """Run the benchmark; returns ``{"conditions": ..., "rows": [...]}``. ``device`` ("cpu",
    "cuda", "cuda:N", "mps") runs every row there; ``nn.LSTM`` is then cuDNN's LSTM, times are
    synchronized wall times and ``peak_gpu_mb`` the rise of allocated GPU memory. The
    conditions carry the host and its load average before, during (after each row) and after
    the run (:mod:`rnnlab.bench.benchrecord`); with ``allow_load=False`` a busy machine is refused
    before any row runs (:class:`rnnlab.bench.benchrecord.LoadError`). ``denormals``: "flush"
    (subnormal floats as zero, what the trainer does) or "keep" (``rnnlab.runtime.flush_denormals``)."""
    from .. import device as dev

    resolved = dev.resolve_device(device, "--device")  # a missing GPU fails here, before any row runs
    if malloc not in ("tuned", "default"):
        raise ValueError(f"malloc must be 'tuned' or 'default', got {malloc!r}")
    if denormals not in ("flush", "keep"):
        raise ValueError(f"denormals must be 'flush' or 'keep', got {denormals!r}")
    if int(threads) < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    specs = plan(configs, cells, quick)
    host = benchrecord.start(allow_load, own=int(threads))
    rows = []
    for spec in specs:
        spec.update(threads=int(threads), malloc=malloc, denormals=denormals, device=str(resolved))
        t0 = time.time()
        res = _spawn(spec, timeout)
        benchrecord.sample(host)
        row = {k: spec[k] for k in ("label", "hidden", "params", "target_params", "baseline_hidden")}
        row["config"] = spec["config"]["name"]
        row.update(res)
        rows.append(row)
        if log:
            log(_row_line(row) + f"  [{time.time() - t0:.0f} s]")
    import torch

    conditions = benchrecord.conditions(
        host,
        machine=f"{platform_name()}, {os.cpu_count()} cores",
        torch=torch.__version__,
        python=platform.python_version(),
        threads=int(threads),
        malloc=malloc,
        denormals=denormals,
        quick=quick,
        maps_timed=True,
        **dev.conditions(resolved),
    )
    return {"conditions": conditions, "rows": rows}


def _fmt(v, spec="{:.2f}"):
    return "-" if v is None else spec.format(v)


def _row_line(row: dict) -> str:
    if "error" in row:
        return f"{row['config']:6s} {row['label']:12s} n={row['hidden']:<5d} ERROR {row['error']}"
    f = row["fast"]
    k = _time_key(row)
    extra = ""
    if row.get("reference"):
        extra += f" ref {row['reference'][k]:.3f}"
    if row.get("baseline"):
        extra += f" lstm {row['baseline'][k]:.3f}"
    if row.get("maps"):
        extra += f" maps {row['maps'][k]:.3f}"
    fl = row.get("floor")
    gpu = f" gpu peak {row['peak_gpu_mb']:.0f} MB" if "peak_gpu_mb" in row else ""
    return (
        f"{row['config']:6s} {row['label']:12s} n={row['hidden']:<5d} cpu {f['cpu']:.3f} wall {f['wall']:.3f}"
        f"{extra} floor {_fmt(fl and fl['s'], '{:.3f}')} peak {row['peak_mb']:.0f} MB{gpu} faults {f['faults']:.0f}"
    )


def _time_key(row: dict) -> str:
    """CPU rows compare process CPU time; GPU rows synchronized wall time (the CPU only
    queues the work)."""
    return "cpu" if row.get("device", "cpu") == "cpu" else "wall"


def ratio(row: dict, other: str, key: str = "cpu") -> tuple:
    """The row's fast path over variant ``other`` ("baseline", "reference"): (median, min,
    max) of the per-repeat ratios (the variants alternate within each repeat, so a ratio is
    taken between neighbouring timings); records without per-repeat times give the ratio of
    the medians and no range (None, None)."""
    f, o = row["fast"], row[other]
    a, b = f.get(f"{key}_all"), o.get(f"{key}_all")
    if a and b and len(a) == len(b):
        return benchrecord.spread(x / y for x, y in zip(a, b, strict=True))
    return f[key] / o[key], None, None


def format_table(result: dict) -> str:
    """Markdown table of a :func:`run` result (CPU-time medians; see the module docstring);
    GPU results get :func:`format_gpu_table`. Ratios: median [min-max] over the repeats."""
    if any(row.get("device", "cpu") != "cpu" for row in result["rows"] if "error" not in row):
        return format_gpu_table(result)
    # results recorded before the maps were timed keep their table (no maps column)
    with_maps = result.get("conditions", {}).get("maps_timed") or any("maps" in r for r in result["rows"])
    maps_head = " maps s/it (share) |" if with_maps else ""
    head = (
        "| config | cell | n | params | train s/it CPU (wall) | vs nn.LSTM CPU [min-max] (wall) "
        f"| vs reference loop [min-max] | matmul floor s | vs floor |{maps_head} inference seq/s | peak MB "
        "| minor faults/it |"
    )
    lines = [head, "|" + "|".join(["---"] * (13 if with_maps else 12)) + "|"]
    for row in result["rows"]:
        if "error" in row:
            lines.append(
                f"| {row['config']} | {row['label']} | {row['hidden']} | {row['params']} | error: {row['error'][:80]} |"
                + " |" * (8 if with_maps else 7)
            )
            continue
        f = row["fast"]
        B = CONFIGS[row["config"]].batch
        vs_l = "1 (baseline)" if row["label"] == BASELINE else "-"
        if row.get("baseline"):
            cpu, wall = ratio(row, "baseline"), ratio(row, "baseline", "wall")
            vs_l = f"{benchrecord.fmt_spread(cpu)} ({wall[0]:.2f})"
            depth = row.get("depth", 1)
            if depth > 1:
                vs_l += f"; per unit of depth ({depth}) {cpu[0] / depth:.2f}"
        vs_r = benchrecord.fmt_spread(ratio(row, "reference")) if row.get("reference") else "-"
        fl = row.get("floor")
        lines.append(
            f"| {row['config']} | {row['label']} | {row['hidden']} | {row['params']:,} | {f['cpu']:.3f} ({f['wall']:.3f}) "
            f"| {vs_l} | {vs_r} | {_fmt(fl and fl['s'], '{:.3f}')} | {_fmt(fl and f['cpu'] / fl['s'])} "
            + (f"| {_maps_cell(row)} " if with_maps else "")
            + f"| {B / row['infer']['cpu']:.0f} | {row['peak_mb']:.0f} | {f['faults']:.0f} |"
        )
    return "\n".join(lines)


def format_limits(result: dict) -> str:
    """Markdown table of what bounds each row against its matched ``nn.LSTM`` (CPU rows with a
    baseline and a floor): the row's matrix-product floor, the LSTM's floor measured in the same
    process, the floor as a multiple of the LSTM's measured iteration, the orthogonal maps' own
    time, and floor + maps as a multiple of the LSTM's iteration: a cell cannot be faster than
    that ratio without doing less arithmetic. The measured ratio is median [min-max] over the
    repeats."""
    head = (
        "| config | cell | n | floor s | LSTM floor s | floor / LSTM floor | floor / LSTM time | maps s "
        "| (floor + maps) / LSTM time | measured / LSTM time [min-max] |"
    )
    lines = [head, "|" + "|".join(["---"] * 10) + "|"]
    for row in result["rows"]:
        fl, b, bf = row.get("floor"), row.get("baseline"), row.get("baseline_floor")
        if "error" in row or not (fl and b and bf) or row.get("device", "cpu") != "cpu":
            continue
        maps = row["maps"]["cpu"] if row.get("maps") else 0.0
        lines.append(
            f"| {row['config']} | {row['label']} | {row['hidden']} | {fl['s']:.3f} | {bf['s']:.3f} "
            f"| {fl['s'] / bf['s']:.2f} | {fl['s'] / b['cpu']:.2f} | {_fmt(row.get('maps') and maps, '{:.3f}')} "
            f"| {(fl['s'] + maps) / b['cpu']:.2f} | {benchrecord.fmt_spread(ratio(row, 'baseline'))} |"
        )
    return "\n".join(lines)


def _maps_cell(row: dict) -> str:
    """The orthogonal maps' own forward + backward per iteration and its share of the
    iteration (CPU time), "-" for cells without orthogonal maps."""
    m = row.get("maps")
    if not m:
        return "-"
    return f"{m['cpu']:.3f} ({100 * m['cpu'] / row['fast']['cpu']:.0f}%)"


def format_gpu_table(result: dict) -> str:
    """Markdown table of a GPU :func:`run`: synchronized wall-time medians, ratios (median
    [min-max] over the repeats) to cuDNN's LSTM (``nn.LSTM`` on CUDA) of matched parameter
    count and to the reference loop, peak allocated GPU memory."""
    head = (
        "| config | cell | n | params | train s/it (wall) | vs cuDNN LSTM [min-max] | vs reference loop [min-max] "
        "| inference seq/s | peak GPU MB |"
    )
    lines = [head, "|" + "|".join(["---"] * 9) + "|"]
    for row in result["rows"]:
        if "error" in row:
            lines.append(
                f"| {row['config']} | {row['label']} | {row['hidden']} | {row['params']} | error: {row['error'][:80]} |"
                + " |" * 4
            )
            continue
        f = row["fast"]
        vs_l = "1 (baseline)" if row["label"] == BASELINE else "-"
        if row.get("baseline"):
            vs_l = benchrecord.fmt_spread(ratio(row, "baseline", "wall"))
        vs_r = benchrecord.fmt_spread(ratio(row, "reference", "wall")) if row.get("reference") else "-"
        B = CONFIGS[row["config"]].batch
        lines.append(
            f"| {row['config']} | {row['label']} | {row['hidden']} | {row['params']:,} | {f['wall']:.4f} | {vs_l} "
            f"| {vs_r} | {B / row['infer']['wall']:.0f} | {_fmt(row.get('peak_gpu_mb'), '{:.0f}')} |"
        )
    return "\n".join(lines)


# --- command line (argparse wiring for benchmarks/speed.py and ``rnnlab bench speed``) ---

#: the keyword arguments of :func:`main`, one per option :func:`add_arguments` adds
OPTIONS = ("configs", "cells", "quick", "threads", "malloc", "denormals", "json", "device", "allow_load")


def add_arguments(parser) -> None:
    """Add the benchmark's options to an ``argparse`` parser (does not read argv); their
    destinations are :data:`OPTIONS`, the keyword arguments of :func:`main`."""
    parser.add_argument(
        "--configs",
        nargs="+",
        default=list(CONFIGS),
        choices=list(CONFIGS),
        help="benchmark shapes to run, e.g. --configs copy",
    )
    parser.add_argument(
        "--cells", nargs="+", default=None, help="cell labels (default: every registered cell), e.g. --cells lstm asrnn"
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer repeats; the long row for expRNN/LSTM only, e.g. for a first look"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads, e.g. --threads 2")
    parser.add_argument(
        "--malloc",
        choices=("tuned", "default"),
        default="tuned",
        help="tuned: glibc told not to mmap or trim (rnnlab.runtime.tune_malloc); default: glibc "
        "as is; e.g. --malloc default",
    )
    parser.add_argument(
        "--denormals",
        choices=("flush", "keep"),
        default="flush",
        help="flush: subnormal floats treated as zero, as the trainer does (rnnlab.runtime.flush_denormals); "
        "keep: the CPU's default; e.g. --denormals keep",
    )
    parser.add_argument(
        "--json",
        default=None,
        help="also write the raw results here (refused on a busy machine, see --allow-load), e.g. --json speed.json",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="cpu (default), cuda, cuda:N or mps: every row runs there; nn.LSTM is then cuDNN's "
        "LSTM; e.g. --device cuda",
    )
    benchrecord.add_arguments(parser)


def main(
    *,
    configs=tuple(CONFIGS),
    cells=None,
    quick=False,
    threads=1,
    malloc="tuned",
    denormals="flush",
    json=None,
    device="cpu",
    allow_load=False,
) -> int:
    """The command line's run: progress lines to stderr, the markdown table (with its caption:
    idle or loaded machine) to stdout, the record to ``json`` if given. A record is refused
    (exit status 2, nothing lost) when the machine is busy, unless ``allow_load``."""
    try:
        result = run(
            configs,
            cells,
            quick,
            threads,
            malloc,
            log=lambda s: print(s, file=sys.stderr, flush=True),
            device=device,
            allow_load=allow_load or not json,
            denormals=denormals,
        )
        if json:
            benchrecord.write(json, result, result["conditions"])
    except benchrecord.LoadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    c = result["conditions"]
    gpu = ""
    if c.get("device", "cpu") != "cpu":
        gpu = f"; {c['device']} ({c['device_name']}, CUDA {c.get('cuda')}, cuDNN {c.get('cudnn')})"
    print(
        f"\n{c['date']}; {c['machine']}{gpu}; torch {c['torch']}; threads {c['threads']}; malloc {c['malloc']}; "
        f"subnormals {c['denormals']}\n"
    )
    print(benchrecord.caption(result, json or "(not written)") + "\n")
    print(format_table(result))
    if any(r.get("baseline_floor") for r in result["rows"]):
        print("\nWhat bounds each cell against its matched nn.LSTM (CPU seconds):\n")
        print(format_limits(result))
    return 0
