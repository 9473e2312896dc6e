"""Every outcome setting of an audited paper preset has a source (the paper's text, the authors'
released code at file and line, or ours with the reason), the fidelity pages are what the
sources give, and the presets not audited yet are listed (a list that may only shrink)."""

import fnmatch
import re
from pathlib import Path

import pytest

from rnnlab.ledger import sources
from rnnlab.ledger.published_dmu import DMU_CODE_DIFFS
from rnnlab.ledger.rows import Source

ROOT = Path(__file__).resolve().parents[2]
AUDITED_PRESETS = [p for p in sources.paper_presets() if sources.audited(p)]


def test_the_audited_presets_are_the_dmu_synthetic_and_henaff_presets():
    names = set(AUDITED_PRESETS)
    syn = {f"dmu/{t}-{m}" for t in ("adding", "temporal_order", "noisy_sequence") for m in MODULES}
    assert syn <= names and {f"dmu/code/{t}-{m}" for t, m in DMU_CODE_DIFFS} <= names
    assert sum(p.startswith("henaff/") for p in names) >= 15


MODULES = ("rnn", "lstm", "gru", "rhn", "dmu")


@pytest.mark.parametrize("preset", AUDITED_PRESETS)
def test_every_outcome_setting_of_an_audited_preset_has_a_source(preset):
    missing = sources.unsourced(preset)
    assert not missing, f"{preset}: no source for {missing}: add a rule to rnnlab.ledger.sources.SOURCES"


def test_a_setting_without_a_rule_is_found(monkeypatch):
    """Not vacuous: a cell option or task option no rule names is reported, and a preset whose
    rules are taken away has settings without a source (every preset is audited now)."""
    assert sources.source_of("dmu/adding-dmu", "model.cell_options.a_new_option") is None
    assert sources.source_of("dmu/adding-dmu", "task.a_new_option") is None
    assert not sources.unsourced("cornn/psmnist")
    monkeypatch.setattr(sources, "SOURCES", [r for r in sources.SOURCES if "cornn/psmnist" not in r[0]])
    assert sources.unsourced("cornn/psmnist")
    # the settings a preset runs with by default are outcome settings too
    keys = sources.outcome_settings("dmu/adding-lstm")
    assert keys["model.cell_options.forget_bias"] is None and keys["task.step0_mark"] == "pair"
    assert sources.outcome_settings("dmu/code/adding-lstm")["model.cell_options.forget_bias_hh"] == 2.0


def test_every_paper_preset_is_audited_or_pending():
    """A paper preset is either audited (every setting sourced) or on the PENDING list; each
    pending pattern still names a preset (the list only shrinks as presets are audited)."""
    for p in sources.paper_presets():
        pending = any(fnmatch.fnmatchcase(p, q) for q in sources.PENDING)
        assert sources.audited(p) != pending, p
    for q in sources.PENDING:
        assert any(fnmatch.fnmatchcase(p, q) for p in sources.paper_presets()), f"PENDING {q} names no preset"


def test_code_sources_name_a_file_and_line_and_ours_says_why():
    for _presets, _keys, src in sources.SOURCES:
        if src.kind == "code":
            assert re.search(r"\.(py|yml|sh|md):\d", src.where), src
        if src.kind == "ours":
            assert src.why
    for diffs in DMU_CODE_DIFFS.values():
        for _k, _v, src, _what in diffs:
            assert re.search(r"\.(py|yml|sh):\d", src.where), src
    with pytest.raises(ValueError, match="says why"):
        Source("ours", "")
    with pytest.raises(ValueError, match="'text', 'code' or 'ours'"):
        Source("paper", "Table X")


@pytest.mark.parametrize("paper", sources.FIDELITY_PAPERS)
def test_the_fidelity_pages_are_what_the_sources_give(paper):
    page = ROOT / "docs" / "fidelity" / f"{paper}.md"
    assert page.read_text(encoding="utf-8") == sources.fidelity_page(paper), (
        f"{page} is stale: run python -m rnnlab.ledger.sources"
    )
    assert "**no source**" not in page.read_text(encoding="utf-8")


def test_the_dmu_page_marks_every_difference_of_text_and_code():
    page = sources.fidelity_page("dmu")
    n = sum(len(d) for d in DMU_CODE_DIFFS.values())
    assert page.count("**differs**") == n
