"""What makes a resumed run and an ensemble member equal their uninterrupted twins bit for bit
(docs/runs.md, "Reproducibility"), checked in fresh processes so that the setting made at
``import rnnlab`` is what MKL sees at its first call."""

import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="torch without MKL")

# each member's 5 x 5 weight gradient of a tiny RNN (one batched product over 440 rows, as
# rnnlab.kernels.small computes it), alone and at its offset in a batch of 51
PROBE = """
import os, sys
import rnnlab, torch
torch.set_num_threads(1)
torch.manual_seed(0)
dZ, prev = torch.randn(51, 440, 5), torch.randn(51, 440, 5)
together = torch.bmm(dZ.transpose(1, 2), prev)
alone = [torch.bmm(dZ[e : e + 1].transpose(1, 2), prev[e : e + 1])[0] for e in range(51)]
print(os.environ.get("MKL_CBWR"), sum(torch.equal(together[e], alone[e]) for e in range(51)))
"""


def _probe(**env) -> tuple[str, int]:
    full = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"} | env
    out = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True, text=True, check=True)
    setting, equal = out.stdout.split()
    return setting, int(equal)


def test_import_rnnlab_makes_a_members_product_independent_of_its_offset():
    """Without strict reproducibility, MKL gave 13 of these 51 products equal (torch 2.13, AMD
    EPYC): the members whose offset in the batch was aligned."""
    assert _probe() == ("AUTO,STRICT", 51)


def test_a_users_own_mkl_setting_is_kept():
    setting, _ = _probe(MKL_CBWR="AUTO")
    assert setting == "AUTO"


def test_the_docs_say_children_inherit_the_setting_and_their_way_out_works():
    """`import rnnlab` put MKL_CBWR into every child process without saying so. The docs now
    say it (and why it stays), and the way they give to start a child without it works."""
    from pathlib import Path

    root = Path(__file__).parents[1]
    runs = " ".join((root / "docs" / "runs.md").read_text().split())
    assert "every child process inherits it" in runs and "cannot take it back out" in runs
    assert "child processes inherit it" in " ".join((root / "docs" / "guide.md").read_text().split())
    code = (
        "import os, subprocess, sys, rnnlab\n"
        "show = [sys.executable, '-c', 'import os; print(os.environ.get(\"MKL_CBWR\"))']\n"
        "print(subprocess.run(show, capture_output=True, text=True).stdout.strip())\n"
        "env = {k: v for k, v in os.environ.items() if k != 'MKL_CBWR'}\n"
        "print(subprocess.run(show, env=env, capture_output=True, text=True).stdout.strip())\n"
    )
    full = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["AUTO,STRICT", "None"]
