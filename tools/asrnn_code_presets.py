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

import sys

from preset_toml import CONFIGS, apply, said, sync, text

from rnnlab.config import tomllib
from rnnlab.ledger.sources_asrnn import ASRNN_CODE_DIFFS, ASRNN_CODE_REPO


def written(code: str) -> bool:
    """Whether the tool writes ``code`` (the ``asrnn/code/`` presets) or only checks it."""
    return code.startswith("asrnn/code/")


def render(code: str) -> str:
    base, diffs = ASRNN_CODE_DIFFS[code]
    paper = tomllib.loads((CONFIGS / f"{base}.toml").read_text())
    data = apply(paper, diffs)
    # the published numbers stay on the paper preset (the ledger's rows name it); the source stays
    data["paper"] = {"source": f"{paper['paper']['source']} (the numbers: {base})"}
    return text(
        data,
        code.replace("/", "-"),
        f"The code protocol of {base}: the asRNN authors' released code ({ASRNN_CODE_REPO}) as it runs, "
        f"where it differs from the paper preset: {said(diffs)}. Otherwise as the paper protocol: "
        f"{paper['description']}",
    )


def main(argv: list[str]) -> int:
    files = {CONFIGS / f"{code}.toml": render(code) for code in ASRNN_CODE_DIFFS if written(code)}
    return sync(files, argv, "asrnn_code_presets.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
