"""Chapter 6 (residual connections and LayerNorm): the reference against independent oracles, and the
hidden checks.

Oracles: ``torch.nn.functional.layer_norm`` and ``nn.LayerNorm`` (values and autograd gradients; the
hand-written backward against autograd and ``gradcheck``), ``nn.RMSNorm``, SwiGLU written from Shazeer's
equation with einsum,
``nn.TransformerEncoderLayer(norm_first=False/True, dropout=0, batch_first=True)`` with copied weights,
with and without masks, and hand-computed values. Then the built-in wrappers and case generators of
``solutions/cases/residual_norm.py``, and the notebook's hidden checks against right and wrong blocks.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import solutions.cases.residual_norm as cases_mod
import solutions.residual_norm as ref
from grader import cells
from grader.checks import CheckFailed, parse_checks, prepare, run_local

from .casecheck import assert_generator_is_deterministic_and_labelled

NOTEBOOK = Path(__file__).resolve().parents[1] / "book" / "ch06_residual_norm" / "residual_norm.ipynb"
BLOCK_NAMES = sorted([
    "attn.in_proj_weight", "attn.in_proj_bias", "attn.out_proj.weight", "attn.out_proj.bias",
    "ffn.linear1.weight", "ffn.linear1.bias", "ffn.linear2.weight", "ffn.linear2.bias",
    "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"])


def hidden_blocks() -> dict[str, str]:
    return cells.hidden_blocks(nbformat.read(NOTEBOOK, as_version=4))


def randomise(module: nn.Module, seed: int) -> nn.Module:
    """Give every parameter random values, LayerNorm gains and biases and attention biases included."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm1.weight") or name.endswith("norm2.weight"):
                p.copy_(1 + 0.3 * noise)
            elif p.dim() > 1:
                p.copy_(noise / math.sqrt(p.shape[1]))
            else:
                p.copy_(0.2 * noise)
    return module


def torch_layer(block: nn.Module, norm_first: bool) -> nn.TransformerEncoderLayer:
    """PyTorch's encoder layer holding a copy of ``block``'s weights, in eval mode."""
    d_model, n_heads = block.attn.embed_dim, block.attn.num_heads
    layer = nn.TransformerEncoderLayer(d_model, n_heads, block.ffn.linear1.out_features, dropout=0.0,
                                       batch_first=True, norm_first=norm_first)
    layer.load_state_dict(cases_mod.to_torch_names(block.state_dict()), strict=True)
    return layer.eval()


def random_masks(B: int, T: int, gen: torch.Generator) -> torch.Tensor:
    return (torch.rand(B, T, T, generator=gen) < 0.4) | torch.eye(T, dtype=torch.bool)


# ---------------------------------------------------------------------------------------------------
# layer_norm


@pytest.mark.parametrize("shape", [(5,), (4, 8), (2, 3, 6), (2, 1, 3, 7), (3, 1)])
@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_layer_norm_matches_torch_layer_norm(shape, eps):
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=gen) * 3 + 1
    gamma, beta = 1 + torch.randn(shape[-1], generator=gen), torch.randn(shape[-1], generator=gen)
    torch.testing.assert_close(ref.layer_norm(x, gamma, beta, eps), F.layer_norm(x, shape[-1:], gamma, beta, eps))


def test_layer_norm_matches_nn_layer_norm_module_in_float64():
    torch.manual_seed(0)
    norm = randomise(nn.LayerNorm(9).double(), 0)
    x = torch.randn(3, 4, 9, dtype=torch.float64)
    out = ref.layer_norm(x, norm.weight.detach(), norm.bias.detach(), norm.eps)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, norm(x).detach(), atol=1e-12, rtol=1e-12)


def test_layer_norm_by_hand_uses_the_biased_variance():
    x = torch.tensor([2.0, 4.0, 4.0, 6.0])  # mean 4, biased variance 8/4 = 2 (unbiased would be 8/3)
    out = ref.layer_norm(x, torch.ones(4), torch.zeros(4), eps=0.0)
    r2 = math.sqrt(2.0)
    torch.testing.assert_close(out, torch.tensor([-r2, 0.0, 0.0, r2]))


