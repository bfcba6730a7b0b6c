"""Chapter 3 (why sqrt(d_k)): the reference against independent oracles, and the judges of the hidden checks.

Oracles: brute-force simulation for the variance and its standard error, the exact fourth moment of a dot
product, ``torch.distributions.Categorical.entropy`` for the entropy, autograd (``torch.func.jacrev``) for
the softmax Jacobian. The judges must accept the reference (also with seeds other than the notebook's) and
reject each kind of wrong estimator with a message that names the mistake.
"""

from __future__ import annotations

import math

import pytest
import torch

import solutions.cases.scaling as cases_mod
import solutions.scaling as ref
from grader.checks import Case, Check, CheckFailed, evaluate, from_plain, run_local
from solutions.cases.families import DTYPES, TOLERANCES

from .casecheck import assert_generator_is_deterministic_and_labelled

# ---------------------------------------------------------------------------------------------------
# dot_product_variance and its standard error


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_dot_product_variance_returns_a_float_reproducible_from_its_generator():
    a = ref.dot_product_variance(12, 500, gen(3))
    assert type(a) is float
    assert a == ref.dot_product_variance(12, 500, gen(3))
    assert a != ref.dot_product_variance(12, 500, gen(4))
    g = gen(3)
    assert ref.dot_product_variance(12, 500, g) == a and ref.dot_product_variance(12, 500, g) != a


def test_dot_product_variance_uses_the_global_stream_without_a_generator():
    torch.manual_seed(5)
    a = ref.dot_product_variance(4, 100)
    torch.manual_seed(5)
    assert ref.dot_product_variance(4, 100) == a
    assert ref.dot_product_variance(4, 100) != a


def test_dot_product_variance_equals_the_unbiased_variance_of_the_drawn_dot_products():
    g = torch.Generator().manual_seed(9)
    q = torch.randn(50, 6, generator=g, dtype=torch.float64)
    k = torch.randn(50, 6, generator=g, dtype=torch.float64)
    x = [float(q[i] @ k[i]) for i in range(50)]
    mean = sum(x) / 50
    expected = sum((xi - mean) ** 2 for xi in x) / 49
    assert math.isclose(ref.dot_product_variance(6, 50, gen(9)), expected, rel_tol=1e-12)


@pytest.mark.parametrize("d_k", [1, 16, 512])
def test_dot_product_variance_is_within_six_standard_errors_of_d_k(d_k):
    n = 20_000 if d_k < 512 else 4000
    estimate = ref.dot_product_variance(d_k, n, gen(d_k))
    assert abs(estimate - d_k) < 6 * ref.variance_standard_error(d_k, n)


def test_dot_product_variance_is_unbiased_even_with_two_samples():
    estimates = torch.tensor([ref.dot_product_variance(8, 2, gen(s)) for s in range(3000)])
    se_mean = ref.variance_standard_error(8, 2) / math.sqrt(3000)
    assert abs(float(estimates.mean()) - 8) < 6 * se_mean
    assert (estimates >= 0).all()


def test_dot_product_variance_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n_samples must be >= 2"):
        ref.dot_product_variance(4, 1, gen(0))
    with pytest.raises(ValueError, match="d_k must be >= 1"):
        ref.dot_product_variance(0, 10, gen(0))
    with pytest.raises(TypeError, match="generator must be"):
        ref.dot_product_variance(4, 10, 7)


def test_fourth_moment_of_a_dot_product_is_three_d_squared_plus_six_d():
    """Exact for d = 1 (E[q^4] E[k^4] = 9); by simulation for d = 3 (45) within 3 %."""
    assert 3 * 1 + 6 * 1 == 9
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(2_000_000, 3, generator=g, dtype=torch.float64)
         * torch.randn(2_000_000, 3, generator=g, dtype=torch.float64)).sum(-1)
    assert abs(float(x.pow(4).mean()) / 45 - 1) < 0.03


