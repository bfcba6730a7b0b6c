"""Hidden-test cases and property judges for chapter 3 (why sqrt(d_k)).

``dot_product_variance`` returns a random number, so it is graded by properties of its sampling
distribution rather than by equality with the reference (a correct answer may draw ``q`` and ``k`` in
another order and get another, equally valid, estimate). Each case passes its own freshly seeded
``torch.Generator``; the judges read the seed back with ``initial_seed()``.

Four judges, each with a false-failure probability (a correct answer failing) at most 1e-6:

- :func:`is_reproducible_and_seed_dependent`: the same seed gives exactly the same float, different
  seeds give different floats. Catches a hard-coded ``d_k``, the global random stream, a fixed seed.
- :func:`estimates_are_unbiased`: over ``M`` seeds the mean estimate is within ``Z = 6`` standard
  errors of ``d_k``, where one estimate has the exact standard deviation ``se`` of
  :func:`solutions.scaling.variance_standard_error` and the mean of ``M`` has ``se / sqrt(M)``. At
  ``n_samples = 2`` the biased estimator (divisor ``n``) averages ``d_k / 2``, 10 or more standard
  errors away. For large ``d_k`` the dot product is nearly normal and the mean of ``M`` estimates at
  ``n = 2`` is ``d_k chi^2_M / M``: ``P(> 6 sd) = 1.4e-8`` and ``P(< -6 sd) = 2e-11`` for ``M = 1000``;
  in simulation (400 repetitions of each configuration of the notebook) ``|z|`` never exceeded 3.5.
- :func:`estimates_follow_the_sampling_distribution`: unbiased as above, and a two-sample
  Kolmogorov-Smirnov test (level 1e-6) against estimates the judge draws itself. At ``n_samples = 2``
  an estimate is ``(x_1 - x_2)^2 / 2``, a very skewed distribution; an estimate faked as ``d_k`` plus
  normal noise of exactly the right standard error passes the mean and spread tests but not this one.
- :func:`estimates_spread_like_the_standard_error`: also the ratio ``R`` of the estimates' sample
  variance to ``se^2`` must lie in ``[0.5, 2]``. At ``n_samples = 100`` and ``M = 300``, ``R`` has mean 1
  and standard deviation about 0.105 (simulated: 0.13 at ``M = 200`` for ``d_k = 1``, 0.10 for
  ``d_k = 16``); a scaled ``chi^2`` with that spread (about 180 degrees of freedom) gives
  ``P(R < 0.5) = 2e-9`` and ``P(R > 2) < 1e-13``. Catches ``d_k`` plus tiny noise (``R`` near 0), an
  estimate from other than ``n_samples`` pairs, and at ``d_k = 1`` even a normal-looking fake with the
  large-``n`` standard error: a dot product of width 1 is far from normal (fourth moment 9, not 3), and
  such a fake has ``R`` near 0.25.

The other two exercises are deterministic and compared with the reference (``check_close``).
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch

from grader.checks import Case
from solutions.scaling import variance_standard_error

#: Standard errors a mean estimate may stray from d_k (two-sided normal tail 2e-9).
Z = 6.0
#: Bounds of (sample variance of the estimates) / se^2, see the module docstring.
SPREAD_BOUNDS = (0.5, 2.0)
#: The distribution test: significance level, size and seed of the judge's own sample.
KS_ALPHA, REFERENCE_SIZE, REFERENCE_SEED = 1e-6, 20_000, 20_240_601


def _generator(s: int) -> torch.Generator:
    return torch.Generator().manual_seed(s)


def _seeds(seed: int, count: int) -> list[int]:
    """``count`` distinct seeds derived from ``seed`` (distinct ``seed`` give disjoint ranges)."""
    return [1_000_003 * seed + 7 * i + 1 for i in range(count)]


# ---------------------------------------------------------------------------------------------------
# dot_product_variance


def variance_seed_cases(seed: int) -> list[Case]:
    """Groups of four calls per ``(d_k, n_samples)``: seeds ``a, a, b, c``; and two invalid calls."""
    seeds = iter(_seeds(seed, 64))
    cases = []
    for d_k, n in ((1, 50), (7, 200), (64, 1000), (300, 30), (8, None)):
        a, b, c = next(seeds), next(seeds), next(seeds)
        for tag, s in (("first call", a), ("same seed again", a), ("another seed", b), ("a third seed", c)):
            if n is None:
                cases.append(Case(args=(d_k,), kwargs={"generator": _generator(s)},
                                  label=f"d_k={d_k}, default n_samples (10000), seed {s} ({tag})"))
            else:
                cases.append(Case(args=(d_k, n, _generator(s)), label=f"d_k={d_k}, n_samples={n}, seed {s} ({tag})"))
    s = next(seeds)
    cases.append(Case(args=(4, 1, _generator(s)), raises="ValueError",
                      label="n_samples=1: one dot product has no sample variance (ValueError)"))
    cases.append(Case(args=(0, 100, _generator(s)), raises="ValueError", label="d_k=0 (ValueError)"))
    return cases


def variance_sample_cases(seed: int, d_k: int, n_samples: int, count: int) -> list[Case]:
    """``count`` calls with the same ``d_k`` and ``n_samples`` and distinct seeds."""
    return [Case(args=(d_k, n_samples, _generator(s)), label=f"d_k={d_k}, n_samples={n_samples}, seed {s}")
            for s in _seeds(seed, count)]


def _setting(case: Case) -> tuple[int, int, int]:
    """``(d_k, n_samples, seed)`` of a case, with the default ``n_samples`` filled in."""
    d_k = case.args[0]
    n = case.args[1] if len(case.args) > 1 else case.kwargs.get("n_samples", 10000)
    g = case.args[2] if len(case.args) > 2 else case.kwargs["generator"]
    return d_k, n, g.initial_seed()


def _estimates(cases: list[Case], outputs: list) -> list[float]:
    """The outputs as floats, after checking that each is a finite, non-negative Python float."""
    values = []
    for case, out in zip(cases, outputs):
        where = f"case '{case.label}'"
        if isinstance(out, torch.Tensor):
            raise AssertionError(f"{where}: returned a tensor; return a Python float (use .item() or float(...))")
        assert type(out) is float, f"{where}: should return a Python float, got {type(out).__name__}"
        assert math.isfinite(out), f"{where}: returned {out}"
        assert out >= 0, f"{where}: returned {out:.4g}, but a variance is never negative"
        values.append(out)
    return values


def is_reproducible_and_seed_dependent(cases: list[Case], outputs: list) -> None:
    """Equal seeds give equal floats; different seeds give different floats (per ``(d_k, n)``)."""
    values = _estimates(cases, outputs)
    groups: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
    for case, value in zip(cases, values):
        d_k, n, s = _setting(case)
        groups[(d_k, n)].append((s, value))
    for (d_k, n), calls in groups.items():
        for i, (s1, v1) in enumerate(calls):
            for s2, v2 in calls[i + 1:]:
                if s1 == s2:
                    assert v1 == v2, (
                        f"two calls with d_k={d_k}, n_samples={n} and the same seed {s1} gave {v1:.6g} and "
                        f"{v2:.6g}: draw q and k with the `generator` argument (torch.randn(..., "
                        "generator=generator)), not from the global random stream, so that a seed "
                        "reproduces its estimate")
                else:
                    assert v1 != v2, (
                        f"d_k={d_k}, n_samples={n}: seeds {s1} and {s2} gave the same estimate {v1:.6g}; "
                        "the estimate must come from q and k drawn with `generator`, so different seeds "
                        "give (slightly) different estimates -- do not return d_k itself")


def _by_setting(cases: list[Case], outputs: list) -> dict[tuple[int, int], list[float]]:
    values = _estimates(cases, outputs)
    groups: dict[tuple[int, int], list[float]] = defaultdict(list)
    for case, value in zip(cases, values):
        d_k, n, _ = _setting(case)
        groups[(d_k, n)].append(value)
    return groups


def _check_mean(d_k: int, n: int, values: list[float]) -> None:
    m = len(values)
    se = variance_standard_error(d_k, n)
    mean = math.fsum(values) / m
    bound = Z * se / math.sqrt(m)
    if abs(mean - d_k) <= bound:
        return
    hint = ""
    if abs(mean - d_k * (n - 1) / n) <= bound:
        hint = (f" That is d_k (n-1)/n = {d_k * (n - 1) / n:.4g}, the average of the *biased* variance: "
                "divide by n_samples - 1, not n_samples (torch.var's default, correction=1).")
    elif abs(mean) <= bound:
        hint = " That is about 0, the mean of q . k: return the variance of the dot products, not their mean."
    elif abs(mean - math.sqrt(d_k)) <= bound:
        hint = " That is about sqrt(d_k): return the variance, not the standard deviation."
    raise AssertionError(
        f"over {m} seeds with d_k={d_k} and n_samples={n} your estimates average {mean:.4g}, but "
        f"Var(q . k) = d_k = {d_k}. One estimate has standard error {se:.3g}, so the average of {m} "
        f"independent estimates lies within {Z:g} x {se:.3g} / sqrt({m}) = {bound:.3g} of d_k except with "
        f"probability below 1e-8.{hint} (q and k must be standard normal, torch.randn, and independent.)")


def estimates_are_unbiased(cases: list[Case], outputs: list) -> None:
    """The average estimate over many seeds is ``d_k`` within ``Z`` standard errors of the average."""
    for (d_k, n), values in _by_setting(cases, outputs).items():
        if len(values) < 50:
            raise ValueError("estimates_are_unbiased needs at least 50 seeds per setting")
        _check_mean(d_k, n, values)


def _reference_sample(d_k: int, n: int, size: int) -> torch.Tensor:
    """``size`` independent estimates drawn by the judge itself, vectorised, from its own stream."""
    g = torch.Generator().manual_seed(REFERENCE_SEED)
    q = torch.randn(size, n, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(size, n, d_k, generator=g, dtype=torch.float64)
    return (q * k).sum(dim=-1).var(dim=-1, correction=1)  # (size,)


def _ks_statistic(a: torch.Tensor, b: torch.Tensor) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = a.sort().values, b.sort().values
    points = torch.cat([a, b])
    cdf_a = torch.searchsorted(a, points, right=True).double() / len(a)
    cdf_b = torch.searchsorted(b, points, right=True).double() / len(b)
    return float((cdf_a - cdf_b).abs().max())


def estimates_follow_the_sampling_distribution(cases: list[Case], outputs: list) -> None:
    """Unbiased, and distributed like a true sample variance of ``n`` dot products (two-sample KS test).

    The judge draws :data:`REFERENCE_SIZE` estimates of its own and compares the two empirical
    distributions: a correct answer exceeds the critical value ``c sqrt(1/M + 1/R)`` with
    ``c = sqrt(ln(2 / alpha) / 2)`` with probability below ``alpha = 1e-6`` (the asymptotic
    Kolmogorov bound ``2 exp(-2 c^2)``). At ``n = 2`` an estimate is ``(x_1 - x_2)^2 / 2``, very skewed;
    an estimate faked as ``d_k`` plus normal noise of the right size has the right mean and spread but
    not that shape.
    """
    for (d_k, n), values in _by_setting(cases, outputs).items():
        m = len(values)
        if m < 500 or n * d_k > 256:
            raise ValueError("the distribution test needs >= 500 seeds and n_samples * d_k <= 256")
        _check_mean(d_k, n, values)
        sample = torch.tensor(values, dtype=torch.float64)
        reference = _reference_sample(d_k, n, REFERENCE_SIZE)
        D = _ks_statistic(sample, reference)
        critical = math.sqrt(math.log(2 / KS_ALPHA) / 2) * math.sqrt(1 / m + 1 / REFERENCE_SIZE)
        assert D <= critical, (
            f"with d_k={d_k} and n_samples={n} the distribution of your estimates over {m} seeds does not "
            f"look like that of a sample variance of {n} dot products: the largest gap between the two "
            f"cumulative distributions is {D:.3f}, above the {critical:.3f} that a correct estimator exceeds "
            f"with probability below {KS_ALPHA:g}. Compute the estimate from n_samples pairs q, k ~ N(0, I) "
            "drawn with `generator`.")


def estimates_spread_like_the_standard_error(cases: list[Case], outputs: list) -> None:
    """Unbiased, and the estimates vary across seeds as much as the standard error says."""
    for (d_k, n), values in _by_setting(cases, outputs).items():
        m = len(values)
        if n < 100 or m < 300:
            raise ValueError("the spread bounds are justified for n_samples >= 100 and >= 300 seeds")
        _check_mean(d_k, n, values)
        se = variance_standard_error(d_k, n)
        mean = math.fsum(values) / m
        spread = math.fsum((v - mean) ** 2 for v in values) / (m - 1)
        ratio = spread / se ** 2
        low, high = SPREAD_BOUNDS
        assert low <= ratio, (
            f"with d_k={d_k} and n_samples={n} your estimates vary across {m} seeds with standard deviation "
            f"{math.sqrt(spread):.3g}, but a sample variance of {n} dot products varies with standard "
            f"deviation {se:.3g} (its standard error). An estimate that varies less than that is not "
            f"computed from n_samples random pairs: draw n_samples pairs q, k ~ N(0, I) with `generator` "
            "and return the sample variance of their dot products.")
        assert ratio <= high, (
            f"with d_k={d_k} and n_samples={n} your estimates vary across {m} seeds with standard deviation "
            f"{math.sqrt(spread):.3g}, but a sample variance of {n} dot products has standard error "
            f"{se:.3g}: use all n_samples pairs, each pair two independent N(0, I) vectors.")


# ---------------------------------------------------------------------------------------------------
# softmax_entropy


def _softmax(g: torch.Generator, *shape: int, scale: float = 1.0, dim: int = -1,
             dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.softmax(torch.randn(*shape, generator=g, dtype=dtype) * scale, dim=dim)


def _with_zeros(g: torch.Generator, rows: int, n: int) -> torch.Tensor:
    """Rows of a softmax in which some entries are exactly 0 (masked keys), one row one-hot."""
    logits = torch.randn(rows, n, generator=g)
    keep = torch.rand(rows, n, generator=g) < 0.5
    keep[:, 0] = True
    keep[-1] = False
    keep[-1, n // 2] = True
    return torch.softmax(logits.masked_fill(~keep, float("-inf")), dim=-1)


def entropy_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    one_hot = torch.eye(4)[torch.tensor([2, 0, 3])]  # (3, 4)
    return [
        Case(args=(_softmax(g, 1, 5),), label="one distribution over 5 outcomes, shape (1, 5)"),
        Case(args=(_softmax(g, 5),), label="a 1-D distribution over 5 outcomes: the entropy is a 0-d tensor"),
        Case(args=(_softmax(g, 4, 7, scale=3.0),), label="4 rows of 7, default dim=-1"),
        Case(args=(_softmax(g, 2, 3, 6, dim=1),), kwargs={"dim": 1},
             label="shape (2, 3, 6), distributions along dim=1"),
        Case(args=(_softmax(g, 5, 4, dim=0),), kwargs={"dim": 0}, label="shape (5, 4), distributions along dim=0"),
        Case(args=(_softmax(g, 2, 4, 3, dim=-2),), kwargs={"dim": -2},
             label="shape (2, 4, 3), distributions along dim=-2"),
        Case(args=(one_hot,), label="one-hot rows (entropy 0, zeros in every row)"),
        Case(args=(_with_zeros(g, 4, 6),), label="rows with exact zeros (masked entries), the last one-hot"),
        Case(args=(torch.full((2, 8), 1 / 8),), label="uniform rows over 8 outcomes (entropy log 8)"),
        Case(args=(_softmax(g, 3, 1),), label="a single outcome per row, shape (3, 1) (entropy 0)"),
        Case(args=(_softmax(g, 3, 9, scale=40.0),),
             label="saturated float32 rows: logits of size ~40, many probabilities underflow to 0"),
        Case(args=(_softmax(g, 2, 3, 5, scale=2.0, dtype=torch.float64),), label="float64 (2, 3, 5)"),
    ]


# ---------------------------------------------------------------------------------------------------
# softmax_jacobian


def jacobian_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case(args=(_softmax(g, 4),), label="one distribution, shape (4,) -> (4, 4)"),
        Case(args=(_softmax(g, 3, 5, scale=2.0),), label="a batch of 3 rows of 5 -> (3, 5, 5)"),
        Case(args=(_softmax(g, 2, 3, 4),), label="two batch dims (2, 3), n=4 -> (2, 3, 4, 4)"),
        Case(args=(torch.eye(4)[torch.tensor([1, 3])],), label="one-hot rows: the Jacobian is 0"),
        Case(args=(torch.full((1, 6), 1 / 6),), label="a uniform row over 6 outcomes"),
        Case(args=(_softmax(g, 3, 1),), label="n=1 (softmax is constant 1, the Jacobian 0), shape (3, 1)"),
        Case(args=(_with_zeros(g, 3, 7),), label="rows with exact zeros (masked entries)"),
        Case(args=(_softmax(g, 2, 7, scale=3.0, dtype=torch.float64),), label="float64, shape (2, 7)"),
    ]
