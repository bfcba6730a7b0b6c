"""Hidden-test cases for chapter 6 (residual connections and LayerNorm), and the built-in references.

Generators ``<name>_cases(seed, **params) -> list[Case]`` draw every tensor from a ``torch.Generator``
seeded with ``seed``; their labels are shown to a student whose code fails a case.

The blocks are checked against PyTorch itself: :class:`TorchPostNormBlock` and :class:`TorchPreNormBlock`
hold an ``nn.TransformerEncoderLayer`` (``norm_first=False`` / ``True``, dropout 0, batch_first) but read
and write their weights under the chapter's names (``attn.*``, ``ffn.linear1.*``, ``ffn.linear2.*``,
``norm1.*``, ``norm2.*``), so a hidden check can hand the student's block and the built-in layer the very
same weights. Every block case brings its own random weights, LayerNorm gains and biases included, so that
a block that swaps ``norm1`` and ``norm2`` or drops a bias cannot pass by luck.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from grader.checks import Case
from solutions.cases.families import DTYPES, expanded, non_contiguous, randn, tag

# ---------------------------------------------------------------------------------------------------
# nn.TransformerEncoderLayer under the chapter's parameter names

#: the chapter's name prefix -> ``nn.TransformerEncoderLayer``'s
TORCH_PREFIX = {"attn.": "self_attn.", "ffn.linear1.": "linear1.", "ffn.linear2.": "linear2.",
                "norm1.": "norm1.", "norm2.": "norm2."}


def _rename(name: str, table: dict[str, str]) -> str:
    for old, new in table.items():
        if name.startswith(old):
            return new + name[len(old):]
    raise KeyError(f"unexpected parameter name {name!r}; expected names starting with {sorted(table)}")


def to_torch_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A block's ``state_dict`` with ``nn.TransformerEncoderLayer``'s parameter names."""
    return {_rename(k, TORCH_PREFIX): v for k, v in state.items()}


def from_torch_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An ``nn.TransformerEncoderLayer`` ``state_dict`` with the chapter's parameter names."""
    return {_rename(k, {v: k for k, v in TORCH_PREFIX.items()}): v for k, v in state.items()}


def course_mask_to_torch(mask: torch.Tensor | None, B: int, n_heads: int) -> torch.Tensor | None:
    """The course's mask (True = may attend; ``(T, T)`` or ``(B, T, T)``) as ``src_mask`` of
    ``nn.TransformerEncoderLayer`` (True = may NOT attend; ``(T, T)`` or ``(B * n_heads, T, T)``)."""
    if mask is None:
        return None
    if mask.dim() == 3:
        mask = mask.expand(B, *mask.shape[-2:]).repeat_interleave(n_heads, dim=0)
    return ~mask