@pytest.mark.parametrize("d_k, n", [(1, 2), (32, 2), (4, 10), (16, 100)])
def test_standard_error_matches_the_spread_of_simulated_estimates(d_k, n):
    g = torch.Generator().manual_seed(d_k * 1000 + n)
    R = 20_000 if n * d_k <= 64 else 4000
    q = torch.randn(R, n, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(R, n, d_k, generator=g, dtype=torch.float64)
    estimates = (q * k).sum(-1).var(dim=-1)
    assert abs(float(estimates.std()) / ref.variance_standard_error(d_k, n) - 1) < 0.08


def test_standard_error_tends_to_the_large_n_formula():
    d, n = 64, 1_000_000
    assert math.isclose(ref.variance_standard_error(d, n), math.sqrt((2 * d * d + 6 * d) / n), rel_tol=1e-5)


# ---------------------------------------------------------------------------------------------------
# softmax_entropy


@pytest.mark.parametrize("shape, dim", [((7,), -1), ((4, 6), -1), ((3, 5, 4), 1), ((5, 3), 0), ((2, 4, 3), -2)])
def test_entropy_matches_categorical_entropy(shape, dim):
    p = torch.softmax(torch.randn(*shape, dtype=torch.float64) * 3, dim=dim)
    expected = torch.distributions.Categorical(probs=p.movedim(dim, -1)).entropy()
    torch.testing.assert_close(ref.softmax_entropy(p, dim=dim), expected)


def test_entropy_of_one_hot_uniform_and_masked_rows():
    p = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.5, 0.0, 0.5, 0.0]])
    h = ref.softmax_entropy(p)
    assert not h.isnan().any()
    torch.testing.assert_close(h, torch.tensor([0.0, math.log(4), math.log(2)]))


def test_entropy_keeps_dtype_and_leaves_input_unchanged():
    p = torch.softmax(torch.randn(3, 4, dtype=torch.float64), -1)
    before = p.clone()
    assert ref.softmax_entropy(p).dtype == torch.float64
    assert torch.equal(p, before)


# ---------------------------------------------------------------------------------------------------
# softmax_jacobian


def autograd_jacobian(s: torch.Tensor) -> torch.Tensor:
    jac = torch.func.jacrev(lambda row: torch.softmax(row, dim=-1))
    flat = s.reshape(-1, s.shape[-1])
    return torch.func.vmap(jac)(flat).reshape(*s.shape, s.shape[-1])


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 6), (4, 1)])
def test_jacobian_matches_autograd(shape):
    s = torch.randn(*shape, dtype=torch.float64) * 2
    torch.testing.assert_close(ref.softmax_jacobian(torch.softmax(s, -1)), autograd_jacobian(s))


def test_jacobian_is_symmetric_psd_with_zero_row_sums_and_norm_at_most_one_half():
    p = torch.softmax(torch.randn(500, 8, dtype=torch.float64) * torch.rand(500, 1, dtype=torch.float64) * 6, -1)
    J = ref.softmax_jacobian(p)
    torch.testing.assert_close(J, J.mT)
    torch.testing.assert_close(J.sum(-1), torch.zeros(500, 8, dtype=torch.float64))
    eig = torch.linalg.eigvalsh(J)
    assert eig.min() > -1e-12 and eig.max() <= 0.5 + 1e-12
    assert eig[:, -1].max() > 0.4  # the bound is nearly reached by two-point distributions
    x = torch.nn.functional.normalize(torch.randn(500, 8, dtype=torch.float64), dim=-1)
    quadratic = (x.unsqueeze(-2) @ J @ x.unsqueeze(-1)).squeeze()
    variance_under_p = (p * x**2).sum(-1) - (p * x).sum(-1) ** 2
    torch.testing.assert_close(quadratic, variance_under_p)


def test_jacobian_of_one_hot_is_zero_and_of_uniform_is_the_centering_matrix():
    assert torch.equal(ref.softmax_jacobian(torch.eye(4)), torch.zeros(4, 4, 4))
    n = 5
    torch.testing.assert_close(ref.softmax_jacobian(torch.full((n,), 1 / n)),
                               (torch.eye(n) - torch.full((n, n), 1 / n)) / n)


def test_jacobian_rejects_a_scalar_and_leaves_input_unchanged():
    with pytest.raises(ValueError, match="at least one dimension"):
        ref.softmax_jacobian(torch.tensor(1.0))
    p = torch.softmax(torch.randn(2, 3), -1)
    before = p.clone()
    ref.softmax_jacobian(p)
    assert torch.equal(p, before)


