"""Complex unitary RNNs with real inputs and outputs: the restricted-capacity uRNN (Arjovsky,
Shah & Bengio 2016) and EURNN (Jing et al. 2017, efficient unitary RNN).

Both cells keep N = ``hidden_size // 2`` complex units and run, in column form,

    z_t = W h_{t-1} + V x_t,        h_t = modReLU(z_t),
    modReLU(z)_k = z_k / |z_k| * relu(|z_k| + b_k)      (0 where z_k = 0),

with W an N x N unitary matrix, V = V_re + i V_im a complex N x I input map (stored as the real
``weight_ih`` of shape (2N, I): rows 0..N-1 are V_re, rows N..2N-1 are V_im) and b a real bias
of N entries. The state and the output that a readout sees are the real vector
``[Re h_t; Im h_t]`` of size 2N = ``hidden_size``, so a linear readout ``U [Re h; Im h] + c``
is exactly the papers' real output layer, and layers stack like any other cell. Shapes: x_t
(B, I), h (B, 2N).

W is never stored: each cell applies it as a product of cheap factors (O(N log N) or O(N L)
per step); :meth:`unitary_matrix` builds the dense N x N matrix by applying those factors to
the identity, and :meth:`recurrent_matrix` returns its real 2N x 2N form
``[[Re W, -Im W], [Im W, Re W]]`` (orthogonal), which acts on ``[Re h; Im h]``.

uRNN: ``W = D3 R2 F^{-1} D2 Pi R1 F D1`` with ``D_j = diag(exp(i theta_j))``, reflections
``R_j = I - 2 v_j v_j^* / ||v_j||^2`` (v_j complex), F the unitary DFT (``F^{-1} = F^*``) and
Pi a fixed random permutation ((Pi z)_k = z_{perm[k]}). Free parameters of W: 3N phases + 2
reflections of 2N reals = 7N.

EURNN, ``variant="tunable"`` (capacity ``L`` >= 1):
``W = D F^(1) F^(2) ... F^(L)`` (F^(L) acts first), where odd layers F^(l) rotate the pairs
(0,1), (2,3), ... and even layers the pairs (1,2), (3,4), ...; each pair (i, j) gets the 2 x 2
unitary ``[[e^{i phi} cos t, -sin t], [e^{i phi} sin t, cos t]]`` (a phase on z_i, then a
rotation by t) with its own angle t and phase phi, and D = diag(exp(i omega)). The phase sits
on the rotation's input as in Clements et al.'s decomposition of U(N): with it on the output
row instead (``[[e^{i phi} cos t, -e^{i phi} sin t], [sin t, cos t]]``) the phases of the
last layer duplicate D and the L = N product reaches a thinner set (we measured the rank of
its derivative: 13 of 16 real directions at N = 4, 31 of 36 at N = 6). With N even a layer of the first kind has N/2
rotations and one of the second kind N/2 - 1, so capacity L has
``ceil(L/2) N + floor(L/2) (N - 2) + N`` free parameters; L = N gives N^2, the dimension of
U(N) (full capacity). ``variant="fft"``: log2(N) butterfly layers (N a power of two), layer k
pairing i with i + N / 2^(k+1), each with N/2 rotations: N log2(N) + N free parameters.

Initialisation: phases, angles and theta_j ~ U(-pi, pi), reflection vectors with real and
imaginary parts ~ U(-1, 1), the Pi permutation from the global torch RNG (a buffer, saved with
the model), V ~ U(-sqrt(6/(I + 2N)), +sqrt(6/(I + 2N))) (Glorot on the real (2N, I) form),
b ~ U(-0.01, 0.01). The parameters of W are tagged ``"unitary"`` (``optim.group_lr.unitary``
sets their own learning rate; by default they share the others').
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..kernels.linear import tall_linear
from .base import Cell


def complex_modrelu(z: Tensor, bias: Tensor) -> Tensor:
    """``z / |z| * relu(|z| + b)`` element-wise on complex ``z``; 0 where z = 0."""
    mod = z.abs()
    scale = torch.relu(mod + bias) / torch.where(mod > 0, mod, torch.ones_like(mod))
    return z * torch.where(mod > 0, scale, torch.zeros_like(scale))


class UnitaryCell(Cell):
    """Shared part of the complex unitary cells: the real/complex packing, the input map, the
    modReLU step and the fast sequence path. Subclasses define :meth:`operator` (whatever W
    needs, computed once per sequence) and :meth:`apply` (``W z`` for a batch of row vectors)."""

    family = "unitary"

    def __init__(self, input_size: int, hidden_size: int, backend: str = "auto"):
        super().__init__(input_size, hidden_size, backend)
        if hidden_size % 2:
            raise ValueError(
                f"{type(self).__name__} keeps hidden_size // 2 complex units and outputs [Re h; Im h], "
                f"so hidden_size must be even, got {hidden_size}"
            )
        self.units = hidden_size // 2
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size))
        self.bias = nn.Parameter(torch.empty(self.units))
        k = math.sqrt(6.0 / (input_size + hidden_size))
        with torch.no_grad():
            self.weight_ih.uniform_(-k, k)
            self.bias.uniform_(-0.01, 0.01)

    # --- a random start drawn in float64 ---------------------------------------------------
    def keep_float64_start(self, path: str, draw: Tensor) -> None:
        """Remember the float64 ``draw`` (real-valued) that the tensor at ``path`` (a parameter or
        buffer, e.g. ``"factor0"``) was initialised with, cast to the default dtype. When the
        cell is later cast to float64 (``.double()``) while that tensor still holds its start,
        it gets the draw itself, unitary to float64 precision, not the float32 rounding of it
        (unitary only to about 1e-7)."""
        starts = self.__dict__.setdefault("_float64_starts", {})
        starts[path] = draw.detach().to(torch.float64).clone()

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        for path, draw in self.__dict__.get("_float64_starts", {}).items():
            t = self.get_parameter(path) if path in dict(self.named_parameters()) else self.get_buffer(path)
            if t.dtype == torch.float64 and torch.equal(t, draw.to(torch.float32).to(t.device, torch.float64)):
                with torch.no_grad():
                    t.copy_(draw.to(t.device))
        return out

    # --- the unitary map ---------------------------------------------------------------
    def operator(self):
        raise NotImplementedError

    def apply(self, op, z: Tensor) -> Tensor:
        raise NotImplementedError

    def unitary_parameter_count(self) -> int:
        raise NotImplementedError

    def unitary_matrix(self) -> Tensor:
        """The dense complex N x N matrix W (column form: z -> W z), built by applying the
        factors to the identity."""
        p = self.weight_ih
        dtype = torch.complex128 if p.dtype == torch.float64 else torch.complex64
        eye = torch.eye(self.units, dtype=dtype, device=p.device)
        return self.apply(self.operator(), eye).T  # row k of apply(I) is (W e_k)^T

    def recurrent_matrix(self) -> Tensor:
        W = self.unitary_matrix()
        return torch.cat([torch.cat([W.real, -W.imag], 1), torch.cat([W.imag, W.real], 1)], 0)

    def free_parameter_count(self) -> int:
        return self.weight_ih.numel() + self.bias.numel() + self.unitary_parameter_count()

    # --- time --------------------------------------------------------------------------
    def _step(self, op, u_t: Tensor, h: Tensor) -> Tensor:
        n = self.units
        # the unitary factors and the state stay in the parameters' precision: under autocast
        # only the input projection is rounded (there is no bf16 complex type either)
        dtype = self.bias.dtype
        u_t, h = u_t.to(dtype), h.to(dtype)
        z = self.apply(op, torch.complex(h[:, :n], h[:, n:])) + torch.complex(u_t[:, :n], u_t[:, n:])
        z = complex_modrelu(z, self.bias)
        return torch.cat([z.real, z.imag], 1)

    def forward(self, x_t: Tensor, h: Tensor):
        h = self._step(self.operator(), nn.functional.linear(x_t, self.weight_ih), h)
        return h, h

    def sequence(self, x: Tensor, state: Tensor | None = None, lengths: Tensor | None = None):
        """Fast path: the input map for all steps in one product, the factors of W (phases,
        rotation coefficients) computed once, then the step loop. ``backend="reference"``
        runs :func:`rnnlab.unroll`."""
        if self.path(x, lengths) == "step":
            return super().sequence(x, state, lengths)
        h = self.start_sequence(x, state)
        u = tall_linear(x, self.weight_ih)
        op = self.operator()
        outputs = []
        # unbind, not u[t]: each u[t]'s backward would fill a zero (T, B, H) gradient (O(T^2) work,
        # 250 s and 2.8 GB for one psMNIST step at N = 512); unbind's backward stacks them once
        for t, u_t in enumerate(u.unbind(0)):
            new = self._step(op, u_t, h)
            if lengths is None:
                h = new
                outputs.append(h)
            else:
                keep = (lengths.to(x.device) > t).unsqueeze(1)
                h = torch.where(keep, new, h)
                outputs.append(new * keep.to(new.dtype))
        if not outputs:
            raise ValueError("cannot unroll over an empty sequence (T = 0)")
        return torch.stack(outputs), h


def _phase(theta: Tensor) -> Tensor:
    return torch.polar(torch.ones_like(theta), theta)


class URNNCell(UnitaryCell):
    """Restricted-capacity uRNN (Arjovsky et al. 2016): ``W = D3 R2 F^{-1} D2 Pi R1 F D1``
    (see the module docstring); 7N free parameters in W.

    Example:
    >>> import torch
    >>> from rnnlab.cells import URNNCell
    >>> cell = URNNCell(3, 8)
    >>> W = cell.recurrent_matrix()                  # the unitary product as a real 8 x 8 matrix
    >>> torch.allclose(W @ W.T, torch.eye(8), atol=1e-5)
    True
    """

    def __init__(self, input_size: int, hidden_size: int, backend: str = "auto"):
        super().__init__(input_size, hidden_size, backend)
        n = self.units
        self.theta = nn.Parameter(torch.empty(3, n).uniform_(-math.pi, math.pi))
        self.reflection = nn.Parameter(torch.empty(2, 2, n).uniform_(-1.0, 1.0))  # (j, re/im, N)
        self.register_buffer("permutation", torch.randperm(n))
        for name in ("theta", "reflection"):
            self.tag_parameters(name, "unitary")

    def unitary_parameter_count(self) -> int:
        return self.theta.numel() + self.reflection.numel()

    def operator(self):
        d = _phase(self.theta)
        v = torch.complex(self.reflection[:, 0], self.reflection[:, 1])
        return d, v, 2.0 / (v.abs() ** 2).sum(-1, keepdim=True)

    @staticmethod
    def _reflect(z: Tensor, v: Tensor, c: Tensor) -> Tensor:
        # (I - c v v^*) z for row vectors z: z - c (z . conj(v)) v
        return z - (c * (z @ v.conj())).unsqueeze(-1) * v

    def apply(self, op, z: Tensor) -> Tensor:
        d, v, c = op
        z = torch.fft.fft(z * d[0], norm="ortho")
        z = self._reflect(z, v[0], c[0])
        z = z[..., self.permutation] * d[1]
        z = torch.fft.ifft(z, norm="ortho")
        z = self._reflect(z, v[1], c[1])
        return z * d[2]


def eurnn_layers(n: int, variant: str, capacity: int) -> list[list[tuple[int, int]]]:
    """The pairs (i, j) each rotation layer acts on, in the order the layers are written in
    ``W = D F^(1) ... F^(L)`` (so the last list acts first)."""
    if variant == "tunable":
        return [[(i, i + 1) for i in range(l % 2, n - 1, 2)] for l in range(capacity)]
    stages = n.bit_length() - 1
    return [[(i, i + (n >> (k + 1))) for i in range(n) if not i & (n >> (k + 1))] for k in range(stages)]


class EURNNCell(UnitaryCell):
    """EURNN (Jing et al. 2017): ``W = D F^(1) ... F^(L)``, layers of 2 x 2 rotations with
    phases; ``variant="tunable"`` with ``capacity`` L, or ``"fft"`` (log2 N butterfly layers,
    N a power of two; ``capacity`` is then ignored). See the module docstring.

    Example:
    >>> import torch
    >>> from rnnlab.cells import EURNNCell
    >>> cell = EURNNCell(3, 8)
    >>> W = cell.recurrent_matrix()                  # Givens rotations and phases: unitary
    >>> torch.allclose(W @ W.T, torch.eye(8), atol=1e-5)
    True
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        capacity: int = 2,
        variant: str = "tunable",
        backend: str = "auto",
    ):
        super().__init__(input_size, hidden_size, backend)
        n = self.units
        if variant not in ("tunable", "fft"):
            raise ValueError(f"EURNN variant must be 'tunable' or 'fft', got {variant!r}")
        if variant == "fft" and (n < 2 or n & (n - 1)):
            raise ValueError(
                f"the FFT-style EURNN needs a power of two complex units (hidden_size // 2), got "
                f"{n} from hidden_size={hidden_size}; use hidden_size = 2 * 2^k or variant='tunable'"
            )
        if variant == "tunable" and (int(capacity) < 1 or n < 2):
            raise ValueError(
                f"tunable EURNN needs capacity >= 1 and at least 2 complex units, got capacity={capacity}, "
                f"hidden_size={hidden_size}"
            )
        self.variant = variant
        layers = eurnn_layers(n, variant, int(capacity))
        self.capacity = len(layers)
        rows = [l for l, pairs in enumerate(layers) for _ in pairs]
        first = [i for pairs in layers for i, _ in pairs]
        second = [j for pairs in layers for _, j in pairs]
        partner = torch.arange(n).repeat(len(layers), 1)
        partner[rows, first], partner[rows, second] = torch.tensor(second), torch.tensor(first)
        self.register_buffer("layer_of", torch.tensor(rows, dtype=torch.long), persistent=False)
        self.register_buffer("first", torch.tensor(first, dtype=torch.long), persistent=False)
        self.register_buffer("second", torch.tensor(second, dtype=torch.long), persistent=False)
        self.register_buffer("partner", partner, persistent=False)
        self.angle = nn.Parameter(torch.empty(len(rows)).uniform_(-math.pi, math.pi))
        self.phase = nn.Parameter(torch.empty(len(rows)).uniform_(-math.pi, math.pi))
        self.omega = nn.Parameter(torch.empty(n).uniform_(-math.pi, math.pi))
        for name in ("angle", "phase", "omega"):
            self.tag_parameters(name, "unitary")

    def unitary_parameter_count(self) -> int:
        return self.angle.numel() + self.phase.numel() + self.omega.numel()

    def operator(self):
        """Per layer, coefficient vectors c1, c2 (L, N) with ``F z = c1 * z + c2 * z[partner]``
        (the element-wise form of a layer of disjoint 2 x 2 rotations)."""
        cos, sin, e = torch.cos(self.angle), torch.sin(self.angle), _phase(self.phase)
        L, n = self.capacity, self.units
        dtype = e.dtype
        one = torch.ones(L, n, dtype=dtype, device=e.device)
        zero = torch.zeros(L, n, dtype=dtype, device=e.device)
        rows, i, j = self.layer_of, self.first, self.second
        # z_i' = e cos z_i - sin z_j,  z_j' = e sin z_i + cos z_j
        c1 = one.index_put((rows, i), e * cos).index_put((rows, j), cos.to(dtype))
        c2 = zero.index_put((rows, i), -sin.to(dtype)).index_put((rows, j), e * sin)
        return c1, c2, _phase(self.omega)

    def apply(self, op, z: Tensor) -> Tensor:
        c1, c2, d = op
        for l in range(self.capacity - 1, -1, -1):
            z = c1[l] * z + c2[l] * z[..., self.partner[l]]
        return z * d

    def extra_repr(self) -> str:
        return f"variant={self.variant}, capacity={self.capacity}, units={self.units}"
