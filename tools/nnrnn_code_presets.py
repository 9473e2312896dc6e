"""Write the nnRNN code-protocol presets (``configs/nnrnn/code/<name>.toml``) from the paper
presets and ``rnnlab.ledger.published_nnrnn.NNRNN_CODE_DIFFS``: each is its paper preset with
exactly the settings where the authors' released scripts, run with their supplement's
hyperparameter tables, differ from it.

    python tools/nnrnn_code_presets.py          # rewrite them
    python tools/nnrnn_code_presets.py --check  # exit 1 when a file differs from what it would write
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

from dmu_code_presets import _value  # the same TOML values (tools/ is the script's directory)

from rnnlab.config import tomllib
from rnnlab.ledger.published_nnrnn import NNRNN_CODE_DIFFS, NNRNN_CODE_REPO

CONFIGS = Path(__file__).resolve().parents[1] / "src" / "rnnlab" / "configs" / "nnrnn"


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)  # "test/bpc" is quoted


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


def render(name: str) -> str:
    paper = tomllib.loads((CONFIGS / f"{name}.toml").read_text())
    data = copy.deepcopy(paper)
    diffs = NNRNN_CODE_DIFFS[name]
    for key, value, _src, _what in diffs:
        *path, last = key.split(".")
        node = data
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    said = "; ".join(f"{what} ({src.where})" for _k, _v, src, what in diffs)
    if "paper" in paper:  # the published numbers stay on the paper preset (the ledger's rows name it)
        src = paper["paper"].get("source")
        data["paper"] = {"source": f"{src} (the numbers: nnrnn/{name})"} if src else {}
        if not data["paper"]:
            del data["paper"]
    data["name"] = f"nnrnn-code-{name}"
    data["description"] = (
        f"The code protocol of nnrnn/{name}: the nnRNN authors' released scripts ({NNRNN_CODE_REPO}) run with "
        f"their supplement's hyperparameter tables, where they differ from the paper preset: {said}. "
        f"Otherwise as the paper protocol: {paper['description']}"
    )
    order = ["name", "description"] + [k for k in data if k not in ("name", "description")]
    return "\n".join(_emit({k: data[k] for k in order})) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    (CONFIGS / "code").mkdir(exist_ok=True)
    for name in NNRNN_CODE_DIFFS:
        path = CONFIGS / "code" / f"{name}.toml"
        text = render(name)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
    if stale:
        print("out of date (run python tools/nnrnn_code_presets.py):\n  " + "\n  ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
