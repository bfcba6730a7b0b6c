"""Chapter 4 (masks): the reference against independent oracles, and the hidden checks' cases and judges.

Oracles: masks written out with loops; ``F.scaled_dot_product_attention`` (bool ``attn_mask``, True =
attend) and ``nn.MultiheadAttention`` (bool ``key_padding_mask``/``attn_mask``, True = ignore) given the
course's masks, negated for the latter; ``torch.softmax`` and ``torch.autograd.gradcheck`` for the masked
softmax; the no-leak property for causal attention.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import solutions.cases.masks as cases_mod
import solutions.masks as ref
from grader.checks import Case, evaluate, from_plain

from .casecheck import assert_generator_is_deterministic_and_labelled

# ---------------------------------------------------------------------------------------------------
# causal_mask, padding_mask, attention_mask


@pytest.mark.parametrize("T", [0, 1, 2, 7])
def test_causal_mask_allows_exactly_the_pairs_j_le_i(T):
    m = ref.causal_mask(T)
    assert m.dtype == torch.bool and m.shape == (T, T)
    assert all(bool(m[i, j]) == (j <= i) for i in range(T) for j in range(T))


def test_causal_mask_device_and_errors():
    assert ref.causal_mask(3, device="cpu").device.type == "cpu"
    assert ref.causal_mask(3, device=torch.device("meta")).device.type == "meta"
    with pytest.raises(ValueError, match="T must be >= 0"):
        ref.causal_mask(-1)


@pytest.mark.parametrize("lengths, T", [([3, 5, 1], 5), ([0, 2], 4), ([2, 3], 6), ([4], 4)])
def test_padding_mask_marks_the_real_tokens(lengths, T):
    m = ref.padding_mask(torch.tensor(lengths), T)
    assert m.dtype == torch.bool and m.shape == (len(lengths), T)
    assert all(bool(m[b, j]) == (j < n) for b, n in enumerate(lengths) for j in range(T))


def test_padding_mask_accepts_int32_and_rejects_bad_lengths():
    torch.testing.assert_close(ref.padding_mask(torch.tensor([1, 2], dtype=torch.int32), 3),
                               ref.padding_mask(torch.tensor([1, 2]), 3))
    for bad in (torch.tensor([2, 6]), torch.tensor([-1, 2]), torch.tensor([[1, 2]]), torch.tensor([1.0, 2.0])):
        with pytest.raises(ValueError):
            ref.padding_mask(bad, 5)


def loop_padding(lengths: list[int], T: int, side: str) -> list[list[bool]]:
    """The padding mask written out: which positions of each sequence are real."""
    return [[(j < n) if side == "right" else (j >= T - n) for j in range(T)] for n in lengths]


@pytest.mark.parametrize("lengths, T", [([3, 5, 1], 5), ([0, 2], 4), ([2, 3], 6), ([4], 4)])
def test_padding_mask_left_marks_the_last_tokens(lengths, T):
    m = ref.padding_mask(torch.tensor(lengths), T, side="left")
    assert m.dtype == torch.bool and m.shape == (len(lengths), T)
    assert m.tolist() == loop_padding(lengths, T, "left")
    assert torch.equal(m, ref.padding_mask(torch.tensor(lengths), T).flip(-1))
    with pytest.raises(ValueError, match="side"):
        ref.padding_mask(torch.tensor(lengths), T, side="center")


def test_padding_mask_left_agrees_with_a_left_padding_tokenizer_layout():
    # what a left-padding tokenizer returns: [pad] * (T - n) + tokens, attention_mask 0 then 1
    lengths, T = [2, 5, 0, 3], 5
    hf = torch.tensor([[0] * (T - n) + [1] * n for n in lengths]).bool()
    assert torch.equal(ref.padding_mask(torch.tensor(lengths), T, "left"), hf)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_mask_masks_keys_not_queries_and_gives_empty_rows_their_diagonal(causal, side):
    lengths, T = [5, 3, 0, 1], 5
    m = ref.attention_mask(torch.tensor(lengths), T, causal=causal, side=side)
    assert m.dtype == torch.bool and m.shape == (4, 1, T, T) and m.is_contiguous()
    real = loop_padding(lengths, T, side)
    for b in range(len(lengths)):
        for i in range(T):
            row = [real[b][j] and (j <= i or not causal) for j in range(T)]
            if not any(row):
                row = [j == i for j in range(T)]
            assert m[b, 0, i].tolist() == row, (b, i)


def test_attention_mask_leaves_no_row_empty():
    for side in ("right", "left"):
        for causal in (False, True):
            m = ref.attention_mask(torch.tensor([4, 1, 6, 0]), 6, causal=causal, side=side)
            assert m.any(dim=-1).all()


def test_left_padded_causal_attention_is_finite_forward_and_backward_and_right_on_real_rows():
    torch.manual_seed(0)
    lengths, T = torch.tensor([6, 4, 1]), 6
    mask = ref.attention_mask(lengths, T, causal=True, side="left")
    q, k, v = (torch.randn(3, 2, T, 4, requires_grad=True) for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out.sum().backward()
    assert torch.isfinite(out).all() and all(torch.isfinite(t.grad).all() for t in (q, k, v))
    # the real rows: each left-padded sequence alone, unpadded, through is_causal attention
    for b, n in enumerate(lengths.tolist()):
        alone = F.scaled_dot_product_attention(q[b:b + 1, :, T - n:], k[b:b + 1, :, T - n:], v[b:b + 1, :, T - n:],
                                               is_causal=True)
        torch.testing.assert_close(out[b:b + 1, :, T - n:], alone)
    # and the masked softmax agrees with SDPA everywhere, the rescued rows included
    with torch.no_grad():
        by_hand = ref.masked_softmax(q @ k.transpose(-2, -1) / 2.0, mask) @ v
    torch.testing.assert_close(by_hand, out.detach())


def test_attention_mask_rejects_an_unknown_side():
    with pytest.raises(ValueError, match="side"):
        ref.attention_mask(torch.tensor([1, 2]), 3, side="top")


# ---------------------------------------------------------------------------------------------------
# document_mask


def loop_document(ids: list[int], causal: bool) -> list[list[bool]]:
    return [[ids[i] == ids[j] and (j <= i or not causal) for j in range(len(ids))] for i in range(len(ids))]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("ids", [[0, 0, 0, 1, 1, 2], [5, 5, 5, 5], [0, 1, 2, 3], [0, 1, 0, 1, 1], [3, 3, -1, -1, 7]])
def test_document_mask_is_the_loop(ids, causal):
    m = ref.document_mask(torch.tensor([ids, ids[::-1]]), causal=causal)
    assert m.dtype == torch.bool and m.shape == (2, 1, len(ids), len(ids))
    assert m[0, 0].tolist() == loop_document(ids, causal)
    assert m[1, 0].tolist() == loop_document(ids[::-1], causal)


def test_document_mask_equals_attention_on_each_document_alone():
    torch.manual_seed(1)
    sizes = [3, 5, 1, 4]
    ids = torch.tensor([[d for d, n in enumerate(sizes) for _ in range(n)]])
    T = ids.shape[1]
    q, k, v = (torch.randn(1, 2, T, 4) for _ in range(3))
    packed = F.scaled_dot_product_attention(q, k, v, attn_mask=ref.document_mask(ids))
    start = 0
    for n in sizes:
        sl = slice(start, start + n)
        torch.testing.assert_close(packed[..., sl, :],
                                   F.scaled_dot_product_attention(q[..., sl, :], k[..., sl, :], v[..., sl, :],
                                                                  is_causal=True))
        start += n


def test_document_mask_of_one_document_is_the_causal_mask_and_rejects_bad_ids():
    assert torch.equal(ref.document_mask(torch.zeros(1, 6, dtype=torch.int32))[0, 0], ref.causal_mask(6))
    assert torch.equal(ref.document_mask(torch.arange(4)[None], causal=False)[0, 0], torch.eye(4, dtype=torch.bool))
    for bad in (torch.tensor([0, 0, 1]), torch.zeros(1, 3), torch.zeros(1, 2, 3, dtype=torch.long)):
        with pytest.raises(ValueError):
            ref.document_mask(bad)


def multihead_by_hand(mha: nn.MultiheadAttention, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``mha``'s computation written out, with a course mask (True = attend) of shape (B, 1, T, T)."""
    B, T, D = x.shape
    h = mha.num_heads
    q, k, v = F.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (t.reshape(B, T, h, D // h).transpose(1, 2) for t in (q, k, v))  # (B, h, T, d)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D // h)
    out = ref.masked_softmax(scores, mask) @ v  # (B, h, T, d)
    return mha.out_proj(out.transpose(1, 2).reshape(B, T, D))


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_course_masks_match_multihead_attention_negated_and_sdpa_as_they_are(causal, need_weights):
    torch.manual_seed(0)
    B, T, D = 3, 6, 8
    mha = nn.MultiheadAttention(D, num_heads=2, batch_first=True).eval()
    x, lengths = torch.randn(B, T, D), torch.tensor([6, 4, 1])
    with torch.no_grad():
        expected, _ = mha(x, x, x, key_padding_mask=~ref.padding_mask(lengths, T),
                          attn_mask=~ref.causal_mask(T) if causal else None, need_weights=need_weights)
        mask = ref.attention_mask(lengths, T, causal=causal)
        torch.testing.assert_close(multihead_by_hand(mha, x, mask), expected)
        q, k, v = (t.reshape(B, T, 2, D // 2).transpose(1, 2)
                   for t in F.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, dim=-1))
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(mha.out_proj(sdpa.transpose(1, 2).reshape(B, T, D)), expected)


def test_multihead_attention_given_the_course_mask_without_negation_attends_to_the_wrong_keys():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(4, num_heads=1, batch_first=True).eval()
    x, lengths = torch.randn(2, 5, 4), torch.tensor([5, 3])
    with torch.no_grad():
        right, _ = mha(x, x, x, key_padding_mask=~ref.padding_mask(lengths, 5))
        wrong, _ = mha(x, x, x, key_padding_mask=ref.padding_mask(lengths, 5))
    assert not torch.allclose(right[1], wrong[1].nan_to_num(), atol=1e-3)


def test_square_subsequent_mask_is_the_float_form_of_the_negated_causal_mask():
    T = 5
    expected = torch.zeros(T, T).masked_fill(~ref.causal_mask(T), float("-inf"))
    assert torch.equal(nn.Transformer.generate_square_subsequent_mask(T), expected)


# ---------------------------------------------------------------------------------------------------
# masked_softmax


def test_masked_softmax_without_masking_is_the_softmax():
    s = torch.randn(3, 4, 5)
    torch.testing.assert_close(ref.masked_softmax(s, torch.ones(5, dtype=torch.bool)), torch.softmax(s, -1))


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_masked_softmax_matches_minus_infinity_softmax_on_rows_with_keys_and_is_zero_elsewhere(dim):
    g = torch.Generator().manual_seed(dim + 5)
    s = torch.randn(4, 5, 6, generator=g)
    mask = torch.rand(4, 5, 6, generator=g) < 0.5
    p = ref.masked_softmax(s, mask, dim=dim)
    has_key = mask.any(dim=dim, keepdim=True).expand_as(mask)
    expected = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=dim)
    torch.testing.assert_close(p[has_key], expected[has_key])
    assert torch.equal(p[~has_key], torch.zeros(int((~has_key).sum())))
    assert torch.equal(p[~mask], torch.zeros(int((~mask).sum())))


def test_masked_softmax_ignores_garbage_and_huge_values_at_masked_entries():
    s = torch.randn(3, 6)
    mask = torch.arange(6)[None, :] < torch.tensor([[2], [6], [0]])
    garbage = s.clone()
    garbage[~mask] = torch.tensor([1e30, float("inf"), float("nan")]).repeat(int((~mask).sum()))[: int((~mask).sum())]
    torch.testing.assert_close(ref.masked_softmax(garbage, mask), ref.masked_softmax(s, mask))
    assert not ref.masked_softmax(garbage, mask).isnan().any()


def test_masked_softmax_is_stable_at_large_scores():
    s = torch.tensor([[1e4, 1e4 - 1.0, -1e4], [-1e4, -1e4 - 2.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    p = ref.masked_softmax(s, mask)
    assert torch.isfinite(p).all()
    torch.testing.assert_close(p, torch.softmax(s.masked_fill(~mask, float("-inf")), -1))


def test_masked_softmax_passes_gradcheck_with_a_fully_masked_row():
    s = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, False, True, True, False], [False] * 5, [True] * 5])
    assert torch.autograd.gradcheck(lambda t: ref.masked_softmax(t, mask), (s,))
    assert torch.autograd.gradgradcheck(lambda t: ref.masked_softmax(t, mask), (s,))
    ref.masked_softmax(s, mask).pow(2).sum().backward()
    assert torch.isfinite(s.grad).all() and torch.equal(s.grad[1], torch.zeros(5, dtype=torch.float64))
    assert torch.equal(s.grad[0, [1, 4]], torch.zeros(2, dtype=torch.float64))


def test_masked_softmax_gives_zeros_where_minus_infinity_gives_nan():
    s, mask = torch.randn(2, 4), torch.tensor([[True, False, False, False], [False] * 4])
    assert torch.softmax(s.masked_fill(~mask, float("-inf")), -1)[1].isnan().all()
    p = ref.masked_softmax(s, mask)
    assert torch.equal(p[1], torch.zeros(4)) and p[0, 0] == 1


def test_attention_through_masked_softmax_matches_sdpa_on_rows_with_keys():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))
    mask = ref.attention_mask(torch.tensor([5, 2]), 5, causal=True)
    out = ref.masked_softmax(q @ k.transpose(-2, -1) / 2.0, mask) @ v
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_masked_softmax_in_every_dtype_is_the_float64_softmax_rounded(dtype):
    g = torch.Generator().manual_seed(3)
    s = (torch.randn(4, 6, generator=g, dtype=torch.float64) * 3).to(dtype)
    mask = torch.rand(4, 6, generator=g) < 0.6
    mask[1] = False
    p = ref.masked_softmax(s, mask)
    assert p.dtype == dtype
    expected = torch.softmax(s.double().masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 1e-6, torch.float64: 1e-12}[dtype]
    torch.testing.assert_close(p.double(), expected, atol=tol, rtol=tol)


