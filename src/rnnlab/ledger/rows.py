"""The kinds of a published entry (:class:`Published`, a number or figure; :class:`Setting`, a
hyperparameter) and their registry: every paper module adds its rows here, in the order the
ledger shows them (:mod:`rnnlab.ledger.published` imports them all).
"""

from __future__ import annotations

from dataclasses import dataclass

PAPERS = {
    "asrnn": "Nguyen-Duy et al., Adaptive-saturated RNN: remember more with less instability (ICLR 2023 Tiny Papers)",
    "nnrnn": "Kerg et al., Non-normal recurrent neural network (nnRNN): learning long time dependencies while improving "
    "expressivity with transient dynamics (NeurIPS 2019)",
    "dmu": "Deep Memory Update (DMU) recurrent module (IEEE TNNLS)",
    "henaff": "Henaff, Szlam and LeCun, Recurrent orthogonal networks and long-memory tasks (ICML 2016)",
    "cornn": "Rusch and Mishra, Coupled oscillatory recurrent neural network (coRNN): an accurate and (gradient) "
    "stable architecture for learning long time dependencies (ICLR 2021)",
    "lem": "Rusch, Mishra, Erichson and Mahoney, Long expressive memory for sequence modeling (ICLR 2022)",
}


@dataclass(frozen=True)
class Published:
    """One published value (or one curve of a figure: ``value=None``)."""

    paper: str
    table: str  # "Table 1", "Fig. 2"
    model: str
    task: str
    size: str  # the row's size / setting: "T=150", "N=2", "L=1000"
    metric: str  # rnnlab's metric key: "test/bpc", "params", "time_per_step_s_gpu", ...
    value: float | None = None
    spread: float | None = None  # the printed +- (a standard deviation where the paper says)
    best: float | None = None  # DMU tables: the best of the runs
    presets: tuple[str, ...] = ()  # first: the preset faithful to the paper; then named variants
    reason: str = ""  # why there is no preset
    runs: int = 0  # runs behind the number, where the paper says
    note: str = ""  # where the value comes from and what it means: shown in the ledger
    missing: str = ""  # a table row whose number we do not hold: why

    @property
    def kind(self) -> str:
        """The ledger's section: "trained" (results of training runs), "timing", "weights"
        (weight counts), "analytic" (constructions, baselines, analyses of trained matrices)
        or "settings" (hyperparameter tables)."""
        if self.metric.startswith("params"):
            return "weights"
        if self.metric == "settings":
            return "settings"
        if self.metric.startswith("time_"):
            return "timing"
        if self.metric.startswith(("test/", "train/")) or self.metric == "thresholds":
            return "trained"
        return "analytic"


@dataclass(frozen=True)
class Setting:
    """A published hyperparameter that a preset must carry (a dotted key of the resolved config)."""

    paper: str
    table: str
    preset: str
    key: str
    value: object


@dataclass(frozen=True)
class Source:
    """Where a preset's setting comes from: ``text`` (the paper: section, table or figure),
    ``code`` (the authors' released repository: file and line at its commit) or ``ours`` (the
    paper and its code leave it open, or we depart from them: ``why`` says which and why)."""

    kind: str  # "text", "code" or "ours"
    where: str  # "Table X", "deep_memory_update/layers/rhn.py:12-15", "" for ours
    why: str = ""

    def __post_init__(self):
        if self.kind not in ("text", "code", "ours"):
            raise ValueError(f"a setting's source is 'text', 'code' or 'ours', got {self.kind!r}")
        if self.kind == "ours" and not self.why:
            raise ValueError("a setting of our own choice says why (Source('ours', '', why=...))")

    def __str__(self) -> str:
        head = f"{self.kind}: {self.where}" if self.where else self.kind
        return f"{head} ({self.why})" if self.why else head


def text_source(where: str, why: str = "") -> Source:
    """A setting the paper's text fixes (``where``: section, table or figure)."""
    return Source("text", where, why)


def code_source(where: str, why: str = "") -> Source:
    """A setting the authors' released code fixes (``where``: file and line at its commit)."""
    return Source("code", where, why)


def ours_source(why: str) -> Source:
    """A setting of ours (the paper and its code leave it open, or we depart from them)."""
    return Source("ours", "", why)


ROWS: list[Published] = []
SETTINGS: list[Setting] = []
#: variant preset -> (the faithful preset, how it differs): runs of a variant are labelled so
VARIANTS: dict[str, tuple[str, str]] = {}

#: The protocol a preset runs, when it is not the paper's: preset -> (the paper-protocol preset it
#: stands in for, or "" for a variant that has its own faithful preset; the protocol; how it
#: differs). ``paper``: the text's values (where the text is silent, the released code's choice,
#: stated in the preset); ``code``: the authors' released scripts as they run, where they differ
#: from the text; ``short``: a cheaper protocol of ours. Only paper-protocol runs can confirm or
#: refute a paper; a verdict on runs at another protocol names it.
PAPER_PROTOCOL = "paper"
PROTOCOLS: dict[str, tuple[str, str, str]] = {}
#: ``ours``: settings that decide the outcome and that neither the paper's text nor released code
#: fixes, so that every run of such a preset is one setting of ours (preset prefix -> which
#: settings are ours and why). Such runs never refute a claim that something works: it is "not
#: reproduced in the N settings tried"; they confirm it from one setting (3 seeds or more), and a
#: claim that something fails only over a declared sweep (``rnnlab.ledger.findings.verdict``).
OURS_PROTOCOL = "ours"
OPEN_SETTINGS: dict[str, str] = {
    "henaff/": "the optimizer, its learning rate, clipping, batch, step budget and the first timescale (T=500) "
    "are not in the text and no code was released",
    # Table IV of the DMU paper: beyond N and the task, no MNIST setting is in the text or the released code
    "dmu/smnist-": "the optimizer, its learning rates, clipping, batch, step budget, the DMU's z_bias and the "
    "split are not in the DMU paper's text, and its released code has no MNIST experiment",
    "dmu/psmnist-": "the optimizer, its learning rates, clipping, batch, step budget, the DMU's z_bias and the "
    "split are not in the DMU paper's text, and its released code has no MNIST experiment",
}


def protocol(preset: str) -> str:
    """The protocol ``preset`` runs (``PROTOCOLS``; a preset under ``OPEN_SETTINGS``: ours; every
    other preset runs the paper's)."""
    if preset in PROTOCOLS:
        return PROTOCOLS[preset][1]
    if any(preset.startswith(prefix) for prefix in OPEN_SETTINGS):
        return OURS_PROTOCOL
    return PAPER_PROTOCOL


def at_other_protocols(preset: str) -> list[str]:
    """The presets that run ``preset``'s experiment at another protocol: code first, then short."""
    order = {"code": 0, "short": 1}
    alts = [p for p, (base, proto, _) in PROTOCOLS.items() if base == preset]
    return sorted(alts, key=lambda p: (order.get(PROTOCOLS[p][1], 2), p))


def _add(*rows: Published) -> None:
    ROWS.extend(rows)
