"""Write the DMU synthetic code-protocol presets (``configs/dmu/code/<task>-<module>.toml``) from
the paper presets and ``rnnlab.ledger.published_dmu.DMU_CODE_DIFFS``: each is its paper preset
with exactly the settings where the authors' released scripts differ from the text.

    python tools/dmu_code_presets.py          # rewrite them
    python tools/dmu_code_presets.py --check  # exit 1 when a file differs from what it would write
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

from rnnlab.config import tomllib
from rnnlab.ledger.published_dmu import DMU_CODE_DIFFS, DMU_CODE_REPO

CONFIGS = Path(__file__).resolve().parents[1] / "src" / "rnnlab" / "configs" / "dmu"


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


def _emit(data: dict, prefix: str = "") -> list[str]:
    flat = [(k, v) for k, v in data.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict)]
    lines = []
    if prefix and flat:
        lines += ["", f"[{prefix}]"]
    lines += [f"{k} = {_value(v)}" for k, v in flat]
    for k, v in tables:
        lines += _emit(v, f"{prefix}.{k}" if prefix else k)
    return lines


def render(task: str, module: str) -> str:
    paper = tomllib.loads((CONFIGS / f"{task}-{module}.toml").read_text())
    data = copy.deepcopy(paper)
    diffs = DMU_CODE_DIFFS[(task, module)]
    for key, value, _src, _what in diffs:
        *path, last = key.split(".")
        node = data
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    said = "; ".join(f"{what} ({src.where})" for _k, _v, src, what in diffs)
    data["name"] = f"dmu-code-{task}-{module}"
    data["description"] = (
        f"The code protocol of dmu/{task}-{module}: the DMU authors' released scripts ({DMU_CODE_REPO}) as they run, "
        f"where they differ from the paper's text: {said}. Otherwise as the paper protocol: {paper['description']}"
    )
    order = ["name", "description"] + [k for k in data if k not in ("name", "description")]
    return "\n".join(_emit({k: data[k] for k in order})) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for task, module in DMU_CODE_DIFFS:
        path = CONFIGS / "code" / f"{task}-{module}.toml"
        text = render(task, module)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
    if stale:
        print("out of date (run python tools/dmu_code_presets.py):\n  " + "\n  ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
