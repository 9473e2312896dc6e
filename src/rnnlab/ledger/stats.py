"""The statistical tests behind the ledger's verdicts, in plain Python (no SciPy at the core).

Every verdict that says *confirmed* or *refuted* shows one of these: a p-value or an interval.

* ``t_sf`` / ``t_ppf``: Student's t distribution (regularized incomplete beta, Lentz's continued
  fraction); ``mean_interval``: the t interval of a mean over seeds; ``welch``: Welch's
  one-sided two-sample t test.
* ``two_proportions``: one-sided two-proportion z test, for one run per model, where the only
  noise left is the test set's (accuracies over ``n`` test items, treated as independent).
* ``wilson``: an accuracy's interval over its test items; ``clopper_pearson``: the exact
  interval of a share of runs; ``newcombe``: the interval of the difference of two shares.
* ``fisher_one_sided``: Fisher's exact test on "k of n runs reached a threshold".
* ``mann_whitney``: one-sided rank test that one model's first epochs are smaller (exact
  permutation distribution for small samples, normal approximation with ties otherwise);
  a run that never reached a threshold counts as later than every run that did.
"""

from __future__ import annotations

import itertools
import math

from ..results import mean_std

#: the level of every test ("significant": p <= ALPHA; intervals are 1 - ALPHA)
ALPHA = 0.05


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbeta) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbeta) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def _bisect(f, lo: float, hi: float, target: float, increasing: bool = True) -> float:
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if (f(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (``q`` in (0, 1))."""
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    hi = 1.0
    while 1.0 - t_sf(hi, df) < q:
        hi *= 2.0
    return _bisect(lambda t: 1.0 - t_sf(t, df), 0.0, hi, q)


def _mean_var(vals: list[float]) -> tuple[float, float]:
    m, s = mean_std(vals)
    return m, s * s


MIN_SAMPLE = 2  # the fewest values per group a t interval or Welch's test takes


def mean_interval(vals: list[float], level: float = 1 - ALPHA) -> tuple[float, float] | None:
    """The two-sided t interval of the mean of ``vals`` (None below ``MIN_SAMPLE`` values)."""
    n = len(vals)
    if n < MIN_SAMPLE:
        return None
    m, v = _mean_var(vals)
    half = t_ppf(1.0 - (1.0 - level) / 2.0, n - 1) * math.sqrt(v / n)
    return m - half, m + half


def welch(a: list[float], b: list[float]) -> float | None:
    """One-sided p-value of Welch's t test for mean(a) > mean(b) (None below ``MIN_SAMPLE`` values each)."""
    if len(a) < MIN_SAMPLE or len(b) < MIN_SAMPLE:
        return None
    ma, va = _mean_var(a)
    mb, vb = _mean_var(b)
    se2 = va / len(a) + vb / len(b)
    if se2 == 0.0:  # identical values within each group: the order of the means is certain
        return 0.0 if ma > mb else 1.0
    df = se2**2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1))
    return t_sf((ma - mb) / math.sqrt(se2), df)


def two_proportions(k1: int, n1: int, k2: int, n2: int) -> float:
    """One-sided p-value of the pooled two-proportion z test for k1/n1 > k2/n2."""
    p = (k1 + k2) / (n1 + n2)
    se = math.sqrt(p * (1.0 - p) * (1.0 / n1 + 1.0 / n2))
    diff = k1 / n1 - k2 / n2
    if se == 0.0:
        return 0.0 if diff > 0 else 1.0
    return normal_sf(diff / se)


def wilson(k: int, n: int, level: float = 1 - ALPHA) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n."""
    z = math.sqrt(2.0) * _erfinv(level)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(k1: int, n1: int, k2: int, n2: int, level: float = 1 - ALPHA) -> tuple[float, float]:
    """Newcombe's hybrid score interval of the difference of two proportions k1/n1 - k2/n2
    (from the two Wilson intervals)."""
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson(k1, n1, level)
    l2, u2 = wilson(k2, n2, level)
    d = p1 - p2
    return d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


def _erfinv(y: float) -> float:
    return _bisect(math.erf, 0.0, 10.0, y)


def clopper_pearson(k: int, n: int, level: float = 1 - ALPHA) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a share of runs k/n."""
    a = (1.0 - level) / 2.0
    lo = 0.0 if k == 0 else _bisect(lambda x: betainc(k, n - k + 1, x), 0.0, 1.0, a)
    hi = 1.0 if k == n else _bisect(lambda x: betainc(k + 1, n - k, x), 0.0, 1.0, 1.0 - a)
    return lo, hi


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return math.fsum(math.comb(n, x) * p**x * (1 - p) ** (n - x) for x in range(max(k, 0), n + 1))


def fisher_one_sided(ka: int, na: int, kb: int, nb: int) -> float:
    """P(at least ``ka`` of the ``ka + kb`` successes fall in group a) when the ``na + nb`` runs'
    successes are assigned to the groups at random (hypergeometric tail: Fisher's exact test)."""
    k, n = ka + kb, na + nb
    return math.fsum(math.comb(k, x) * math.comb(n - k, na - x) for x in range(ka, min(k, na) + 1)) / math.comb(n, na)


#: above this many splits the rank test uses its normal approximation
EXACT_SPLITS = 20000


def mann_whitney(a: list[float], b: list[float]) -> float:
    """One-sided p-value that the values of ``a`` tend to be *smaller* than those of ``b``
    (Mann-Whitney U with ties counted one half; ``inf`` allowed). Exact permutation
    distribution when there are at most ``EXACT_SPLITS`` splits, else the normal approximation
    with the tie correction."""
    na, nb = len(a), len(b)
    if not na or not nb:
        return 1.0

    def u_stat(xs, ys):
        return sum(1.0 if x < y else 0.5 if x == y else 0.0 for x in xs for y in ys)

    u = u_stat(a, b)
    pooled = list(a) + list(b)
    n = na + nb
    if math.comb(n, na) <= EXACT_SPLITS:
        count, total = 0, 0
        for idx in itertools.combinations(range(n), na):
            chosen = set(idx)
            xs = [pooled[i] for i in idx]
            ys = [pooled[i] for i in range(n) if i not in chosen]
            total += 1
            if u_stat(xs, ys) >= u - 1e-9:
                count += 1
        return count / total
    ties = {}
    for v in pooled:
        ties[v] = ties.get(v, 0) + 1
    var = na * nb / 12.0 * ((n + 1) - sum(t**3 - t for t in ties.values()) / (n * (n - 1)))
    if var <= 0:
        return 1.0
    return normal_sf((u - na * nb / 2.0 - 0.5) / math.sqrt(var))


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``counted(1, "seed")`` -> ``"1 seed"``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def fmt_p(p: float) -> str:
    """A p-value as the ledger prints it."""
    return f"p = {p:.2g}" if p >= 1e-4 else "p < 1e-4"