def test_layer_norm_puts_eps_under_the_square_root():
    a, eps = 1e-3, 1e-5
    out = ref.layer_norm(torch.tensor([-a, a], dtype=torch.float64), torch.ones(2, dtype=torch.float64),
                         torch.zeros(2, dtype=torch.float64), eps)
    torch.testing.assert_close(out[1].item(), a / math.sqrt(a * a + eps))  # 0.3015
    assert abs(out[1].item() - a / (a + eps)) > 0.5  # the (std + eps) formula gives 0.990


def test_layer_norm_of_constant_tokens_and_of_one_feature_is_beta():
    beta = torch.tensor([0.5, -1.0, 2.0])
    out = ref.layer_norm(torch.full((4, 3), 7.0), torch.tensor([2.0, 3.0, 4.0]), beta)
    torch.testing.assert_close(out, beta.expand(4, 3))
    torch.testing.assert_close(ref.layer_norm(torch.randn(5, 1), torch.ones(1) * 3, torch.ones(1)), torch.ones(5, 1))


def test_layer_norm_gives_each_token_mean_zero_and_unit_variance_and_ignores_its_scale_and_offset():
    x = torch.randn(6, 32, dtype=torch.float64)
    ones, zeros = torch.ones(32, dtype=torch.float64), torch.zeros(32, dtype=torch.float64)
    y = ref.layer_norm(x, ones, zeros, eps=0.0)
    torch.testing.assert_close(y.mean(-1), torch.zeros(6, dtype=torch.float64))
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(6, dtype=torch.float64))
    torch.testing.assert_close(ref.layer_norm(5 * x - 3, ones, zeros, eps=0.0), y)


def test_layer_norm_gradients_match_torch_and_pass_gradcheck():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    gamma = (1 + torch.randn(5, generator=gen, dtype=torch.float64)).requires_grad_()
    beta = torch.randn(5, generator=gen, dtype=torch.float64, requires_grad=True)
    grad_out = torch.randn(2, 3, 5, generator=gen, dtype=torch.float64)
    ours = torch.autograd.grad(ref.layer_norm(x, gamma, beta, 1e-3), (x, gamma, beta), grad_out)
    theirs = torch.autograd.grad(F.layer_norm(x, (5,), gamma, beta, 1e-3), (x, gamma, beta), grad_out)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(lambda *t: ref.layer_norm(*t, eps=1e-3), (x, gamma, beta))


def test_layer_norm_leaves_inputs_unchanged_and_rejects_bad_gain_and_bias():
    x, gamma, beta = torch.randn(3, 4), torch.randn(4), torch.randn(4)
    before = [t.clone() for t in (x, gamma, beta)]
    ref.layer_norm(x, gamma, beta)
    assert all(torch.equal(a, b) for a, b in zip((x, gamma, beta), before))
    with pytest.raises(ValueError, match="gamma must have shape"):
        ref.layer_norm(x, torch.ones(3), beta)
    with pytest.raises(ValueError, match="beta must have shape"):
        ref.layer_norm(x, gamma, torch.zeros(1, 4))


# ---------------------------------------------------------------------------------------------------
# FeedForward


def test_feed_forward_has_two_named_linear_layers():
    ffn = ref.FeedForward(6, 24)
    assert [n for n, _ in ffn.named_parameters()] == ["linear1.weight", "linear1.bias", "linear2.weight",
                                                      "linear2.bias"]
    assert ffn.linear1.weight.shape == (24, 6) and ffn.linear2.weight.shape == (6, 24)


@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
def test_feed_forward_is_relu_between_two_affine_maps_applied_per_token(batch):
    torch.manual_seed(0)
    ffn = ref.FeedForward(5, 7)
    x = torch.randn(*batch, 4, 5)
    W1, b1, W2, b2 = ffn.linear1.weight, ffn.linear1.bias, ffn.linear2.weight, ffn.linear2.bias
    with torch.no_grad():
        expected = torch.clamp(x @ W1.T + b1, min=0) @ W2.T + b2
        torch.testing.assert_close(ffn(x), expected)
        torch.testing.assert_close(ffn(x)[..., 2, :], ffn(x[..., 2:3, :])[..., 0, :])


def test_feed_forward_equals_the_encoder_layers_feed_forward_block():
    torch.manual_seed(0)
    block = ref.PreNormBlock(8, 2, 12)
    layer = torch_layer(block, norm_first=True)
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        torch.testing.assert_close(block.ffn(x), layer._ff_block(x))