def test_masked_softmax_with_a_lower_rank_mask_and_a_positive_dim_is_the_broadcast_one():
    g = torch.Generator().manual_seed(4)
    s = torch.randn(2, 3, 4, 5, generator=g)
    mask = torch.rand(4, 5, generator=g) < 0.5
    full = mask.expand(s.shape)
    for dim in (0, 1, 2, 3):
        torch.testing.assert_close(ref.masked_softmax(s, mask, dim=dim), ref.masked_softmax(s, full, dim=dim - 4))


def test_masked_softmax_gradient_is_autograd_of_the_plain_softmax_on_rows_with_keys():
    g = torch.Generator().manual_seed(5)
    s = torch.randn(3, 6, generator=g, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(3, 6, generator=g) < 0.6
    mask[:, 0] = True
    upstream = torch.randn(6, dtype=torch.float64, generator=g).expand(3, 6)  # stride 0
    (mine,) = torch.autograd.grad(ref.masked_softmax(s, mask), s, upstream)
    (plain,) = torch.autograd.grad(torch.softmax(s.masked_fill(~mask, float("-inf")), -1), s, upstream)
    torch.testing.assert_close(mine, plain)


def test_masked_softmax_keeps_dtype_and_inputs_and_rejects_bad_masks():
    s = torch.randn(2, 3, dtype=torch.float64)
    mask = torch.tensor([True, False, True])
    before = (s.clone(), mask.clone())
    assert ref.masked_softmax(s, mask).dtype == torch.float64
    assert torch.equal(s, before[0]) and torch.equal(mask, before[1])
    with pytest.raises(TypeError, match="bool tensor"):
        ref.masked_softmax(s, mask.float())
    with pytest.raises(ValueError, match="does not broadcast"):
        ref.masked_softmax(s, torch.ones(4, 2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="does not broadcast"):
        ref.masked_softmax(s, torch.ones(3, 2, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------------
# causal_attention


@pytest.mark.parametrize("batch, T, d_k, d_v", [((), 5, 4, 4), ((2,), 7, 8, 3), ((2, 3), 4, 4, 6), ((2,), 1, 3, 2)])
def test_causal_attention_matches_sdpa_is_causal(batch, T, d_k, d_v):
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(*batch, T, d, generator=g) for d in (d_k, d_k, d_v))
    torch.testing.assert_close(ref.causal_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_causal_attention_matches_multihead_attention_with_the_negated_causal_mask():
    torch.manual_seed(0)
    d = 6
    mha = nn.MultiheadAttention(d, num_heads=1, batch_first=True).eval()
    x = torch.randn(2, 5, d)
    with torch.no_grad():
        expected, _ = mha(x, x, x, attn_mask=~ref.causal_mask(5))
        q, k, v = F.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, dim=-1)
        torch.testing.assert_close(mha.out_proj(ref.causal_attention(q, k, v)), expected)


def test_causal_attention_does_not_see_the_future_and_passes_gradcheck():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 6, 3, generator=g, dtype=torch.float64) for _ in range(3))
    out = ref.causal_attention(q, k, v)
    for t in range(6):
        q2, k2, v2 = (x.clone() for x in (q, k, v))
        for x in (q2, k2, v2):
            x[:, t:] = torch.randn(2, 6 - t, 3, generator=g, dtype=torch.float64)
        torch.testing.assert_close(ref.causal_attention(q2, k2, v2)[:, :t], out[:, :t])
    assert torch.autograd.gradcheck(ref.causal_attention, tuple(x.requires_grad_() for x in (q, k, v)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_causal_attention_keeps_the_dtype_and_matches_sdpa(dtype):
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g, dtype=torch.float64).to(dtype) for _ in range(3))
    out = ref.causal_attention(q, k, v)
    assert out.dtype == dtype
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    tol = {torch.float16: 1e-2, torch.bfloat16: 6e-2, torch.float64: 1e-10}[dtype]
    torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol)


