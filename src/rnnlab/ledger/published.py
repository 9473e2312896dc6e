"""The four papers' published values, kept once: every number of their tables and the
content of their figures (curves: no number), each row with the preset that reproduces it or
the reason why there is none; and the hyperparameter tables as settings the presets must
carry. ``rnnlab.ledger`` turns these and run records into ``REPRODUCTION.md``; the tests
check every preset's ``[paper]`` numbers and settings against this module.

Values are as printed, in the units rnnlab reports: accuracies as fractions (a table's 98.5%
is 0.985), losses in nats, BPC in bits, times in seconds. A spread printed beside a percentage
is divided by 100 too, except where the paper evidently prints it as a fraction already (asRNN
Table 2: see ``_table2_spread``). ``runs`` is the number of runs behind a number where the
paper says (asRNN copy and MNIST: its one seed, 5544). ``VARIANTS`` names the presets that
differ from the paper on purpose (the reference code's settings, another learning-rate rule):
their runs are shown, and judged, as variants. ``PROTOCOLS`` names the presets that run an
experiment at another protocol than the paper's (the authors' released code, or a cheaper one
of ours): only paper-protocol runs reproduce a number or confirm or refute a claim.
"""

from __future__ import annotations

# the papers' rows: each module adds its own to ``ROWS`` and ``SETTINGS`` when imported, in
# this order (the ledger's)
from . import published_asrnn, published_dmu, published_nnrnn, published_others  # noqa: F401
from .published_dmu import DMU_T8_RECURRENT_ONLY
from .rows import (
    OPEN_SETTINGS,
    OURS_PROTOCOL,
    PAPER_PROTOCOL,
    PAPERS,
    PROTOCOLS,
    ROWS,
    SETTINGS,
    VARIANTS,
    Published,
    Setting,
    at_other_protocols,
    protocol,
)

__all__ = [
    "DMU_T8_RECURRENT_ONLY",
    "OPEN_SETTINGS",
    "OURS_PROTOCOL",
    "PAPERS",
    "PAPER_PROTOCOL",
    "PROTOCOLS",
    "ROWS",
    "SETTINGS",
    "VARIANTS",
    "Published",
    "Setting",
    "at_other_protocols",
    "protocol",
]
