"""Write the nnRNN code-protocol presets (``configs/nnrnn/code/<name>.toml``) from the paper
presets and ``rnnlab.ledger.published_nnrnn.NNRNN_CODE_DIFFS``: each is its paper preset with
exactly the settings where the authors' released scripts, run with their supplement's
hyperparameter tables, differ from it.

    python tools/nnrnn_code_presets.py          # rewrite them
    python tools/nnrnn_code_presets.py --check  # exit 1 when a file differs from what it would write
"""

from __future__ import annotations

import sys

from preset_toml import CONFIGS, apply, said, sync, text

from rnnlab.config import tomllib
from rnnlab.ledger.published_nnrnn import NNRNN_CODE_DIFFS, NNRNN_CODE_REPO


def render(name: str) -> str:
    paper = tomllib.loads((CONFIGS / "nnrnn" / f"{name}.toml").read_text())
    diffs = NNRNN_CODE_DIFFS[name]
    data = apply(paper, diffs)
    if "paper" in paper:  # the published numbers stay on the paper preset (the ledger's rows name it)
        src = paper["paper"].get("source")
        data["paper"] = {"source": f"{src} (the numbers: nnrnn/{name})"} if src else {}
        if not data["paper"]:
            del data["paper"]
    return text(
        data,
        f"nnrnn-code-{name}",
        f"The code protocol of nnrnn/{name}: the nnRNN authors' released scripts ({NNRNN_CODE_REPO}) run with "
        f"their supplement's hyperparameter tables, where they differ from the paper preset: {said(diffs)}. "
        f"Otherwise as the paper protocol: {paper['description']}",
    )


def main(argv: list[str]) -> int:
    files = {CONFIGS / "nnrnn" / "code" / f"{name}.toml": render(name) for name in NNRNN_CODE_DIFFS}
    return sync(files, argv, "nnrnn_code_presets.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