def test_causal_attention_rejects_cross_attention_shapes():
    with pytest.raises(ValueError, match="one length T"):
        ref.causal_attention(torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2))
    with pytest.raises(ValueError, match="share d_k"):
        ref.causal_attention(torch.randn(3, 4), torch.randn(3, 5), torch.randn(3, 2))


# ---------------------------------------------------------------------------------------------------
# case generators and judges


GENERATORS = [("causal_mask_cases", {}), ("padding_mask_cases", {}), ("attention_mask_cases", {}),
              ("document_mask_cases", {}),
              *[("masked_softmax_cases", {"dtype": d, "grad": grad}) for d in ("float32", "float64", "float16",
                                                                               "bfloat16") for grad in (False, True)],
              *[("causal_attention_cases", {"dtype": d}) for d in ("float32", "float64", "float16", "bfloat16")],
              ("future_change_pairs_cases", {})]


@pytest.mark.parametrize("name, params", GENERATORS)
def test_case_generators_are_deterministic_labelled_and_non_empty(name, params):
    assert_generator_is_deterministic_and_labelled(getattr(cases_mod, name), 0, params)


def test_masked_softmax_cases_have_empty_rows_broadcast_masks_other_dims_and_gradients():
    cases = cases_mod.masked_softmax_cases(seed=0)
    assert all(c.args[1].dtype == torch.bool for c in cases)
    empty = [c for c in cases if not c.args[1].expand(c.args[0].shape).any(dim=c.kwargs.get("dim", -1)).all()]
    assert len(empty) >= 4
    assert any(c.args[1].dim() < c.args[0].dim() for c in cases)
    assert {c.kwargs.get("dim", -1) for c in cases} >= {-1, 0, -2}
    assert {c.args[0].dtype for c in cases_mod.masked_softmax_cases(seed=0, dtype="float16")} == {torch.float16}
    for c in cases_mod.masked_softmax_cases(seed=0, grad=True):
        assert c.grad_output is not None and c.grad_output.shape == c.args[0].shape


