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
from solutions.cases.families import DTYPES, mask_broadcasts, randn, tag


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
        Case(args=(randn(g, 2, 5, 8, dtype="float16"), 2), label="float16 (B=2, T=5, d_model=8), h=2"),
        Case(args=(randn(g, 2, 5, 8, dtype="bfloat16"), 2), label="bfloat16 (B=2, T=5, d_model=8), h=2"),
        Case(args=(_randn(g, 2, 8, 5).transpose(1, 2), 4),
             label="a non-contiguous x (B=2, T=5, d_model=8), made by a transpose, h=4"),
        Case(args=(_randn(g, 6, 5, 2).permute(2, 1, 0), 3),
             label="a non-contiguous x (B=2, T=5, d_model=6) with every axis permuted, h=3"),
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
        Case(args=(randn(g, 2, 2, 5, 3, dtype="float16"),), label="float16 (B=2, h=2, T=5, d_head=3)"),
        Case(args=(randn(g, 2, 2, 5, 3, dtype="bfloat16"),), label="bfloat16 (B=2, h=2, T=5, d_head=3)"),
        Case(args=(_randn(g, 2, 4, 3, 2).transpose(-1, -3),),
             label="a non-contiguous input (B=2, h=2, T=3, d_head=4), d_head and h transposed"),
        Case(args=(_randn(g, 2, 6, 4, 5).transpose(1, 2).clone()[:, :, 1:4],),
             label="a slice of the tokens (B=2, h=4, T=3, d_head=5), not contiguous"),
        Case(args=(_randn(g, 2, 1, 4, 6),), label="a single head: (B=2, h=1, T=4, d_head=6)"),
        Case(args=(_randn(g, 2, 4, 3, 1),), label="one feature per head: (B=2, h=4, T=3, d_head=1)"),
        Case(args=(_randn(g, 3, 2, 1, 4),), label="a single token: (B=3, h=2, T=1, d_head=4)"),
    ]


# ---------------------------------------------------------------------------------------------------
# heads_attention


