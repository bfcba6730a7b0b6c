"""Chapter 5 (multi-head attention): the reference against independent oracles, and the hidden checks.

Oracles: the definition of a head as a column block, written with slices; ``torch.nn.MultiheadAttention``
(weights copied across, masks complemented, per-head weights); ``F.scaled_dot_product_attention`` per head;
``sum(p.numel())`` of ``nn.MultiheadAttention``, of chapter 10's ``GroupedQueryAttention`` and of a layer
of ``nn.Linear`` layers with any head width for the parameter count. Then ``TorchMultiheadAttention``, the
wrapper through which the hidden check compares a student's module with the built-in; the case generators;
and every hidden check of the notebook, including proof that they fail the head-split bugs in all their forms.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import solutions.cases.multihead as cases_mod
import solutions.multihead as ref
from grader.cells import split_hidden
from grader.checks import Case, CheckFailed, parse_checks, prepare, run_local

from .casecheck import assert_generator_is_deterministic_and_labelled

NOTEBOOK = Path(__file__).resolve().parents[1] / "book" / "ch05_multihead" / "multihead.ipynb"

def hidden_checks() -> dict[str, list]:
    """grade_id of each graded test cell -> the checks of its hidden-test block."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: parse_checks(split_hidden(c.source)[1]) for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade")}


def random_mask(*shape: int, gen: torch.Generator) -> torch.Tensor:
    """Bool mask (True = may attend) with at least one True in every row."""
    mask = torch.rand(*shape, generator=gen) < 0.5
    mask[..., 0] |= ~mask.any(dim=-1)
    return mask


def copy_into_torch(ours: ref.MultiHeadAttention, bias: bool = True) -> nn.MultiheadAttention:
    theirs = nn.MultiheadAttention(ours.d_model, ours.n_heads, bias=bias, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.qkv_proj.weight)
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        if bias:
            theirs.in_proj_bias.copy_(ours.qkv_proj.bias)
            theirs.out_proj.bias.copy_(ours.out_proj.bias)
    return theirs


