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


def layer_norm_cases(seed: int, double: bool = False) -> list[Case]:
    """float32 cases (``double=False``) or float64 cases held to a tight tolerance (``double=True``).

    Gains and biases are random (a missing gamma or beta shows), sizes are small (the biased and the
    unbiased variance differ by d / (d - 1)), and some cases have a large ``eps`` or a tiny variance
    (``sqrt(var + eps)`` and ``std + eps`` differ there).
    """
    g = torch.Generator().manual_seed(seed)
    dt = torch.float64 if double else torch.float32

    def case(shape: tuple[int, ...], label: str, eps: float | None = None, scale: float = 1.0,
             offset: float = 0.0, grad: bool = False) -> Case:
        d = shape[-1]
        x = _randn(g, *shape, scale=scale, dtype=dt) + offset
        gamma = 1.0 + _randn(g, d, scale=0.5, dtype=dt)
        beta = _randn(g, d, dtype=dt)
        kwargs = {} if eps is None else {"eps": eps}
        grad_output = _randn(g, *shape, dtype=dt) if grad else None
        return Case(args=(x, gamma, beta), kwargs=kwargs, label=label, grad_output=grad_output)

    if double:
        return [
            case((4, 6), "float64, rows of d=6, default eps"),
            case((3, 5), "float64, eps=0.1 (sqrt(var + eps), not std + eps)", eps=0.1),
            case((2, 3, 7), "float64, tiny variance (std 1e-3) around an offset of 3, eps=1e-5",
                 scale=1e-3, offset=3.0),
            case((2, 4, 5), "float64, gradients with respect to x, gamma and beta", grad=True),
            case((3, 2), "float64, d=2, gradients (the mean and the variance depend on x too)", eps=0.01,
                 grad=True),
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
        Case(args=(constant, 1.0 + _randn(g, 5, scale=0.5), _randn(g, 5)),
             label="constant tokens (variance 0): the output is beta"),
        case((3, 9), "d=9 features, more features than tokens"),
        case((2, 3, 5), "gradients with respect to x, gamma and beta", grad=True),
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
    ]


# ---------------------------------------------------------------------------------------------------
# PostNormBlock, PreNormBlock


def _block_state(g: torch.Generator, d_model: int, d_ff: int) -> dict[str, torch.Tensor]:
    """Random weights under the chapter's names: non-trivial LayerNorm gains and biases, attention
    biases that are not zero (``nn.MultiheadAttention`` starts them at 0)."""
    return {
        "attn.in_proj_weight": _randn(g, 3 * d_model, d_model, scale=d_model ** -0.5),
        "attn.in_proj_bias": _randn(g, 3 * d_model, scale=0.2),
        "attn.out_proj.weight": _randn(g, d_model, d_model, scale=d_model ** -0.5),
        "attn.out_proj.bias": _randn(g, d_model, scale=0.2),
        "ffn.linear1.weight": _randn(g, d_ff, d_model, scale=d_model ** -0.5),
        "ffn.linear1.bias": _randn(g, d_ff, scale=0.2),
        "ffn.linear2.weight": _randn(g, d_model, d_ff, scale=d_ff ** -0.5),
        "ffn.linear2.bias": _randn(g, d_model, scale=0.2),
        "norm1.weight": 1.0 + _randn(g, d_model, scale=0.3),
        "norm1.bias": _randn(g, d_model, scale=0.3),
        "norm2.weight": 1.0 + _randn(g, d_model, scale=0.3),
        "norm2.bias": _randn(g, d_model, scale=0.3),
    }


def block_cases(seed: int) -> list[Case]:
    """Cases for ``PostNormBlock`` and ``PreNormBlock`` (``init = (d_model, n_heads, d_ff)``)."""
    g = torch.Generator().manual_seed(seed)

    def case(B: int, T: int, d_model: int, n_heads: int, d_ff: int, label: str,
             mask: torch.Tensor | None = None, scale: float = 1.0, grad: bool = False) -> Case:
        x = _randn(g, B, T, d_model, scale=scale)
        grad_output = _randn(g, B, T, d_model) if grad else None
        return Case(args=(x,) if mask is None else (x, mask), init=(d_model, n_heads, d_ff),
                    state=_block_state(g, d_model, d_ff), label=label, grad_output=grad_output)

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
    ]