def heads_attention_cases(seed: int, dtype: str = "float32") -> list[Case]:
    """Cases in ``dtype`` (one hidden check per dtype of :data:`families.DTYPES`): every float32 shape and
    mask below, and in the other dtypes a few of them, masks included."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def case(batch: tuple[int, ...], T_q: int, T_k: int, d_model: int, h: int, label: str,
             mask: torch.Tensor | None = None, scale: float = 1.5, layout=None) -> Case:
        q = randn(g, *batch, T_q, d_model, scale=scale, dtype=dt)
        k = randn(g, *batch, T_k, d_model, scale=scale, dtype=dt)
        v = randn(g, *batch, T_k, d_model, dtype=dt)
        if layout is not None:
            q, k, v = layout(q), layout(k), layout(v)
        return Case(args=(q, k, v, h) if mask is None else (q, k, v, h, mask), label=tag(label, dt))

    common = [
        case((2,), 5, 5, 12, 3, "B=2, T=5, d_model=12, h=3 (d_head=4), no mask"),
        case((2,), 6, 6, 8, 4, "B=2, T=6, d_model=8, h=4 (d_head=2), causal (T, T) mask", mask=_causal(6)),
        case((2,), 3, 7, 10, 2,
             "cross-attention: B=2, T_q=3, T_k=7, d_model=10, h=2 (d_head=5), key padding (B, 1, 1, T_k)",
             mask=_key_padding(g, 2, 7)),
        case((3,), 5, 5, 12, 4, "B=3, T=5, d_model=12, h=4 (d_head=3), one mask per head (B, h, T, T)",
             mask=_mask(g, 3, 4, 5, 5)),
    ]
    if dt is not torch.float32:
        return common
    # every broadcast class of a mask against the scores (B=2, h=3, T_q=4, T_k=6)
    broadcasts = [case((2,), 4, 6, 6, 3, f"B=2, h=3, T_q=4, T_k=6, d_model=6: {name}", mask=m)
                  for name, m in mask_broadcasts(g, (2, 3), 4, 6)]
    return common + broadcasts + [
        case((2,), 7, 7, 6, 3, "B=2, T=7, d_model=6, h=3 (d_head=2), mask (B, 1, T, T)",
             mask=_mask(g, 2, 1, 7, 7)),
        case((), 4, 4, 6, 2, "one sequence, no batch dim: T=4, d_model=6, h=2 (d_head=3), causal mask",
             mask=_causal(4)),
        case((2, 2), 3, 5, 8, 2, "two leading batch dims (2, 2), T_q=3, T_k=5, d_model=8, h=2, per-head (2, T_q, T_k) mask",
             mask=_mask(g, 2, 3, 5)),
        case((2,), 5, 5, 8, 1, "a single head: B=2, T=5, d_model=8, h=1"),
        case((2,), 3, 3, 4, 4, "one feature per head: B=2, T=3, d_model=4, h=4 (d_head=1)"),
        case((2,), 1, 1, 6, 3, "a single token: B=2, T=1, d_model=6, h=3"),
        case((2,), 6, 6, 16, 2, "large scores: B=2, T=6, d_model=16, h=2, q and k entries of size ~4",
             scale=4.0),
        case((2,), 5, 5, 12, 3, "non-contiguous q, k, v (made by a transpose), B=2, T=5, h=3",
             layout=lambda t: t.transpose(0, 1).contiguous().transpose(0, 1)),
        case((2,), 5, 5, 8, 2, "an all-True (T, T) mask: B=2, T=5, d_model=8, h=2",
             mask=torch.ones(5, 5, dtype=torch.bool)),
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
             bias: bool = True, weights: bool | None = None, dtype: str | None = None, twice: bool = False) -> Case:
        dt = getattr(torch, dtype) if dtype else torch.float32
        x = _randn(g, B, T, d_model).to(dt)
        kwargs = {} if weights is None else {"return_weights": weights}
        args = (x,) if mask is None else (x, mask)
        again = ((_randn(g, B, T, d_model).to(dt), *args[1:]) if twice else None)
        return Case(args=args, kwargs=kwargs, init=(d_model, h),
                    init_kwargs={} if bias else {"bias": False}, state=_mha_state(g, d_model, bias),
                    module_dtype=dtype, again=again, label=label)

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
        *[case(2, 5, 6, 3, f"return_weights=True, B=2, T=5, d_model=6, h=3: {name}", mask=m, weights=True)
          for name, m in mask_broadcasts(g, (2, 3), 5, 5)],
        Case(args=(_randn(g, 2, 4, 10),), init=(10, 4), state={}, raises="ValueError",
             label="MultiHeadAttention(d_model=10, n_heads=4): 10 is not divisible by 4"),
        case(2, 5, 12, 3, "a float64 module and input: B=2, T=5, d_model=12, h=3, causal mask", mask=_causal(5),
             dtype="float64"),
        case(2, 5, 8, 2, "a float64 module and input, return_weights=True: B=2, T=5, d_model=8, h=2",
             dtype="float64", weights=True),
        case(2, 6, 8, 2, "one module called twice, on another x of the same shape (B=2, T=6, d_model=8, h=2), "
                         "the first output overwritten in between", mask=_causal(6), twice=True),
    ]


# ---------------------------------------------------------------------------------------------------
# attention_param_count


def param_count_cases(seed: int) -> list[Case]:
    """Sizes for ``attention_param_count``; every case bounds memory at 16 elements, so building a module
    (``nn.MultiheadAttention``, ``nn.Linear`` layers) and counting its parameters fails: the count is
    arithmetic. The reference is pure integer arithmetic, exact at any size."""
    del seed  # the sizes are fixed; the seed is part of the check's signature only

    def case(*args, label: str, raises: str | None = None, **kwargs) -> Case:
        return Case(args=args, kwargs=kwargs, label=label, raises=raises, max_numel=16)

    return [
        case(512, 8, label="d_model=512, n_heads=8 (the Transformer base model)"),
        case(512, 8, bias=False, label="d_model=512, n_heads=8, bias=False"),
        case(768, 12, label="d_model=768, n_heads=12"),
        case(64, 1, label="d_model=64, a single head"),
        case(10, 10, bias=False, label="d_model=10, n_heads=10 (d_head=1), bias=False"),
        case(1, 1, label="d_model=1, n_heads=1"),
        case(512, 8, n_kv_heads=8, label="n_kv_heads=n_heads=8 given: multi-head attention"),
        case(512, 8, n_kv_heads=2, label="grouped-query: d_model=512, 8 query heads, 2 key/value heads, bias"),
        case(512, 8, n_kv_heads=2, bias=False, label="grouped-query: d_model=512, 8 query heads, 2 kv heads, bias=False"),
        case(512, 8, n_kv_heads=1, label="multi-query: d_model=512, 8 query heads, 1 key/value head, bias"),
        case(96, 12, 4, label="n_kv_heads=4 given positionally: d_model=96, 12 query heads"),
        case(3072, 16, d_head=256, label="d_head=256 with 16 heads at d_model=3072 (h * d_head = 4096 != d_model)"),
        case(3072, 16, d_head=256, bias=False, label="d_head=256 with 16 heads at d_model=3072, bias=False"),
        case(10, 4, d_head=8, label="d_head=8 given: n_heads=4 need not divide d_model=10"),
        case(64, 8, d_head=4, n_kv_heads=2, label="narrow heads and grouped kv: d_model=64, 8 heads of 4, 2 kv heads"),
        case(8192, 64, n_kv_heads=8, d_head=128, bias=False,
             label="d_model=8192, 64 query heads, 8 kv heads, d_head=128, bias=False (a 70B-scale layer)"),
        case(2**27 + 1, 1, label="d_model=2^27+1, one head: a count above 2^56, exact only in integer arithmetic"),
        case(2**26 + 1, 1, d_head=2**26 + 3, label="d_model=2^26+1, d_head=2^26+3: a count above 2^54"),
        case(2**27, 2**20, n_kv_heads=2**10, label="d_model=2^27, 2^20 heads, 2^10 kv heads: a count near 2^56"),
        case(12, 5, raises="ValueError", label="d_model=12 is not divisible by n_heads=5 (d_head not given)"),
        case(10, 4, bias=False, raises="ValueError", label="d_model=10 is not divisible by n_heads=4, bias=False"),
        case(512, 8, n_kv_heads=3, raises="ValueError", label="n_kv_heads=3 does not divide n_heads=8"),
        case(512, 8, n_kv_heads=16, raises="ValueError", label="n_kv_heads=16 > n_heads=8"),
        case(512, 8, n_kv_heads=0, raises="ValueError", label="n_kv_heads=0"),
        case(512, 0, raises="ValueError", label="n_heads=0"),
        case(512, 8, d_head=0, raises="ValueError", label="d_head=0"),
        case(0, 1, raises="ValueError", label="d_model=0"),
    ]


# ---------------------------------------------------------------------------------------------------
# the contract: every clause of the notebook's statements -> the hidden cases that exercise it

_HA = "B=2, h=3, T_q=4, T_k=6, d_model=6: "
_MHA = "return_weights=True, B=2, T=5, d_model=6, h=3: "

CONTRACT = {
    "split_heads": {
        "out[..., i, t, :] == x[..., t, i*d_head:(i+1)*d_head] (the transpose, not a bare view)":
            ["int64 entries 0, 1, 2, ... of shape (B=2, T=5, d_model=6), h=3 (d_head=2)",
             "(B=3, T=7, d_model=12), h=4 (d_head=3)"],
        "any number of leading batch dims, or none": [
            "one sequence, no batch dim: (T=4, d_model=10), h=2 (d_head=5)",
            "two leading batch dims (2, 3), T=4, d_model=10, h=5 (d_head=2)"],
        "any dtype, kept (exact: a rearrangement, so one check at tolerance 0 covers every dtype)": [
            "int64 entries 0, 1, 2, ... of shape (B=2, T=5, d_model=6), h=3 (d_head=2)",
            "float64 (B=2, T=5, d_model=8), h=2", "float16 (B=2, T=5, d_model=8), h=2",
            "bfloat16 (B=2, T=5, d_model=8), h=2"],
        "a transposed or sliced x works as well as a contiguous one": [
            "a non-contiguous x (B=2, T=5, d_model=8), made by a transpose, h=4",
            "a non-contiguous x (B=2, T=5, d_model=6) with every axis permuted, h=3"],
        "edge sizes: h=1, d_head=1, T=1": ["a single head: (B=2, T=4, d_model=6), h=1",
                                          "one feature per head: (B=2, T=3, d_model=4), h=4 (d_head=1)",
                                          "a single token: (B=3, T=1, d_model=8), h=2"],
        "raises ValueError when n_heads does not divide d_model": ["d_model=10 is not divisible by h=4",
                                                                  "d_model=9 is not divisible by h=2"],
        "leaves x unchanged (returning a view is fine)": ["(B=3, T=7, d_model=12), h=4 (d_head=3)"],
    },
    "merge_heads": {
        "out[..., t, i*d_head:(i+1)*d_head] == x[..., i, t, :], the inverse of split_heads": [
            "int64 entries 0, 1, 2, ... of shape (B=2, h=3, T=5, d_head=2)", "(B=3, h=4, T=7, d_head=3)"],
        "any number of leading dims": ["one sequence, no batch dim: (h=2, T=5, d_head=4)",
                                       "two leading batch dims (2, 3), h=5, T=4, d_head=2"],
        "contiguous and non-contiguous (transposed, sliced) inputs": [
            "a non-contiguous input (B=2, h=3, T=6, d_head=5), made by a transpose",
            "a non-contiguous input (B=2, h=2, T=3, d_head=4), d_head and h transposed",
            "a slice of the tokens (B=2, h=4, T=3, d_head=5), not contiguous"],
        "any dtype, kept (exact, tolerance 0)": [
            "int64 entries 0, 1, 2, ... of shape (B=2, h=3, T=5, d_head=2)", "float64 (B=2, h=2, T=5, d_head=3)",
            "float16 (B=2, h=2, T=5, d_head=3)", "bfloat16 (B=2, h=2, T=5, d_head=3)"],
        "edge sizes: h=1, d_head=1, T=1": ["a single head: (B=2, h=1, T=4, d_head=6)",
                                          "one feature per head: (B=2, h=4, T=3, d_head=1)",
                                          "a single token: (B=3, h=2, T=1, d_head=4)"],
    },
    "heads_attention": {
        "every head attends over its own column block, scale 1/sqrt(d_head); out merges the heads": [
            "B=2, T=5, d_model=12, h=3 (d_head=4), no mask", "one feature per head: B=2, T=3, d_model=4, h=4 (d_head=1)",
            "a single head: B=2, T=5, d_model=8, h=1", "a single token: B=2, T=1, d_model=6, h=3"],
        "returns per-head weights (..., h, T_q, T_k)": ["B=2, T=5, d_model=12, h=3 (d_head=4), no mask"],
        "T_q may differ from T_k (cross-attention)": [
            "cross-attention: B=2, T_q=3, T_k=7, d_model=10, h=2 (d_head=5), key padding (B, 1, 1, T_k)"],
        "any leading dims, or none": ["one sequence, no batch dim: T=4, d_model=6, h=2 (d_head=3), causal mask",
                                      "two leading batch dims (2, 2), T_q=3, T_k=5, d_model=8, h=2, per-head (2, T_q, T_k) mask"],
        "mask (T_q, T_k), (B, 1, 1, T_k), (B, h, T_q, T_k), True = may attend": [
            "B=2, T=6, d_model=8, h=4 (d_head=2), causal (T, T) mask",
            "cross-attention: B=2, T_q=3, T_k=7, d_model=10, h=2 (d_head=5), key padding (B, 1, 1, T_k)",
            "B=3, T=5, d_model=12, h=4 (d_head=3), one mask per head (B, h, T, T)",
            "B=2, T=7, d_model=6, h=3 (d_head=2), mask (B, 1, T, T)", "an all-True (T, T) mask: B=2, T=5, d_model=8, h=2"],
        "any other mask shape that broadcasts: (T_k,), (1, T_k), (T_q, 1), (h, T_q, T_k), (1, h, T_q, T_k), ...": [
            _HA + "a 1-D key mask (T_k,)", _HA + "a 2-D mask (T_q, T_k) shared by the batch",
            _HA + "a key mask (1, T_k) broadcast over the queries", _HA + "a query-column mask (T_q, 1) with every row kept",
            _HA + "a per-head mask (3, 4, 6)", _HA + "a mask of full rank (2, 3, 4, 6)",
            _HA + "a padding mask (B, 1, 1, T_k) = (2, 1, 1, 6)", _HA + "a per-head mask (1, H, T_q, T_k) = (1, 3, 4, 6)",
            _HA + "a per-batch mask (B, 1, T_q, T_k) = (2, 1, 4, 6)"],
        "keeps the dtype, in float16, bfloat16, float32 and float64 (one check per dtype)": [
            "B=2, T=5, d_model=12, h=3 (d_head=4), no mask (float16)",
            "B=2, T=6, d_model=8, h=4 (d_head=2), causal (T, T) mask (bfloat16)",
            "B=3, T=5, d_model=12, h=4 (d_head=3), one mask per head (B, h, T, T) (float64)",
            "cross-attention: B=2, T_q=3, T_k=7, d_model=10, h=2 (d_head=5), key padding (B, 1, 1, T_k) (float64)"],
        "q, k, v may be non-contiguous": ["non-contiguous q, k, v (made by a transpose), B=2, T=5, h=3"],
        "large scores stay finite": ["large scores: B=2, T=6, d_model=16, h=2, q and k entries of size ~4"],
        "must not call F.scaled_dot_product_attention (nor the fused multi-head kernels)": [
            "ban:torch.nn.functional.scaled_dot_product_attention", "ban:aten._scaled_dot_product*",
            "ban:torch.nn.functional.multi_head_attention_forward"],
        "leaves q, k, v unchanged": ["B=2, T=5, d_model=12, h=3 (d_head=4), no mask"],
    },
    "MultiHeadAttention": {
        "qkv_proj (3 d_model rows: q, k, v) and out_proj, exactly these parameters (loaded strictly by name)": [
            "B=2, T=5, d_model=12, h=3 (d_head=4), no mask", "bias=False: B=2, T=6, d_model=8, h=4 (d_head=2), causal mask"],
        "equals nn.MultiheadAttention with the same weights (layout, split, scale, out_proj)": [
            "B=2, T=5, d_model=12, h=3 (d_head=4), no mask", "a single head: B=2, T=5, d_model=6, h=1",
            "one feature per head: B=2, T=3, d_model=4, h=4 (d_head=1)", "a single token: B=3, T=1, d_model=8, h=2"],
        "mask (T, T), (B, 1, T, T), (B, 1, 1, T), (B, h, T, T), True = may attend": [
            "B=3, T=7, d_model=8, h=2 (d_head=4), causal (T, T) mask",
            "B=2, T=6, d_model=12, h=4 (d_head=3), key padding (B, 1, 1, T)",
            "B=2, T=6, d_model=10, h=5 (d_head=2), mask (B, 1, T, T)",
            "B=2, T=4, d_model=6, h=3 (d_head=2), one mask per head (B, h, T, T)"],
        "any other mask shape broadcastable to (B, h, T, T)": [
            _MHA + "a 1-D key mask (T_k,)", _MHA + "a 2-D mask (T_q, T_k) shared by the batch",
            _MHA + "a key mask (1, T_k) broadcast over the queries", _MHA + "a query-column mask (T_q, 1) with every row kept",
            _MHA + "a per-head mask (3, 5, 5)", _MHA + "a mask of full rank (2, 3, 5, 5)",
            _MHA + "a padding mask (B, 1, 1, T_k) = (2, 1, 1, 5)", _MHA + "a per-head mask (1, H, T_q, T_k) = (1, 3, 5, 5)",
            _MHA + "a per-batch mask (B, 1, T_q, T_k) = (2, 1, 5, 5)"],
        "returns out only, unless return_weights; then (out, per-head weights (B, h, T, T))": [
            "return_weights=False given explicitly: B=2, T=5, d_model=12, h=3",
            "return_weights=True: B=2, T=5, d_model=12, h=3 (d_head=4), no mask",
            "return_weights=True: B=2, T=7, d_model=8, h=2 (d_head=4), causal mask",
            "return_weights=True: B=2, T=4, d_model=6, h=3 (d_head=2), one mask per head"],
        "raises ValueError in __init__ when n_heads does not divide d_model": [
            "MultiHeadAttention(d_model=10, n_heads=4): 10 is not divisible by 4"],
        "must not call nn.MultiheadAttention's functional form or F.scaled_dot_product_attention": [
            "ban:torch.nn.functional.multi_head_attention_forward", "ban:aten._native_multi_head_attention",
            "ban:torch.nn.functional.scaled_dot_product_attention", "ban:aten._scaled_dot_product*"],
        "holds no nn.MultiheadAttention (its parameters would be named in_proj_weight)": [
            "B=2, T=5, d_model=12, h=3 (d_head=4), no mask"],
        "float32, the dtype of the module's parameters":
            ["a float64 module and input: B=2, T=5, d_model=12, h=3, causal mask",
             "a float64 module and input, return_weights=True: B=2, T=5, d_model=8, h=2"],
        "the same module called twice gives the same answer (no state kept between calls)":
            ["one module called twice, on another x of the same shape (B=2, T=6, d_model=8, h=2), "
             "the first output overwritten in between"],
    },
    "attention_param_count": {
        "multi-head attention (defaults): the count of MultiHeadAttention and nn.MultiheadAttention": [
            "d_model=512, n_heads=8 (the Transformer base model)", "d_model=768, n_heads=12",
            "d_model=64, a single head", "d_model=1, n_heads=1", "n_kv_heads=n_heads=8 given: multi-head attention"],
        "n_kv_heads key/value heads: W_K and W_V have n_kv_heads * d_head outputs": [
            "grouped-query: d_model=512, 8 query heads, 2 key/value heads, bias",
            "grouped-query: d_model=512, 8 query heads, 2 kv heads, bias=False",
            "multi-query: d_model=512, 8 query heads, 1 key/value head, bias",
            "n_kv_heads=4 given positionally: d_model=96, 12 query heads"],
        "d_head given: W_Q has n_heads * d_head outputs, W_O that many inputs": [
            "d_head=256 with 16 heads at d_model=3072 (h * d_head = 4096 != d_model)",
            "d_head=256 with 16 heads at d_model=3072, bias=False",
            "narrow heads and grouped kv: d_model=64, 8 heads of 4, 2 kv heads",
            "d_model=8192, 64 query heads, 8 kv heads, d_head=128, bias=False (a 70B-scale layer)"],
        "with d_head given, n_heads need not divide d_model": ["d_head=8 given: n_heads=4 need not divide d_model=10"],
        "bias: one bias entry per output feature of every projection": [
            "d_model=512, n_heads=8, bias=False", "d_model=10, n_heads=10 (d_head=1), bias=False",
            "grouped-query: d_model=512, 8 query heads, 2 key/value heads, bias"],
        "a Python int, exact (integer arithmetic past 2^53; compared exactly, type included)": [
            "d_model=2^27+1, one head: a count above 2^56, exact only in integer arithmetic",
            "d_model=2^26+1, d_head=2^26+3: a count above 2^54",
            "d_model=2^27, 2^20 heads, 2^10 kv heads: a count near 2^56"],
        "raises ValueError: n_heads not dividing d_model without d_head": [
            "d_model=12 is not divisible by n_heads=5 (d_head not given)",
            "d_model=10 is not divisible by n_heads=4, bias=False"],
        "raises ValueError: n_kv_heads not dividing n_heads, or a size < 1": [
            "n_kv_heads=3 does not divide n_heads=8", "n_kv_heads=16 > n_heads=8", "n_kv_heads=0", "n_heads=0",
            "d_head=0", "d_model=0"],
        "the formula, not a module (no parameters built and counted)": ["memory"],
    },
}