def randomised(module: nn.Module, seed: int) -> nn.Module:
    """Give every parameter (biases included, which nn.MultiheadAttention sets to 0) random values."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.4)
    return module


# ---------------------------------------------------------------------------------------------------
# split_heads and merge_heads


@pytest.mark.parametrize("shape, h", [((2, 5, 12), 3), ((7, 12), 4), ((2, 3, 4, 10), 5), ((3, 1, 8), 2),
                                      ((2, 4, 6), 1), ((2, 3, 4), 4)])
def test_split_heads_gives_head_i_the_column_block_i_of_every_token(shape, h):
    x = torch.randn(*shape)
    d_head = shape[-1] // h
    y = ref.split_heads(x, h)
    assert y.shape == (*shape[:-2], h, shape[-2], d_head)
    for i in range(h):
        for t in range(shape[-2]):
            assert torch.equal(y[..., i, t, :], x[..., t, i * d_head:(i + 1) * d_head])


def test_split_heads_differs_from_a_view_without_transpose():
    x = torch.arange(2 * 5 * 6).reshape(2, 5, 6)
    buggy = x.view(2, 3, 5, 2)
    assert buggy.shape == ref.split_heads(x, 3).shape
    assert not torch.equal(buggy, ref.split_heads(x, 3))
    assert torch.equal(buggy[0, 0, 1], x[0, 0, 2:4])  # the view's "token 1" of head 0 is a piece of token 0


def test_merge_heads_inverts_split_heads_and_concatenates_the_heads():
    for shape, h in [((2, 5, 12), 3), ((7, 12), 4), ((2, 3, 4, 10), 5), ((2, 4, 6), 1)]:
        x = torch.randn(*shape)
        assert torch.equal(ref.merge_heads(ref.split_heads(x, h)), x)
    heads = torch.randn(2, 4, 5, 3)
    assert torch.equal(ref.merge_heads(heads), torch.cat(heads.unbind(dim=1), dim=-1))
    non_contiguous = torch.randn(2, 6, 3, 5).transpose(1, 2)
    assert torch.equal(ref.merge_heads(non_contiguous), torch.cat(non_contiguous.unbind(dim=1), dim=-1))
    merged = ref.merge_heads(heads)
    assert merged.is_contiguous() and merged.data_ptr() != heads.data_ptr()


def test_split_and_merge_leave_their_inputs_unchanged_and_keep_the_dtype():
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    before = x.clone()
    y = ref.split_heads(x, 4)
    z = ref.merge_heads(y.contiguous())
    assert torch.equal(x, before) and y.dtype == z.dtype == torch.float64


def test_split_and_merge_reject_bad_shapes():
    with pytest.raises(ValueError, match="not divisible"):
        ref.split_heads(torch.randn(2, 4, 10), 4)
    with pytest.raises(ValueError, match="positive"):
        ref.split_heads(torch.randn(2, 4, 10), 0)
    with pytest.raises(ValueError, match=r"\(\.\.\., T, d_model\)"):
        ref.split_heads(torch.randn(10), 2)
    with pytest.raises(ValueError, match=r"\(\.\.\., h, T, d_head\)"):
        ref.merge_heads(torch.randn(4, 3))


# ---------------------------------------------------------------------------------------------------
# heads_attention


def per_head_sdpa(q, k, v, h, mask=None):
    """Oracle: F.scaled_dot_product_attention on the column blocks, one head at a time."""
    d_head = q.shape[-1] // h
    if mask is not None:
        mask = mask.expand(*q.shape[:-2], h, q.shape[-2], k.shape[-2])
    outs = []
    for i in range(h):
        cols = slice(i * d_head, (i + 1) * d_head)
        outs.append(F.scaled_dot_product_attention(q[..., cols], k[..., cols], v[..., cols],
                                                   attn_mask=None if mask is None else mask[..., i, :, :]))
    return torch.cat(outs, dim=-1)


@pytest.mark.parametrize("mask_kind", [None, "causal", "padding", "per_head", "broadcast"])
def test_heads_attention_equals_attention_over_column_blocks(mask_kind):
    gen = torch.Generator().manual_seed(0)
    B, T, d_model, h = 3, 6, 12, 4
    q, k, v = (torch.randn(B, T, d_model, generator=gen) for _ in range(3))
    mask = {None: None, "causal": torch.ones(T, T, dtype=torch.bool).tril(),
            "padding": (torch.arange(T) < torch.tensor([6, 4, 1])[:, None])[:, None, None, :],
            "per_head": random_mask(B, h, T, T, gen=gen), "broadcast": random_mask(B, 1, T, T, gen=gen)}[mask_kind]
    out, weights = ref.heads_attention(q, k, v, h, mask)
    torch.testing.assert_close(out, per_head_sdpa(q, k, v, h, mask))
    assert weights.shape == (B, h, T, T)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, h, T))
    if mask is not None:
        assert (weights[~mask.expand(B, h, T, T)] == 0).all()


def test_heads_attention_equals_multihead_attention_with_identity_projections():
    gen = torch.Generator().manual_seed(1)
    d_model, h = 12, 3
    mha = nn.MultiheadAttention(d_model, h, batch_first=True, bias=False)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.eye(d_model).repeat(3, 1))
        mha.out_proj.weight.copy_(torch.eye(d_model))
        q = torch.randn(2, 3, d_model, generator=gen)
        k, v = torch.randn(2, 7, d_model, generator=gen), torch.randn(2, 7, d_model, generator=gen)
        expected, expected_w = mha(q, k, v, average_attn_weights=False)
    out, weights = ref.heads_attention(q, k, v, h)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_w)


def test_heads_attention_is_causal_under_a_causal_mask():
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 6, 8, generator=gen, requires_grad=True) for _ in range(3))
    out, _ = ref.heads_attention(q, k, v, 2, torch.ones(6, 6, dtype=torch.bool).tril())
    out[:, 2].sum().backward()  # output token 2 must not depend on tokens 3, 4, 5
    for t in (q, k, v):
        assert (t.grad[:, 3:] == 0).all() and t.grad[:, :3].abs().sum() > 0


def test_heads_attention_handles_one_sequence_and_leaves_inputs_unchanged():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 5, 6, generator=gen) for _ in range(3))
    before = [t.clone() for t in (q, k, v)]
    out, weights = ref.heads_attention(q, k, v, 3)
    one, one_w = ref.heads_attention(q[1], k[1], v[1], 3)
    assert one.shape == (5, 6) and one_w.shape == (3, 5, 5)
    torch.testing.assert_close(one, out[1])
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), before))


def test_heads_attention_rejects_mismatched_widths_and_masks():
    q, k, v = torch.randn(2, 4, 6), torch.randn(2, 4, 6), torch.randn(2, 4, 6)
    with pytest.raises(ValueError, match="same width"):
        ref.heads_attention(q, torch.randn(2, 4, 8), v, 2)
    with pytest.raises(ValueError, match="not divisible"):
        ref.heads_attention(q, k, v, 4)
    with pytest.raises(ValueError, match="does not broadcast"):
        ref.heads_attention(q, k, v, 2, torch.ones(2, 3, 4, 4, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------------
# MultiHeadAttention


def test_multihead_attention_has_the_fused_layout_of_the_builtin():
    mha = ref.MultiHeadAttention(12, 3)
    assert list(mha.state_dict()) == ["qkv_proj.weight", "qkv_proj.bias", "out_proj.weight", "out_proj.bias"]
    assert mha.qkv_proj.weight.shape == nn.MultiheadAttention(12, 3).in_proj_weight.shape == (36, 12)
    assert list(ref.MultiHeadAttention(12, 3, bias=False).state_dict()) == ["qkv_proj.weight", "out_proj.weight"]
    with pytest.raises(ValueError, match="not divisible"):
        ref.MultiHeadAttention(10, 4)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mask_kind", [None, "causal", "padding", "per_head"])
def test_multihead_attention_equals_the_builtin_with_copied_weights(bias, mask_kind):
    torch.manual_seed(0)
    B, T, d_model, h = 3, 5, 12, 3
    ours = randomised(ref.MultiHeadAttention(d_model, h, bias=bias), seed=1)
    theirs = copy_into_torch(ours, bias)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(B, T, d_model, generator=gen)
    keep = torch.arange(T) < torch.tensor([5, 3, 1])[:, None]  # (B, T): True = real token
    per_head = random_mask(B, h, T, T, gen=gen)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    with torch.no_grad():
        if mask_kind is None:
            out, w = ours(x, return_weights=True)
            expected, expected_w = theirs(x, x, x, average_attn_weights=False)
        elif mask_kind == "causal":
            out, w = ours(x, causal, return_weights=True)
            expected, expected_w = theirs(x, x, x, attn_mask=~causal, average_attn_weights=False)
        elif mask_kind == "padding":
            out, w = ours(x, keep[:, None, None, :], return_weights=True)
            expected, expected_w = theirs(x, x, x, key_padding_mask=~keep, average_attn_weights=False)
        else:
            out, w = ours(x, per_head, return_weights=True)
            expected, expected_w = theirs(x, x, x, attn_mask=~per_head.reshape(B * h, T, T),
                                          average_attn_weights=False)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(w, expected_w)
        torch.testing.assert_close(ours(x), theirs(x, x, x, need_weights=False)[0])


def test_multihead_attention_gradients_equal_the_builtins():
    ours = randomised(ref.MultiHeadAttention(8, 2), seed=3)
    theirs = copy_into_torch(ours)
    x = torch.randn(2, 4, 8)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    ours(x, causal).square().sum().backward()
    theirs(x, x, x, attn_mask=~causal, need_weights=False)[0].square().sum().backward()
    torch.testing.assert_close(ours.qkv_proj.weight.grad, theirs.in_proj_weight.grad)
    torch.testing.assert_close(ours.qkv_proj.bias.grad, theirs.in_proj_bias.grad)
    torch.testing.assert_close(ours.out_proj.weight.grad, theirs.out_proj.weight.grad)


def test_multihead_attention_returns_a_tensor_unless_asked_for_weights():
    mha, x = ref.MultiHeadAttention(8, 4), torch.randn(2, 3, 8)
    with torch.no_grad():
        assert type(mha(x)) is torch.Tensor
        out, weights = mha(x, return_weights=True)
    assert out.shape == (2, 3, 8) and weights.shape == (2, 4, 3, 3)


def test_head_count_changes_the_function_but_not_the_parameters():
    base = randomised(ref.MultiHeadAttention(8, 1), seed=4)
    other = ref.MultiHeadAttention(8, 4)
    other.load_state_dict(base.state_dict())
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        assert not torch.allclose(base(x), other(x), atol=1e-3)  # same weights, different heads


# ---------------------------------------------------------------------------------------------------
# the wrapper around nn.MultiheadAttention that the hidden check uses as its reference


def test_wrapper_holds_a_builtin_and_shows_the_exercise_parameter_names():
    wrapper = cases_mod.TorchMultiheadAttention(12, 3)
    assert isinstance(wrapper.mha, nn.MultiheadAttention) and wrapper.mha.batch_first
    assert list(wrapper.state_dict()) == list(ref.MultiHeadAttention(12, 3).state_dict())
    assert list(cases_mod.TorchMultiheadAttention(12, 3, bias=False).state_dict()) == \
        ["qkv_proj.weight", "out_proj.weight"]
    state = randomised(ref.MultiHeadAttention(12, 3), seed=5).state_dict()
    wrapper.load_state_dict(state, strict=True)
    assert torch.equal(wrapper.mha.in_proj_weight, state["qkv_proj.weight"])
    assert torch.equal(wrapper.mha.in_proj_bias, state["qkv_proj.bias"])
    assert torch.equal(wrapper.mha.out_proj.weight, state["out_proj.weight"])
    assert all(torch.equal(a, state[k]) for k, a in wrapper.state_dict().items())
    with pytest.raises(RuntimeError, match="Unexpected key"):
        wrapper.load_state_dict({**state, "extra.weight": torch.zeros(1)}, strict=True)
    with pytest.raises(ValueError, match="not divisible"):
        cases_mod.TorchMultiheadAttention(10, 4)


@pytest.mark.parametrize("mask_kind", [None, "causal", "padding", "per_head"])
def test_wrapper_equals_the_reference_and_passes_the_complemented_mask(mask_kind):
    gen = torch.Generator().manual_seed(6)
    B, T, h = 2, 5, 3
    ours = randomised(ref.MultiHeadAttention(12, h), seed=7)
    wrapper = cases_mod.TorchMultiheadAttention(12, h)
    wrapper.load_state_dict(ours.state_dict())
    x = torch.randn(B, T, 12, generator=gen)
    mask = {None: None, "causal": torch.ones(T, T, dtype=torch.bool).tril(),
            "padding": (torch.arange(T) < torch.tensor([5, 2])[:, None])[:, None, None, :],
            "per_head": random_mask(B, h, T, T, gen=gen)}[mask_kind]
    with torch.no_grad():
        out, w = wrapper(x, mask, return_weights=True)
        expected, expected_w = ours(x, mask, return_weights=True)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(w, expected_w)
        torch.testing.assert_close(wrapper(x, mask), expected)
        if mask is not None:  # the built-in really receives True = "may not attend"
            direct, _ = wrapper.mha(x, x, x, attn_mask=~mask.expand(B, h, T, T).reshape(B * h, T, T))
            torch.testing.assert_close(out, direct)
            assert not torch.allclose(wrapper(x, ~mask | torch.eye(T, dtype=torch.bool)), expected, atol=1e-3)


# ---------------------------------------------------------------------------------------------------
# attention_param_count


def grouped_layer(d_model: int, n_heads: int, n_kv_heads: int, d_head: int, bias: bool) -> nn.Module:
    """A grouped-query layer of chapter 10's layout with any head width, made of nn.Linear layers."""
    layer = nn.Module()
    layer.q_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)
    layer.k_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=bias)
    layer.v_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=bias)
    layer.out_proj = nn.Linear(n_heads * d_head, d_model, bias=bias)
    return layer


def numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("d_model, h", [(512, 8), (768, 12), (64, 1), (6, 3), (10, 10), (1, 1)])
@pytest.mark.parametrize("bias", [True, False])
def test_param_count_of_multihead_attention_equals_the_modules_count(d_model, h, bias):
    n = ref.attention_param_count(d_model, h, bias=bias)
    assert type(n) is int
    assert n == numel(nn.MultiheadAttention(d_model, h, bias=bias))
    assert n == numel(ref.MultiHeadAttention(d_model, h, bias=bias))
    assert n == ref.attention_param_count(d_model, h, h, d_model // h, bias)


@pytest.mark.parametrize("d_model, h, h_kv", [(64, 8, 8), (64, 8, 4), (64, 8, 2), (64, 8, 1), (96, 12, 3)])
@pytest.mark.parametrize("bias", [True, False])
def test_param_count_of_grouped_query_attention_equals_chapter_10s_layer(d_model, h, h_kv, bias):
    from solutions.decoding import GroupedQueryAttention

    want = numel(GroupedQueryAttention(d_model, h, h_kv, bias))
    assert ref.attention_param_count(d_model, h, h_kv, bias=bias) == want


@pytest.mark.parametrize("d_model, h, h_kv, d_head", [(48, 4, 4, 16), (48, 4, 2, 16), (10, 4, 1, 8), (64, 8, 2, 4),
                                                      (30, 2, 2, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_param_count_with_any_head_width_equals_a_layer_of_linears(d_model, h, h_kv, d_head, bias):
    want = numel(grouped_layer(d_model, h, h_kv, d_head, bias))
    assert ref.attention_param_count(d_model, h, h_kv, d_head, bias) == want


def test_param_count_is_exact_integer_arithmetic_past_float_precision():
    d = 2**27 + 1
    n = ref.attention_param_count(d, 1)
    assert n == 4 * d * d + 4 * d and n > 2**56
    assert int(4.0 * d * d + 4.0 * d) != n  # what float arithmetic would give


def test_param_count_does_not_depend_on_the_number_of_heads_and_checks_its_sizes():
    assert len({ref.attention_param_count(512, h) for h in (1, 2, 4, 8, 16, 64, 512)}) == 1
    with pytest.raises(ValueError, match="not divisible"):
        ref.attention_param_count(12, 5)
    assert ref.attention_param_count(10, 4, d_head=8) > 0  # with d_head given, n_heads need not divide d_model
    for kwargs in ({"n_kv_heads": 3}, {"n_kv_heads": 16}, {"n_kv_heads": 0}, {"d_head": 0}):
        with pytest.raises(ValueError):
            ref.attention_param_count(512, 8, **kwargs)
    for args in ((0, 1), (512, 0)):
        with pytest.raises(ValueError):
            ref.attention_param_count(*args)


def test_param_count_cases_bound_memory_so_that_building_a_module_fails():
    (check,) = hidden_checks()["test_attention_param_count"]
    cases = prepare(check)
    assert all(c.max_numel is not None and c.max_numel < 64 for c in cases)
    run_local(check, ref.attention_param_count)

    def by_module(d_model, n_heads, n_kv_heads=None, d_head=None, bias=True):
        ref.attention_param_count(d_model, n_heads, n_kv_heads, d_head, bias)  # the same errors
        return numel(grouped_layer(min(d_model, 64), 1, 1, 1, bias))  # even a tiny module allocates

    with pytest.raises(CheckFailed, match="created a tensor"):
        run_local(check, by_module)


# ---------------------------------------------------------------------------------------------------
# case generators


GENERATORS = ["split_heads_cases", "merge_heads_cases", "heads_attention_cases", "multihead_attention_cases",
              "param_count_cases"]


@pytest.mark.parametrize("seed", [0, 1, 7])
@pytest.mark.parametrize("name", GENERATORS)
def test_case_generators_are_deterministic_labelled_and_non_empty(seed, name):
    assert_generator_is_deterministic_and_labelled(getattr(cases_mod, name), seed)


def heads_sizes(case: Case, name: str) -> tuple[int, int, int]:
    """(T, h, d_head) of a case that splits heads."""
    if name == "split_heads_cases":
        x, h = case.args
        return x.shape[-2], h, x.shape[-1] // h
    if name == "merge_heads_cases":
        return case.args[0].shape[-2], case.args[0].shape[-3], case.args[0].shape[-1]
    if name == "heads_attention_cases":
        q, h = case.args[0], case.args[3]
        return q.shape[-2], h, q.shape[-1] // h
    return case.args[0].shape[-2], case.init[1], case.init[0] // case.init[1]


@pytest.mark.parametrize("name", GENERATORS[:4])
def test_cases_keep_tokens_heads_and_features_apart(name):
    """Where T, h and d_head all exceed 1 they differ, so no mix-up of two axes keeps the shape and the
    values; and there are edge cases h = 1, d_head = 1, T = 1 (and invalid widths where the exercise raises)."""
    cases = [c for c in getattr(cases_mod, name)(seed=0) if c.raises is None]
    sizes = [heads_sizes(c, name) for c in cases]
    general = [s for s in sizes if min(s) > 1]
    assert len(general) >= 3
    assert all(len(set(s)) == 3 for s in general), general
    assert any(s[1] == 1 for s in sizes) and any(s[2] == 1 for s in sizes) and any(s[0] == 1 for s in sizes)
    if name in ("split_heads_cases", "multihead_attention_cases"):
        assert any(c.raises == "ValueError" for c in getattr(cases_mod, name)(seed=0))


def test_heads_attention_cases_cover_masks_cross_attention_and_batch_dims():
    cases = cases_mod.heads_attention_cases(seed=0)
    masks = [c.args[4] for c in cases if len(c.args) > 4]
    assert {m.dim() for m in masks} >= {2, 4}
    assert any(m.dim() == 4 and m.shape[1] > 1 for m in masks)  # one mask per head
    assert any(m.dim() == 4 and m.shape[2] == 1 for m in masks)  # key padding (B, 1, 1, T_k)
    assert any(c.args[0].shape[-2] != c.args[1].shape[-2] for c in cases)  # T_q != T_k
    assert {c.args[0].dim() for c in cases} >= {2, 3}
    for c in cases:
        if len(c.args) > 4:
            q, k, h, m = c.args[0], c.args[1], c.args[3], c.args[4]
            assert m.dtype == torch.bool
            assert m.expand(*q.shape[:-2], h, q.shape[-2], k.shape[-2]).any(dim=-1).all(), c.label


def test_multihead_attention_cases_give_weights_with_non_zero_biases_and_cover_the_options():
    cases = cases_mod.multihead_attention_cases(seed=0)
    valid = [c for c in cases if c.raises is None]
    assert all(c.state is not None for c in cases)
    for c in valid:
        ref.MultiHeadAttention(*c.init, **c.init_kwargs).load_state_dict(c.state, strict=True)
        cases_mod.TorchMultiheadAttention(*c.init, **c.init_kwargs).load_state_dict(c.state, strict=True)
        if "qkv_proj.bias" in c.state:
            assert c.state["qkv_proj.bias"].abs().min() > 0 and c.state["out_proj.bias"].abs().max() > 0.1
    assert any(c.init_kwargs == {"bias": False} for c in valid)
    assert any(c.kwargs.get("return_weights") for c in valid) and any("return_weights" not in c.kwargs for c in valid)
    masks = [c.args[1] for c in valid if len(c.args) > 1]
    assert {m.dim() for m in masks} >= {2, 4} and any(m.shape[1] > 1 for m in masks if m.dim() == 4)
    for c in valid:
        if len(c.args) > 1:
            B, T, _ = c.args[0].shape
            assert c.args[1].expand(B, c.init[1], T, T).any(dim=-1).all(), c.label


# ---------------------------------------------------------------------------------------------------
# the notebook's hidden checks


def test_module_check_compares_with_the_builtin_and_bans_builtin_attention():
    checks = hidden_checks()
    (module_check,) = checks["test_MultiHeadAttention"]
    assert module_check.kind == "module"
    assert module_check.reference == "solutions.cases.multihead:TorchMultiheadAttention"
    banned = {"torch.nn.functional.scaled_dot_product_attention", "aten._scaled_dot_product*",
              "torch.nn.functional.multi_head_attention_forward", "aten._native_multi_head_attention"}
    for gid in ("test_heads_attention", "test_MultiHeadAttention"):
        assert all(banned <= set(c.banned) for c in checks[gid]), gid
    for case in prepare(module_check):
        if case.raises is None:
            ref.MultiHeadAttention(*case.init, **case.init_kwargs).load_state_dict(case.state, strict=True)


def test_the_reference_passes_the_module_check_and_the_check_is_against_the_builtin(monkeypatch):
    (module_check,) = hidden_checks()["test_MultiHeadAttention"]
    run_local(module_check, ref.MultiHeadAttention)

    def broken(self, *args, **kwargs):
        raise AssertionError("the built-in was called")

    monkeypatch.setattr(nn.MultiheadAttention, "forward", broken)
    with pytest.raises(AssertionError, match="the built-in was called"):
        run_local(module_check, ref.MultiHeadAttention)


def view_split(x, n_heads):
    *lead, T, d = x.shape
    if d % n_heads:
        raise ValueError("not divisible")
    return x.reshape(*lead, n_heads, T, d // n_heads)


def view_merge(x):
    *lead, h, T, d = x.shape
    return x.reshape(*lead, T, h * d)


def strided_split(x, n_heads):
    *lead, T, d = x.shape
    if d % n_heads:
        raise ValueError("not divisible")
    return x.reshape(*lead, T, d // n_heads, n_heads).movedim(-1, -3)


def strided_merge(x):
    *lead, h, T, d = x.shape
    return x.movedim(-3, -1).reshape(*lead, T, h * d)


def attention_with(split, merge):
    def heads_attention(q, k, v, n_heads, mask=None):
        qh, kh, vh = split(q, n_heads), split(k, n_heads), split(v, n_heads)
        scores = qh @ kh.transpose(-2, -1) / math.sqrt(qh.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return merge(weights @ vh), weights
    return heads_attention


def module_with(split, merge):
    attend = attention_with(split, merge)

    class Broken(ref.MultiHeadAttention):
        def forward(self, x, mask=None, return_weights=False):
            q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
            out, weights = attend(q, k, v, self.n_heads, mask)
            out = self.out_proj(out)
            return (out, weights) if return_weights else out

    return Broken


SPLIT_BUGS = {"view_split": (view_split, ref.merge_heads), "view_merge": (ref.split_heads, view_merge),
              "view_both_ways": (view_split, view_merge), "strided_split": (strided_split, ref.merge_heads),
              "strided_both_ways": (strided_split, strided_merge)}


@pytest.mark.parametrize("bug", sorted(SPLIT_BUGS))
def test_hidden_checks_catch_every_form_of_the_head_split_bug(bug):
    split, merge = SPLIT_BUGS[bug]
    checks = hidden_checks()
    if split is not ref.split_heads:
        with pytest.raises(CheckFailed, match="is wrong on case"):
            run_local(checks["test_split_heads"][0], split)
    if merge is not ref.merge_heads:
        with pytest.raises(CheckFailed, match="is wrong on case"):
            run_local(checks["test_merge_heads"][0], merge)
    with pytest.raises(CheckFailed, match="is wrong on case"):
        run_local(checks["test_heads_attention"][0], attention_with(split, merge))
    with pytest.raises(CheckFailed, match="is wrong on case"):
        run_local(checks["test_MultiHeadAttention"][0], module_with(split, merge))


def test_a_correct_split_written_with_the_same_helpers_passes():
    checks = hidden_checks()
    run_local(checks["test_heads_attention"][0], attention_with(ref.split_heads, ref.merge_heads))
    run_local(checks["test_MultiHeadAttention"][0], module_with(ref.split_heads, ref.merge_heads))
