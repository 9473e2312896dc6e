"""Every numeric option of every cell is range-checked at construction, as the trainer checks
its settings: a value outside the option's documented range (docs/models.md, "Option ranges")
is a one-line ``ValueError`` naming the option and the value, never a model that computes NaN
or silently runs with a meaningless setting."""

import inspect
import math

import pytest
import torch

from rnnlab.cells import CELLS
from rnnlab.cells.layers import Recurrent

NAN, INF = math.nan, math.inf

#: cell -> option -> (values refused, a value accepted); every numeric option and every switch
#: (a bool option) of every cell; ``bias`` is every layer's (refused by the layer itself)
RANGES = {
    "lstm": {"forget_bias": ([NAN, INF], -1.0), "forget_bias_hh": ([NAN, INF], 0.0)},
    "exprnn": {"K": ([NAN, INF, 0, 2.5], 5), "M": ([NAN, 0, -1], 2)},
    "scornn": {"negatives": ([-1, 9], 2)},
    "asrnn": {
        "K": ([NAN, 0], 3),
        "M": ([INF, 0], 3),
        "a": ([NAN, -INF], -1.0),
        "b": ([NAN, INF], 2.0),
        "eps": ([NAN, INF, -1e-3], 1e-3),
    },
    "nnrnn": {
        "delta": ([NAN, INF, -1.0], 0.5),
        "K": ([NAN, 0], 3),
        "M": ([NAN, 0], 3),
        "fixed_gamma": ([NAN, INF, 0.0, -1.0], 0.9),
        "seed": ([], 3),
    },
    "dmu": {"z_bias": ([NAN, INF], -1.0)},
    "rhn": {"depth": ([0, -1], 3), "transform_bias": ([NAN, -INF], 1.0)},
    "ltrnn": {
        "chunk": ([-1], 4),
        "input_scale": ([NAN, INF, 0.0, -1.0], 0.5),
        "bias_value": ([NAN, INF], -0.02),
    },
    "eurnn": {"capacity": ([0, -2], 3)},
    "momentumlstm": {
        "mu": ([NAN, INF, 5.0, 1.0, -0.1], 0.9),
        "epsilon": ([NAN, INF, 0.0, -0.6], 2.0),
        "forget_bias": ([NAN, INF], 0.0),
    },
    "fcurnn": {"K": ([NAN, 0], 3), "M": ([INF, 0], 3)},
    "softorth": {"margin": ([NAN, -0.1, 1.0], 0.5), "penalty": ([NAN, INF, -1.0], 0.1)},
    "kru": {"penalty": ([NAN, INF, -1.0], 0.1), "complex_input": (["no", 0, None], False)},
    "antisymrnn": {
        "eps": ([NAN, INF, 0.0, -1.0], 0.1),
        "gamma": ([NAN, INF, -1.0], 0.0),
        "init_std": ([NAN, INF, -1.0], 0.5),
        "gated": (["yes", 1, None], True),
    },
    "incrnn": {
        "eta": ([NAN, INF, 0.0], 0.1),
        "alpha": ([NAN, INF, -1.0], 0.0),
        "steps": ([0, -1], 2),
        "rank": ([0, 9], 2),
        "init_std": ([NAN, -1.0], 0.5),
    },
    "naisnet": {
        "step": ([NAN, INF, 0.0], 0.2),
        "delta": ([NAN, -1.0], 0.0),
        "bound": ([NAN, INF, 0.0], 2.0),
        "init_std": ([INF, -1.0], 0.5),
    },
    "lipschitz": {
        "eps": ([NAN, INF, 0.0], 0.1),
        "beta": ([NAN, -0.1, 1.5], 0.5),
        "gamma_a": ([NAN, -1.0], 0.0),
        "gamma_w": ([INF, -1.0], 0.0),
        "init_std": ([NAN, -1.0], 0.5),
    },
    "cornn": {"dt": ([NAN, INF, 0.0], 0.1), "gamma": ([NAN, -1.0], 1.0), "epsilon": ([INF, 0.0], 1.0)},
    "lem": {"dt": ([NAN, INF, 0.0, -1.0], 0.5)},
    "slstm": {"heads": ([0, 3, NAN], 2)},
    "mlstm": {"heads": ([0, 3, NAN], 2), "chunk": ([0, -1, NAN], 4)},
    "lru": {
        "r_min": ([NAN, -0.1, 1.0], 0.5),
        "r_max": ([NAN, 0.0, 1.5], 0.99),
        "max_phase": ([NAN, INF, 0.0], 0.3),
        "chunk": ([-1, 2.5], 3),
        "block": (["yes", 1, None], True),
        "gamma_norm": (["no", 0, None], False),
    },
    "s4d": {
        "state_size": ([0, 3, 2.0], 4),
        "dt_min": ([NAN, 0.0, -1.0], 0.01),
        "dt_max": ([NAN, INF, 1e-4], 0.5),
        "chunk": ([-1, 2.5], 3),
    },
    "mamba": {
        "state_size": ([0, 1.5], 4),
        "expand": ([0, 2.0], 1),
        "conv_size": ([1, 0], 2),
        "dt_rank": ([-1, 1.5], 2),
        "dt_min": ([NAN, 0.0], 0.01),
        "dt_max": ([NAN, INF, 1e-4], 0.5),
        "dt_init_floor": ([NAN, -1.0], 0.0),
        "chunk": ([-1, 2.5], 3),
    },
}


def _numeric_options(cls) -> set[str]:
    out = set()
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name in ("self", "input_size", "hidden_size", "bias"):
            continue
        ann = str(p.annotation)
        numeric = ("float" in ann or "int" in ann) and "list" not in ann and not isinstance(p.default, str)
        if numeric or isinstance(p.default, bool):
            out.add(name)
    return out


def test_the_table_names_every_numeric_option_of_every_cell():
    for key, cls in CELLS.items():
        assert _numeric_options(cls) == set(RANGES.get(key, {})), (
            f"{key}: add its numeric options and switches to RANGES"
        )


CASES = [(k, o, v) for k, opts in RANGES.items() for o, (bad, _) in opts.items() for v in bad]


@pytest.mark.parametrize("key,option,value", CASES, ids=[f"{k}-{o}-{v}" for k, o, v in CASES])
def test_an_option_outside_its_range_is_a_one_line_error(key, option, value):
    """Before: MomentumLSTM's ``mu = 5`` gave NaN outputs; NaN was accepted for the LSTM's and
    MomentumLSTM's forget bias, DMU's z_bias, RHN's transform bias, asRNN's a, b and eps, nnRNN's
    delta and the dynamic-trivialization K, M of expRNN, asRNN, nnRNN and fcuRNN."""
    with pytest.raises(ValueError) as info:
        Recurrent(3, 8, cell=CELLS[key], **{option: value})
    msg = str(info.value)
    assert "\n" not in msg and option in msg and repr(value) in msg, msg


GOOD = [(k, o, good) for k, opts in RANGES.items() for o, (_, good) in opts.items()]


@pytest.mark.parametrize("key,option,value", GOOD, ids=[f"{k}-{o}" for k, o, _ in GOOD])
def test_an_option_inside_its_range_builds_a_finite_model(key, option, value):
    torch.manual_seed(0)
    layer = Recurrent(3, 8, cell=CELLS[key], **{option: value})
    out, _ = layer(torch.randn(6, 2, 3))
    assert torch.isfinite(out).all()