class _TorchBlock(nn.Module):
    norm_first: bool

    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.n_heads = n_heads
        self.layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, batch_first=True,
                                                norm_first=self.norm_first)

    def state_dict(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        return from_torch_names(self.layer.state_dict(*args, **kwargs))

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self.layer.load_state_dict(to_torch_names(state_dict), strict=strict, assign=assign)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.layer(x, src_mask=course_mask_to_torch(mask, x.shape[0], self.n_heads))


class TorchPostNormBlock(_TorchBlock):
    """``nn.TransformerEncoderLayer(norm_first=False)`` with the parameter names of ``PostNormBlock``."""

    norm_first = False


class TorchPreNormBlock(_TorchBlock):
    """``nn.TransformerEncoderLayer(norm_first=True)`` with the parameter names of ``PreNormBlock``."""

    norm_first = True


# ---------------------------------------------------------------------------------------------------
# helpers


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _causal(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril()  # (T, T): query i sees keys 0..i


def _random_masks(g: torch.Generator, B: int, T: int) -> torch.Tensor:
    """``(B, T, T)`` random masks, different per sequence, each token allowed to see itself."""
    return (torch.rand(B, T, T, generator=g) < 0.5) | torch.eye(T, dtype=torch.bool)


def _padding_masks(B: int, T: int, lengths: list[int]) -> torch.Tensor:
    """``(B, T, T)`` key-padding masks: ``m[b, i, j] = j < lengths[b]`` (every query keeps key 0)."""
    keys = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    return keys[:, None, :].expand(B, T, T).clone()


# ---------------------------------------------------------------------------------------------------
# layer_norm


def _affine(g: torch.Generator, d: int, dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return randn(g, d, scale=0.5, shift=1.0, dtype=dt), randn(g, d, dtype=dt)


def layer_norm_cases(seed: int, dtype: str = "float32", double: bool = False) -> list[Case]:
    """Cases in one dtype of the matrix (``double=True`` is ``dtype="float64"``, kept for old checks).

    Gains and biases are random (a missing gamma or beta shows), sizes are small (the biased and the
    unbiased variance differ by d / (d - 1)), and some cases have a large ``eps`` or a tiny variance
    (``sqrt(var + eps)`` and ``std + eps`` differ there, and so does another default eps).
    """
    if double:
        dtype = "float64"
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def case(shape: tuple[int, ...], label: str, eps: float | None = None, scale: float = 1.0,
             offset: float = 0.0, grad: bool = False, layout=None) -> Case:
        d = shape[-1]
        x = randn(g, *shape, scale=scale, shift=offset, dtype=dt)
        gamma, beta = _affine(g, d, dt)
        kwargs = {} if eps is None else {"eps": eps}
        grad_output = randn(g, *shape, dtype=dt) if grad else None
        return Case(args=(x if layout is None else layout(x), gamma, beta), kwargs=kwargs, label=label if label.startswith("float64") else tag(label, dtype),
                    grad_output=grad_output)

    if dtype == "float64":
        return [
            case((4, 6), "float64, rows of d=6, default eps"),
            case((3, 5), "float64, eps=0.1 (sqrt(var + eps), not std + eps)", eps=0.1),
            case((2, 3, 7), "float64, tiny variance (std 1e-3) around an offset of 3, eps=1e-5",
                 scale=1e-3, offset=3.0),
            case((2, 4, 5), "float64, gradients with respect to x, gamma and beta", grad=True),
            case((3, 2), "float64, d=2, gradients (the mean and the variance depend on x too)", eps=0.01,
                 grad=True),
        ]
    if dtype in ("float16", "bfloat16"):
        return [
            case((2, 3, 16), "half precision: (B=2, T=3, d=16), the result in x's dtype"),
            case((4, 8), "half precision: tokens of spread 300, whose squared deviations overflow float16",
                 scale=300.0),
            case((3, 12), "half precision: eps=0.25 by keyword", eps=0.25),
        ]
    constant = torch.full((3, 5), 2.5)
    return [
        case((5, 8), "rows of d=8 features, default eps"),
        case((2, 3, 4, 6), "three leading dims (2, 3, 4), d=6"),
        case((6, 4), "d=4 (the biased variance divides by d, not d - 1)"),
        case((2, 3, 2), "d=2, leading dims (2, 3)"),
        case((4, 1), "d=1: every token normalises to 0, so the output is beta"),
        case((3, 6), "eps=0.5 passed by keyword (sqrt(var + eps), not std + eps)", eps=0.5),
        case((4, 7), "features of std 1e-3 with the default eps=1e-5 (eps is not negligible here)",
             scale=1e-3),
        case((3, 5), "large values: 100 + 10 * noise", scale=10.0, offset=100.0),
        Case(args=(constant, *_affine(g, 5, dt)), label="constant tokens (variance 0): the output is beta"),
        case((3, 9), "d=9 features, more features than tokens"),
        case((2, 3, 5), "gradients with respect to x, gamma and beta", grad=True),
        case((4, 6), "a non-contiguous x (stride 2 along the features)", layout=non_contiguous),
        case((5, 6), "an expanded x (stride 0 along a new leading dim)", layout=lambda x: expanded(x[0], 5)),
        case((4, 3, 6), "a transposed x (B and T swapped in memory)", layout=lambda x: x.transpose(0, 1)),
    ]


def layer_norm_offset_cases(seed: int) -> list[Case]:
    """Tokens far from zero with unit spread: ``E[x^2] - E[x]^2`` subtracts two numbers of size 1e8 (float32) or
    1e16 (float64) and keeps no digit of the variance, while centring first keeps it. Two-pass results in float32
    agree only to about 2e-3 here (the mean itself is rounded), so the check's tolerance is 1e-2."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for dtype, offset, label in (("float32", 1e4, "float32 tokens around 1e4 with unit spread (one-pass variance "
                                                   "E[x^2] - E[x]^2 cancels)"),
                                 ("float64", 1e8, "float64 tokens around 1e8 with unit spread (one-pass variance "
                                                   "cancels)")):
        dt = DTYPES[dtype]
        out.append(Case(args=(randn(g, 6, 16, shift=offset, dtype=dt), *_affine(g, 16, dt)), label=label))
    return out


# ---------------------------------------------------------------------------------------------------
# layer_norm_backward


def layer_norm_backward_cases(seed: int, dtype: str = "float32") -> list[Case]:
    """Gradient-like ``grad_out`` of every layout: dense random, the stride-0 ones of ``loss = y.sum()``, a
    transposed view; leading dims of every rank (``dgamma``/``dbeta`` sum over all of them); a single token.
    ``dtype="offset"``: tokens around 1e4 (float32) with unit spread, checked at 1e-2 (see the forward)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == "offset":
        x = randn(g, 6, 16, shift=1e4)
        return [Case(args=(randn(g, 6, 16), x, randn(g, 16, scale=0.5, shift=1.0)),
                     label="float32 tokens around 1e4 with unit spread (one-pass variance cancels)")]
    dt = DTYPES[dtype]

    def case(shape: tuple[int, ...], label: str, eps: float | None = None, scale: float = 1.0,
             grad=None, x_layout=None, fresh: bool = False) -> Case:
        x = randn(g, *shape, scale=scale, dtype=dt)
        go = randn(g, *shape, dtype=dt) if grad is None else grad
        gamma = randn(g, shape[-1], scale=0.5, shift=1.0, dtype=dt)
        kwargs = {} if eps is None else {"eps": eps}
        return Case(args=(go, x if x_layout is None else x_layout(x), gamma), kwargs=kwargs, fresh=fresh,
                    label=label if label.startswith("float64") else tag(label, dtype))

    if dtype != "float32":
        out = [case((3, 4, 16), "(B=3, T=4, d=16), a dense grad_out, default eps"),
               case((5, 6), "d=6, eps=0.1 by keyword", eps=0.1)]
        if dtype == "float16":
            out.append(case((4, 8), "tokens of spread 300, whose squared deviations overflow float16; grad_out of "
                            "scale 300", scale=300.0, grad=randn(g, 4, 8, scale=300.0, dtype=dt)))
        return out
    transposed = randn(g, 7, 3, 5).transpose(0, 1)  # (3, 7, 5) with non-unit strides
    return [
        case((5, 8), "5 tokens of d=8, a dense grad_out, default eps"),
        case((2, 3, 6), "leading dims (2, 3): dgamma and dbeta sum over every token of every sequence"),
        case((2, 2, 3, 4), "three leading dims (2, 2, 3), d=4"),
        case((7,), "a single token x of shape (d,) = (7,): dgamma = grad_out * x_hat, dbeta = grad_out"),
        case((5,), "a single token (5,), read after the inputs were overwritten: dbeta is a new tensor, not grad_out itself", fresh=True),
        case((6, 4), "d=4 (the biased variance, divide by d)"),
        case((4, 2), "d=2, eps=0.01 (the mean and the variance terms of dx matter most)", eps=0.01),
        case((3, 5), "eps=0.5 by keyword", eps=0.5),
        case((4, 7), "features of std 1e-3 with the default eps=1e-5 (eps under the square root matters)",
             scale=1e-3),
        case((4, 6), "grad_out of loss = y.sum(): ones with stride 0 (torch.ones(d).expand)",
             grad=torch.ones(6).expand(4, 6)),
        case((3, 7, 5), "a non-contiguous grad_out (a transposed view)", grad=transposed),
        case((4, 6), "a non-contiguous x (stride 2 along the features)", x_layout=non_contiguous),
    ]


# ---------------------------------------------------------------------------------------------------
# rms_norm


def rms_norm_cases(seed: int, dtype: str = "float32") -> list[Case]:
    """Inputs with a non-zero mean (subtracting it shows), a tiny root mean square (eps outside the square root,
    or another default eps, shows), random weights (the weight applied before normalising shows)."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def case(shape: tuple[int, ...], label: str, eps: float | None = None, scale: float = 1.0, shift: float = 0.0,
             grad: bool = False, layout=None, positional: bool = False, w_dtype: torch.dtype | None = None) -> Case:
        x = randn(g, *shape, scale=scale, shift=shift, dtype=dt)
        w = randn(g, shape[-1], scale=0.5, shift=1.0, dtype=w_dtype or dt)
        args, kwargs = (x if layout is None else layout(x), w), {}
        if eps is not None:
            args, kwargs = (args + (eps,), {}) if positional else (args, {"eps": eps})
        return Case(args=args, kwargs=kwargs, label=label if label.startswith("float64") else tag(label, dtype),
                    grad_output=randn(g, *shape, dtype=dt) if grad else None)

    if dtype in ("float16", "bfloat16"):
        return [
            case((2, 3, 16), "half precision: (B=2, T=3, d=16), the result in x's dtype"),
            case((4, 8), "half precision: entries of size ~300, whose squares overflow float16", scale=300.0),
            case((3, 8), "half precision: a mean of 2 (no mean is subtracted)", shift=2.0),
            case((2, 4, 8), "half precision x with a float32 weight (mixed precision): the result in x's dtype",
                 scale=30.0, w_dtype=torch.float32),
        ]
    if dtype == "float64":
        return [
            case((4, 6), "float64: (T=4, d=6), default eps"),
            case((3, 5), "float64: eps=0.1 by keyword", eps=0.1),
            case((2, 4, 5), "float64: gradients with respect to x and weight", grad=True),
        ]
    return [
        case((5, 8), "rows of d=8 features, default eps=1e-6"),
        case((2, 3, 4, 6), "three leading dims (2, 3, 4), d=6"),
        case((4, 6), "tokens with a mean of 3: RMSNorm does not subtract the mean", shift=3.0),
        case((4, 7), "a tiny root mean square (1e-4) with the default eps=1e-6: eps under the square root, and "
             "this default", scale=1e-4),
        case((3, 6), "eps=0.5 by keyword", eps=0.5),
        case((3, 6), "eps=0.25 given positionally", eps=0.25, positional=True),
        case((4, 1), "d=1: every token becomes weight * sign(x) (up to eps)"),
        Case(args=(torch.zeros(2, 5), randn(g, 5, scale=0.5, shift=1.0)), label="all-zero tokens: the output is 0"),
        case((2, 3, 5), "gradients with respect to x and weight", grad=True),
        case((4, 6), "a non-contiguous x (stride 2 along the features)", layout=non_contiguous),
        case((3, 8), "a float32 x with a bfloat16 weight: the result in x's dtype", w_dtype=torch.bfloat16),
    ]


# ---------------------------------------------------------------------------------------------------
# FeedForward


def feed_forward_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case(args=(_randn(g, 2, 5, 8),), init=(8, 32), label="batch of 2, T=5, d_model=8, d_ff=32"),
        Case(args=(_randn(g, 7, 6),), init=(6, 10), label="one sequence without batch dim, T=7, d_model=6, d_ff=10"),
        Case(args=(_randn(g, 2, 3, 4, 5),), init=(5, 3), label="leading dims (2, 3), T=4, d_ff=3 < d_model=5"),
        Case(args=(_randn(g, 3, 1, 4, scale=3.0),), init=(4, 16), label="T=1, inputs of scale 3"),
        Case(args=(_randn(g, 2, 4, 6),), init=(6, 12), label="gradient with respect to the input",
             grad_output=_randn(g, 2, 4, 6)),
        Case(args=(_randn(g, 2, 5, 8, scale=40.0),), init=(8, 16),
             label="inputs of scale 40: hidden activations far above 6 (a ReLU has no upper clip)"),
        Case(args=(non_contiguous(_randn(g, 2, 5, 8)),), init=(8, 16), label="a non-contiguous x (stride 2)"),
        Case(args=(_randn(g, 2, 4, 6),), again=(_randn(g, 2, 4, 6),), init=(6, 12),
             label="one module called twice, on another x of the same shape (batch of 2, T=4, d_model=6, d_ff=12), the first output overwritten in between"),
    ]


# ---------------------------------------------------------------------------------------------------
# SwiGLU


def _swiglu_state(g: torch.Generator, d_model: int, d_ff: int) -> dict[str, torch.Tensor]:
    return {"gate_proj.weight": _randn(g, d_ff, d_model, scale=d_model ** -0.5 * 2),
            "up_proj.weight": _randn(g, d_ff, d_model, scale=d_model ** -0.5),
            "down_proj.weight": _randn(g, d_model, d_ff, scale=d_ff ** -0.5)}


def swiglu_cases(seed: int) -> list[Case]:
    """``init = (d_model, d_ff)`` or, for Llama's width, ``(d_model,)`` and ``(d_model, None, multiple_of)``; random
    weights (the gate with pre-activations of both signs and of size up to ~6, where SiLU, GELU and a sigmoid gate
    all differ), loaded strictly, so a module of another width fails its case."""
    g = torch.Generator().manual_seed(seed)

    def case(shape: tuple[int, ...], d_ff: int | None, label: str, grad: bool = False, layout=None,
             scale: float = 1.0, multiple_of: int | None = None) -> Case:
        d = shape[-1]
        x = _randn(g, *shape, scale=scale)
        init = (d, d_ff) if multiple_of is None else (d, d_ff, multiple_of)
        if d_ff is None and multiple_of is None:
            init = (d,)
        m = 256 if multiple_of is None else multiple_of
        width = d_ff if d_ff is not None else -(-(8 * d // 3) // m) * m  # Llama: int(8d/3), up to a multiple of m
        return Case(args=(x if layout is None else layout(x),), init=init, state=_swiglu_state(g, d, width),
                    label=label, grad_output=_randn(g, *shape) if grad else None)

    return [
        case((2, 5, 8), 16, "batch of 2, T=5, d_model=8, d_ff=16"),
        case((7, 6), 10, "one sequence without batch dim, T=7, d_model=6, d_ff=10"),
        case((2, 3, 4, 5), 12, "leading dims (2, 3), T=4, d_model=5, d_ff=12"),
        case((2, 4, 12), 32, "d_model=12, d_ff=32 = 8/3 * 12: the width is d_ff as given"),
        case((3, 4, 6), 4, "d_ff=4 < d_model=6"),
        case((2, 5, 8), 16, "inputs of scale 3: gate pre-activations of both signs up to ~10", scale=3.0),
        case((2, 4, 6), 12, "gradient with respect to the input", grad=True),
        case((2, 5, 8), 16, "a non-contiguous x (stride 2)", layout=non_contiguous),
        case((5, 2, 8), 16, "a transposed x (B and T swapped in memory)", layout=lambda x: x.transpose(0, 1)),
        case((2, 3, 40), None, "Llama's width, d_model=40, multiple_of=256 by default: int(106.67) = 106 -> 256"),
        case((2, 3, 4), None, "Llama's width, d_model=4, multiple_of=10: int(10.67) = 10 is a multiple already "
             "(its ceiling would give 20)", multiple_of=10),
        case((2, 3, 7), None, "Llama's width, d_model=7, multiple_of=1: int(18.67) = 18 (rounding would give 19)",
             multiple_of=1),
        case((2, 3, 33), None, "Llama's width, d_model=33, multiple_of=16: int(88) = 88 -> 96", multiple_of=16),
        case((2, 3, 6), 16, "d_ff=16 given with multiple_of=7: the width is d_ff as given", multiple_of=7),
    ]


# ---------------------------------------------------------------------------------------------------
# PostNormBlock, PreNormBlock


def _block_state(g: torch.Generator, d_model: int, d_ff: int) -> dict[str, torch.Tensor]:
    """Random weights under the chapter's names: non-trivial LayerNorm gains and biases, attention
    biases that are not zero (``nn.MultiheadAttention`` starts them at 0).

    The feed-forward weights keep every pre-activation of ``ffn.linear1`` inside (0.5, 5.5) whatever the
    block feeds it (its input is always a LayerNorm output, of norm at most ``max|gamma| sqrt(d) + |beta|``).
    There ReLU is the identity, so a FeedForward that clips at 6, or forgets the ReLU, or uses a leaky one,
    computes the same as the right one: the block checks grade the wiring only, and a mistake in exercise
    FeedForward costs that exercise's point, not the blocks' too. The FFN stays input-dependent
    (``W2 (W1 h + b1) + b2``), so feeding it the wrong tensor still shows.
    """
    state = {
        "attn.in_proj_weight": _randn(g, 3 * d_model, d_model, scale=d_model ** -0.5),
        "attn.in_proj_bias": _randn(g, 3 * d_model, scale=0.2),
        "attn.out_proj.weight": _randn(g, d_model, d_model, scale=d_model ** -0.5),
        "attn.out_proj.bias": _randn(g, d_model, scale=0.2),
        "norm1.weight": 1.0 + _randn(g, d_model, scale=0.3),
        "norm1.bias": _randn(g, d_model, scale=0.3),
        "norm2.weight": 1.0 + _randn(g, d_model, scale=0.3),
        "norm2.bias": _randn(g, d_model, scale=0.3),
    }
    bound = max(float(state[f"norm{i}.weight"].abs().max()) * d_model ** 0.5
                + float(state[f"norm{i}.bias"].norm()) for i in (1, 2))  # the norm of any LayerNorm output
    w1 = _randn(g, d_ff, d_model)
    w1 = w1 / w1.norm(dim=1, keepdim=True) * (2.0 / bound)  # |W1 h| <= 2 for every row
    state.update({
        "ffn.linear1.weight": w1,
        "ffn.linear1.bias": 3.0 + 0.5 * (2 * torch.rand(d_ff, generator=g, dtype=torch.float64) - 1).float(),
        "ffn.linear2.weight": _randn(g, d_model, d_ff, scale=d_ff ** -0.5),
        "ffn.linear2.bias": _randn(g, d_model, scale=0.2),
    })
    return state


def block_cases(seed: int) -> list[Case]:
    """Cases for ``PostNormBlock`` and ``PreNormBlock`` (``init = (d_model, n_heads, d_ff)``)."""
    g = torch.Generator().manual_seed(seed)

    def case(B: int, T: int, d_model: int, n_heads: int, d_ff: int, label: str,
             mask: torch.Tensor | None = None, scale: float = 1.0, grad: bool = False, tiny: bool = False,
             again: tuple | None = None) -> Case:
        x = _randn(g, B, T, d_model, scale=scale)
        grad_output = _randn(g, B, T, d_model) if grad else None
        state = _block_state(g, d_model, d_ff)
        if tiny:  # attention of tiny inputs stays tiny: what the first LayerNorm of either block then sees
            state["attn.in_proj_bias"] = torch.zeros_like(state["attn.in_proj_bias"])
            state["attn.out_proj.bias"] = torch.zeros_like(state["attn.out_proj.bias"])
        return Case(args=(x,) if mask is None else (x, mask), init=(d_model, n_heads, d_ff),
                    state=state, label=label, grad_output=grad_output, again=again)

    return [
        case(2, 5, 8, 2, 16, "no mask: B=2, T=5, d_model=8, n_heads=2, d_ff=16"),
        case(3, 6, 12, 3, 20, "causal (T, T) mask: B=3, T=6, d_model=12, n_heads=3", mask=_causal(6)),
        case(3, 5, 8, 2, 8, "(B, T, T) random masks, a different one per sequence, n_heads=2",
             mask=_random_masks(g, 3, 5)),
        case(2, 6, 8, 4, 12, "(B, T, T) key-padding masks, lengths 6 and 3, n_heads=4",
             mask=_padding_masks(2, 6, [6, 3])),
        case(2, 1, 4, 1, 6, "T=1: a single token, one head", mask=torch.ones(1, 1, dtype=torch.bool)),
        case(2, 4, 6, 2, 5, "inputs of scale 5, d_ff=5 < d_model=6", scale=5.0),
        case(2, 5, 8, 2, 16, "gradient with respect to x, causal mask", mask=_causal(5), grad=True),
        case(3, 5, 8, 2, 16, 'one block called twice, on another x and another (B, T, T) mask of the same shapes, the first output overwritten in between', mask=_random_masks(g, 3, 5),
             again=(_randn(g, 3, 5, 8), _random_masks(g, 3, 5))),
        case(2, 5, 8, 2, 16, "inputs of std 1e-3, attention biases 0: the tokens' variance is tiny, so the LayerNorms' default eps=1e-5 matters", mask=_causal(5), scale=1e-3, tiny=True),
    ]


# ---------------------------------------------------------------------------------------------------
# the contract: each clause of an exercise's statement -> the hidden cases that exercise it

_H16, _B16 = " (float16)", " (bfloat16)"
_HALF_LN = "half precision: (B=2, T=3, d=16), the result in x's dtype"
_HALF_BWD = "(B=3, T=4, d=16), a dense grad_out, default eps"
_HALF_RMS = "half precision: (B=2, T=3, d=16), the result in x's dtype"

CONTRACT = {
    "layer_norm": {
        "gamma * (x - mean) / sqrt(var + eps) + beta over the last dim, per token":
            ["rows of d=8 features, default eps", "d=9 features, more features than tokens", "float64, rows of d=6, default eps"],
        "any number of leading dims": ["three leading dims (2, 3, 4), d=6", "d=2, leading dims (2, 3)"],
        "the biased variance (divide by d)": ["d=4 (the biased variance divides by d, not d - 1)",
                                              "d=1: every token normalises to 0, so the output is beta"],
        "eps under the square root; eps by keyword": ["eps=0.5 passed by keyword (sqrt(var + eps), not std + eps)",
                                                      "float64, eps=0.1 (sqrt(var + eps), not std + eps)"],
        "the default eps is 1e-5 (tokens of tiny variance tell another eps apart)":
            ["features of std 1e-3 with the default eps=1e-5 (eps is not negligible here)",
             "float64, tiny variance (std 1e-3) around an offset of 3, eps=1e-5"],
        "constant tokens give beta (no division by zero)": ["constant tokens (variance 0): the output is beta"],
        "two passes: tokens around 1e4 with unit spread": [
            "float32 tokens around 1e4 with unit spread (one-pass variance E[x^2] - E[x]^2 cancels)",
            "float64 tokens around 1e8 with unit spread (one-pass variance cancels)", "large values: 100 + 10 * noise"],
        "returns x's dtype for float16, bfloat16, float32, float64; half precision computed in float32":
            [_HALF_LN + _H16, _HALF_LN + _B16, "float64, rows of d=6, default eps",
             "half precision: tokens of spread 300, whose squared deviations overflow float16" + _H16,
             "half precision: eps=0.25 by keyword" + _B16],
        "gradients with respect to x, gamma and beta flow through the statistics":
            ["gradients with respect to x, gamma and beta", "float64, gradients with respect to x, gamma and beta",
             "float64, d=2, gradients (the mean and the variance depend on x too)"],
        "non-contiguous and expanded x": ["a non-contiguous x (stride 2 along the features)",
                                          "an expanded x (stride 0 along a new leading dim)",
                                          "a transposed x (B and T swapped in memory)"],
        "returns a new tensor and leaves x unchanged": ["rows of d=8 features, default eps"],
        "no built-in normalisation": ["ban:torch.nn.functional.layer_norm", "ban:torch.nn.functional.group_norm",
                                      "ban:aten.native_layer_norm", "ban:torch.nn.functional.rms_norm"],
    },
    "layer_norm_backward": {
        "dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)), g = grad_out * gamma":
            ["5 tokens of d=8, a dense grad_out, default eps", "d=4 (the biased variance, divide by d)",
             "d=2, eps=0.01 (the mean and the variance terms of dx matter most)"],
        "dgamma, dbeta of shape (d,) summed over every leading dim":
            ["leading dims (2, 3): dgamma and dbeta sum over every token of every sequence",
             "three leading dims (2, 2, 3), d=4"],
        "no leading dims: a single token (d,)": ["a single token x of shape (d,) = (7,): dgamma = grad_out * x_hat, dbeta = grad_out"],
        "eps by keyword, under the square root; default 1e-5":
            ["eps=0.5 by keyword", "features of std 1e-3 with the default eps=1e-5 (eps under the square root matters)"],
        "grad_out of any layout: stride-0 ones, transposed views":
            ["grad_out of loss = y.sum(): ones with stride 0 (torch.ones(d).expand)",
             "a non-contiguous grad_out (a transposed view)"],
        "non-contiguous x": ["a non-contiguous x (stride 2 along the features)"],
        "two passes: tokens around 1e4 with unit spread":
            ["float32 tokens around 1e4 with unit spread (one-pass variance cancels)"],
        "all three in x's dtype for the four floating dtypes; half precision in float32":
            [_HALF_BWD + _H16, _HALF_BWD + _B16, _HALF_BWD + " (float64)", "d=6, eps=0.1 by keyword (float64)",
             "tokens of spread 300, whose squared deviations overflow float16; grad_out of scale 300" + _H16],
        "leaves grad_out and x unchanged": ["5 tokens of d=8, a dense grad_out, default eps"],
        "returns new tensors, not grad_out itself (a single token's dbeta)": ["a single token (5,), read after the inputs were overwritten: dbeta is a new tensor, not grad_out itself"],
        "no autograd and no built-in norm": ["ban:torch.autograd.grad", "ban:torch.Tensor.backward",
                                             "ban:torch.autograd.backward", "ban:aten.native_layer_norm_backward",
                                             "ban:torch.nn.functional.layer_norm"],
        "checked against autograd and gradcheck": "visible only: the visible test runs autograd and gradcheck; the "
                                                  "hidden cases compare with the reference, itself tested against both",
    },
    "rms_norm": {
        "weight * x / sqrt(mean(x^2) + eps) over the last dim, equal to nn.RMSNorm(d, eps=eps)":
            ["rows of d=8 features, default eps=1e-6", "float64: (T=4, d=6), default eps"],
        "any number of leading dims": ["three leading dims (2, 3, 4), d=6"],
        "no mean subtracted": ["tokens with a mean of 3: RMSNorm does not subtract the mean",
                               "half precision: a mean of 2 (no mean is subtracted)" + _H16],
        "eps under the square root, default 1e-6 (not nn.RMSNorm's None)":
            ["a tiny root mean square (1e-4) with the default eps=1e-6: eps under the square root, and this default"],
        "eps by keyword or positionally": ["eps=0.5 by keyword", "eps=0.25 given positionally", "float64: eps=0.1 by keyword"],
        "the weight multiplies the normalised token": ["rows of d=8 features, default eps=1e-6",
                                                       "d=1: every token becomes weight * sign(x) (up to eps)"],
        "all-zero tokens give 0": ["all-zero tokens: the output is 0"],
        "x's dtype for the four floating dtypes; half precision squared in float32":
            [_HALF_RMS + _H16, _HALF_RMS + _B16, "float64: (T=4, d=6), default eps",
             "half precision: entries of size ~300, whose squares overflow float16" + _H16],
        "gradients flow to x and weight": ["gradients with respect to x and weight",
                                           "float64: gradients with respect to x and weight"],
        "any strides": ["a non-contiguous x (stride 2 along the features)"],
        "returns a new tensor, x unchanged": ["rows of d=8 features, default eps=1e-6"],
        "no built-in norm": ["ban:torch.nn.functional.rms_norm", "ban:torch.nn.functional.layer_norm"],
        "a weight in another floating dtype than x: the result in x's dtype":
            ["half precision x with a float32 weight (mixed precision): the result in x's dtype" + _H16,
             "half precision x with a float32 weight (mixed precision): the result in x's dtype" + _B16,
             "a float32 x with a bfloat16 weight: the result in x's dtype"],
        "torch.linalg.vector_norm (a norm, not a normalisation layer) is allowed":
            "not gradable: nothing bans it, so an answer through it is graded by its results like any other "
            "(tests/student_code: rms_norm__correct_norm)",
    },
    "FeedForward": {
        "linear2(relu(linear1(x))), state_dict linear1.{weight,bias} (d_ff, d_model), linear2.* (d_model, d_ff)":
            ["batch of 2, T=5, d_model=8, d_ff=32", "leading dims (2, 3), T=4, d_ff=3 < d_model=5"],
        "any leading dims, a single token": ["one sequence without batch dim, T=7, d_model=6, d_ff=10",
                                             "T=1, inputs of scale 3"],
        "a ReLU has no upper clip (activations above 6)":
            ["inputs of scale 40: hidden activations far above 6 (a ReLU has no upper clip)"],
        "gradients flow to the input": ["gradient with respect to the input"],
        "any strides": ["a non-contiguous x (stride 2)"],
        "keeps no state between calls": ["one module called twice, on another x of the same shape (batch of 2, T=4, d_model=6, d_ff=12), the first output overwritten in between"],
    },
    "SwiGLU": {
        "down_proj(silu(gate_proj(x)) * up_proj(x)), SiLU on the gate branch":
            ["batch of 2, T=5, d_model=8, d_ff=16", "inputs of scale 3: gate pre-activations of both signs up to ~10"],
        "three bias-free linears gate_proj, up_proj (d_ff, d_model), down_proj (d_model, d_ff); d_ff as given":
            ["d_model=12, d_ff=32 = 8/3 * 12: the width is d_ff as given", "d_ff=4 < d_model=6"],
        "any leading dims": ["one sequence without batch dim, T=7, d_model=6, d_ff=10",
                             "leading dims (2, 3), T=4, d_model=5, d_ff=12"],
        "d_ff=None: Llama's width, int(8 d_model / 3) rounded up to a multiple of multiple_of (256 by default)": [
            "Llama's width, d_model=40, multiple_of=256 by default: int(106.67) = 106 -> 256",
            "Llama's width, d_model=4, multiple_of=10: int(10.67) = 10 is a multiple already (its ceiling would give 20)",
            "Llama's width, d_model=7, multiple_of=1: int(18.67) = 18 (rounding would give 19)",
            "Llama's width, d_model=33, multiple_of=16: int(88) = 88 -> 96"],
        "a d_ff given is used as it is, whatever multiple_of":
            ["d_ff=16 given with multiple_of=7: the width is d_ff as given",
             "d_model=12, d_ff=32 = 8/3 * 12: the width is d_ff as given"],
        "gradients flow to the input": ["gradient with respect to the input"],
        "any strides": ["a non-contiguous x (stride 2)", "a transposed x (B and T swapped in memory)"],
        "keeps no state between calls": "not gradable: each hidden case builds a fresh module and calls it once",
        "the three linears are its only parameters; parameter-free submodules (nn.SiLU()) are allowed":
            ["batch of 2, T=5, d_model=8, d_ff=16"],
    },
}

_BLOCK = {
    "the block wiring, equal to nn.TransformerEncoderLayer with the same weights":
        ["no mask: B=2, T=5, d_model=8, n_heads=2, d_ff=16", "inputs of scale 5, d_ff=5 < d_model=6"],
    "a (T, T) mask, True = may attend": ["causal (T, T) mask: B=3, T=6, d_model=12, n_heads=3",
                                         "T=1: a single token, one head"],
    "a (B, T, T) mask, one per sequence, heads of a sequence together":
        ["(B, T, T) random masks, a different one per sequence, n_heads=2",
         "(B, T, T) key-padding masks, lengths 6 and 3, n_heads=4"],
    "state_dict: the twelve stated names and shapes (loaded with strict=True)":
        ["no mask: B=2, T=5, d_model=8, n_heads=2, d_ff=16", "causal (T, T) mask: B=3, T=6, d_model=12, n_heads=3"],
    "gradients flow to x": ["gradient with respect to x, causal mask"],
    "norm1, norm2 = nn.LayerNorm(d_model): its default eps=1e-5, not another": ["inputs of std 1e-3, attention biases 0: the tokens' variance is tiny, so the LayerNorms' default eps=1e-5 matters"],
    "only the wiring is graded: ReLU pre-activations kept in (0, 6)": ["no mask: B=2, T=5, d_model=8, n_heads=2, d_ff=16"],
    "keeps no state between calls": ['one block called twice, on another x and another (B, T, T) mask of the same shapes, the first output overwritten in between'],
}
CONTRACT["PostNormBlock"] = dict(_BLOCK)
CONTRACT["PreNormBlock"] = dict(_BLOCK)
