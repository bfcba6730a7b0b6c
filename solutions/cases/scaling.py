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

Two more judges for the calls the statement names: :func:`uses_the_global_stream_without_generator` (two
calls with ``generator=None`` in a row continue PyTorch's global stream, so they differ; a fallback to a
fresh ``torch.Generator()`` gives the same float twice) and :func:`continues_a_shared_generator` (a
generator that has already been drawn from continues where it stands: re-seeding it from
``initial_seed()`` gives the fresh generator's estimate again).

``variance_z_test`` is deterministic: the statistic and the decision are compared with the reference
(``check_close``), on estimates built to sit at a chosen z, some between the one-sided and the two-sided
critical values. The other exercises are compared with the reference per dtype; ``softmax_vjp`` also under
a memory bound that any ``(..., n, n)`` tensor breaks, for every kind of input its statement allows.

``CONTRACT`` (at the end) maps every clause of every statement to the cases that exercise it.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict

import torch

from grader.checks import Case
from solutions.cases.families import DTYPES, expanded, extreme_scores, non_contiguous, randn, tag
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


def variance_stream_cases(seed: int) -> list[Case]:
    """Two calls in a row with ``generator=None`` (the global stream), per setting."""
    del seed  # the global stream is whatever the notebook left it at; the judge needs no seed
    return [Case(args=(d_k, n), kwargs={"generator": None} if kw else {},
                 label=f"d_k={d_k}, n_samples={n}, generator=None{' given' if kw else ' by default'} ({tag_})")
            for d_k, n in ((5, 400), (64, 2000)) for kw in (False, True)
            for tag_ in ("first call", "second call")]


def variance_shared_cases(seed: int) -> list[Case]:
    """A fresh generator, and the same seed after one call has drawn from it (a generator shared by two calls)."""
    cases = []
    for i, (d_k, n) in enumerate(((3, 300), (32, 1000))):
        s = _seeds(seed, 2)[i]
        advanced = _generator(s)
        torch.randn(n, d_k, generator=advanced, dtype=torch.float64)  # what a first call would draw
        torch.randn(n, d_k, generator=advanced, dtype=torch.float64)
        cases.append(Case(args=(d_k, n, _generator(s)), label=f"d_k={d_k}, n_samples={n}, a fresh generator seeded {s}"))
        cases.append(Case(args=(d_k, n, advanced),
                          label=f"d_k={d_k}, n_samples={n}, the generator seeded {s} after a first call drew from it"))
    return cases


def uses_the_global_stream_without_generator(cases: list[Case], outputs: list) -> None:
    """Pairs of calls with ``generator=None``: both plausible estimates of ``d_k``, and different."""
    values = _estimates(cases, outputs)
    for i in range(0, len(cases), 2):
        d_k, n = cases[i].args
        for case, value in ((cases[i], values[i]), (cases[i + 1], values[i + 1])):
            se = variance_standard_error(d_k, n)
            assert abs(value - d_k) <= Z * se, (
                f"case '{case.label}': the estimate {value:.4g} is more than {Z:g} standard errors ({Z * se:.3g}) "
                f"from d_k = {d_k}")
        assert values[i] != values[i + 1], (
            f"two calls in a row with d_k={d_k}, n_samples={n} and generator=None gave the same estimate "
            f"{values[i]:.6g}: without a generator, draw from PyTorch's global random stream "
            "(torch.randn(..., generator=None)), which moves on after every draw -- not from a fresh "
            "torch.Generator() or a fixed seed")


def continues_a_shared_generator(cases: list[Case], outputs: list) -> None:
    """A generator already drawn from gives another estimate than a fresh one with the same seed."""
    values = _estimates(cases, outputs)
    for i in range(0, len(cases), 2):
        d_k, n, _ = cases[i].args
        se = variance_standard_error(d_k, n)
        for case, value in ((cases[i], values[i]), (cases[i + 1], values[i + 1])):
            assert abs(value - d_k) <= Z * se, (
                f"case '{case.label}': the estimate {value:.4g} is more than {Z:g} standard errors ({Z * se:.3g}) "
                f"from d_k = {d_k}")
        assert values[i] != values[i + 1], (
            f"case '{cases[i + 1].label}': gave the same estimate {values[i]:.6g} as a fresh generator with that "
            "seed: draw from the generator you are given, where it stands (two calls sharing one generator get "
            "two different estimates), without re-seeding it or making a new one from initial_seed()")


# ---------------------------------------------------------------------------------------------------
# variance_z_test


def _z_case(d_k: int, n: int, zs: list[float], label: str, alpha: float | None = None,
            dtype: torch.dtype = torch.float64, positional: bool = False) -> Case:
    """Estimates whose mean sits at ``z`` standard errors of the mean from ``d_k`` (``zs`` the per-estimate
    offsets in units of se; their mean, times sqrt(M), is the z of the test)."""
    se = variance_standard_error(d_k, n)
    estimates = torch.tensor([d_k + z * se for z in zs], dtype=torch.float64).to(dtype)
    if alpha is None:
        return Case(args=(estimates, d_k, n), label=label)
    if positional:
        return Case(args=(estimates, d_k, n, alpha), label=label)
    return Case(args=(estimates, d_k, n), kwargs={"alpha": alpha}, label=label)


def z_test_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    M = 50
    noise = torch.randn(M, generator=g, dtype=torch.float64)
    noise = (noise - noise.mean()).tolist()  # mean exactly 0: the z of the test is set by the shift below
    return [
        _z_case(64, 10_000, [1.3], "one estimate, d_k=64, n_samples=10000, 1.3 se above d_k"),
        _z_case(1, 100, [-2.0], "d_k=1 (fourth moment 9, not the normal 3), n_samples=100, 2 se below"),
        _z_case(4, 2, [0.7], "n_samples=2: the exact standard error, not its large-n form"),
        _z_case(16, 5, [-0.4], "n_samples=5, d_k=16, 0.4 se below"),
        _z_case(16, 200, [2.0 / math.sqrt(M) + x for x in noise],
                f"M={M} estimates whose mean is 2 standard errors of the mean above d_k"),
        _z_case(300, 30, [x - 5.5 / math.sqrt(M) for x in noise],
                f"M={M} estimates, mean 5.5 standard errors of the mean below d_k: reject"),
        _z_case(8, 1000, [5.2], "z=+5.2 > 4.89: reject at the default alpha=1e-6"),
        _z_case(8, 1000, [-5.2], "z=-5.2: a two-sided test rejects below as well"),
        _z_case(8, 1000, [4.82], "z=4.82, between the one-sided 4.75 and the two-sided 4.89 critical values"),
        _z_case(32, 500, [1.8], "alpha=0.05 as keyword, z=1.8 (one-sided 1.645 < z < two-sided 1.96)", alpha=0.05),
        _z_case(32, 500, [-2.1], "alpha=0.05 given positionally, z=-2.1: reject", alpha=0.05, positional=True),
        _z_case(2, 50, [0.0, 1.0, -0.5, 2.5], "four estimates given as float32",
                dtype=torch.float32),
        _z_case(8, 1000, [3.0], "alpha=0.01, z=3.0: reject", alpha=0.01),
        _z_case(8, 1000, [8.4], "alpha=1e-17 (1 - alpha/2 rounds to 1.0), z=8.4 below the critical 8.57: keep",
                alpha=1e-17),
        _z_case(8, 1000, [-8.8], "alpha=1e-17, z=-8.8 beyond the critical 8.57: reject", alpha=1e-17),
        _z_case(16, 200, [9.6], "alpha=1e-20 given positionally, z=9.6 beyond the critical 9.34: reject",
                alpha=1e-20, positional=True),
        _z_case(64, 10_000, [-21.0], "alpha=1e-100, z=-21.0 below the critical 21.31: keep", alpha=1e-100),
        _z_case(64, 10_000, [36.5], "alpha=1e-300, z=36.5 below the critical 37.07: keep", alpha=1e-300),
        _z_case(64, 10_000, [37.6], "alpha=1e-300, z=37.6 beyond the critical 37.07: reject", alpha=1e-300),
        Case(args=(torch.empty(0, dtype=torch.float64), 4, 100), raises="ValueError",
             label="no estimate (ValueError)"),
        Case(args=(torch.tensor([4.0], dtype=torch.float64), 4, 1), raises="ValueError",
             label="n_samples=1 (ValueError)"),
        Case(args=(torch.tensor([1.0], dtype=torch.float64), 0, 100), raises="ValueError", label="d_k=0 (ValueError)"),
        Case(args=(torch.tensor([4.0], dtype=torch.float64), 4, 100), kwargs={"alpha": 0.0}, raises="ValueError",
             label="alpha=0 (ValueError)"),
        Case(args=(torch.tensor([4.0], dtype=torch.float64), 4, 100), kwargs={"alpha": 1.0}, raises="ValueError",
             label="alpha=1 (ValueError)"),
    ]


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


@functools.lru_cache(maxsize=16)
def _reference_sample(d_k: int, n: int, size: int) -> torch.Tensor:
    """``size`` independent estimates drawn by the judge itself, vectorised, from its own stream (the
    same for every submission: drawn once per grading worker; callers only read it)."""
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


def _probs(g: torch.Generator, *shape: int, scale: float = 1.0, dim: int = -1, dtype: str = "float32") -> torch.Tensor:
    """A softmax computed in float64 and rounded to ``dtype`` (the same distribution in every dtype)."""
    return torch.softmax(randn(g, *shape, scale=scale, dtype=torch.float64), dim=dim).to(DTYPES[dtype])


def entropy_dtype_cases(seed: int, dtype: str) -> list[Case]:
    """The same distributions in one dtype: a batch, another dim, exact zeros, one-hot rows."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]
    return [
        Case(args=(_probs(g, 4, 7, scale=2.0, dtype=dtype),), label=tag("4 rows of 7", dtype)),
        Case(args=(_probs(g, 2, 6, 3, dim=1, dtype=dtype),), kwargs={"dim": 1},
             label=tag("shape (2, 6, 3) along dim=1", dtype)),
        Case(args=(_with_zeros(g, 4, 6).to(dt),), label=tag("rows with exact zeros, the last one-hot", dtype)),
    ]


def entropy_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    one_hot = torch.eye(4)[torch.tensor([2, 0, 3])]  # (3, 4)
    many = 1_000_000
    near_uniform = torch.softmax(extreme_scores(g, 2, many, kind="near_uniform", dtype=torch.float64), -1)
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
        Case(args=(near_uniform.float(),),
             label=f"near-uniform rows over {many} outcomes (p ~ 1e-6: log(p + eps) is visibly off)"),
        Case(args=(non_contiguous(_softmax(g, 3, 5)),), label="a non-contiguous p (a strided view)"),
        Case(args=(expanded(_softmax(g, 5), 3),), label="an expanded p (stride 0 along the rows)"),
    ]


# ---------------------------------------------------------------------------------------------------
# softmax_jacobian


def jacobian_dtype_cases(seed: int, dtype: str) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case(args=(_probs(g, 3, 5, scale=2.0, dtype=dtype),), label=tag("a batch of 3 rows of 5", dtype)),
        Case(args=(_probs(g, 6, dtype=dtype),), label=tag("one distribution of 6", dtype)),
    ]


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
        Case(args=(_softmax(g, 2, 5, 3, dim=1).transpose(1, 2),),
             label="a non-contiguous p (a transposed view, shape (2, 3, 5))"),
    ]


# ---------------------------------------------------------------------------------------------------
# softmax_vjp


def _vjp_case(g: torch.Generator, shape: tuple[int, ...], dim: int, dtype: str, label: str,
              memory: bool = False, p_scale: float = 2.0) -> Case:
    p = _probs(g, *shape, scale=p_scale, dim=dim, dtype=dtype)
    grad = randn(g, *shape, dtype=dtype)
    kwargs = {} if dim == -1 else {"dim": dim}
    if not memory:
        return Case(args=(p, grad), kwargs=kwargs, label=tag(label, dtype))
    n, size = shape[dim], p.numel()
    # a few p-sized temporaries (an upcast copy, p * g, the result) are fine; one (n, n) block is not
    limit, live = size + 4096, 6 * size + 8192
    assert n * n > 4 * limit, "one (n, n) Jacobian must break the bound"
    return Case(args=(p, grad), kwargs=kwargs, label=tag(label, dtype), max_numel=limit, max_live=live)


def vjp_cases(seed: int, dtype: str = "float32") -> list[Case]:
    """Values in one dtype; in float32 also the edge cases, layouts and errors."""
    g = torch.Generator().manual_seed(seed)
    cases = [
        _vjp_case(g, (5,), -1, dtype, "one distribution over 5 outcomes"),
        _vjp_case(g, (4, 7), -1, dtype, "a batch of 4 rows of 7, default dim=-1"),
        _vjp_case(g, (2, 3, 6), -1, dtype, "two leading batch dims (2, 3), n=6"),
        _vjp_case(g, (6, 4), 0, dtype, "shape (6, 4), distributions along dim=0"),
        _vjp_case(g, (2, 5, 3), 1, dtype, "shape (2, 5, 3) along dim=1"),
        _vjp_case(g, (2, 4, 3), -2, dtype, "shape (2, 4, 3) along dim=-2"),
    ]
    if dtype != "float32":
        return cases
    one_hot = torch.eye(5)[torch.tensor([1, 4, 0])]
    zeros = _with_zeros(g, 3, 6)
    p = _probs(g, 3, 8)
    grad = randn(g, 8)
    cases += [
        Case(args=(one_hot, randn(g, 3, 5)), label="one-hot rows: no gradient gets through (exactly 0)"),
        Case(args=(zeros, randn(g, 3, 6)), label="rows with exact zeros (masked keys get no gradient)"),
        Case(args=(_probs(g, 4, 1), randn(g, 4, 1)), label="n=1: softmax is constant, the gradient 0"),
        Case(args=(torch.full((2, 6), 1 / 6), torch.ones(2, 6)),
             label="a constant upstream gradient: adding c to every score changes nothing, so 0"),
        Case(args=(non_contiguous(p), non_contiguous(randn(g, 3, 8))), label="non-contiguous p and grad_p"),
        Case(args=(p, expanded(grad, 3)), label="an expanded grad_p (stride 0 along the rows)"),
        Case(args=(p, randn(g, 3, 7)), raises="ValueError", label="grad_p of another shape (ValueError)"),
    ]
    return cases


def vjp_memory_cases(seed: int, dtype: str = "float32") -> list[Case]:
    """Long distributions under a bound of about one input's size: any (n, n) block breaks it, for every
    kind of input the statement allows (1-D, batched, leading dims, another dim)."""
    g = torch.Generator().manual_seed(seed)
    return [
        _vjp_case(g, (4096,), -1, dtype, "memory: one distribution over 4096 outcomes", memory=True),
        _vjp_case(g, (4, 1024), -1, dtype, "memory: 4 rows of 1024", memory=True),
        _vjp_case(g, (2, 2, 512), -1, dtype, "memory: leading dims (2, 2), n=512", memory=True),
        _vjp_case(g, (1024, 3), 0, dtype, "memory: n=1024 along dim=0", memory=True),
        _vjp_case(g, (2, 512, 3), 1, dtype, "memory: n=512 along dim=1", memory=True),
    ]


# ---------------------------------------------------------------------------------------------------
# the contract: every clause of every statement -> the hidden cases that exercise it


def _dtype_labels(label: str) -> list[str]:
    return [tag(label, d) for d in DTYPES]


CONTRACT = {
    "dot_product_variance": {
        "returns a Python float (not a tensor), never negative": ["d_k=1, n_samples=50, seed 11000034 (first call)"],
        "the same generator seed gives exactly the same float": [
            "d_k=7, n_samples=200, seed 11000055 (same seed again)", "d_k=1, n_samples=50, seed 11000034 (same seed again)"],
        "different seeds give different floats (not d_k itself)": [
            "d_k=64, n_samples=1000, seed 11000083 (another seed)"],
        "n_samples defaults to 10000": ["d_k=8, default n_samples (10000), seed 11000118 (first call)"],
        "generator=None (default or given) draws from PyTorch's global stream, which moves on":
            ["d_k=5, n_samples=400, generator=None by default (second call)",
             "d_k=64, n_samples=2000, generator=None given (second call)"],
        "a generator already drawn from is used where it stands (two calls sharing one generator)":
            ["d_k=3, n_samples=300, the generator seeded 18000055 after a first call drew from it",
             "d_k=32, n_samples=1000, the generator seeded 18000062 after a first call drew from it"],
        "unbiased: divisor n_samples - 1 (the mean over seeds is d_k)": [
            "d_k=32, n_samples=2, seed 12000037", "d_k=256, n_samples=20, seed 13000040"],
        "q, k standard normal, n_samples independent pairs (the distribution at n_samples=2)": [
            "d_k=32, n_samples=2, seed 12000037"],
        "as noisy as the standard error says (all n_samples pairs used)": [
            "d_k=1, n_samples=100, seed 14000043", "d_k=16, n_samples=100, seed 15000046"],
        "raises ValueError for d_k < 1 or n_samples < 2": [
            "n_samples=1: one dot product has no sample variance (ValueError)", "d_k=0 (ValueError)"],
        "raises TypeError when generator is neither None nor a torch.Generator":
            "not gradable: torch.randn itself raises TypeError for such a generator, so every answer passes",
    },
    "variance_z_test": {
        "z = (mean of the M estimates - d_k) / (se / sqrt(M)), a Python float": [
            "one estimate, d_k=64, n_samples=10000, 1.3 se above d_k",
            "M=50 estimates whose mean is 2 standard errors of the mean above d_k",
            "M=50 estimates, mean 5.5 standard errors of the mean below d_k: reject"],
        "se is the exact standard error of the chapter, fourth moment 3 d^2 + 6 d (not a normal's 3 d^2)": [
            "d_k=1 (fourth moment 9, not the normal 3), n_samples=100, 2 se below"],
        "se is exact at small n_samples, not the large-n approximation": [
            "n_samples=2: the exact standard error, not its large-n form", "n_samples=5, d_k=16, 0.4 se below"],
        "two-sided: reject when |z| > Phi^-1(1 - alpha/2), also for z < 0": [
            "z=+5.2 > 4.89: reject at the default alpha=1e-6", "z=-5.2: a two-sided test rejects below as well",
            "z=4.82, between the one-sided 4.75 and the two-sided 4.89 critical values",
            "alpha=0.05 as keyword, z=1.8 (one-sided 1.645 < z < two-sided 1.96)"],
        "any alpha in (0, 1), however small (where 1 - alpha/2 rounds to 1.0)": [
            "alpha=1e-17 (1 - alpha/2 rounds to 1.0), z=8.4 below the critical 8.57: keep",
            "alpha=1e-17, z=-8.8 beyond the critical 8.57: reject",
            "alpha=1e-20 given positionally, z=9.6 beyond the critical 9.34: reject",
            "alpha=1e-100, z=-21.0 below the critical 21.31: keep",
            "alpha=1e-300, z=36.5 below the critical 37.07: keep",
            "alpha=1e-300, z=37.6 beyond the critical 37.07: reject"],
        "the normal approximation's calibration (when the real level is alpha)":
            "not gradable: it is a property of the test, stated for the student; the function's result is z and "
            "the decision at the given alpha",
        "alpha is a parameter (positional or keyword), default 1e-6": [
            "alpha=0.05 given positionally, z=-2.1: reject", "alpha=0.01, z=3.0: reject",
            "z=4.82, between the one-sided 4.75 and the two-sided 4.89 critical values"],
        "reject is a Python bool": ["z=+5.2 > 4.89: reject at the default alpha=1e-6"],
        "estimates may be float32 (computed in float64)": ["four estimates given as float32"],
        "raises ValueError for no estimate, d_k < 1, n_samples < 2, alpha outside (0, 1)": [
            "no estimate (ValueError)", "d_k=0 (ValueError)", "n_samples=1 (ValueError)", "alpha=0 (ValueError)",
            "alpha=1 (ValueError)"],
    },
    "softmax_entropy": {
        "H = -sum p log p in nats along dim, dim removed": [
            "4 rows of 7, default dim=-1", "a 1-D distribution over 5 outcomes: the entropy is a 0-d tensor"],
        "any dim (0, 1, -2)": ["shape (2, 3, 6), distributions along dim=1", "shape (5, 4), distributions along dim=0",
                              "shape (2, 4, 3), distributions along dim=-2"],
        "0 log 0 = 0: exact zeros and one-hot rows give no NaN": [
            "one-hot rows (entropy 0, zeros in every row)", "rows with exact zeros (masked entries), the last one-hot",
            "saturated float32 rows: logits of size ~40, many probabilities underflow to 0"],
        "exact 0 log 0, not log(p + eps), even over many near-uniform outcomes": [
            "near-uniform rows over 1000000 outcomes (p ~ 1e-6: log(p + eps) is visibly off)"],
        "uniform over n gives log n; n=1 gives 0": ["uniform rows over 8 outcomes (entropy log 8)",
                                                 "a single outcome per row, shape (3, 1) (entropy 0)"],
        "keeps p's dtype: float16, bfloat16, float32, float64": _dtype_labels("4 rows of 7"),
        "exact zeros in half precision": _dtype_labels("rows with exact zeros, the last one-hot"),
        "accepts non-contiguous and expanded p": ["a non-contiguous p (a strided view)",
                                                  "an expanded p (stride 0 along the rows)"],
        "returns a new tensor, p unchanged": ["4 rows of 7, default dim=-1"],
    },
    "softmax_jacobian": {
        "J[..., i, j] = p_i (delta_ij - p_j), shape (..., n, n)": [
            "one distribution, shape (4,) -> (4, 4)", "a batch of 3 rows of 5 -> (3, 5, 5)"],
        "any number of leading batch dims": ["two batch dims (2, 3), n=4 -> (2, 3, 4, 4)"],
        "one-hot rows give 0; n=1 gives 0": ["one-hot rows: the Jacobian is 0",
                                            "n=1 (softmax is constant 1, the Jacobian 0), shape (3, 1)"],
        "rows with exact zeros": ["rows with exact zeros (masked entries)"],
        "keeps p's dtype: float16, bfloat16, float32, float64": _dtype_labels("a batch of 3 rows of 5"),
        "accepts a non-contiguous p": ["a non-contiguous p (a transposed view, shape (2, 3, 5))"],
    },
    "softmax_vjp": {
        "returns p * (grad_p - <p, grad_p>), <.,.> along dim, p's shape": [
            "one distribution over 5 outcomes", "a batch of 4 rows of 7, default dim=-1"],
        "any number of leading batch dims": ["two leading batch dims (2, 3), n=6"],
        "any dim (0, 1, -2)": ["shape (6, 4), distributions along dim=0", "shape (2, 5, 3) along dim=1",
                              "shape (2, 4, 3) along dim=-2"],
        "keeps p's dtype: float16, bfloat16, float32, float64": _dtype_labels("a batch of 4 rows of 7, default dim=-1"),
        "one-hot rows, exact zeros, n=1, constant gradients": [
            "one-hot rows: no gradient gets through (exactly 0)", "rows with exact zeros (masked keys get no gradient)",
            "n=1: softmax is constant, the gradient 0",
            "a constant upstream gradient: adding c to every score changes nothing, so 0"],
        "accepts non-contiguous and expanded inputs": ["non-contiguous p and grad_p",
                                                       "an expanded grad_p (stride 0 along the rows)"],
        "never forms an (n, n) Jacobian: O(size of p) memory, for 1-D, batched, leading dims, any dim, every dtype": [
            "memory", *[tag(label, d) for d in DTYPES for label in (
                "memory: one distribution over 4096 outcomes", "memory: 4 rows of 1024",
                "memory: leading dims (2, 2), n=512", "memory: n=1024 along dim=0", "memory: n=512 along dim=1")]],
        "no autograd through a softmax (its backward kernels are banned)": [
            "ban:aten._softmax_backward_data", "ban:aten._log_softmax_backward_data"],
        "raises ValueError when grad_p's shape differs from p's": ["grad_p of another shape (ValueError)"],
        "returns a new tensor, inputs unchanged": ["one distribution over 5 outcomes"],
        "grad_p in another dtype than p": "not gradable: the statement gives both one dtype (mixed dtypes are "
                                          "not graded: type promotion would pick the result's)",
    },
}
