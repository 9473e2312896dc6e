"""The DMU paper's translation and Table IV (MNIST) presets are audited: every outcome setting has
a source, the ways the released translation runs differ are listed on docs/fidelity/dmu-real.md
with their file and line, and what neither the text nor the code fixes for MNIST is ours."""

import fnmatch
import re
import statistics

import pytest

from rnnlab import config
from rnnlab.ledger import sources
from rnnlab.ledger.published_dmu import DMU_TRANSLATION_CODE_GAPS
from rnnlab.ledger.sources_dmu_other import PRESETS

OTHER = [p for p in sources.paper_presets() if any(fnmatch.fnmatchcase(p, q) for q in PRESETS)]


def test_the_translation_and_mnist_presets_are_audited_not_pending():
    stems = {p.split("/")[1].split("-")[0] for p in OTHER}
    assert stems == {"spa2eng", "ger2eng", "smnist", "psmnist"} and len(OTHER) == 24 + 26
    assert all(sources.audited(p) and not sources.unsourced(p) for p in OTHER)
    assert not any(q.startswith("dmu/") for q in sources.PENDING)


def test_what_mnist_leaves_open_is_ours_and_the_sizes_are_the_table():
    """No MNIST code was released and the text gives no training setting: every optimizer and
    training setting of Table IV's presets is ours; N comes from Table IV."""
    for p in (q for q in OTHER if "mnist" in q):
        for key in sources.outcome_settings(p):
            src = sources.source_of(p, key)
            if key.startswith(("optim.", "train.")):
                assert src.kind == "ours", (p, key, src)
            if key == "model.hidden_size":
                assert src.kind == "text" and "Table IV" in src.where, (p, src)


def test_the_translation_sources_name_the_released_differences():
    """The settings the released runs set otherwise are ours or read from the text, each naming
    the released value: z bias 0, batch 32, the acc/val checkpoint, the inverted teacher forcing."""
    p = "dmu/spa2eng-N2-dmu"
    assert config.load(p).model.cell_options.get("z_bias", 3.0) == 3.0
    want = {
        "model.cell_options.z_bias": ("ours", "translation.sh:14-17"),
        "train.batch_size": ("ours", "32"),
        "train.select_metric": ("ours", "acc/val"),
        "task.teacher_forcing": ("text", "base_model.py:384-387"),
        "task.max_pairs": ("ours", "30,000"),
    }
    for key, (kind, named) in want.items():
        src = sources.source_of(p, key)
        assert src.kind == kind and named in str(src), (key, src)


def test_the_released_translation_gaps_are_on_the_real_data_page():
    page = sources.fidelity_page("dmu-real")
    for _e, what, src, _ours in DMU_TRANSLATION_CODE_GAPS:
        assert src.kind == "code" and re.search(r"\.(py|yml|sh):\d", src.where), src
        assert f"| {what} | {src} |" in page
    assert "## `dmu/ger2eng-N10-rhn`" in page and "## `dmu/psmnist-kru`" in page
    assert "dmu/spa2eng-" not in sources.fidelity_page("dmu")  # the synthetic page keeps to its presets


@pytest.mark.needs_data
@pytest.mark.parametrize("pair, longest, mean", [("spa-eng", 7, 3.7), ("deu-eng", 6, 3.6)])
def test_the_first_30000_lines_hold_the_shortest_pairs(pair, longest, mean, data_root):
    """The gap's numbers, from the data: the released loader reads the first 30,000 lines
    (translation.py:132), whose English side is at most ``longest`` words."""
    from rnnlab.tasks.translation import read_pairs

    path = next(data_root.glob(f"**/{pair}.zip"), None)
    if path is None:
        pytest.skip(f"no {pair}.zip under {data_root}")
    words = [len(eng.split()) for eng, _other in read_pairs(path)]
    assert max(words[:30000]) == longest and round(statistics.mean(words[:30000]), 1) == mean
    assert statistics.mean(words) > 6.0


def test_table_iv_presets_run_the_ours_protocol():
    """Every Table IV preset's optimizer and training settings are sourced ``ours`` (no MNIST
    setting in the text or the released code; the test above), so the presets run the ``ours`` protocol and their
    runs can never refute a claim that something works; the DMU's other presets keep theirs."""
    from rnnlab.ledger.rows import OURS_PROTOCOL, PAPER_PROTOCOL, protocol

    mnist = [p for p in config.list_presets() if p.startswith(("dmu/smnist-", "dmu/psmnist-"))]
    assert len(mnist) == 26
    for p in mnist:
        assert protocol(p) == OURS_PROTOCOL, p
    assert protocol("dmu/adding-dmu") == PAPER_PROTOCOL and protocol("dmu/spa2eng-N1-dmu") == PAPER_PROTOCOL