def test_future_pairs_agree_before_the_change_and_differ_from_it_on():
    cases = cases_mod.future_change_pairs_cases(seed=0)
    assert len(cases) % 2 == 0
    for a, b in zip(cases[::2], cases[1::2]):
        t = cases_mod._first_change(a.args[0], b.args[0])
        assert t >= 1
        for x, y in zip(a.args, b.args):
            assert torch.equal(x[..., :t, :], y[..., :t, :])
            assert (x[..., t:, :] != y[..., t:, :]).all()


def outputs(fn, cases: list[Case]) -> list:
    return [from_plain(o.output) for o in evaluate(fn, cases)]


def test_no_leak_judge_accepts_the_reference_and_sdpa_and_names_the_polarity_bug():
    cases = cases_mod.future_change_pairs_cases(seed=6)
    cases_mod.does_not_see_the_future(cases, outputs(ref.causal_attention, cases))
    cases_mod.does_not_see_the_future(
        cases, outputs(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), cases))

    def buggy(q, k, v):
        T = q.shape[-2]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(T, T, dtype=torch.bool).triu(1))

    with pytest.raises(AssertionError, match="sees the future"):
        cases_mod.does_not_see_the_future(cases, outputs(buggy, cases))


def test_no_leak_judge_checks_shapes_and_nan():
    cases = cases_mod.future_change_pairs_cases(seed=6)

    def transposed(q, k, v):
        return ref.causal_attention(q, k, v).transpose(-2, -1)

    def nan(q, k, v):
        return torch.full((*q.shape[:-1], v.shape[-1]), float("nan"))

    with pytest.raises(AssertionError, match="shape"):
        cases_mod.does_not_see_the_future(cases, outputs(transposed, cases))
    with pytest.raises(AssertionError, match="NaN"):
        cases_mod.does_not_see_the_future(cases, outputs(nan, cases))
