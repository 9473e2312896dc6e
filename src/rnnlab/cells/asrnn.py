"""asRNN: the adaptive-saturated RNN (Nguyen-Duy, ICLR 2023 Tiny Papers).

Update (column form; ``W_xh`` is stored as ``weight_ih`` (H, I), ``W_hh`` as ``weight_hh``
(H, H), both applied as ``x @ W.T``)::

    h_t = W_f^{-1} tanh(W_f (W_xh x_t + W_hh h_{t-1} + b)),    W_f = U_f D_f,

with ``W_hh`` and ``U_f`` orthogonal (matrix exponential, Cayley map or dynamic
trivialization, see :mod:`rnnlab.parametrize`), ``D_f = diag(|s| + eps)`` and therefore
``W_f^{-1} = D_f^{-1} U_f^T``. Initialisation (paper A.4.1): ``W_hh`` Henaff or Cayley,
``U_f = I``, ``s ~ U(a, b)``, ``W_xh`` random semi-orthogonal, ``b = 0``.

Two limits of the paper hold exactly / asymptotically (tested): ``W_f = I`` gives the vanilla
tanh RNN; ``D_f = eps I`` with ``eps -> 0`` gives the linear RNN
``h_t = W_xh x_t + W_hh h_{t-1} + b`` (error O(eps^2)). Per coordinate the cell applies the
saturating activation ``f(x; a) = tanh(a x) / a`` of the paper's Eq. (1): with ``U_f = I``,
``h_t = f(z_t; d)`` elementwise with ``d = |s| + eps``.

Fast path (``backend="auto"``): in the coordinates ``g_t = W_f h_t`` the recurrence is a
plain tanh RNN::

    g_t = tanh(W_f W_xh x_t + (W_f W_hh W_f^{-1}) g_{t-1} + W_f b),   h_t = W_f^{-1} g_t,

which the fused tanh recurrence :func:`rnnlab.kernels.elementwise_rnn` runs (input projections of
all steps in one matrix product fused into the kernel, one (H, H) product per step forward and
one backward, as a vanilla RNN; the Triton kernel on CUDA; also with ``lengths``) and maps back
to h with one product over all steps. It equals the step loop in exact arithmetic; in floating point the change of
basis amplifies rounding by ``kappa = min(max_i (D_f^{-1} |U_f|^T |U_f| D_f 1)_i, cond(D_f))``,
which is 1 when ``U_f`` is a signed permutation (any ``D_f``) or ``D_f = c I`` (any ``U_f``) and
about ``cond(D_f)`` for a dense ``U_f``;
when ``kappa`` exceeds :data:`FAST_PATH_MAX_KAPPA` for the dtype the cell falls back to the
reference loop (measured in ``docs/asrnn.md``; tested in ``tests/cells/test_asrnn_cell.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize as P

from .. import parametrize as par
from ..kernels.amp import float32_region, full_precision, recurrence_dtype
from ..kernels.families.rnn import elementwise_rnn
from ..kernels.linear import tall_linear
from .base import Cell, nonnegative_option, real_option, unroll

#: Largest rounding amplification ``kappa`` (see :meth:`ASRNNCell.amplification`) at which
#: ``sequence`` takes the transformed-coordinate fast path, per dtype. Measured (docs/asrnn.md,
#: "Precision of the fast path"): the fast path's output error grows like
#: ``unit_roundoff * kappa`` and its U_f gradient error faster, while the step loop's does
#: not grow; up to these values the fast path's worst relative error over outputs and all
#: gradients stayed within a few times the step loop's own in float32 and below ~3e-8 in float64.
FAST_PATH_MAX_KAPPA = {torch.float32: 3e2, torch.float64: 1e4}


def saturating(x: Tensor, a) -> Tensor:
    """The adaptive-saturated activation ``f(x; a) = tanh(a x) / a`` (paper Eq. 1).

    ``a -> 0`` gives the identity (the value at ``a == 0`` is exactly ``x``); ``a = 1`` gives
    tanh; ``|f(x; a)| < 1/|a|``, and ``a f(x; a) = tanh(a x) -> sign(x)`` as ``a`` grows.
    ``a`` is a float or a tensor broadcastable against ``x`` (e.g. one ``a`` per unit).
    """
    a = torch.as_tensor(a, dtype=x.dtype, device=x.device)
    zero = a == 0
    safe = torch.where(zero, torch.ones_like(a), a)
    return torch.where(zero, x, torch.tanh(safe * x) / safe)


class ASRNNCell(Cell):
    """asRNN cell (see the module docstring for the update and the fast path).

    Args:
        input_size, hidden_size: I and H.
        map, init, K, M: map ("expm" | "cayley"), initialiser ("henaff", "cayley", "haar",
            "identity", "random") and dynamic trivialization of ``W_hh``.
        a, b, eps: ``s ~ U(a, b)``, ``D_f = diag(|s| + eps)``. ``eps = 0`` is allowed (the
            paper's PTB setting, Table 5) when the init range excludes 0 (``a > 0`` or
            ``b < 0``): then ``D_f = diag(|s|)`` exactly. At ``s_i = 0`` with ``eps = 0``,
            ``W_f`` is singular and ``W_f^{-1} tanh(W_f z)`` is 0/0 (and ``d|s|/ds = 0`` there,
            so ``s_i`` would stay stuck): the constructor refuses an init range containing 0,
            and a forward pass that meets a zero entry of ``D_f`` raises ``FloatingPointError``
            instead of returning NaN.
        uf_map: map of ``U_f`` ("expm" | "cayley"); it shares ``K``/``M`` with ``W_hh``.
        uf_group: optimizer group of ``U_f``'s skew parameter and of ``s``. ``"orthogonal"``
            follows the paper (A.4.1: ``U_f`` parametrized like ``W_hh``); ``"default"``
            follows the paper's Table 5 / reference code, which give them the main learning rate.
        backend: "auto" (fast path with a precision fallback), "fast" (always the fast path),
            "reference" (the step loop).

    Shapes: x_t (B, I), h (B, H). Parameters: ``weight_ih`` (H, I), ``bias`` (H,),
    orthogonal ``weight_hh`` and ``weight_uf`` (H, H), positive ``diag_f`` (H,).

    Example:
    >>> import torch
    >>> from rnnlab.cells import ASRNNCell
    >>> cell = ASRNNCell(3, 8)
    >>> W_hh, U_f = cell.weight_hh, cell.weight_uf   # both orthogonal
    >>> torch.allclose(W_hh @ W_hh.T, torch.eye(8), atol=1e-5), torch.allclose(U_f @ U_f.T, torch.eye(8), atol=1e-5)
    (True, True)
    >>> h, _ = cell(torch.randn(2, 3))
    >>> h.shape
    torch.Size([2, 8])
    """

    family = "transformed"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        map: str = "expm",
        init: str = "henaff",
        K: int | None = None,
        M: int | None = None,
        a: float = 0.0,
        b: float = 0.0,
        eps: float = 1e-5,
        uf_map: str = "expm",
        uf_group: str = "orthogonal",
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        a, b = real_option("a", a), real_option("b", b)
        eps = nonnegative_option("eps", eps)
        if a > b:
            raise ValueError(f"the init range of s needs a <= b, got a={a}, b={b}")
        if not isinstance(uf_group, str) or not uf_group:
            raise ValueError(f"uf_group must be a group tag such as 'orthogonal' or 'default', got {uf_group!r}")
        if eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        if eps == 0 and a <= 0 <= b:
            raise ValueError(
                f"eps=0 with the init range s ~ U({a}, {b}) containing 0 makes D_f = diag(|s|) singular; "
                f"use eps > 0 (e.g. 1e-5) or a range away from 0 (the paper's PTB: a=0.8, b=3)"
            )
        H = hidden_size
        self.init, self.a, self.b, self.eps = init, float(a), float(b), float(eps)
        self.weight_ih = nn.Parameter(par.semi_orthogonal(H, input_size))
        self.weight_hh = nn.Parameter(torch.empty(H, H))
        self.orthogonal = par.orthogonal_(self, "weight_hh", map, init, K, M)
        self.weight_uf = nn.Parameter(torch.empty(H, H))
        self.orthogonal_f = par.orthogonal_(self, "weight_uf", uf_map, "identity", K, M)
        self.diag_f = nn.Parameter(torch.empty(H).uniform_(self.a, self.b))
        par.positive_diagonal_(self, "diag_f", eps)
        self.bias = nn.Parameter(torch.zeros(H))
        self.uf_group = uf_group
        self.tag_parameters("parametrizations.weight_hh", "orthogonal")
        self.tag_parameters("parametrizations.weight_uf", uf_group)
        self.tag_parameters("parametrizations.diag_f", uf_group)

    @classmethod
    def extra_backends(cls) -> tuple[str, ...]:
        return ("fast",)

    # --- the paper's step (the reference) ------------------------------------------------
    def forward(self, x_t: Tensor, h: Tensor):
        U, d = self.weight_uf, self.diag_f
        self._check_invertible(d)
        z = nn.functional.linear(x_t, self.weight_ih, self.bias) + nn.functional.linear(h, self.weight_hh)
        # row form of W_f z = U (d * z) and W_f^{-1} y = (U^T y) / d; W_f and W_f^{-1} are applied
        # in float32 even under autocast (D_f^{-1} amplifies rounding)
        with float32_region(z):
            z = z.to(full_precision(z))
            y = torch.tanh((z * d) @ U.T)
            h = (y @ U) / d
        return h, h

    def _check_invertible(self, d: Tensor) -> None:
        # only eps = 0 can reach d_i = 0 (|s| + eps >= eps otherwise)
        if self.eps == 0 and not bool((d != 0).all()):
            k = int((d == 0).sum())
            raise FloatingPointError(
                f"asRNN with eps=0: {k} entries of D_f = diag(|s|) are 0, so W_f is singular and "
                f"W_f^{{-1}} tanh(W_f z) is 0/0; train with eps > 0 (--set model.cell_options.eps=1e-5)"
            )

    # --- fast path -------------------------------------------------------------------------
    def condition_number(self) -> float:
        """``cond(D_f) = max(d) / min(d)`` (= cond(W_f), since U_f is orthogonal)."""
        d = self.diag_f.detach()
        return float(d.max() / d.min())

    @staticmethod
    @torch.no_grad()
    def _kappa(U: Tensor, d: Tensor) -> float:
        U = U.detach().double().abs()
        d = d.detach().double()
        componentwise = float(((U.T @ U) @ d / d).max())
        return min(componentwise, float(d.max() / d.min()))

    def amplification(self) -> float:
        """``kappa = min(max_i (D_f^{-1} |U_f|^T |U_f| D_f 1)_i, cond(D_f)) >= 1``: how much
        the fast path's change of basis magnifies rounding. Forming ``W_f W_hh W_f^{-1}`` and
        applying it to ``g = W_f h`` commits errors of size ``u |U| D |W| D^{-1} |U|^T |U| D |h|``
        (componentwise) where the step loop commits ``u |U| D |W| |h|``, a ratio bounded by the
        first term (1 for a signed-permutation U_f, whatever D_f); normwise the ratio is of the
        order of cond(D_f) (1 for D_f = c I, whatever U_f). Both are heuristics; the thresholds
        in :data:`FAST_PATH_MAX_KAPPA` come from measurements."""
        with torch.no_grad():
            return self._kappa(self.weight_uf, self.diag_f)

    def _fast_ok(self, dtype: torch.dtype, U: Tensor, d: Tensor) -> bool:
        if self.backend == "reference":
            return False
        if self.backend == "fast":
            return True
        return self._kappa(U, d) <= FAST_PATH_MAX_KAPPA.get(dtype, FAST_PATH_MAX_KAPPA[torch.float32])

    def uses_fast_path(self, dtype: torch.dtype) -> bool:
        """Whether :meth:`sequence` takes the fast path for inputs of ``dtype`` now."""
        with torch.no_grad():
            return self._fast_ok(dtype, self.weight_uf, self.diag_f)

    def transformed_weights(self) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``(W_f W_xh, W_f W_hh W_f^{-1}, W_f b, W_f, W_f^{-1})``: the g-coordinates RNN."""
        with P.cached(), float32_region(self.weight_hh):  # float32 under autocast
            U, d, W = self.weight_uf, self.diag_f, self.weight_hh
            W_f = U * d  # U diag(d)
            W_f_inv = U.T / d[:, None]  # diag(1/d) U^T, no matrix inverse needed
            return W_f @ self.weight_ih, W_f @ W @ W_f_inv, W_f @ self.bias, W_f, W_f_inv

    def sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        g, h_n, W_f_inv = self.sequence_mapped(x, state, lengths)
        if W_f_inv is None:
            return g, h_n
        # h = W_f^{-1} g for all steps in one product; zero (padded) g maps to zero h; in
        # float32 under autocast, as every application of W_f^{-1}
        with float32_region(g):
            return tall_linear(g, W_f_inv), h_n

    def sequence_mapped(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """The fast path's ``g_t = W_f h_t`` with ``M = W_f^{-1}`` (``h_t = M g_t``), so that
        a linear readout can use ``W_o W_f^{-1}`` on g and skip mapping every step back
        (:meth:`rnnlab.cells.Cell.sequence_mapped`); the reference loop's h with ``M = None``
        when the fast path is off or falls back."""
        if self.path(x, lengths) == "step":
            out, h_n = unroll(self, x, state, lengths)
            return out, h_n, None
        # one evaluation of the parametrized weights serves the precision test and the run
        # (first accessed with autograd on, so the cached tensors carry the graph)
        with P.cached():
            self._check_invertible(self.diag_f)
            x = x.to(recurrence_dtype(x))  # float32 under autocast (see rnnlab.kernels.amp)
            if not self._fast_ok(x.dtype, self.weight_uf, self.diag_f):
                out, h_n = unroll(self, x, state, lengths)
                return out, h_n, None
            state = self.start_sequence(x, state)
            w_ih, w_hh, bias, W_f, W_f_inv = self.transformed_weights()
            with float32_region(x):
                g0 = nn.functional.linear(state.to(W_f.dtype), W_f)
                # the vanilla tanh recurrence in g, its input projection fused into the kernel
                # (one product for all steps, written straight into the state buffer)
                g, g_n = elementwise_rnn(x, w_hh, g0, "tanh", lengths=lengths, input_weight=w_ih, input_bias=bias)
            return g, nn.functional.linear(g_n, W_f_inv), W_f_inv

    # --- bookkeeping -----------------------------------------------------------------------
    def free_parameter_count(self) -> int:
        """``W_xh`` + ``b`` + ``s`` + ``n(n-1)/2`` for each of ``W_hh`` and ``U_f``
        (the papers' count; n = 138 with 10 inputs and the 9-way copy readout gives 21,813)."""
        n = self.hidden_size
        return self.weight_ih.numel() + self.bias.numel() + n + 2 * (n * (n - 1) // 2)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, init={self.init!r}, a={self.a}, b={self.b}, "
            f"eps={self.eps}, uf_group={self.uf_group!r}, backend={self.backend!r}"
        )