# ---------------------------------------------------------------------------------------------------
# PostNormBlock, PreNormBlock against nn.TransformerEncoderLayer


BLOCKS = [(ref.PostNormBlock, False), (ref.PreNormBlock, True)]


@pytest.mark.parametrize("block_cls, norm_first", BLOCKS)
def test_blocks_have_the_submodules_and_parameter_names_of_the_chapter(block_cls, norm_first):
    block = block_cls(12, 3, 20)
    assert isinstance(block.attn, nn.MultiheadAttention) and block.attn.batch_first
    assert block.attn.num_heads == 3 and block.attn.dropout == 0.0
    assert isinstance(block.ffn, ref.FeedForward)
    assert isinstance(block.norm1, nn.LayerNorm) and isinstance(block.norm2, nn.LayerNorm)
    assert sorted(block.state_dict()) == BLOCK_NAMES
    assert sorted(cases_mod.to_torch_names(block.state_dict())) == sorted(torch_layer(block, norm_first).state_dict())


@pytest.mark.parametrize("block_cls, norm_first", BLOCKS)
@pytest.mark.parametrize("mask_kind", ["none", "causal", "per_sequence", "padding", "broadcast"])
def test_blocks_equal_torch_encoder_layer_after_copying_weights(block_cls, norm_first, mask_kind):
    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(2)
    B, T, d_model, n_heads = 3, 6, 16, 4
    block = randomise(block_cls(d_model, n_heads, 24), seed=3).eval()
    layer = torch_layer(block, norm_first)
    x = torch.randn(B, T, d_model, generator=gen)
    ours_mask = {
        "none": None,
        "causal": torch.ones(T, T, dtype=torch.bool).tril(),
        "per_sequence": random_masks(B, T, gen),
        "padding": (torch.arange(T) < torch.tensor([6, 4, 1])[:, None])[:, None, :].expand(B, T, T),
        "broadcast": torch.ones(1, T, T, dtype=torch.bool).tril(),
    }[mask_kind]
    # PyTorch's bool src_mask: True = may NOT attend; a 3-D one is (B * n_heads, T, T), sequence-major
    if ours_mask is None:
        torch_mask = None
    elif ours_mask.dim() == 2:
        torch_mask = ~ours_mask
    else:
        torch_mask = torch.cat([~ours_mask.expand(B, T, T)[b].expand(n_heads, T, T) for b in range(B)])
    with torch.no_grad():
        torch.testing.assert_close(block(x, ours_mask), layer(x, src_mask=torch_mask), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_cls, norm_first", BLOCKS)
def test_block_input_gradients_equal_torch_encoder_layer(block_cls, norm_first):
    torch.manual_seed(4)
    block = randomise(block_cls(8, 2, 16), seed=5).eval()
    layer = torch_layer(block, norm_first)
    x, grad_out, causal = torch.randn(2, 5, 8), torch.randn(2, 5, 8), torch.ones(5, 5, dtype=torch.bool).tril()
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    (ga,) = torch.autograd.grad(block(xa, causal), xa, grad_out)
    (gb,) = torch.autograd.grad(layer(xb, src_mask=~causal), xb, grad_out)
    torch.testing.assert_close(ga, gb, atol=1e-5, rtol=1e-5)


def test_post_norm_and_pre_norm_are_different_blocks():
    torch.manual_seed(6)
    post = randomise(ref.PostNormBlock(8, 2, 16), seed=7).eval()
    pre = ref.PreNormBlock(8, 2, 16).eval()
    pre.load_state_dict(post.state_dict())
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        assert (post(x) - pre(x)).abs().max() > 0.1
        # the popular error: a "post-norm" block written as pre-norm equals PyTorch's norm_first=True
        torch.testing.assert_close(pre(x), torch_layer(post, norm_first=True)(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_cls", [ref.PostNormBlock, ref.PreNormBlock])
def test_causal_mask_keeps_the_future_out(block_cls):
    torch.manual_seed(8)
    block = block_cls(8, 2, 16).eval()
    x, causal = torch.randn(2, 6, 8), torch.ones(6, 6, dtype=torch.bool).tril()
    x_changed = x.clone()
    x_changed[:, 4:] = torch.randn(2, 2, 8) * 10
    with torch.no_grad():
        torch.testing.assert_close(block(x, causal)[:, :4], block(x_changed, causal)[:, :4])
        assert not torch.allclose(block(x)[:, :4], block(x_changed)[:, :4], atol=1e-3)


def test_post_norm_output_is_normalised_and_pre_norm_output_is_not():
    torch.manual_seed(9)
    x = torch.randn(2, 5, 16) * 4
    with torch.no_grad():
        post, pre = ref.PostNormBlock(16, 4, 32).eval()(x), ref.PreNormBlock(16, 4, 32).eval()(x)
    torch.testing.assert_close(post.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(post.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3, rtol=0)
    assert (pre.var(-1, unbiased=False) - 1).abs().max() > 1


def test_pre_norm_residual_path_is_the_identity_when_the_branches_are_silenced():
    torch.manual_seed(10)
    block = randomise(ref.PreNormBlock(8, 2, 16), seed=11).eval()
    with torch.no_grad():
        for p in (block.attn.out_proj.weight, block.attn.out_proj.bias, block.ffn.linear2.weight,
                  block.ffn.linear2.bias):
            p.zero_()
        x = torch.randn(2, 4, 8) * 3
        torch.testing.assert_close(block(x), x)


def test_blocks_leave_inputs_unchanged_and_reject_bad_masks():
    block = ref.PostNormBlock(8, 2, 16).eval()
    x, mask = torch.randn(2, 4, 8), torch.ones(4, 4, dtype=torch.bool).tril()
    before = (x.clone(), mask.clone())
    with torch.no_grad():
        block(x, mask)
    assert torch.equal(x, before[0]) and torch.equal(mask, before[1])
    with pytest.raises(TypeError, match="bool tensor"):
        block(x, torch.ones(4, 4))
    with pytest.raises(ValueError, match=r"\(T, T\)"):
        block(x, torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"\(B, T, T\)"):
        block(x, torch.ones(3, 4, 4, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------------
# the built-in wrappers and the case generators


@pytest.mark.parametrize("wrapper, block_cls", [(cases_mod.TorchPostNormBlock, ref.PostNormBlock),
                                                (cases_mod.TorchPreNormBlock, ref.PreNormBlock)])
def test_torch_wrappers_speak_the_chapters_parameter_names(wrapper, block_cls):
    torch.manual_seed(0)
    ours = randomise(block_cls(8, 2, 12), seed=1).eval()
    theirs = wrapper(8, 2, 12).eval()
    assert sorted(theirs.state_dict()) == BLOCK_NAMES
    theirs.load_state_dict(ours.state_dict(), strict=True)
    for name, value in ours.state_dict().items():
        assert torch.equal(theirs.state_dict()[name], value), name
    with pytest.raises(RuntimeError, match="Missing key"):
        theirs.load_state_dict({k: v for k, v in ours.state_dict().items() if k != "norm2.bias"})
    x, masks = torch.randn(3, 5, 8), random_masks(3, 5, torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(theirs(x, masks), ours(x, masks), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(theirs(x), ours(x), atol=1e-5, rtol=1e-5)


def test_renaming_round_trips():
    state = ref.PostNormBlock(4, 2, 6).state_dict()
    assert cases_mod.from_torch_names(cases_mod.to_torch_names(state)).keys() == state.keys()
    with pytest.raises(KeyError, match="unexpected parameter name"):
        cases_mod.to_torch_names({"norm3.weight": torch.ones(4)})


GENERATORS = [("layer_norm_cases", {}), ("layer_norm_cases", {"double": True}), ("feed_forward_cases", {}),
              ("block_cases", {}), ("layer_norm_offset_cases", {}), ("swiglu_cases", {}),
              *[(name, {"dtype": dt}) for name in ("layer_norm_cases", "rms_norm_cases", "layer_norm_backward_cases")
                for dt in ("float16", "bfloat16", "float32", "float64")],
              ("layer_norm_backward_cases", {"dtype": "offset"})]


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_case_generators_are_deterministic_labelled_and_non_empty(seed):
    for name, params in GENERATORS:
        assert_generator_is_deterministic_and_labelled(getattr(cases_mod, name), seed, params)


def test_layer_norm_cases_cover_shapes_eps_small_variance_and_gradients():
    cases = cases_mod.layer_norm_cases(seed=0) + cases_mod.layer_norm_cases(seed=0, double=True)
    assert {c.args[0].dim() for c in cases} >= {2, 3, 4}
    assert {c.args[0].shape[-1] for c in cases} >= {1, 2}
    assert {c.args[0].dtype for c in cases} == {torch.float32, torch.float64}
    assert any(c.kwargs.get("eps", 0) >= 0.1 for c in cases)
    assert any(float(c.args[0].std(-1).max()) < 1e-2 for c in cases if c.args[0].shape[-1] > 1)
    assert any(c.grad_output is not None for c in cases)
    assert all(not torch.equal(c.args[1], torch.ones_like(c.args[1])) for c in cases)  # gains are not 1
    for c in cases:
        assert c.args[1].shape == c.args[2].shape == c.args[0].shape[-1:]


def test_block_cases_cover_masks_and_bring_weights_that_fit_the_blocks():
    cases = cases_mod.block_cases(seed=0)
    masks = [c.args[1] for c in cases if len(c.args) > 1]
    assert {m.dim() for m in masks} == {2, 3}
    per_sequence = [m for m in masks if m.dim() == 3]
    assert any(not torch.equal(m[0], m[1]) for m in per_sequence)
    assert any(c.init[1] > 1 and c.args[0].shape[0] > 1 for c in cases if len(c.args) > 1 and c.args[1].dim() == 3)
    assert any(c.grad_output is not None for c in cases)
    for c in cases:
        assert c.state is not None and sorted(c.state) == BLOCK_NAMES
        ref.PostNormBlock(*c.init).load_state_dict(c.state, strict=True)
        assert not torch.equal(c.state["norm1.weight"], c.state["norm2.weight"])
        if len(c.args) > 1:
            T = c.args[0].shape[1]
            assert c.args[1].dtype == torch.bool and c.args[1].any(dim=-1).all(), c.label
            assert c.args[1].shape[-2:] == (T, T)


# ---------------------------------------------------------------------------------------------------
# the notebook's hidden checks


def test_block_checks_compare_with_pytorchs_own_encoder_layer():
    blocks = hidden_blocks()
    for name, wrapper in (("PostNormBlock", "TorchPostNormBlock"), ("PreNormBlock", "TorchPreNormBlock")):
        checks = parse_checks(blocks[f"test_{name}"])
        assert any(c.kind == "module" and c.reference == f"solutions.cases.residual_norm:{wrapper}"
                   for c in checks), name
        for check in checks:
            for case in prepare(check):
                assert case.state is not None


def test_layer_norm_checks_ban_the_built_in_normalisations():
    for check in parse_checks(hidden_blocks()["test_layer_norm"]):
        assert {"torch.nn.functional.layer_norm", "aten.native_layer_norm", "aten.native_group_norm",
                "aten.native_batch_norm"} <= set(check.banned)


@pytest.mark.parametrize("target, wrong", [
    ("PostNormBlock", ref.PreNormBlock),  # the bug hunt: pre-norm sold as post-norm
    ("PreNormBlock", ref.PostNormBlock),
])
def test_block_checks_fail_the_other_placement_with_a_message_naming_the_case(target, wrong):
    for check in parse_checks(hidden_blocks()[f"test_{target}"]):
        with pytest.raises(CheckFailed, match=r"is wrong on case '.+'"):
            run_local(check, wrong)


@pytest.mark.filterwarnings("ignore:var\\(\\)")  # the unbiased variance of one feature divides by 0
def test_layer_norm_checks_fail_the_unbiased_variance():
    def unbiased(x, gamma, beta, eps=1e-5):
        return gamma * (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) + beta

    for check in parse_checks(hidden_blocks()["test_layer_norm"]):
        with pytest.raises(CheckFailed):
            run_local(check, unbiased)


# ---------------------------------------------------------------------------------------------------
# layer_norm_backward, rms_norm, SwiGLU against independent oracles


@pytest.mark.parametrize("shape, eps", [((5, 8), 1e-5), ((2, 3, 6), 0.1), ((7,), 1e-5), ((2, 2, 3, 4), 0.5),
                                        ((4, 2), 0.01)])
def test_layer_norm_backward_equals_autograd_of_f_layer_norm(shape, eps):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(*shape, dtype=torch.float64, generator=g, requires_grad=True)
    gamma = (1 + 0.5 * torch.randn(shape[-1], dtype=torch.float64, generator=g)).requires_grad_()
    beta = torch.randn(shape[-1], dtype=torch.float64, generator=g, requires_grad=True)
    go = torch.randn(*shape, dtype=torch.float64, generator=g)
    F.layer_norm(x, shape[-1:], gamma, beta, eps=eps).backward(go)
    dx, dgamma, dbeta = ref.layer_norm_backward(go, x.detach(), gamma.detach(), eps)
    torch.testing.assert_close(dx, x.grad, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(dgamma, gamma.grad, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(dbeta, beta.grad, atol=1e-12, rtol=1e-10)


def test_layer_norm_backward_passes_gradcheck_as_the_backward_of_an_autograd_function():
    class ByHand(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, gamma, beta):
            ctx.save_for_backward(x, gamma)
            return ref.layer_norm(x, gamma, beta, 0.01)

        @staticmethod
        def backward(ctx, grad_out):
            x, gamma = ctx.saved_tensors
            return ref.layer_norm_backward(grad_out, x, gamma, 0.01)

    g = torch.Generator().manual_seed(4)
    args = (torch.randn(2, 3, 5, dtype=torch.float64, generator=g, requires_grad=True),
            torch.randn(5, dtype=torch.float64, generator=g, requires_grad=True),
            torch.randn(5, dtype=torch.float64, generator=g, requires_grad=True))
    assert torch.autograd.gradcheck(ByHand.apply, args)


def test_layer_norm_backward_takes_stride_zero_and_half_precision_grad_out():
    x = torch.randn(3, 4, 6)
    gamma = torch.randn(6)
    dx, dgamma, dbeta = ref.layer_norm_backward(torch.ones(6).expand(3, 4, 6), x, gamma)
    xr = x.clone().requires_grad_()
    ref.layer_norm(xr, gamma, torch.zeros(6)).sum().backward()
    torch.testing.assert_close(dx, xr.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(dbeta, torch.full((6,), 12.0))
    half = ref.layer_norm_backward(torch.ones(3, 4, 6, dtype=torch.float16), x.half(), gamma.half())
    assert all(t.dtype == torch.float16 for t in half)
    torch.testing.assert_close(half[0].float(), dx, atol=1e-2, rtol=1e-2)


def test_rms_norm_equals_nn_rms_norm_with_eps_1e6_and_documents_torchs_default():
    g = torch.Generator().manual_seed(5)
    for dtype in (torch.float32, torch.float64):
        x = (torch.randn(2, 5, 8, generator=g) + 1.0).to(dtype)
        module = nn.RMSNorm(8, eps=1e-6, dtype=dtype)
        with torch.no_grad():
            module.weight.copy_(1 + 0.5 * torch.randn(8, generator=g))
            torch.testing.assert_close(ref.rms_norm(x, module.weight), module(x))
    tiny = 1e-4 * torch.randn(3, 8, generator=g)
    ones = torch.ones(8)
    with torch.no_grad():
        torch.testing.assert_close(ref.rms_norm(tiny, ones), nn.RMSNorm(8, eps=1e-6)(tiny))
        # nn.RMSNorm's default eps=None is float32's machine epsilon, not 1e-6: far apart for a tiny token
        assert not torch.allclose(ref.rms_norm(tiny, ones), nn.RMSNorm(8)(tiny), atol=1e-2)
        torch.testing.assert_close(ref.rms_norm(tiny, ones, torch.finfo(torch.float32).eps), nn.RMSNorm(8)(tiny))


def test_rms_norm_squares_half_precision_in_float32():
    x = 300 * torch.randn(4, 8)
    y = ref.rms_norm(x.half(), torch.ones(8, dtype=torch.float16))
    assert y.dtype == torch.float16 and torch.isfinite(y).all()
    torch.testing.assert_close(y.float(), ref.rms_norm(x, torch.ones(8)), atol=1e-2, rtol=1e-2)


def test_swiglu_equals_shazeers_equation_written_with_einsum():
    torch.manual_seed(6)
    m = ref.SwiGLU(6, 16)
    assert sorted(n for n, _ in m.named_parameters()) == ["down_proj.weight", "gate_proj.weight", "up_proj.weight"]
    assert sum(p.numel() for p in m.parameters()) == 3 * 6 * 16
    x = torch.randn(2, 3, 6)
    W, V, W2 = m.gate_proj.weight.T, m.up_proj.weight.T, m.down_proj.weight.T  # (d, d_ff), (d, d_ff), (d_ff, d)
    xw = torch.einsum("btd,df->btf", x, W)
    expected = torch.einsum("btf,fd->btd", xw * torch.sigmoid(xw) * torch.einsum("btd,df->btf", x, V), W2)
    with torch.no_grad():
        torch.testing.assert_close(m(x), expected)


def test_llama_width_is_two_thirds_of_4d_rounded_up_to_a_multiple():
    assert ref.swiglu_hidden(4096) == 11008  # Llama 7B's intermediate size
    assert ref.swiglu_hidden(5120) == 13824  # Llama 13B
    for d in (64, 512, 4096):
        assert ref.swiglu_hidden(d) % 256 == 0 and ref.swiglu_hidden(d) >= 8 * d / 3


def test_block_cases_keep_relu_in_its_linear_range_so_a_wrong_feed_forward_costs_only_its_exercise():
    for c in cases_mod.block_cases(seed=5) + cases_mod.block_cases(seed=6):
        for block_cls in (ref.PostNormBlock, ref.PreNormBlock):
            block = block_cls(*c.init)
            block.load_state_dict(c.state)
            seen = []
            block.ffn.linear1.register_forward_hook(lambda mod, inp, out, seen=seen: seen.append(out.detach()))
            with torch.no_grad():
                block.eval()(*c.args)
            assert 0 < float(seen[0].min()) and float(seen[0].max()) < 6, c.label

    class ClippedFeedForward(ref.FeedForward):  # a FeedForward mistake: ReLU6
        def forward(self, x):
            return self.linear2(F.relu6(self.linear1(x)))

    class PreWithClipped(ref.PreNormBlock):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__(d_model, n_heads, d_ff)
            self.ffn = ClippedFeedForward(d_model, d_ff)

    for check in parse_checks(hidden_blocks()["test_PreNormBlock"]):
        run_local(check, PreWithClipped)  # the block's points are not lost
    for check in parse_checks(hidden_blocks()["test_FeedForward"]):
        with pytest.raises(CheckFailed, match="above 6"):
            run_local(check, ClippedFeedForward)


def test_new_checks_fail_the_classic_mistakes():
    def one_pass(x, gamma, beta, eps=1e-5):
        m = x.mean(-1, keepdim=True)
        return (x - m) / ((x * x).mean(-1, keepdim=True) - m * m + eps).sqrt() * gamma + beta

    def eps_outside(x, weight, eps=1e-6):
        return weight * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps)

    def no_mean_terms(grad_out, x, gamma, eps=1e-5):
        dx, dgamma, dbeta = ref.layer_norm_backward(grad_out, x, gamma, eps)
        rstd = torch.rsqrt(x.var(-1, keepdim=True, correction=0) + eps)
        return (grad_out * gamma * rstd).to(x.dtype), dgamma, dbeta

    blocks = hidden_blocks()
    for test, wrong in (("test_layer_norm", one_pass), ("test_rms_norm", eps_outside),
                        ("test_layer_norm_backward", no_mean_terms)):
        failed = 0
        for check in parse_checks(blocks[test]):
            try:
                run_local(check, wrong)
            except CheckFailed:
                failed += 1
        assert failed >= 1, test


def test_swiglu_takes_llamas_width_when_d_ff_is_none_and_keeps_a_given_one():
    def width(*args, **kwargs):
        with torch.device("meta"):
            return ref.SwiGLU(*args, **kwargs).gate_proj.out_features

    assert width(4096) == 11008 == ref.swiglu_hidden(4096)  # Llama 7B's intermediate_size
    assert [width(4, multiple_of=10), width(7, multiple_of=1), width(33, multiple_of=16)] == [10, 18, 96]
    assert width(6, 16, multiple_of=7) == 16
