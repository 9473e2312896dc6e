"""What the code-protocol preset writers share (tools/dmu_code_presets.py, asrnn_code_presets.py,
nnrnn_code_presets.py): a paper preset with a table's differences applied, written back as TOML
with name and description first, and the write-or ``--check`` loop over the files."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[1] / "src" / "rnnlab" / "configs"


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def _key(k: str) -> str:
    """A bare TOML key where it may be one, else quoted (``"test/perplexity"``)."""
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _emit(data: dict, prefix: str = "") -> list[str]:
    flat = [(k, v) for k, v in data.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict)]
    lines = []
    if prefix and flat:
        lines += ["", f"[{prefix}]"]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in flat]
    for k, v in tables:
        lines += _emit(v, f"{prefix}.{_key(k)}" if prefix else _key(k))
    return lines


def apply(data: dict, diffs) -> dict:
    """A copy of the preset ``data`` with each ``(dotted key, value, source, what)`` of ``diffs``
    set (a value of None removes the key)."""
    data = copy.deepcopy(data)
    for key, value, _src, _what in diffs:
        *path, last = key.split(".")
        node = data
        for p in path:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return data


def said(diffs) -> str:
    """The differences in words, each with where it comes from (once each)."""
    return "; ".join(dict.fromkeys(f"{what} ({src.where})" for _k, _v, src, what in diffs))


def text(data: dict, name: str, description: str) -> str:
    """The TOML of ``data`` under ``name`` and ``description``, those two first."""
    data = {
        "name": name,
        "description": description,
        **{k: v for k, v in data.items() if k not in ("name", "description")},
    }
    return "\n".join(_emit(data)) + "\n"


def sync(files: dict[Path, str], argv: list[str], tool: str) -> int:
    """Write each ``path: text`` of ``files``, or with ``--check`` in ``argv`` report (exit 1)
    those that differ from what would be written."""
    check = "--check" in argv
    stale = []
    for path, content in files.items():
        if check:
            if not path.exists() or path.read_text() != content:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    if stale:
        print(f"out of date (run python tools/{tool}):\n  " + "\n  ".join(stale))
        return 1
    return 0
