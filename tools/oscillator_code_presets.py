"""Write the coRNN and LEM code-protocol presets (``configs/<cornn|lem>/code/psmnist.toml``)
from the paper presets and ``rnnlab.ledger.published_others.OSCILLATOR_CODE_DIFFS``: each is its
preset with exactly the settings where the authors' released psMNIST script differs from it.

    python tools/oscillator_code_presets.py          # rewrite them
    python tools/oscillator_code_presets.py --check  # exit 1 when a file differs from what it would write
"""

from __future__ import annotations

import sys

from preset_toml import CONFIGS, apply, said, sync, text

from rnnlab.config import tomllib
from rnnlab.ledger.published_others import CORNN_CODE_REPO, LEM_CODE_REPO, OSCILLATOR_CODE_DIFFS

_REPO = {"cornn": CORNN_CODE_REPO, "lem": LEM_CODE_REPO}


def render(preset: str) -> str:
    """The code preset of ``preset`` (``cornn/psmnist`` or ``lem/psmnist``)."""
    paper_name, stem = preset.split("/")
    paper = tomllib.loads((CONFIGS / paper_name / f"{stem}.toml").read_text())
    diffs = OSCILLATOR_CODE_DIFFS[preset]
    return text(
        apply(paper, diffs),
        f"{paper_name}-code-{stem}",
        f"The code protocol of {preset}: the authors' released script ({_REPO[paper_name]}) as it runs, where it "
        f"differs from the preset: {said(diffs)}. Otherwise as the paper protocol, {preset}.",
    )


def main(argv: list[str]) -> int:
    files = {}
    for preset in OSCILLATOR_CODE_DIFFS:
        paper_name, stem = preset.split("/")
        files[CONFIGS / paper_name / "code" / f"{stem}.toml"] = render(preset)
    return sync(files, argv, "oscillator_code_presets.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
