"""Write the asRNN code-protocol presets (``configs/asrnn/code/<name>.toml``) from the paper
presets and ``rnnlab.ledger.sources_asrnn.ASRNN_CODE_DIFFS``: each is its paper preset with
exactly the settings where the authors' released code (its scripts and Hyperparameter.md)
differs; a value None removes the key (the cell's default). The copy asRNN's code presets
``asrnn/copy-L{1000,2000}-code`` predate the table and carry runs: they are checked (their
settings), not rewritten.

    python tools/asrnn_code_presets.py          # rewrite them
    python tools/asrnn_code_presets.py --check  # exit 1 when a file differs from what it would write
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

from rnnlab.config import tomllib
from rnnlab.ledger.sources_asrnn import ASRNN_CODE_DIFFS, ASRNN_CODE_REPO

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dmu_code_presets import _value  # noqa: E402  (the same TOML values)

CONFIGS = Path(__file__).resolve().parents[1] / "src" / "rnnlab" / "configs"


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _emit(data: dict, prefix: str = "") -> list[str]:
    flat = [(k, v) for k, v in data.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict)]
    lines = []
    if prefix and flat:
        lines += ["", f"[{prefix}]"]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in flat]
    for k, v in tables:
        lines += _emit(v, f"{prefix}.{k}" if prefix else k)
    return lines


def written(code: str) -> bool:
    """Whether the tool writes ``code`` (the ``asrnn/code/`` presets) or only checks it."""
    return code.startswith("asrnn/code/")


def apply(data: dict, diffs) -> dict:
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


def render(code: str) -> str:
    base, diffs = ASRNN_CODE_DIFFS[code]
    paper = tomllib.loads((CONFIGS / f"{base}.toml").read_text())
    data = apply(paper, diffs)
    said = "; ".join(dict.fromkeys(f"{what} ({src.where})" for _k, _v, src, what in diffs))
    data["name"] = code.replace("/", "-")
    data["description"] = (
        f"The code protocol of {base}: the asRNN authors' released code ({ASRNN_CODE_REPO}) as it runs, "
        f"where it differs from the paper preset: {said}. Otherwise as the paper protocol: {paper['description']}"
    )
    # the published numbers stay on the paper preset (the ledger's rows name it); the source stays
    data["paper"] = {"source": f"{paper['paper']['source']} (the numbers: {base})"}
    order = ["name", "description"] + [k for k in data if k not in ("name", "description")]
    return "\n".join(_emit({k: data[k] for k in order})) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for code in ASRNN_CODE_DIFFS:
        if not written(code):
            continue
        path = CONFIGS / f"{code}.toml"
        text = render(code)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("out of date (run python tools/asrnn_code_presets.py):\n  " + "\n  ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
