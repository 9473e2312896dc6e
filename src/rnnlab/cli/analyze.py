"""``rnnlab analyze schur|jacobian`` and ``rnnlab doctor``."""

from __future__ import annotations

import json
from pathlib import Path

from .common import DEPRECATED_UNTIL, _at_least_one, _note, progress_line


def cmd_analyze_schur(args) -> int:
    from ..analysis.schur import analyze_run

    summaries = analyze_run(args.run, out_dir=args.out, which=args.which, data_dir=args.data_dir, device=args.device)
    for s in summaries:
        print(
            f"{s['name']}: n={s['n']}  mean |eigenvalue| = {s['mean_eigenvalue_modulus']:.4f} "
            f"(min {s['min_eigenvalue_modulus']:.4f}, max {s['max_eigenvalue_modulus']:.4f})  "
            f"complex pairs = {s['complex_pairs']}  departure from normality = "
            f"{s['departure_from_normality']:.4g}  mean |T| on sub-diagonal 1 = {s['mean_abs_T_subdiag_1']:.3g}, "
            f"elsewhere = {s['mean_abs_T_all']:.3g}"
        )
        print(f"  wrote {s['figure']}")
    return 0


def _jacobian_summary(digest: dict) -> str:
    """A few lines from ``analyze jacobian``'s digest (``{label: summarize(...)}``): per model,
    log10 sigma_max / sigma_min at each lag of the digest (``<= b``: sigma_min no longer resolved
    by the explicit product, b its QR bound), and for asRNN at which t the conditions of the
    paper's Theorem 2.1 hold."""

    def low(v: dict) -> str:  # unresolved by the explicit product: the QR estimate bounds it from above
        m = v["log10_sigma_min"]
        return f"<= {v['log10_sigma_min_qr_bound']:.3g}" if m is None else f"{m:.3g}"

    lines = []
    for label, d in digest.items():
        lags = "; ".join(f"{k}: {v['log10_sigma_max']:.3g} / {low(v)}" for k, v in d["lags"].items())
        lines.append(f"{label}, T={d['T']}: log10 sigma_max / sigma_min at lag {lags}")
        checks = list((d.get("theorem21") or {}).values())
        if checks:
            held = {
                name: ", ".join(str(c["t"]) for c in checks if c.get(key)) or "none"
                for name, key in (
                    ("assumption A3", "assumption_A3_holds"),
                    ("the D_f condition", "D_f_condition_holds"),
                    ("the W_hh condition", "W_hh_condition_holds"),
                )
            }
            lines.append(
                f"  Theorem 2.1 at t = {', '.join(str(c['t']) for c in checks)}: "
                + "; ".join(f"{name} holds at {ts}" for name, ts in held.items())
            )
    return "\n".join(lines)


def cmd_analyze_jacobian(args) -> int:
    from ..analysis.jacobian import analyze_run, plot_lag_spectra, summarize
    from ..config import ConfigError

    _at_least_one(args.max_lag, "--max-lag", "the largest lag; leave it out for the sequence length")
    if args.output and args.out:
        raise ConfigError("give --out DIR, or the deprecated -o/--output FILE, not both")
    cells = tuple(c for c in (args.compare or "").split(",") if c)
    res = analyze_run(
        args.run,
        split=args.split,
        index=args.index,
        max_lag=args.max_lag,
        which=args.which,
        data_dir=args.data_dir,
        init_cells=cells,
        device=args.device,
    )
    digest = {label: summarize(r) for label, r in res.items()}
    text = json.dumps(digest, indent=2, default=float) + "\n"
    if args.output:  # the spelling before --out DIR: one figure file, the digest only with --json FILE
        _note(
            f"analyze jacobian -o/--output FILE is deprecated and accepted until rnnlab {DEPRECATED_UNTIL}; "
            f"use --out DIR (writes DIR/jacobian.png and DIR/jacobian.json)"
        )
        figure, written = Path(args.output), []
    else:  # like analyze schur: --out DIR, else RUN/jacobian (RUN: also the directory of a checkpoint)
        run = Path(args.run)
        out = Path(args.out) if args.out else (run if run.is_dir() else run.parent) / "jacobian"
        out.mkdir(parents=True, exist_ok=True)
        figure, written = out / "jacobian.png", [out / "jacobian.json"]
        written[0].write_text(text)
    if args.json not in (None, "-"):
        Path(args.json).write_text(text)
        written.append(Path(args.json))
    if args.json == "-":
        print(text, end="")
    else:
        print(_jacobian_summary(digest))
    plot_lag_spectra(
        {k: r["spectrum"] for k, r in res.items()},
        figure,
        title=f"singular values of J(t1 + lag, t1) along {args.split} sequence {args.index}",
    )
    progress_line(f"wrote {', '.join(map(str, [figure, *written]))}")
    return 0


def cmd_doctor(args) -> int:
    from ..bench.doctor import main_doctor

    return main_doctor(
        device=args.device,
        quick=args.quick,
        sections=args.sections,
        cells=args.cells,
        with_kernel_table=args.kernel_table,
        output=args.output,
        verbose=args.verbose,
        dispatch=args.dispatch,
    )
