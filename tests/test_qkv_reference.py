"""Chapter 2 (queries, keys and values): the reference against independent oracles, and the hidden checks.

Oracles: ``torch.nn.functional.scaled_dot_product_attention`` (bool ``attn_mask``, True = attend),
``torch.softmax``, ``nn.Linear``, ``nn.MultiheadAttention`` and the paper's formula for the positional
encodings written out with loops. Then the case generators and judges of ``solutions/cases/qkv.py``, and
every hidden check of the notebook run against the reference.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import solutions.cases.qkv as cases_mod
import solutions.qkv as ref
from grader import cells
from grader.checks import Case, CheckFailed, banned_family, evaluate, from_plain, parse_checks, prepare, run_local
from solutions.cases.families import DTYPES, TOLERANCES, extreme_scores

from .casecheck import assert_generator_is_deterministic_and_labelled

NOTEBOOK = Path(__file__).resolve().parents[1] / "book" / "ch02_qkv" / "qkv.ipynb"

def hidden_blocks() -> dict[str, str]:
    return cells.hidden_blocks(nbformat.read(NOTEBOOK, as_version=4))


def random_mask(*shape: int, gen: torch.Generator) -> torch.Tensor:
    """Bool mask (True = may attend) with at least one True in every row."""
    mask = torch.rand(*shape, generator=gen) < 0.5
    mask[..., 0] |= ~mask.any(dim=-1)
    return mask


# ---------------------------------------------------------------------------------------------------
# project_qkv


@pytest.mark.parametrize("batch", [(), (3,), (2, 3)])
def test_project_qkv_matches_bias_free_linear_layers(batch):
    torch.manual_seed(0)
    d_model, d_k, d_v, T = 6, 4, 5, 7
    layers = [nn.Linear(d_model, d, bias=False) for d in (d_k, d_k, d_v)]
    x = torch.randn(*batch, T, d_model)
    q, k, v = ref.project_qkv(x, *(layer.weight.T for layer in layers))
    for got, layer, width in zip((q, k, v), layers, (d_k, d_k, d_v)):
        assert got.shape == (*batch, T, width)
        torch.testing.assert_close(got, layer(x).detach())


def test_project_qkv_leaves_inputs_unchanged():
    x, W_q, W_k, W_v = torch.randn(2, 4, 3), torch.randn(3, 2), torch.randn(3, 2), torch.randn(3, 5)
    before = [t.clone() for t in (x, W_q, W_k, W_v)]
    ref.project_qkv(x, W_q, W_k, W_v)
    assert all(torch.equal(a, b) for a, b in zip((x, W_q, W_k, W_v), before))


def test_project_qkv_rejects_matrices_of_the_wrong_shape():
    x = torch.randn(4, 6)
    with pytest.raises(ValueError, match="W_k must have shape"):
        ref.project_qkv(x, torch.randn(6, 3), torch.randn(3, 6), torch.randn(6, 3))
    with pytest.raises(ValueError, match="same width d_k"):
        ref.project_qkv(x, torch.randn(6, 3), torch.randn(6, 4), torch.randn(6, 3))


# ---------------------------------------------------------------------------------------------------
# softmax


@pytest.mark.parametrize("shape", [(5,), (4, 7), (2, 3, 6), (2, 1, 3, 4)])
def test_softmax_matches_torch_softmax_along_every_dim(shape):
    x = torch.randn(*shape) * 4
    for dim in range(-len(shape), len(shape)):
        torch.testing.assert_close(ref.softmax(x, dim=dim), torch.softmax(x, dim=dim))


@pytest.mark.parametrize("offset", [1e4, -1e4, 3e4])
def test_softmax_does_not_overflow_or_underflow_at_large_logits(offset):
    x = offset + torch.randn(3, 8) * 5
    p = ref.softmax(x)
    assert torch.isfinite(p).all()
    torch.testing.assert_close(p, torch.softmax(x, dim=-1))


def test_softmax_gives_exactly_zero_to_minus_infinity_mixed_with_finite_logits():
    x = torch.tensor([[0.0, float("-inf"), 1.0], [float("-inf"), float("-inf"), 2.0]])
    p = ref.softmax(x)
    assert torch.equal(p[:, 1], torch.zeros(2)) and p[1, 2] == 1
    torch.testing.assert_close(p, torch.softmax(x, dim=-1))


def test_softmax_of_an_all_minus_infinity_row_is_nan_like_torch():
    p = ref.softmax(torch.full((2, 3), float("-inf")))
    assert p.isnan().all()


def test_softmax_keeps_dtype_and_leaves_input_unchanged():
    x = torch.randn(3, 4, dtype=torch.float64)
    before = x.clone()
    p = ref.softmax(x, dim=0)
    assert p.dtype == torch.float64 and torch.equal(x, before)
    torch.testing.assert_close(p, torch.softmax(x, dim=0))


# ---------------------------------------------------------------------------------------------------
# scaled_dot_product_attention


@pytest.mark.parametrize("batch, T_q, T_k, d_k, d_v", [
    ((), 3, 3, 2, 2), ((), 4, 6, 8, 3), ((3,), 5, 5, 4, 6), ((2, 3), 2, 7, 3, 5), ((2, 2), 1, 1, 4, 4),
])
def test_attention_matches_torch_sdpa_without_mask(batch, T_q, T_k, d_k, d_v):
    gen = torch.Generator().manual_seed(T_q * 10 + T_k)
    q, k, v = (torch.randn(*batch, T, d, generator=gen) for T, d in ((T_q, d_k), (T_k, d_k), (T_k, d_v)))
    out, weights = ref.scaled_dot_product_attention(q, k, v)
    assert out.shape == (*batch, T_q, d_v) and weights.shape == (*batch, T_q, T_k)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(weights, torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1))


@pytest.mark.parametrize("mask_shape", [(5, 7), (2, 1, 5, 7), (2, 1, 1, 7), (1, 3, 5, 7), (3, 1, 7)])
def test_attention_matches_torch_sdpa_with_broadcast_bool_masks(mask_shape):
    gen = torch.Generator().manual_seed(len(mask_shape))
    q, k, v = torch.randn(2, 3, 5, 4, generator=gen), torch.randn(2, 3, 7, 4, generator=gen), \
        torch.randn(2, 3, 7, 6, generator=gen)
    mask = random_mask(*mask_shape, gen=gen)
    out, weights = ref.scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_attention_weights_are_distributions_over_the_keys():
    gen = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(4, 3, 8, generator=gen), torch.randn(4, 9, 8, generator=gen), \
        torch.randn(4, 9, 2, generator=gen)
    _, weights = ref.scaled_dot_product_attention(q, k, v, random_mask(4, 3, 9, gen=gen))
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 3))


def test_attention_is_stable_at_huge_logits():
    gen = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(2, 4, 2, generator=gen) * 100, torch.randn(2, 6, 2, generator=gen) * 100, \
        torch.randn(2, 6, 3, generator=gen)
    out, weights = ref.scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_attention_scales_by_sqrt_d_k_not_d_v():
    q = torch.tensor([[2 * math.log(3.0), 0.0, 0.0, 0.0]])  # d_k = 4: scaled scores [0, ln 3]
    k = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    v = torch.tensor([[4.0, 0.0], [0.0, 8.0]])  # d_v = 2
    out, weights = ref.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(weights, torch.tensor([[0.25, 0.75]]))
    torch.testing.assert_close(out, torch.tensor([[1.0, 6.0]]))


def test_attention_of_a_fully_masked_row_is_nan_as_documented():
    mask = torch.tensor([[True, False], [False, False]])
    q, k, v = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3)
    _, weights = ref.scaled_dot_product_attention(q, k, v, mask)
    assert not weights[0].isnan().any() and weights[1].isnan().all()


def test_attention_leaves_inputs_unchanged():
    q, k, v, mask = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 2), random_mask(
        3, 5, gen=torch.Generator().manual_seed(0))
    before = [t.clone() for t in (q, k, v, mask)]
    ref.scaled_dot_product_attention(q, k, v, mask)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v, mask), before))


def test_attention_rejects_bad_input_with_clear_errors():
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        ref.scaled_dot_product_attention(q, k, v, torch.ones(3, 5))
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        ref.scaled_dot_product_attention(q, k, v, [[True] * 5] * 3)
    with pytest.raises(ValueError, match="share d_k"):
        ref.scaled_dot_product_attention(q, torch.randn(5, 3), v)
    with pytest.raises(ValueError, match="one row per key"):
        ref.scaled_dot_product_attention(q, k, torch.randn(4, 2))
    with pytest.raises(ValueError, match="does not broadcast"):
        ref.scaled_dot_product_attention(q, k, v, torch.ones(5, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="does not broadcast"):
        ref.scaled_dot_product_attention(q, k, v, torch.ones(2, 3, 5, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------------
# SelfAttention


def test_self_attention_has_linear_layers_named_and_shaped_as_specified():
    attn = ref.SelfAttention(8, 4, 6)
    assert [name for name, _ in attn.named_parameters()] == ["W_q.weight", "W_k.weight", "W_v.weight"]
    assert (attn.W_q.weight.shape, attn.W_k.weight.shape, attn.W_v.weight.shape) == ((4, 8), (4, 8), (6, 8))
    assert ref.SelfAttention(8, 4).W_v.out_features == 4
    assert all(layer.bias is not None for layer in ref.SelfAttention(8, 4, bias=True).children())


@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
def test_self_attention_matches_torch_sdpa_on_its_projections(batch):
    torch.manual_seed(0)
    attn = ref.SelfAttention(6, 4, 5, bias=True)
    x, causal = torch.randn(*batch, 7, 6), torch.ones(7, 7, dtype=torch.bool).tril()
    with torch.no_grad():
        q, k, v = attn.W_q(x), attn.W_k(x), attn.W_v(x)
        torch.testing.assert_close(attn(x), F.scaled_dot_product_attention(q, k, v))
        torch.testing.assert_close(attn(x, causal), F.scaled_dot_product_attention(q, k, v, attn_mask=causal))


def test_self_attention_equals_single_head_multihead_attention_with_inverted_mask():
    torch.manual_seed(0)
    d = 6
    attn = ref.SelfAttention(d, d, bias=True)
    mha = nn.MultiheadAttention(d, num_heads=1, bias=True, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([attn.W_q.weight, attn.W_k.weight, attn.W_v.weight]))
        mha.in_proj_bias.copy_(torch.cat([attn.W_q.bias, attn.W_k.bias, attn.W_v.bias]))
        mha.out_proj.weight.copy_(torch.eye(d))
        mha.out_proj.bias.zero_()
        x, causal = torch.randn(2, 5, d), torch.ones(5, 5, dtype=torch.bool).tril()
        expected, _ = mha(x, x, x, attn_mask=~causal, need_weights=False)  # MHA: True = may NOT attend
        torch.testing.assert_close(attn(x, causal), expected)


def test_self_attention_is_permutation_equivariant_not_invariant():
    torch.manual_seed(0)
    attn = ref.SelfAttention(8, 4, 3)
    x, perm = torch.randn(2, 6, 8), torch.tensor([2, 0, 5, 1, 4, 3])
    with torch.no_grad():
        out, out_perm = attn(x), attn(x[:, perm])
    torch.testing.assert_close(out_perm, out[:, perm])
    assert not torch.allclose(out_perm, out, atol=1e-3)


def test_positional_encodings_break_permutation_equivariance():
    torch.manual_seed(0)
    attn = ref.SelfAttention(8, 4, 3)
    x, perm, pe = torch.randn(6, 8), torch.tensor([2, 0, 5, 1, 4, 3]), ref.sinusoidal_positions(6, 8)
    with torch.no_grad():
        assert not torch.allclose(attn(x[perm] + pe), attn(x + pe)[perm], atol=1e-3)


# ---------------------------------------------------------------------------------------------------
# sinusoidal_positions


def paper_formula(T: int, d_model: int) -> torch.Tensor:
    pe = torch.empty(T, d_model, dtype=torch.float64)
    for pos in range(T):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe


@pytest.mark.parametrize("T, d_model", [(1, 2), (7, 6), (50, 16), (200, 10), (20, 128)])
def test_sinusoidal_positions_follow_the_papers_interleaved_formula(T, d_model):
    pe = ref.sinusoidal_positions(T, d_model)
    assert pe.shape == (T, d_model) and pe.dtype == torch.float32
    torch.testing.assert_close(pe.double(), paper_formula(T, d_model), atol=1e-6, rtol=0)


def test_sinusoidal_positions_of_a_later_position_are_a_rotation_of_an_earlier_one():
    d_model, offset = 16, 7
    pe = ref.sinusoidal_positions(40, d_model).double()
    for i in range(d_model // 2):
        w = 10000 ** (-2 * i / d_model)
        c, s = math.cos(w * offset), math.sin(w * offset)
        rotation = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
        pair = pe[:, 2 * i:2 * i + 2]
        torch.testing.assert_close(pair[offset:], pair[:-offset] @ rotation.T, atol=1e-6, rtol=0)


def test_sinusoidal_positions_reject_odd_width_and_allow_empty_sequences():
    with pytest.raises(ValueError, match="even"):
        ref.sinusoidal_positions(4, 5)
    with pytest.raises(ValueError, match="T must be"):
        ref.sinusoidal_positions(-1, 4)
    assert ref.sinusoidal_positions(0, 4).shape == (0, 4)


# ---------------------------------------------------------------------------------------------------
# case generators and judges


def all_cases() -> dict[str, list[Case]]:
    return {name: getattr(cases_mod, name)(seed=0) for name in (
        "project_qkv_cases", "softmax_cases", "sdpa_cases", "self_attention_cases",
        "permutation_pairs_cases", "sinusoidal_cases")}


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_case_generators_are_deterministic_labelled_and_non_empty(seed):
    for name, params in (("project_qkv_cases", {}), ("softmax_cases", {}),
                         ("softmax_cases", {"extreme": True}), ("sdpa_cases", {}),
                         ("self_attention_cases", {}), ("permutation_pairs_cases", {}),
                         ("sinusoidal_cases", {}), ("sinusoidal_long_cases", {}), ("sdpa_mask_cases", {}),
                         *[(name, {"dtype": d}) for d in DTYPES for name in (
                             "project_qkv_dtype_cases", "softmax_dtype_cases", "sdpa_dtype_cases")]):
        assert_generator_is_deterministic_and_labelled(getattr(cases_mod, name), seed, params)


# ---------------------------------------------------------------------------------------------------
# the contract's families against independent oracles


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_softmax_matches_torch_softmax_in_every_dtype_on_the_extreme_families(dtype):
    for case in cases_mod.softmax_dtype_cases(seed=3, dtype=dtype):
        x, dim = case.args[0], case.kwargs.get("dim", -1)
        got = ref.softmax(x, dim=dim)
        assert got.dtype == x.dtype, case.label
        expected = torch.softmax(x.double(), dim=dim)
        atol, rtol = TOLERANCES[dtype]
        torch.testing.assert_close(got.double(), expected, atol=atol, rtol=max(rtol, 1e-3), msg=case.label)
        assert (got[x == float("-inf")] == 0).all(), case.label


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_attention_matches_pytorch_in_every_dtype_and_on_extreme_scores(dtype):
    for case in cases_mod.sdpa_dtype_cases(seed=4, dtype=dtype):
        q, k, v, *mask = case.args
        out, weights = ref.scaled_dot_product_attention(q, k, v, *mask)
        assert out.dtype == weights.dtype == q.dtype, case.label
        expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                  attn_mask=mask[0] if mask else None)
        atol, rtol = TOLERANCES[dtype]
        torch.testing.assert_close(out.double(), expected, atol=max(atol, 1e-5), rtol=max(rtol, 1e-3), msg=case.label)


def test_identity_keys_make_the_scores_exactly_the_given_ones():
    g = torch.Generator().manual_seed(0)
    for dtype in DTYPES:  # huge scores with d_k = 4: q k^T = 2 q stays below float16's 65504
        for kind, n in (("huge", 4), ("very_negative", 16), ("dominant", 16)):
            scores = extreme_scores(g, 3, n, kind=kind, dtype=dtype)
            q, k, _ = cases_mod._identity_keys(g, scores)
            assert torch.equal(q @ k.transpose(-2, -1) / math.sqrt(n), scores), (dtype, kind)


def test_attention_matches_pytorch_for_every_mask_broadcast_class():
    for case in cases_mod.sdpa_mask_cases(seed=5):
        q, k, v, *mask = case.args
        out, weights = ref.scaled_dot_product_attention(q, k, v, *mask)
        # the equations in float64, softmax from torch (F.scaled_dot_product_attention takes no 1-D mask)
        scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask:
            scores = scores.masked_fill(~mask[0], float("-inf"))
        expected = torch.softmax(scores, dim=-1) @ v.double()
        torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-4, msg=case.label)
        if mask:
            assert (weights.masked_select(~mask[0].expand(weights.shape)) == 0).all(), case.label


def test_long_sinusoidal_tables_match_the_papers_formula_within_the_stated_tolerance():
    for case in cases_mod.sinusoidal_long_cases(seed=0):
        T, d = case.args
        pe = ref.sinusoidal_positions(T, d)
        assert pe.shape == (T, d) and pe.dtype == torch.float32
        for pos in {p for p in (0, 1, 255, 256, 511, 512, T - 1) if p < T}:
            for i in range(d // 2):
                angle = pos / 10000 ** (2 * i / d)
                assert abs(float(pe[pos, 2 * i]) - math.sin(angle)) < 1e-6
                assert abs(float(pe[pos, 2 * i + 1]) - math.cos(angle)) < 1e-6
    # float32 angles, as in many tutorials, stay within the stated 2e-3 at T = 5003
    pos = torch.arange(5003, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, 32, 2, dtype=torch.float32) * (-math.log(10000.0) / 32))
    assert (torch.sin(pos * freq) - ref.sinusoidal_positions(5003, 32)[:, 0::2]).abs().max() < 2e-3


def test_project_qkv_cases_cover_batch_dims_and_non_square_matrices():
    cases = all_cases()["project_qkv_cases"]
    assert {c.args[0].dim() for c in cases} >= {2, 3, 4}
    assert any(c.args[1].shape[0] != c.args[1].shape[1] for c in cases)
    assert any(c.args[3].shape[1] != c.args[1].shape[1] for c in cases)
    assert any(c.args[0].shape[-2] == 1 for c in cases)


def test_softmax_cases_cover_other_dims_huge_logits_and_minus_infinity():
    cases = cases_mod.softmax_cases(seed=0) + cases_mod.softmax_cases(seed=0, extreme=True)
    assert {c.kwargs.get("dim", -1) for c in cases} >= {-1, 0, 1, -2}
    finite = [c.args[0][c.args[0].isfinite()] for c in cases]
    assert any(f.max() >= 9e3 for f in finite) and any(f.min() <= -9e3 for f in finite)
    assert any(c.args[0].isneginf().any() for c in cases)
    assert any(c.args[0].dtype == torch.float64 for c in cases)


def test_sdpa_cases_cover_shapes_and_masks_without_fully_masked_rows():
    cases = all_cases()["sdpa_cases"]
    assert {c.args[0].dim() for c in cases} >= {2, 3, 4}
    assert any(c.args[0].shape[-2] != c.args[1].shape[-2] for c in cases)  # T_q != T_k
    assert any(c.args[2].shape[-1] != c.args[0].shape[-1] for c in cases)  # d_v != d_k
    assert any(c.args[0].shape[-2] == 1 for c in cases) and any(c.args[0].shape[-2] % 2 for c in cases)
    masks = [c.args[3] for c in cases if len(c.args) > 3]
    assert {m.dim() for m in masks} >= {2, 4}
    assert any(m.dim() == 4 and m.shape[1] == m.shape[2] == 1 for m in masks)  # key padding (B, 1, 1, T_k)
    for c in cases:
        if len(c.args) > 3:
            scores_shape = (*c.args[0].shape[:-1], c.args[1].shape[-2])
            assert c.args[3].dtype == torch.bool
            assert c.args[3].expand(scores_shape).any(dim=-1).all(), c.label
    assert any(c.args[0].abs().max() * c.args[1].abs().max() > 300 for c in cases)  # large logits


def test_self_attention_cases_cover_bias_masks_and_batch_dims():
    cases = all_cases()["self_attention_cases"]
    assert all(c.init is not None and len(c.init) == 4 and c.state is None for c in cases)
    assert any(c.init[2] is None for c in cases) and any(c.init[3] for c in cases)
    assert any(c.init[2] not in (None, c.init[1]) for c in cases)  # d_v != d_k
    assert {c.args[0].dim() for c in cases} >= {2, 3, 4}
    assert any(len(c.args) == 2 for c in cases)
    for c in cases:
        if len(c.args) == 2:
            T = c.args[0].shape[-2]
            assert c.args[1].expand(*c.args[0].shape[:-2], T, T).any(dim=-1).all(), c.label


def test_permutation_pairs_share_weights_and_permute_the_tokens():
    cases = all_cases()["permutation_pairs_cases"]
    assert len(cases) % 2 == 0
    for a, b in zip(cases[::2], cases[1::2]):
        assert a.init == b.init and a.state is b.state and a.state is not None
        x, x_perm = a.args[0], b.args[0]
        assert not torch.equal(x, x_perm)
        assert torch.equal(x.sort(dim=-2).values, x_perm.sort(dim=-2).values)


def test_permutation_pair_state_fits_the_reference_module():
    for c in all_cases()["permutation_pairs_cases"]:
        ref.SelfAttention(*c.init).load_state_dict(c.state, strict=True)


def outputs_of(cases: list[Case], obj) -> list:
    return [from_plain(o.output) for o in evaluate(obj, cases)]


def test_attention_weights_judge_accepts_the_reference_and_names_the_bug_of_others():
    cases = cases_mod.sdpa_cases(seed=3)
    cases_mod.attention_weights_are_distributions(cases, outputs_of(cases, ref.scaled_dot_product_attention))

    def over_queries(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-2)
        return weights @ v, weights

    def mask_after(q, k, v, mask=None):
        out, weights = ref.scaled_dot_product_attention(q, k, v)
        return out, weights if mask is None else weights * mask

    with pytest.raises(AssertionError, match="sum to 1"):
        cases_mod.attention_weights_are_distributions(cases, outputs_of(cases, over_queries))
    with pytest.raises(AssertionError, match="sum to 1"):
        cases_mod.attention_weights_are_distributions(cases, outputs_of(cases, mask_after))


def test_equivariance_judge_accepts_the_reference_and_rejects_positional_information():
    cases = cases_mod.permutation_pairs_cases(seed=4)
    cases_mod.is_permutation_equivariant(cases, outputs_of(cases, ref.SelfAttention))

    class WithPositions(ref.SelfAttention):
        def forward(self, x, mask=None):
            return super().forward(x + ref.sinusoidal_positions(x.shape[-2], x.shape[-1]), mask)

    with pytest.raises(AssertionError, match="permutation-equivariant"):
        cases_mod.is_permutation_equivariant(cases, outputs_of(cases, WithPositions))


# ---------------------------------------------------------------------------------------------------
# the notebook's hidden checks


def test_hidden_checks_ban_the_builtins_the_exercises_replace():
    blocks = {gid: parse_checks(block) for gid, block in hidden_blocks().items()}
    assert all({"torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax", "aten._softmax",
                "torch.log_softmax", "torch.nn.functional.log_softmax", "aten._log_softmax"}
               <= set(banned_family(c.banned)) for c in blocks["test_softmax"])
    for gid in ("test_scaled_dot_product_attention", "test_SelfAttention"):
        assert all({"torch.nn.functional.scaled_dot_product_attention", "aten._scaled_dot_product*"}
                   <= set(c.banned) for c in blocks[gid]), gid


def test_hidden_checks_fail_a_wrong_answer_with_a_message_naming_the_case():
    check = parse_checks(hidden_blocks()["test_softmax"])[0]
    with pytest.raises(CheckFailed, match=r"is wrong on case '.+'"):
        run_local(check, lambda x, dim=-1: ref.softmax(x, dim=-1))


def test_module_checks_give_the_student_the_reference_weights():
    check = next(c for c in parse_checks(hidden_blocks()["test_SelfAttention"]) if c.kind == "module")
    for case in prepare(check):
        assert case.state is not None
        ref.SelfAttention(*case.init).load_state_dict(case.state, strict=True)