def test_unscaled_attention_saturates_and_scaled_attention_does_not():
    """The chapter's experiment in miniature: at d_k = 1024 unscaled weights are nearly one-hot."""
    g = torch.Generator().manual_seed(0)
    d, T = 1024, 16
    q = torch.randn(128, 1, d, generator=g, dtype=torch.float64)
    K = torch.randn(128, T, d, generator=g, dtype=torch.float64)
    raw = (q * K).sum(-1)
    p_raw, p_scaled = torch.softmax(raw, -1), torch.softmax(raw / math.sqrt(d), -1)
    assert ref.softmax_entropy(p_raw).mean() < 0.3 < 1.5 < ref.softmax_entropy(p_scaled).mean()
    norm = lambda p: torch.linalg.eigvalsh(ref.softmax_jacobian(p))[..., -1].mean()  # noqa: E731
    assert norm(p_raw) < norm(p_scaled) / 3


# ---------------------------------------------------------------------------------------------------
# case generators and judges


@pytest.mark.parametrize("name, params", [
    ("variance_seed_cases", {}), ("variance_sample_cases", {"d_k": 4, "n_samples": 3, "count": 5}),
    ("entropy_cases", {}), ("jacobian_cases", {}), ("variance_stream_cases", {}), ("variance_shared_cases", {}),
    ("z_test_cases", {}), *[(name, {"dtype": d}) for d in DTYPES for name in (
        "entropy_dtype_cases", "jacobian_dtype_cases", "vjp_cases", "vjp_memory_cases")],
])
def test_case_generators_are_deterministic_labelled_and_non_empty(name, params):
    assert_generator_is_deterministic_and_labelled(getattr(cases_mod, name), 0, params)


def test_variance_cases_carry_fresh_generators_with_distinct_seeds():
    cases = cases_mod.variance_sample_cases(seed=3, d_k=2, n_samples=5, count=50)
    gens = [c.args[2] for c in cases]
    assert all(isinstance(g, torch.Generator) for g in gens)
    seeds = {g.initial_seed() for g in gens}
    assert len(seeds) == 50
    assert all(torch.equal(g.get_state(), gen(g.initial_seed()).get_state()) for g in gens)  # not drawn from yet
    other = {c.args[2].initial_seed() for c in cases_mod.variance_sample_cases(seed=4, d_k=2, n_samples=5, count=50)}
    assert not other & seeds


def test_entropy_and_jacobian_cases_are_distributions_with_zeros_batches_and_float64():
    for cases in (cases_mod.entropy_cases(0), cases_mod.jacobian_cases(0)):
        ps = [c.args[0] for c in cases]
        for c, p in zip(cases, ps):
            dim = c.kwargs.get("dim", -1)
            torch.testing.assert_close(p.double().sum(dim), torch.ones_like(p.double().sum(dim)), msg=c.label)
        assert any((p == 0).any() for p in ps) and any(p.dtype == torch.float64 for p in ps)
        assert {p.dim() for p in ps} >= {2, 3}
    assert any(c.args[0].dim() == 1 for c in cases_mod.jacobian_cases(0))  # a single vector -> (n, n)


def outputs(fn, cases: list[Case]) -> list:
    return [from_plain(o.output) for o in evaluate(fn, cases)]


def unbiased_cases() -> list[Case]:
    return cases_mod.variance_sample_cases(seed=12, d_k=32, n_samples=2, count=1000)


def spread_cases() -> list[Case]:
    return cases_mod.variance_sample_cases(seed=14, d_k=1, n_samples=100, count=300)


def test_distribution_judge_rejects_the_biased_estimator_and_says_so():
    cases = unbiased_cases()

    def biased(d_k, n_samples=10000, generator=None):
        return ref.dot_product_variance(d_k, n_samples, generator) * (n_samples - 1) / n_samples

    with pytest.raises(AssertionError, match="biased"):
        cases_mod.estimates_follow_the_sampling_distribution(cases, outputs(biased, cases))


