"""The C signatures of kernels/small.c against their one declaration (rnnlab.kernels.small_abi):
a changed prototype fails before any build, naming the function and the argument; a wrong call
raises SignatureError before C reads anything; the ctypes signatures come from the declaration."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import torch

from rnnlab.kernels import small, small_abi
from rnnlab.kernels.small_abi import DECLARATIONS, SignatureError, shape_of

SOURCE = small.SOURCE
FLOOR = Path(__file__).resolve().parents[2] / "benchmarks" / "small_floor.c"
D = torch.float64


def test_the_sources_match_the_declaration():
    small_abi.check_source(SOURCE)
    small_abi.check_source(FLOOR, small_abi.SCALAR_FUNCTIONS)  # the benchmark's floor: the scalar loops
    found = small_abi.prototypes(SOURCE.read_text())
    assert set(found) == set(DECLARATIONS) and len(found) == 20
    lanes = {f"{c}_lanes_{d}" for c in ("rnn", "lstm", "gru", "rhn", "dmu") for d in ("forward", "backward")}
    assert set(small_abi.LANE_FUNCTIONS) == lanes
    with pytest.raises(SignatureError, match="rnn_lanes_forward: declared in small_abi.py"):
        small_abi.check_source(FLOOR)  # the floor has no lane kernels
    assert found["dmu_forward"][5] == ("const long *", "n") and found["dmu_forward"][10] == ("R *const *", "Wk")


@pytest.mark.parametrize(
    "old,new,expected",
    [
        # a renamed argument
        ("const R *u, const R *W, const R *h0,\n                       const int64_t *lens, R *S)",
         "const R *u, const R *Wx, const R *h0,\n                       const int64_t *lens, R *S)",
         "rnn_forward: argument 7 is 'const R *Wx'"),
        # a changed type: int where the declaration has long
        ("void NAME(gru_backward)(long E, long T, long B, long H,",
         "void NAME(gru_backward)(long E, long T, long B, int H,", "gru_backward: argument 4 is 'int H'"),
        # const dropped from an input
        ("void NAME(rhn_backward)(long E, long T, long B, long H, long D, const R *dS,",
         "void NAME(rhn_backward)(long E, long T, long B, long H, long D, R *dS,", "rhn_backward: argument 6 is 'R *dS'"),
        # the real type where a pointer was
        ("int act, R slope, const R *u1,", "int act, R *slope, const R *u1,", "dmu_forward: argument 8 is 'R *slope'"),
        # an argument too many at the end
        ("R *C, R *A, R *TC) {", "R *C, R *A, R *TC, long extra) {", "lstm_forward: small.c has 14 arguments, the declaration 13"),
        # two arguments swapped
        ("(gru_forward)(long E, long T, long B, long H, const R *u, const R *W, const R *bhh,",
         "(gru_forward)(long E, long T, long B, long H, const R *u, const R *bhh, const R *W,",
         "gru_forward: argument 6 is 'const R *bhh'"),
        # a function renamed
        ("void NAME(rnn_backward)(", "void NAME(rnn_backward2)(", "rnn_backward: declared in small_abi.py but small.c defines no"),
    ],
)  # fmt: skip
def test_a_changed_prototype_fails_naming_the_function_and_argument(tmp_path, old, new, expected):
    text = SOURCE.read_text()
    assert text.count(old) == 1, "the test's anchor must occur once in small.c"
    changed = tmp_path / "small.c"
    changed.write_text(text.replace(old, new))
    with pytest.raises(SignatureError) as e:
        small_abi.check_source(changed)
    assert expected in str(e.value), str(e.value)


def test_a_changed_prototype_fails_before_any_build(tmp_path, monkeypatch):
    changed = tmp_path / "small.c"
    changed.write_text(
        SOURCE.read_text().replace(
            "long T, long B, long H, int act, const R *dS", "long T, long B, long H, int act, const float *dS"
        )
    )
    monkeypatch.setattr(small, "SOURCE", changed)
    monkeypatch.setattr(small, "_libs", {})
    monkeypatch.setattr(
        small, "_compile", lambda kind: pytest.fail("compiled a source that differs from the declaration")
    )
    with pytest.raises(SignatureError, match=r"rnn_backward: argument 6 is 'const float \*dS'"):
        small.library(torch.float64)


def _rnn_args(E=2, T=3, B=4, H=5, dtype=D):
    u, S = torch.randn(E, T, B, H, dtype=dtype), torch.empty(E, T, B, H, dtype=dtype)
    W, h0 = torch.randn(E, H, H, dtype=dtype), torch.randn(E, B, H, dtype=dtype)
    lens = torch.full((E, B), T, dtype=torch.int64)
    return [E, T, B, H, 0, u, W, h0, lens, S]


class _NoLibrary:
    """Stands in for the library: a wrong call must fail before any C function is looked up."""

    def __getattr__(self, name):
        raise AssertionError(f"C function {name} reached with a wrong call")


def _with(args, i, value):
    args = list(args)
    args[i] = value
    return args


def _wrong_calls():
    a = _rnn_args()
    u, W = a[5], a[6]
    yield "dtype", _with(a, 5, u.float()), r"argument 6 \(const R \*u\) must be torch.float64, got torch.float32"
    yield "contiguity", _with(a, 6, W.transpose(1, 2)), r"argument 7 \(const R \*W\) must be contiguous"
    yield "shape", _with(a, 6, torch.randn(2, 5, 6, dtype=D)), r"argument 7 \(const R \*W\) must have shape \(2, 5, 5\)"
    yield "null", _with(a, 7, None), r"argument 8 \(const R \*h0\) is NULL"
    yield (
        "device",
        _with(a, 5, torch.empty(2, 3, 4, 5, dtype=D, device="meta")),
        r"argument 6 \(const R \*u\) must be on the CPU",
    )
    yield "float size", _with(a, 3, 5.0), r"argument 4 \(long H\) must be an int, got float"
    yield "bool size", _with(a, 1, True), r"argument 2 \(long T\) must be an int, got bool"
    yield "zero size", _with(a, 2, 0), r"argument 3 \(long B\) must be in \[1, 2\*\*31\)"
    yield "size that disagrees", _with(a, 2, 3), r"argument 6 \(const R \*u\) must have shape \(2, 3, 3, 5\)"
    yield "lengths dtype", _with(a, 8, a[8].int()), r"argument 9 \(const int64_t \*lens\) must be torch.int64"
    yield (
        "lengths shape",
        _with(a, 8, torch.full((4,), 3)),
        r"argument 9 \(const int64_t \*lens\) must have shape \(2, 4\)",
    )
    yield "count", a[:-1], r"rnn_forward: takes 10 arguments"
    yield "not a tensor", _with(a, 9, [1, 2]), r"argument 10 \(R \*S\) must be a tensor, got list"


@pytest.mark.parametrize("what,args,message", list(_wrong_calls()), ids=[w[0] for w in _wrong_calls()])
def test_a_wrong_call_raises_before_c(what, args, message):
    with pytest.raises(SignatureError, match=message):
        small_abi.call(_NoLibrary(), "rnn_forward", D, *args)


def _dmu_args(K=2, E=1, T=2, B=3, H=2, n=(4, 3)):
    n = list(n[:K])
    r = lambda *s: torch.randn(*s, dtype=D)  # noqa: E731
    G1 = n[0] if K else 2 * H
    Ws = [r(E, n[j + 1], n[j]) for j in range(K - 1)]
    bs = [r(E, n[j + 1]) for j in range(K - 1)]
    wout, bout = (r(E, 2 * H, n[-1]), r(E, 2 * H)) if K else (None, None)
    S, A = r(E, T, B, H), r(E, T, B, sum(n) + 2 * H)
    return [E, T, B, H, K, n, 0, 0.01, r(E, T, B, G1), r(E, G1, H), Ws, bs, wout, bout, r(E, B, H), None, S, A]


def test_wrong_dmu_calls_raise_before_c():
    a = _dmu_args()
    with pytest.raises(SignatureError, match=r"argument 11 \(R \*const \*Wk\) must be a list of 1 tensors, got 0"):
        small_abi.call(_NoLibrary(), "dmu_forward", D, *_with(a, 10, []))
    with pytest.raises(SignatureError, match=r"argument 11 \(R \*const \*Wk\) must have shape \(1, 3, 4\)"):
        small_abi.call(_NoLibrary(), "dmu_forward", D, *_with(a, 10, [torch.randn(1, 4, 3, dtype=D)]))
    with pytest.raises(SignatureError, match=r"argument 6 \(const long \*n\) must hold K = 2 widths, got 1"):
        small_abi.call(_NoLibrary(), "dmu_forward", D, *_with(a, 5, [4]))
    with pytest.raises(SignatureError, match=r"argument 8 \(R slope\) must be a real number, got str"):
        small_abi.call(_NoLibrary(), "dmu_forward", D, *_with(a, 7, "0.01"))
    with pytest.raises(SignatureError, match=r"argument 13 \(const R \*wout\) is NULL"):
        small_abi.call(_NoLibrary(), "dmu_forward", D, *_with(a, 12, None))
    b = _dmu_args(K=0)
    with pytest.raises(SignatureError, match=r"argument 13 \(const R \*wout\) must be NULL \(None\) when K == 0"):
        small_abi.call(_NoLibrary(), "dmu_forward", D, *_with(b, 12, torch.randn(1, 4, 2, dtype=D)))
    with pytest.raises(SignatureError, match="not a declared function"):
        small_abi.call(_NoLibrary(), "dmu_sideways", D)
    with pytest.raises(SignatureError, match="built for float32 and float64, not torch.bfloat16"):
        small_abi.call(_NoLibrary(), "rnn_forward", torch.bfloat16, *_rnn_args())


@pytest.mark.skipif(not small.available(), reason="no C compiler here")
def test_the_library_takes_its_signatures_from_the_declaration():
    for dtype, real in ((torch.float64, ctypes.c_double), (torch.float32, ctypes.c_float)):
        lib = small.library(dtype)
        suffix = "_f64" if dtype == torch.float64 else "_f32"
        f = getattr(lib, "dmu_forward" + suffix)
        assert len(f.argtypes) == len(DECLARATIONS["dmu_forward"]) and f.restype is None
        assert f.argtypes[0] is ctypes.c_long and f.argtypes[6] is ctypes.c_int and f.argtypes[7] is real
    # a right call runs: the RNN over zero inputs from a zero state stays zero
    a = _rnn_args()
    a[5].zero_(), a[7].zero_()
    a[9].fill_(float("nan"))
    small_abi.call(small.library(D), "rnn_forward", D, *a)
    assert torch.equal(a[9], torch.zeros_like(a[9]))
    b = _dmu_args()
    small_abi.call(small.library(D), "dmu_forward", D, *b)
    assert torch.isfinite(b[16]).all()


def test_shape_of_reads_the_declared_shapes_at_given_sizes():
    """The shapes the autograd Functions allocate by: the DMU's derived widths (G1 = n[0], or 2H
    without hidden layers), one shape per tensor of a pointer array, None where NULL is declared."""
    arg = {a.name: a for a in DECLARATIONS["dmu_backward"]}
    sizes = {"E": 2, "T": 5, "B": 3, "H": 4, "K": 3, "n": (6, 7, 8)}
    assert shape_of(arg["dU1"], sizes) == (2, 5, 3, 6)
    assert shape_of(arg["dWk"], sizes) == [(2, 7, 6), (2, 8, 7)]
    assert shape_of(arg["dwout"], sizes) == (2, 8, 8)
    linear = {**sizes, "K": 0, "n": ()}
    assert shape_of(arg["dwout"], linear) is None and shape_of(arg["dWk"], linear) == []
    assert shape_of(arg["dU1"], linear) == (2, 5, 3, 8)
