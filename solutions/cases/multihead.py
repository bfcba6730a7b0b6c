"""Hidden-test cases for chapter 5 (multi-head attention), and ``nn.MultiheadAttention`` as a reference.

Generators ``<name>_cases(seed, **params) -> list[Case]`` draw every tensor from a ``torch.Generator``
seeded with ``seed``; their labels are shown to a student whose code fails a case. Wherever heads are
split, the sizes keep ``T``, ``h`` and ``d_head`` apart (and > 1), so that a split or merge that mixes
the token axis with the heads or features axis changes values, not only shapes; a few edge cases
(``h = 1``, ``d_head = 1``, ``T = 1``) follow.

:class:`TorchMultiheadAttention` lets a hidden check compare the student's module with PyTorch's own
``nn.MultiheadAttention`` directly: it holds one, but shows the parameter names of the exercise.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from grader.checks import Case


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=dtype) * scale


def _labelled(*shape: int) -> torch.Tensor:
    """int64 entries 0, 1, 2, ... in row-major order: every entry says where it came from."""
    n = 1
    for s in shape:
        n *= s
    return torch.arange(n).reshape(shape)


def _mask(g: torch.Generator, *shape: int, p_keep: float = 0.6) -> torch.Tensor:
    """A random bool mask (True = may attend) in which no query row is fully masked."""
    mask = torch.rand(*shape, generator=g) < p_keep  # (..., T_q, T_k)
    keep = torch.randint(shape[-1], (*shape[:-1], 1), generator=g)  # (..., T_q, 1)
    return mask.scatter(-1, keep, True)  # one allowed key per row, at least


def _causal(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril()  # (T, T): query i sees keys 0..i


def _key_padding(g: torch.Generator, B: int, T_k: int) -> torch.Tensor:
    """``(B, 1, 1, T_k)`` with ``mask[b, 0, 0, j] = j < length[b]``, one full and one padded sequence."""
    lengths = torch.randint(1, T_k, (B,), generator=g)
    lengths[0] = T_k
    return (torch.arange(T_k)[None, :] < lengths[:, None])[:, None, None, :]


# ---------------------------------------------------------------------------------------------------
# split_heads and merge_heads


def split_heads_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case(args=(_labelled(2, 5, 6), 3),
             label="int64 entries 0, 1, 2, ... of shape (B=2, T=5, d_model=6), h=3 (d_head=2)"),
        Case(args=(_randn(g, 3, 7, 12), 4), label="(B=3, T=7, d_model=12), h=4 (d_head=3)"),
        Case(args=(_randn(g, 4, 10), 2), label="one sequence, no batch dim: (T=4, d_model=10), h=2 (d_head=5)"),
        Case(args=(_randn(g, 2, 3, 4, 10), 5),
             label="two leading batch dims (2, 3), T=4, d_model=10, h=5 (d_head=2)"),
        Case(args=(_randn(g, 2, 5, 8, dtype=torch.float64), 2), label="float64 (B=2, T=5, d_model=8), h=2"),
        Case(args=(_randn(g, 2, 4, 6), 1), label="a single head: (B=2, T=4, d_model=6), h=1"),
        Case(args=(_randn(g, 2, 3, 4), 4), label="one feature per head: (B=2, T=3, d_model=4), h=4 (d_head=1)"),
        Case(args=(_randn(g, 3, 1, 8), 2), label="a single token: (B=3, T=1, d_model=8), h=2"),
        Case(args=(_randn(g, 2, 4, 10), 4), raises="ValueError", label="d_model=10 is not divisible by h=4"),
        Case(args=(_randn(g, 2, 6, 9), 2), raises="ValueError", label="d_model=9 is not divisible by h=2"),
    ]


def merge_heads_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case(args=(_labelled(2, 3, 5, 2),),
             label="int64 entries 0, 1, 2, ... of shape (B=2, h=3, T=5, d_head=2)"),
        Case(args=(_randn(g, 3, 4, 7, 3),), label="(B=3, h=4, T=7, d_head=3)"),
        Case(args=(_randn(g, 2, 5, 4),), label="one sequence, no batch dim: (h=2, T=5, d_head=4)"),
        Case(args=(_randn(g, 2, 3, 5, 4, 2),), label="two leading batch dims (2, 3), h=5, T=4, d_head=2"),
        Case(args=(_randn(g, 2, 6, 3, 5).transpose(1, 2),),
             label="a non-contiguous input (B=2, h=3, T=6, d_head=5), made by a transpose"),
        Case(args=(_randn(g, 2, 2, 5, 3, dtype=torch.float64),), label="float64 (B=2, h=2, T=5, d_head=3)"),
        Case(args=(_randn(g, 2, 1, 4, 6),), label="a single head: (B=2, h=1, T=4, d_head=6)"),
        Case(args=(_randn(g, 2, 4, 3, 1),), label="one feature per head: (B=2, h=4, T=3, d_head=1)"),
        Case(args=(_randn(g, 3, 2, 1, 4),), label="a single token: (B=3, h=2, T=1, d_head=4)"),
    ]


# ---------------------------------------------------------------------------------------------------
# heads_attention


def heads_attention_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def case(batch: tuple[int, ...], T_q: int, T_k: int, d_model: int, h: int, label: str,
             mask: torch.Tensor | None = None, scale: float = 1.5) -> Case:
        q = _randn(g, *batch, T_q, d_model, scale=scale)
        k = _randn(g, *batch, T_k, d_model, scale=scale)
        v = _randn(g, *batch, T_k, d_model)
        return Case(args=(q, k, v, h) if mask is None else (q, k, v, h, mask), label=label)

    return [
        case((2,), 5, 5, 12, 3, "B=2, T=5, d_model=12, h=3 (d_head=4), no mask"),
        case((2,), 6, 6, 8, 4, "B=2, T=6, d_model=8, h=4 (d_head=2), causal (T, T) mask", mask=_causal(6)),
        case((2,), 3, 7, 10, 2,
             "cross-attention: B=2, T_q=3, T_k=7, d_model=10, h=2 (d_head=5), key padding (B, 1, 1, T_k)",
             mask=_key_padding(g, 2, 7)),
        case((3,), 5, 5, 12, 4, "B=3, T=5, d_model=12, h=4 (d_head=3), one mask per head (B, h, T, T)",
             mask=_mask(g, 3, 4, 5, 5)),
        case((2,), 7, 7, 6, 3, "B=2, T=7, d_model=6, h=3 (d_head=2), mask (B, 1, T, T)",
             mask=_mask(g, 2, 1, 7, 7)),
        case((), 4, 4, 6, 2, "one sequence, no batch dim: T=4, d_model=6, h=2 (d_head=3), causal mask",
             mask=_causal(4)),
        case((2,), 5, 5, 8, 1, "a single head: B=2, T=5, d_model=8, h=1"),
        case((2,), 3, 3, 4, 4, "one feature per head: B=2, T=3, d_model=4, h=4 (d_head=1)"),
        case((2,), 1, 1, 6, 3, "a single token: B=2, T=1, d_model=6, h=3"),
        case((2,), 6, 6, 16, 2, "large scores: B=2, T=6, d_model=16, h=2, q and k entries of size ~4",
             scale=4.0),
    ]


# ---------------------------------------------------------------------------------------------------
# MultiHeadAttention


#: ``TorchMultiheadAttention``'s state-dict names -> the names inside its ``nn.MultiheadAttention``.
_MHA_NAMES = {"qkv_proj.weight": "mha.in_proj_weight", "qkv_proj.bias": "mha.in_proj_bias",
              "out_proj.weight": "mha.out_proj.weight", "out_proj.bias": "mha.out_proj.bias"}


class TorchMultiheadAttention(nn.Module):
    """``nn.MultiheadAttention(batch_first=True)`` behind the exercise's interface and parameter names.

    It holds a real ``nn.MultiheadAttention`` as ``mha``; its ``state_dict`` calls ``in_proj_weight``
    ``qkv_proj.weight`` (both are ``(3 d_model, d_model)`` with the q, k, v row blocks in that order),
    ``in_proj_bias`` ``qkv_proj.bias``, and keeps ``out_proj.weight`` / ``out_proj.bias``, and
    ``load_state_dict`` accepts those names. ``forward(x, mask, return_weights)`` takes this course's mask
    (True = may attend, broadcastable to ``(B, h, T, T)``) and passes its complement, expanded to
    ``(B * h, T, T)``, as the ``attn_mask`` of ``nn.MultiheadAttention`` (True = may *not* attend); the
    weights come per head (``average_attn_weights=False``). ``x`` is ``(B, T, d_model)``.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.mha = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True)
        self.register_state_dict_post_hook(_to_exercise_names)
        self.register_load_state_dict_pre_hook(_to_torch_names)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, return_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        B, T, _ = x.shape
        h = self.mha.num_heads
        attn_mask = None
        if mask is not None:
            attn_mask = ~mask.expand(B, h, T, T).reshape(B * h, T, T)  # row b * h + i: batch b, head i
        out, weights = self.mha(x, x, x, attn_mask=attn_mask, need_weights=return_weights,
                                average_attn_weights=False)
        return (out, weights) if return_weights else out


