"""``rnnlab list`` and ``rnnlab preset show|copy``: what can be trained."""

from __future__ import annotations

import inspect
from pathlib import Path


def _signature(cls, skip=("self", "input_size", "hidden_size")) -> str:
    parts = []
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name in skip or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        parts.append(name if p.default is p.empty else f"{name}={p.default!r}")
    return ", ".join(parts)


def _preset_line(name: str) -> str:
    """What ``rnnlab list presets`` shows of a preset, read from its TOML alone (no torch)."""
    from .. import config

    try:
        data = config.tomllib.loads(config.preset_path(name).read_text())
    except (config.tomllib.TOMLDecodeError, OSError) as e:
        return f"  {name:28s} (unavailable: {e})"
    cell = data.get("model", {}).get("cell", config.ModelConfig.cell)
    task = data.get("task", {}).get("name", config.TaskConfig.name)
    steps = data.get("train", {}).get("steps", config.TrainConfig.steps)
    return f"  {name:28s} {cell} on {task}, {steps} steps"


def cmd_list(args) -> int:
    from .. import config

    what = args.what
    if what == "presets":  # only the preset files: no torch, starts at once
        print("presets (rnnlab train NAME):")
        for name in config.list_presets():
            print(_preset_line(name))
        return 0
    from ..cells import CELLS
    from ..tasks import TASKS

    if what in ("all", "cells"):
        print("cells (model.cell; options go under [model.cell_options]):")
        for k, source in CELLS.available().items():  # registered, then installed entry points
            try:
                c = CELLS.resolve(k)
            except ValueError as e:
                print(f"  {k:12s} (unavailable: {e})")
                continue
            where = "" if k in CELLS.builtin else f"  [{source}]"
            print(f"  {k:12s} {c.__name__}({_signature(c)}){where}")
    if what in ("all", "tasks"):
        print("tasks (task.name; options go under [task]):")
        for k, t in TASKS.items():
            print(f"  {k:10s} {t.__name__}({_signature(t, ('self',))})")
    if what in ("all", "presets"):
        print("presets (rnnlab train NAME):")
        for name in config.list_presets():
            try:
                cfg = config.load(name)
            except config.ConfigError as e:  # e.g. a preset whose task is not registered yet
                print(f"  {name:28s} (unavailable: {str(e).split(': ', 1)[-1]})")
                continue
            print(f"  {name:28s} {cfg.model.cell} on {cfg.task.name}, {cfg.train.steps} steps")
    return 0


def cmd_preset_show(args) -> int:
    from ..config import preset_path

    print(preset_path(args.name).read_text(encoding="utf-8"), end="")
    return 0


def cmd_preset_copy(args) -> int:
    from ..config import ConfigError, preset_path

    src = preset_path(args.name)
    dest = Path(args.file)
    if dest.is_dir():
        dest = dest / src.name
    try:
        with open(dest, "x", encoding="utf-8") as f:  # "x": never overwrite, also not in a race
            f.write(src.read_text(encoding="utf-8"))
    except FileExistsError:
        raise ConfigError(f"{dest} already exists; give another file name, or delete it first") from None
    print(
        f"copied {args.name} to {dest}; edit it (and its name, so that its runs get their own "
        f"directory), then: rnnlab train {dest}"
    )
    return 0
