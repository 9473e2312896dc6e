"""The asRNN audit: every outcome setting of the copy, MNIST (n=122, 257, 364) and PTB-c presets has
a source (the paper's section or table, the released code ndminhkhoi46/asRNN at file and line,
or ours with the reason), its fidelity page marks every difference of the code protocol, and
what the presets cannot express is listed with its source."""

import re

from rnnlab.ledger import sources
from rnnlab.ledger.rows import PROTOCOLS
from rnnlab.ledger.sources_asrnn import ASRNN_CODE_DIFFS, ASRNN_CODE_UNMODELLED, ASRNN_SOURCES

MODELS = ("", "-lstm", "-scornn", "-exprnn")
PAPER = [f"asrnn/copy-L{L}{m}" for L in (1000, 2000) for m in MODELS]
PAPER += [f"asrnn/{t}-n{n}{m}" for t in ("smnist", "psmnist") for n in (122, 257, 364) for m in MODELS + ("-urnn",)]
PAPER += [f"asrnn/ptb_char-bptt{T}{m}" for T in (150, 300) for m in ("", "-lstm", "-exprnn", "-eurnn")]


def test_every_asrnn_paper_preset_and_its_code_preset_is_audited():
    audited = {p for p in sources.paper_presets() if sources.audited(p)}
    assert set(PAPER) <= audited
    assert set(ASRNN_CODE_DIFFS) <= audited
    for p in PAPER + list(ASRNN_CODE_DIFFS):
        assert not sources.unsourced(p), p
    # every asRNN preset of the ledger's rows is audited: none is pending
    assert {p for p in sources.paper_presets() if p.startswith("asrnn/")} <= set(PAPER) | set(ASRNN_CODE_DIFFS)
    assert not any(q.startswith("asrnn/") for q in sources.PENDING)


def test_every_code_fact_has_a_file_and_line_and_every_ours_a_reason():
    for _presets, _keys, src in ASRNN_SOURCES:
        if src.kind == "code":
            assert re.search(r"\.(py|md):\d", src.where), src
        if src.kind == "ours":
            assert src.why, src
        if src.kind == "text":
            assert re.search(r"(Table \d|A\.4|Sec\. \d|Fig\. \d)", src.where), src
    for _code, (_base, diffs) in ASRNN_CODE_DIFFS.items():
        for _k, _v, src, what in diffs:
            assert src.kind == "code" and re.search(r"\.(py|md):\d", src.where) and what, src
    for _p, what, src, why in ASRNN_CODE_UNMODELLED:
        assert src.kind == "code" and re.search(r"\.(py|md):\d", src.where) and what and why


def test_the_asrnn_page_marks_every_difference_of_text_and_code_and_lists_what_no_preset_expresses():
    page = sources.fidelity_page("asrnn")
    assert page.count("**differs**") == sum(len(d) for _b, d in ASRNN_CODE_DIFFS.values())
    for code, (base, diffs) in ASRNN_CODE_DIFFS.items():
        assert PROTOCOLS[code][:2] == (base, "code")
        section = page.split(f"## `{base}`")[1].split("\n## ")[0]
        assert section.count("**differs**") == len(diffs), code
    for _p, what, _src, _why in ASRNN_CODE_UNMODELLED:
        assert what in page