def _to_exercise_names(module: nn.Module, state_dict: dict, prefix: str, local_metadata: dict) -> None:
    for ours, theirs in _MHA_NAMES.items():
        if prefix + theirs in state_dict:
            state_dict[prefix + ours] = state_dict.pop(prefix + theirs)


def _to_torch_names(module: nn.Module, state_dict: dict, prefix: str, *args) -> None:
    for ours, theirs in _MHA_NAMES.items():
        if prefix + ours in state_dict:
            state_dict[prefix + theirs] = state_dict.pop(prefix + ours)


def _mha_state(g: torch.Generator, d_model: int, bias: bool) -> dict[str, torch.Tensor]:
    """Random weights of unit-variance projections, and biases that are far from zero (the built-in
    initialises its biases to zero, which would hide a forgotten bias)."""
    scale = d_model ** -0.5
    state = {"qkv_proj.weight": _randn(g, 3 * d_model, d_model, scale=1.5 * scale),
             "out_proj.weight": _randn(g, d_model, d_model, scale=scale)}
    if bias:
        state |= {"qkv_proj.bias": _randn(g, 3 * d_model, scale=0.5), "out_proj.bias": _randn(g, d_model, scale=0.5)}
    return state


def multihead_attention_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def case(B: int, T: int, d_model: int, h: int, label: str, mask: torch.Tensor | None = None,
             bias: bool = True, weights: bool | None = None) -> Case:
        x = _randn(g, B, T, d_model)
        kwargs = {} if weights is None else {"return_weights": weights}
        return Case(args=(x,) if mask is None else (x, mask), kwargs=kwargs, init=(d_model, h),
                    init_kwargs={} if bias else {"bias": False}, state=_mha_state(g, d_model, bias),
                    label=label)

    return [
        case(2, 5, 12, 3, "B=2, T=5, d_model=12, h=3 (d_head=4), no mask"),
        case(3, 7, 8, 2, "B=3, T=7, d_model=8, h=2 (d_head=4), causal (T, T) mask", mask=_causal(7)),
        case(2, 6, 12, 4, "B=2, T=6, d_model=12, h=4 (d_head=3), key padding (B, 1, 1, T)",
             mask=_key_padding(g, 2, 6)),
        case(2, 6, 10, 5, "B=2, T=6, d_model=10, h=5 (d_head=2), mask (B, 1, T, T)", mask=_mask(g, 2, 1, 6, 6)),
        case(2, 4, 6, 3, "B=2, T=4, d_model=6, h=3 (d_head=2), one mask per head (B, h, T, T)",
             mask=_mask(g, 2, 3, 4, 4)),
        case(2, 6, 8, 4, "bias=False: B=2, T=6, d_model=8, h=4 (d_head=2), causal mask", mask=_causal(6),
             bias=False),
        case(2, 5, 6, 1, "a single head: B=2, T=5, d_model=6, h=1"),
        case(2, 3, 4, 4, "one feature per head: B=2, T=3, d_model=4, h=4 (d_head=1)"),
        case(3, 1, 8, 2, "a single token: B=3, T=1, d_model=8, h=2"),
        case(2, 5, 12, 3, "return_weights=False given explicitly: B=2, T=5, d_model=12, h=3", weights=False),
        case(2, 5, 12, 3, "return_weights=True: B=2, T=5, d_model=12, h=3 (d_head=4), no mask", weights=True),
        case(2, 7, 8, 2, "return_weights=True: B=2, T=7, d_model=8, h=2 (d_head=4), causal mask",
             mask=_causal(7), weights=True),
        case(2, 4, 6, 3, "return_weights=True: B=2, T=4, d_model=6, h=3 (d_head=2), one mask per head",
             mask=_mask(g, 2, 3, 4, 4), weights=True),
        Case(args=(_randn(g, 2, 4, 10),), init=(10, 4), state={}, raises="ValueError",
             label="MultiHeadAttention(d_model=10, n_heads=4): 10 is not divisible by 4"),
    ]


# ---------------------------------------------------------------------------------------------------
# mha_param_count


def param_count_cases(seed: int) -> list[Case]:
    del seed  # the sizes are fixed; the seed is part of the check's signature only
    return [
        Case(args=(512, 8), label="d_model=512, n_heads=8 (the Transformer base model)"),
        Case(args=(512, 8), kwargs={"bias": False}, label="d_model=512, n_heads=8, bias=False"),
        Case(args=(768, 12), label="d_model=768, n_heads=12"),
        Case(args=(64, 1), label="d_model=64, a single head"),
        Case(args=(6, 3), label="d_model=6, n_heads=3"),
        Case(args=(10, 10), kwargs={"bias": False}, label="d_model=10, n_heads=10 (d_head=1), bias=False"),
        Case(args=(1, 1), label="d_model=1, n_heads=1"),
        Case(args=(1024, 16), kwargs={"bias": True}, label="d_model=1024, n_heads=16, bias=True given"),
        Case(args=(12, 5), raises="ValueError", label="d_model=12 is not divisible by n_heads=5"),
        Case(args=(10, 4), kwargs={"bias": False}, raises="ValueError",
             label="d_model=10 is not divisible by n_heads=4, bias=False"),
    ]
