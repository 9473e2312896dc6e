"""Write the DMU code-protocol presets from the paper presets: the synthetic ones
(``configs/dmu/code/<task>-<module>.toml``) from ``rnnlab.ledger.published_dmu.DMU_CODE_DIFFS``,
the real-data ones (``configs/dmu/code/<natlang|polymusic>-N<N>-<module>.toml``) from
``DMU_REAL_CODE_DIFFS``: each is its paper preset with exactly the settings where the authors'
released scripts differ from the text.

    python tools/dmu_code_presets.py          # rewrite them
    python tools/dmu_code_presets.py --check  # exit 1 when a file differs from what it would write
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

from rnnlab.config import tomllib
from rnnlab.ledger.published_dmu import DMU_CODE_DIFFS, DMU_CODE_REPO, DMU_REAL_CODE_DIFFS

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
        lines += _emit(v, f"{prefix}.{k}" if prefix else k)
    return lines


def _all() -> dict[str, list]:
    """code preset stem -> its differences (the synthetic tasks, then NatLang and PolyMusic)."""
    out = {f"{t}-{m}": d for (t, m), d in DMU_CODE_DIFFS.items()}
    out.update({f"{e}-N{n}-{m}": d for (e, n, m), d in DMU_REAL_CODE_DIFFS.items()})
    return out


def render(task: str, module: str | None = None) -> str:
    """The code preset of ``dmu/<task>-<module>`` (or of the stem ``task``, e.g. natlang-N5-dmu)."""
    stem = f"{task}-{module}" if module else task
    paper = tomllib.loads((CONFIGS / f"{stem}.toml").read_text())
    data = copy.deepcopy(paper)
    diffs = _all()[stem]
    for key, value, _src, _what in diffs:
        *path, last = key.split(".")
        node = data
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    said = "; ".join(f"{what} ({src.where})" for _k, _v, src, what in diffs)
    data["name"] = f"dmu-code-{stem}"
    data["description"] = (
        f"The code protocol of dmu/{stem}: the DMU authors' released scripts ({DMU_CODE_REPO}) as they run, "
        f"where they differ from the paper's text: {said}. Otherwise as the paper protocol: {paper['description']}"
    )
    order = ["name", "description"] + [k for k in data if k not in ("name", "description")]
    return "\n".join(_emit({k: data[k] for k in order})) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for stem in _all():
        path = CONFIGS / "code" / f"{stem}.toml"
        text = render(stem)
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
