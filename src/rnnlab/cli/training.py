"""``rnnlab train``: one run, or one per seed (an ensemble with ``--ensemble``)."""

from __future__ import annotations

from pathlib import Path

from .common import progress_line, quiet


def _run_dir(args, cfg) -> Path:
    """``--out``, else RUNS_DIR/<name>[-<changes>-<hash>]/seed<k> (rundir.run_dir: the directory
    name carries the configuration key when the run differs from its preset)."""
    from .. import config, rundir

    if args.out:
        return Path(args.out)
    base = config.load(args.preset, [f"train.seed={cfg.train.seed}"])
    d = rundir.run_dir(args.runs_dir, cfg, base, resume=args.resume)
    if args.resume and not rundir.RunFiles(d).checkpoint.exists():
        # resuming with a key a resume may change (config.resume_may_change: train.steps,
        # train.precision): the run lives under the name it started with
        same = [
            p.parent
            for p in Path(args.runs_dir).glob(f"{cfg.name}*/seed{cfg.train.seed}/{rundir.RunFiles.CHECKPOINT}")
            if all(config.resume_may_change(k) for k in rundir.differences(rundir.saved_config(p.parent) or {}, cfg))
        ]
        if len(same) == 1:
            return same[0]
        if same:
            raise config.ConfigError(
                f"cannot resume: {d} holds no checkpoint and several runs differ from this "
                f"configuration only in train.steps/train.precision: {', '.join(map(str, same))}; pick one with --out"
            )
    return d


def _print_result(r: dict) -> None:
    """The result of a run, each number labelled with the checkpoint it comes from: the last
    evaluation's validation metrics, then the best checkpoint's (selected by its validation
    metric), which is the one the test metrics were computed on."""
    fmt = lambda d: "  ".join(f"{k}={v:.4g}" for k, v in d.items())  # noqa: E731
    print(f"{r['name']} (seed {r['seed']}): {r['steps']} steps in {r['wall_time_s']:.1f}s [{r['stopped']}]")
    if r.get("final"):
        print(f"  last (step {r['steps']}): {fmt(r['final'])}")
    best = dict(r.get("best") or {})
    test = r.get("test", {})
    if best or test:
        step = best.pop("step", None)
        where = f"step {step}" if step is not None else "step unknown"
        select = r.get("select_metric")
        label = f"best ({where}, by {select})" if select else f"best ({where})"
        print(f"  {label}: {fmt({**best, **test})}")
    base = ", ".join(f"{k}={v:.4g}" for k, v in r["baseline"].items())
    if base:
        print(f"  memoryless baseline: {base}")


def _device_overrides(args, check: bool = True) -> list[str]:
    """``--device`` / ``--precision`` as ``train.*`` overrides, checked against this machine
    first (one-line error before anything is written) unless ``check`` is False (``rnnlab
    train``: the trainer resolves the device once, before it writes anything)."""
    out = []
    if getattr(args, "device", None):
        out.append(f"train.device={args.device}")
    if getattr(args, "precision", None):
        out.append(f"train.precision={args.precision}")
    if out and check and getattr(args, "backend", "local") != "ray":  # Ray: checked against the cluster
        from .. import device

        device.resolve(args.device or "auto", args.precision or "fp32")
    return out


#: the most seeds one ``--seeds`` may name (ranges expanded)
MAX_SEEDS = 10_000


def _parse_seeds(text: str) -> list[int]:
    """``0,1,2``, ``0-50`` (both ends included) or a mix (``0-4,10``); at most
    :data:`MAX_SEEDS` seeds, each in [0, ``config.MAX_SEED``]."""
    from ..config import MAX_SEED, ConfigError

    spans: list[tuple[int, int]] = []
    try:
        for part in (p.strip() for p in text.split(",")):
            lo, dash, hi = part.partition("-")
            if dash and lo.strip() and int(hi) < int(lo):
                raise ValueError(part)
            spans.append((int(lo), int(hi)) if dash and lo.strip() else (int(part), int(part)))
    except ValueError:
        raise ConfigError(
            f"--seeds must be comma-separated integers >= 0 or ranges A-B with A <= B (e.g. --seeds "
            f"0,1,2 or --seeds 0-50), got {text!r}"
        ) from None
    big = max(b for _, b in spans)
    if big > MAX_SEED:
        raise ConfigError(f"--seeds: seed {big} is too large (seeds are integers in [0, {MAX_SEED}]); got {text!r}")
    count = sum(b - a + 1 for a, b in spans)  # before any range is expanded
    if count > MAX_SEEDS:
        raise ConfigError(
            f"--seeds {text!r} names {count} seeds, more than the {MAX_SEEDS} one command may train; "
            f"split it (e.g. --seeds 0-{MAX_SEEDS - 1}, then --seeds {MAX_SEEDS}-{2 * MAX_SEEDS - 1})"
        )
    seeds = [s for a, b in spans for s in range(a, b + 1)]
    if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds must be distinct integers >= 0 (e.g. --seeds 0,1,2), got {text!r}")
    return seeds


def cmd_train(args) -> int:
    from .. import config, device, rundir, train

    seeds = _parse_seeds(args.seeds) if args.seeds is not None else [None]
    if args.out and len(seeds) > 1:
        raise config.ConfigError("--out names one run directory; with several --seeds use --runs-dir")
    runs = []
    for seed in seeds:
        overrides = list(args.set or [])
        if seed is not None:
            overrides.append(f"train.seed={seed}")
        if args.threads is not None:
            overrides.append(f"train.threads={args.threads}")
        if args.tensorboard:
            overrides.append("train.tensorboard=true")
        overrides += _device_overrides(args, check=False)
        cfg = config.load(args.preset, overrides)
        run_dir = _run_dir(args, cfg)
        # the run's one device resolution, before anything is printed or written
        dev = device.resolve(cfg.train.device, cfg.train.precision)
        progress_line(f"run {cfg.name} -> {run_dir}")
        if args.ensemble:  # all seeds as one batched model, below
            runs.append((cfg, run_dir))
            continue
        resume = args.resume
        if resume and len(seeds) > 1:
            # several seeds, as an ensemble's members (train.start_mode): each continues where
            # it is, a finished one is reported, one never checkpointed starts
            resume = "auto"
            if not rundir.RunFiles(run_dir).checkpoint.exists():
                progress_line(f"  seed {seed}: no checkpoint to resume; starting it")
        r = train.train(
            cfg, run_dir, resume=resume, progress=False if quiet(args) else None, data_dir=args.data_dir, device=dev
        )
        _print_result(r)
    if runs:
        from ..ensemble import main_train

        return main_train(runs, args.resume, False if quiet(args) else None, args.data_dir, _print_result)
    return 0
