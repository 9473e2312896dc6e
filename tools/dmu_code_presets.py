"""Write the DMU code-protocol presets from the paper presets: the synthetic ones
(``configs/dmu/code/<task>-<module>.toml``) from ``rnnlab.ledger.published_dmu.DMU_CODE_DIFFS``,
the real-data ones (``configs/dmu/code/<natlang|polymusic>-N<N>-<module>.toml``) from
``DMU_REAL_CODE_DIFFS``: each is its paper preset with exactly the settings where the authors'
released scripts differ from the text.

    python tools/dmu_code_presets.py          # rewrite them
    python tools/dmu_code_presets.py --check  # exit 1 when a file differs from what it would write
"""

from __future__ import annotations

import sys

from preset_toml import CONFIGS, apply, said, sync, text

from rnnlab.config import tomllib
from rnnlab.ledger.published_dmu import DMU_CODE_DIFFS, DMU_CODE_REPO, DMU_REAL_CODE_DIFFS


def _all() -> dict[str, list]:
    """code preset stem -> its differences (the synthetic tasks, then NatLang and PolyMusic)."""
    out = {f"{t}-{m}": d for (t, m), d in DMU_CODE_DIFFS.items()}
    out.update({f"{e}-N{n}-{m}": d for (e, n, m), d in DMU_REAL_CODE_DIFFS.items()})
    return out


def render(task: str, module: str | None = None) -> str:
    """The code preset of ``dmu/<task>-<module>`` (or of the stem ``task``, e.g. natlang-N5-dmu)."""
    stem = f"{task}-{module}" if module else task
    paper = tomllib.loads((CONFIGS / "dmu" / f"{stem}.toml").read_text())
    diffs = _all()[stem]
    return text(
        apply(paper, diffs),
        f"dmu-code-{stem}",
        f"The code protocol of dmu/{stem}: the DMU authors' released scripts ({DMU_CODE_REPO}) as they run, "
        f"where they differ from the paper's text: {said(diffs)}. Otherwise as the paper protocol: "
        f"{paper['description']}",
    )


def main(argv: list[str]) -> int:
    files = {CONFIGS / "dmu" / "code" / f"{stem}.toml": render(stem) for stem in _all()}
    return sync(files, argv, "dmu_code_presets.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
