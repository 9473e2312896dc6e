"""The report of a study: ``trials.md``, ``best.toml`` (a preset ``rnnlab train`` accepts) and
the history and importance plots.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..config import dump_toml, tomllib
from .spec import Sweep, decode, import_optuna, override
from .study import default_storage, make_storage, open_study


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


def trials_table(study, sw: Sweep) -> str:
    keys = list(sw.space)
    head = ["trial", "state", sw.metric, *keys, "steps", "run dir", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in study.get_trials(deepcopy=False):
        note = t.user_attrs.get("error", "")
        retried = t.system_attrs.get("failed_trial")
        if retried is not None:
            note = f"retry of trial {retried}" + (f"; {note}" if note else "")
        if t.state.name == "FAIL" and not note:
            note = "worker died (re-queued)" if t.user_attrs.get("run_dir") else "failed"
        value = (
            t.value
            if t.value is not None
            else (t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None)
        )
        row = [
            t.number,
            t.state.name.lower(),
            value,
            *(t.params.get(k) for k in keys),
            t.user_attrs.get("steps"),
            t.user_attrs.get("run_dir"),
            note.replace("|", "/"),
        ]
        lines.append("| " + " | ".join(_fmt(x) for x in row) + " |")
    return "\n".join(lines)


def best_preset_text(sw: Sweep, trial) -> str:
    """The best trial's configuration as a preset TOML: the sweep's preset file with the fixed
    overrides and the trial's parameters applied."""
    from .. import config

    data = tomllib.loads(config.preset_path(sw.preset).read_text())
    params = {k: decode(sw.space[k], v) if k in sw.space else v for k, v in trial.params.items()}
    data = config.apply_overrides(data, [*sw.set, *(override(k, v) for k, v in params.items())])
    data["name"] = f"{sw.name}-best"
    data["description"] = (
        f"Best trial ({trial.number}) of sweep {sw.name!r} over {sw.preset}: "
        f"{sw.metric} = {trial.value:.6g}. " + data.get("description", "")
    ).strip()
    config.from_dict(json.loads(json.dumps(data)))  # what rnnlab train will do with it
    return dump_toml(data)


def report(sw: Sweep, out: str | Path, storage_url: str | None = None, log=print) -> dict:
    """Write ``best.toml``, ``trials.md``, ``history.png`` and ``importance.png`` into ``out``
    from the study; returns ``{"best": trial number or None, "files": [...]}``."""
    import_optuna()  # a clear error without Optuna, before anything is read
    out = Path(out)
    study = open_study(sw, make_storage(storage_url or default_storage(out)))
    files = []
    md = trials_table(study, sw)
    (out / "trials.md").write_text(md + "\n")
    files.append(out / "trials.md")
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    best = None
    if complete:
        best = study.best_trial
        (out / "best.toml").write_text(best_preset_text(sw, best))
        files.append(out / "best.toml")
        log(
            f"best: trial {best.number}, {sw.metric} = {best.value:.6g}, "
            + ", ".join(f"{k}={_fmt(v)}" for k, v in best.params.items())
        )
    else:
        log("no trial completed yet: no best.toml")
    files += _plots(study, out, log)
    return {"best": None if best is None else best.number, "files": [str(f) for f in files], "table": md}


def _plots(study, out: Path, log) -> list[Path]:
    import warnings

    from ..plots import pyplot, save_figure

    pyplot()  # the Agg backend, before optuna draws
    import optuna.visualization.matplotlib as ovm

    written = []
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    plots = [("history.png", ovm.plot_optimization_history, 1), ("importance.png", ovm.plot_param_importances, 2)]
    for name, fn, need in plots:
        if len(complete) < need:
            log(f"  {name}: needs {need} completed trials, have {len(complete)}; skipped")
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = fn(study)
            fig = ax.figure if hasattr(ax, "figure") else ax
            fig.set_size_inches(7, 4.5)
            written.append(save_figure(fig, out / name, dpi=100))
        except (ValueError, RuntimeError) as e:  # e.g. importance when no parameter varied
            log(f"  {name}: skipped ({e})")
    return written