def test_distribution_judge_rejects_normal_noise_with_the_right_standard_error():
    cases = unbiased_cases()

    def fake(d_k, n_samples=10000, generator=None):
        large_n_error = math.sqrt((2 * d_k**2 + 6 * d_k) / n_samples)
        return abs(d_k + large_n_error * torch.randn(1, generator=generator).item())

    with pytest.raises(AssertionError, match="cumulative distributions"):
        cases_mod.estimates_follow_the_sampling_distribution(cases, outputs(fake, cases))


def test_spread_judge_rejects_d_k_plus_tiny_noise_and_too_few_samples():
    cases = spread_cases()

    def tiny_noise(d_k, n_samples=10000, generator=None):
        return d_k + 1e-3 * torch.rand(1, generator=generator).item()

    def too_few(d_k, n_samples=10000, generator=None):
        return ref.dot_product_variance(d_k, n_samples // 4, generator)

    with pytest.raises(AssertionError, match="not computed from n_samples"):
        cases_mod.estimates_spread_like_the_standard_error(cases, outputs(tiny_noise, cases))
    with pytest.raises(AssertionError, match="use all n_samples pairs"):
        cases_mod.estimates_spread_like_the_standard_error(cases, outputs(too_few, cases))


def test_seed_judge_rejects_a_constant_and_the_global_stream():
    cases = [c for c in cases_mod.variance_seed_cases(seed=11) if c.raises is None]

    def constant(d_k, n_samples=10000, generator=None):
        return float(d_k)

    def global_stream(d_k, n_samples=10000, generator=None):
        return ref.dot_product_variance(d_k, n_samples, None)

    with pytest.raises(AssertionError, match="gave the same estimate"):
        cases_mod.is_reproducible_and_seed_dependent(cases, outputs(constant, cases))
    with pytest.raises(AssertionError, match="global random stream"):
        cases_mod.is_reproducible_and_seed_dependent(cases, outputs(global_stream, cases))


def test_judges_demand_a_python_float():
    cases = cases_mod.variance_sample_cases(seed=0, d_k=2, n_samples=5, count=3)

    def tensor(d_k, n_samples=10000, generator=None):
        return torch.tensor(ref.dot_product_variance(d_k, n_samples, generator))

    with pytest.raises(AssertionError, match="return a Python float"):
        cases_mod._estimates(cases, outputs(tensor, cases))


def test_judges_refuse_settings_their_bounds_are_not_justified_for():
    values = [1.0] * 10
    cases = cases_mod.variance_sample_cases(seed=0, d_k=2, n_samples=5, count=10)
    for judge in (cases_mod.estimates_are_unbiased, cases_mod.estimates_spread_like_the_standard_error,
                  cases_mod.estimates_follow_the_sampling_distribution):
        with pytest.raises(ValueError):
            judge(cases, values)


@pytest.mark.parametrize("judge, params", [
    ("estimates_follow_the_sampling_distribution", {"d_k": 32, "n_samples": 2, "count": 1000}),
    ("estimates_spread_like_the_standard_error", {"d_k": 1, "n_samples": 100, "count": 300}),
])
@pytest.mark.parametrize("seed", [101, 102])
def test_the_reference_passes_the_statistical_judges_with_other_seeds_too(judge, params, seed):
    check = Check(kind="property", target="dot_product_variance",
                  cases="solutions.cases.scaling:variance_sample_cases",
                  judge=f"solutions.cases.scaling:{judge}", seed=seed, params=tuple(sorted(params.items())))
    run_local(check, ref.dot_product_variance)


def test_a_failed_judge_becomes_a_check_failure_for_the_student():
    check = Check(kind="property", target="dot_product_variance",
                  cases="solutions.cases.scaling:variance_seed_cases",
                  judge="solutions.cases.scaling:is_reproducible_and_seed_dependent", seed=11)

    def constant(d_k, n_samples=10000, generator=None):
        if d_k < 1 or n_samples < 2:
            raise ValueError("bad arguments")
        return float(d_k)

    with pytest.raises(CheckFailed, match="`dot_product_variance`: .* gave the same estimate"):
        run_local(check, constant)


def _call_judge(judge: str, cases_name: str, fn, seed: int) -> None:
    check = Check(kind="property", target="dot_product_variance", cases=f"solutions.cases.scaling:{cases_name}",
                  judge=f"solutions.cases.scaling:{judge}", seed=seed)
    run_local(check, fn)


def test_the_stream_and_shared_generator_judges_accept_the_reference():
    torch.manual_seed(0)
    _call_judge("uses_the_global_stream_without_generator", "variance_stream_cases", ref.dot_product_variance, 16)
    _call_judge("continues_a_shared_generator", "variance_shared_cases", ref.dot_product_variance, 18)


def test_a_fresh_generator_instead_of_the_global_stream_is_caught():
    def fresh(d_k, n_samples=10000, generator=None):
        return ref.dot_product_variance(d_k, n_samples, generator if generator is not None else torch.Generator())

    with pytest.raises(CheckFailed, match="global random stream"):
        _call_judge("uses_the_global_stream_without_generator", "variance_stream_cases", fresh, 16)


def test_reseeding_a_shared_generator_is_caught():
    def reseeded(d_k, n_samples=10000, generator=None):
        return ref.dot_product_variance(d_k, n_samples, torch.Generator().manual_seed(generator.initial_seed()))

    with pytest.raises(CheckFailed, match="where it stands"):
        _call_judge("continues_a_shared_generator", "variance_shared_cases", reseeded, 18)


# ---------------------------------------------------------------------------------------------------
# variance_z_test


def _two_sided_p(z: float) -> float:
    return math.erfc(abs(z) / math.sqrt(2))


@pytest.mark.parametrize("z_target, alpha", [(0.0, 1e-6), (2.0, 0.05), (1.8, 0.05), (-2.1, 0.05), (4.82, 1e-6),
                                             (5.2, 1e-6), (-5.2, 1e-6), (3.0, 0.01)])
def test_z_test_statistic_and_decision_match_the_normal_tail(z_target, alpha):
    """The decision equals 'two-sided p-value < alpha', the p-value from erfc (an oracle without quantiles)."""
    d, n = 8, 1000
    se = ref.variance_standard_error(d, n)
    z, reject = ref.variance_z_test(torch.tensor([d + z_target * se], dtype=torch.float64), d, n, alpha)
    assert type(z) is float and type(reject) is bool
    assert math.isclose(z, z_target, abs_tol=1e-9)
    assert reject == (_two_sided_p(z) < alpha)


@pytest.mark.parametrize("alpha", [1e-15, 1e-17, 1e-20, 1e-100, 1e-300])
def test_z_test_takes_any_alpha_however_small(alpha):
    """1 - alpha/2 rounds to 1.0 below about 1e-16: the decision still follows -Phi^-1(alpha/2) (the oracle)."""
    from statistics import NormalDist

    critical = -NormalDist().inv_cdf(alpha / 2)
    d, n = 64, 10_000
    se = ref.variance_standard_error(d, n)
    for z_target, expected in ((critical - 0.05, False), (critical + 0.05, True), (-critical - 0.05, True)):
        z, reject = ref.variance_z_test(torch.tensor([d + z_target * se], dtype=torch.float64), d, n, alpha)
        assert reject is expected, (alpha, z_target, z)


def test_z_test_takes_the_smallest_positive_alpha():
    """alpha = 5e-324 has no representable half: the tail itself is compared (P(|Z| >= 38) is a subnormal above it)."""
    d, n = 64, 10_000
    se = ref.variance_standard_error(d, n)
    assert ref.variance_z_test(torch.tensor([d + 38 * se], dtype=torch.float64), d, n, 5e-324)[1] is False
    assert ref.variance_z_test(torch.tensor([d + 40 * se], dtype=torch.float64), d, n, 5e-324)[1] is True


def test_z_of_the_mean_of_m_estimates_uses_se_over_sqrt_m():
    d, n, m = 16, 200, 25
    se = ref.variance_standard_error(d, n)
    estimates = torch.full((m,), d + 0.4 * se, dtype=torch.float64)
    z, _ = ref.variance_z_test(estimates, d, n)
    assert math.isclose(z, 0.4 * math.sqrt(m), rel_tol=1e-12)


@pytest.mark.parametrize("d_k, n", [(1, 2), (4, 5), (32, 50)])
def test_z_scores_of_real_estimates_are_standard_normal(d_k, n):
    """Simulated from the reference estimator: z has mean 0 and standard deviation 1 (within 4 %)."""
    g = torch.Generator().manual_seed(100 * d_k + n)
    R, m = 4000, 4
    q = torch.randn(R, m, n, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(R, m, n, d_k, generator=g, dtype=torch.float64)
    estimates = (q * k).sum(-1).var(dim=-1)  # (R, m)
    zs = torch.tensor([ref.variance_z_test(row, d_k, n)[0] for row in estimates])
    assert abs(float(zs.mean())) < 4 / math.sqrt(R) * 1.5
    assert abs(float(zs.std()) - 1) < 0.04


def test_z_test_rejects_the_biased_estimator_and_keeps_the_unbiased_one():
    d, n, m = 8, 2, 1000
    unbiased = torch.tensor([ref.dot_product_variance(d, n, gen(s)) for s in range(m)], dtype=torch.float64)
    assert ref.variance_z_test(unbiased, d, n)[1] is False
    assert ref.variance_z_test(unbiased * (n - 1) / n, d, n)[1] is True


def test_z_test_rejects_bad_arguments():
    one = torch.tensor([4.0])
    for args, kwargs in (((torch.empty(0), 4, 10), {}), ((one, 0, 10), {}), ((one, 4, 1), {}),
                         ((one, 4, 10), {"alpha": 0.0}), ((one, 4, 10), {"alpha": 1.0})):
        with pytest.raises(ValueError):
            ref.variance_z_test(*args, **kwargs)


# ---------------------------------------------------------------------------------------------------
# softmax_vjp


@pytest.mark.parametrize("shape, dim", [((7,), -1), ((4, 6), -1), ((2, 3, 5), -1), ((6, 4), 0), ((2, 5, 3), 1),
                                        ((2, 4, 3), -2)])
def test_vjp_matches_autograd_through_softmax(shape, dim):
    s = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    p = torch.softmax(s, dim=dim)
    g = torch.randn(*shape, dtype=torch.float64)
    (expected,) = torch.autograd.grad(p, s, g)
    torch.testing.assert_close(ref.softmax_vjp(p.detach(), g, dim=dim), expected)


def test_vjp_is_the_jacobian_transpose_times_the_gradient():
    p = torch.softmax(torch.randn(3, 6, dtype=torch.float64), -1)
    g = torch.randn(3, 6, dtype=torch.float64)
    J = torch.func.vmap(torch.func.jacrev(lambda s: torch.softmax(s, -1)))(p.log())
    torch.testing.assert_close(ref.softmax_vjp(p, g), (J.mT @ g[..., None])[..., 0])


def test_vjp_passes_gradcheck_through_the_softmax():
    def f(s, g):
        return ref.softmax_vjp(torch.softmax(s, -1), g)

    s = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(f, (s, g))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_vjp_keeps_the_dtype_and_stays_close_to_float64(dtype):
    for case in (c for c in cases_mod.vjp_cases(seed=1, dtype=dtype) if c.raises is None):
        p, g = case.args
        got = ref.softmax_vjp(p, g, **case.kwargs)
        assert got.dtype == p.dtype and got.shape == p.shape
        expected = ref.softmax_vjp(p.double(), g.double(), **case.kwargs)
        atol, rtol = TOLERANCES[dtype]
        torch.testing.assert_close(got.double(), expected, atol=atol, rtol=rtol)


def test_vjp_edge_cases_and_errors():
    assert torch.equal(ref.softmax_vjp(torch.eye(4), torch.randn(4, 4)), torch.zeros(4, 4))
    p = torch.softmax(torch.randn(3, 5, dtype=torch.float64), -1)
    torch.testing.assert_close(ref.softmax_vjp(p, torch.full((3, 5), 2.5, dtype=torch.float64)),
                               torch.zeros(3, 5, dtype=torch.float64))
    with pytest.raises(ValueError):
        ref.softmax_vjp(p, torch.ones(3, 4))


def test_vjp_memory_cases_forbid_any_n_by_n_block():
    for d in DTYPES:
        for case in cases_mod.vjp_memory_cases(seed=0, dtype=d):
            p = case.args[0]
            n = p.shape[case.kwargs.get("dim", -1)]
            assert n * n > 4 * case.max_numel and case.max_numel >= p.numel()
