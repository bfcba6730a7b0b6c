"""Hidden-test cases and property judges for chapter 2 (queries, keys and values).

Generators ``<name>_cases(seed, **params) -> list[Case]`` draw every tensor from a
``torch.Generator`` seeded with ``seed``; their labels are shown to a student whose code fails a case.
Judges ``judge(cases, outputs) -> None`` raise ``AssertionError`` with a message for the student.
Everything is small but the long-sequence and dtype cases of the shared families
(:mod:`solutions.cases.families`): each floating dtype has a check of its own with that dtype's tolerances,
extreme score rows are fed to the attention through identity keys (``k = sqrt(d_k) I``, so the scores
equal ``q`` exactly), and every broadcast class of a mask is tried. ``CONTRACT`` (at the end) maps every
clause of every statement to the cases that exercise it.
"""

from __future__ import annotations

import torch

from grader.checks import Case
from solutions.cases._common import assert_weight_rows
from solutions.cases.families import (
    DTYPES,
    LONG_LENGTHS,
    expanded,
    extreme_scores,
    mask_broadcasts,
    non_contiguous,
    randn,
    tag,
)

#: Tolerances of the property judges (float32 results).
ATOL, RTOL = 1e-5, 1e-4


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=g) * scale


def _mask(g: torch.Generator, *shape: int, p_keep: float = 0.6) -> torch.Tensor:
    """A random bool mask (True = may attend) in which no query row is fully masked."""
    mask = torch.rand(*shape, generator=g) < p_keep  # (..., T_q, T_k)
    rows_empty = ~mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
    keep = torch.randint(shape[-1], (*shape[:-1], 1), generator=g)  # (..., T_q, 1)
    first = torch.zeros(shape, dtype=torch.bool).scatter(-1, keep, True)
    return mask | (rows_empty & first)


def _causal(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril()  # (T, T): query i sees keys 0..i


def _key_padding(g: torch.Generator, B: int, T_k: int) -> torch.Tensor:
    """``(B, T_k)`` with ``mask[b, j] = j < length[b]`` and every length >= 1."""
    lengths = torch.randint(1, T_k + 1, (B,), generator=g)
    lengths[0] = T_k  # one full-length sequence, one (at least) padded
    lengths[-1] = min(int(lengths[-1]), T_k - 1) if T_k > 1 else 1
    return torch.arange(T_k)[None, :] < lengths[:, None]


# ---------------------------------------------------------------------------------------------------
# project_qkv


def project_qkv_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def case(batch: tuple[int, ...], T: int, d_model: int, d_k: int, d_v: int, label: str) -> Case:
        x = _randn(g, *batch, T, d_model)
        return Case(args=(x, _randn(g, d_model, d_k), _randn(g, d_model, d_k), _randn(g, d_model, d_v)),
                    label=label)

    return [
        case((), 3, 4, 2, 3, "one sequence, no batch dim: T=3, d_model=4, d_k=2, d_v=3"),
        case((2,), 5, 6, 4, 3, "batch of 2, T=5, d_model=6, d_k=4, d_v=3"),
        case((2, 3), 4, 5, 3, 2, "two leading batch dims (2, 3), T=4, d_model=5, d_k=3, d_v=2"),
        case((2,), 1, 3, 5, 4, "T=1, d_model=3 smaller than d_k=5 and d_v=4"),
        case((), 7, 8, 8, 8, "square matrices, T=7, d_model=d_k=d_v=8"),
        Case(args=(non_contiguous(_randn(g, 2, 4, 5)), _randn(g, 5, 3), _randn(g, 5, 3), _randn(g, 5, 2)),
             label="a non-contiguous x (a strided view)"),
    ]


def project_qkv_dtype_cases(seed: int, dtype: str) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def x(*shape: int) -> torch.Tensor:
        return randn(g, *shape, dtype=dtype)

    return [Case(args=(x(2, 5, 6), x(6, 4), x(6, 4), x(6, 3)), label=tag("batch of 2, T=5, d_model=6, d_k=4, d_v=3", dtype))]


# ---------------------------------------------------------------------------------------------------
# softmax


def softmax_cases(seed: int, extreme: bool = False) -> list[Case]:
    """Ordinary logits, or (``extreme=True``) logits around +-1e4, where one float32 ulp is about 1e-3.

    The split lets the check hold ordinary cases to a tight tolerance and extreme ones to a relative
    tolerance that a correct log-sum-exp formulation (exact only up to the logits' rounding) can meet.
    """
    g = torch.Generator().manual_seed(seed)
    if extreme:
        return [
            Case(args=(1e4 + _randn(g, 3, 5, scale=5.0),), label="large logits around +1e4 (exp overflows)"),
            Case(args=(-1e4 + _randn(g, 3, 5, scale=5.0),),
                 label="large negative logits around -1e4 (exp underflows)"),
            Case(args=(torch.tensor([[1e4, 0.0, -1e4], [3.0, 3.0, 3.0]]),),
                 label="one dominant logit 1e4, equal logits"),
            Case(args=(1e4 + _randn(g, 2, 3, 4, scale=2.0),), kwargs={"dim": 1},
                 label="logits around 1e4 along dim=1"),
        ]
    inf = float("-inf")
    mixed = _randn(g, 3, 6)
    mixed[0, [1, 4]] = inf
    mixed[1, 0] = inf
    mixed[2, :5] = inf  # one finite entry left: it gets all the weight
    return [
        Case(args=(_randn(g, 5),), label="a vector of 5 logits"),
        Case(args=(_randn(g, 4, 7, scale=3.0),), label="rows of shape (4, 7), default dim=-1"),
        Case(args=(_randn(g, 2, 3, 6),), kwargs={"dim": 1}, label="shape (2, 3, 6) along dim=1"),
        Case(args=(_randn(g, 5, 4),), kwargs={"dim": 0}, label="shape (5, 4) along dim=0 (columns)"),
        Case(args=(_randn(g, 2, 4, 3),), kwargs={"dim": -2}, label="shape (2, 4, 3) along dim=-2"),
        Case(args=(_randn(g, 3, 5, scale=50.0),),
             label="logits with standard deviation 50 (exp overflows float32 above 88.7)"),
        Case(args=(mixed,), label="rows mixing -inf with finite logits"),
        Case(args=(_randn(g, 4, 1),), label="a single entry along dim=-1 (shape (4, 1))"),
        Case(args=(_randn(g, 3, 4).double(),), label="float64 input (dtype must be kept)"),
    ]


def softmax_dtype_cases(seed: int, dtype: str) -> list[Case]:
    """One dtype: ordinary rows, rows mixing -inf (a mask) with finite logits, the extreme families."""
    g = torch.Generator().manual_seed(seed)
    mixed = randn(g, 3, 6, dtype=dtype)
    mixed[0, [1, 4]] = float("-inf")
    mixed[2, :5] = float("-inf")
    huge = extreme_scores(g, 3, 7, kind="huge", dtype=dtype)
    huge[:, 2] = float("-inf")
    cases = [
        Case(args=(randn(g, 4, 7, scale=3.0, dtype=dtype),), label=tag("rows of shape (4, 7)", dtype)),
        Case(args=(randn(g, 2, 5, 3, dtype=dtype),), kwargs={"dim": 1}, label=tag("shape (2, 5, 3) along dim=1", dtype)),
        Case(args=(mixed,), label=tag("-inf entries (a mask) among finite logits, one finite entry left", dtype)),
        Case(args=(huge,), label=tag("logits of size ~1e4 with a -inf column", dtype)),
        Case(args=(extreme_scores(g, 3, 6, kind="dominant", dtype=dtype),),
             label=tag("one logit per row 60 above the others", dtype)),
    ]
    if dtype in ("float32", "float64"):
        # not in half precision: there the logits themselves are rounded to 1/4 (float16) or 2 (bfloat16) at
        # -300, and a correct log-sum-exp rounded to that dtype is off by as much; the case would grade rounding
        cases.append(Case(args=(extreme_scores(g, 3, 6, kind="very_negative", dtype=dtype),),
                          label=tag("every logit of every row below -100", dtype)))
    if dtype == "float32":
        cases += [
            Case(args=(extreme_scores(g, 2, 5000, kind="near_uniform"),),
                 label="near-uniform rows over 5000 outcomes"),
            Case(args=(non_contiguous(_randn(g, 3, 5)),), label="a non-contiguous x (a strided view)"),
            Case(args=(_randn(g, 4, 3).T,), kwargs={"dim": 0}, label="a transposed x along dim=0"),
            Case(args=(expanded(_randn(g, 6), 3),), label="an expanded x (stride 0 along the rows)"),
        ]
    return cases


# ---------------------------------------------------------------------------------------------------
# scaled_dot_product_attention


def sdpa_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def case(batch: tuple[int, ...], T_q: int, T_k: int, d_k: int, d_v: int, label: str,
             mask: torch.Tensor | None = None, scale: float = 1.0) -> Case:
        q = _randn(g, *batch, T_q, d_k, scale=scale)
        k = _randn(g, *batch, T_k, d_k, scale=scale)
        v = _randn(g, *batch, T_k, d_v)
        return Case(args=(q, k, v) if mask is None else (q, k, v, mask), label=label)

    return [
        case((), 3, 3, 2, 2, "one sequence, no batch dim: T=3, d_k=d_v=2, no mask"),
        case((), 4, 4, 4, 8, "one sequence, no batch dim: T=4, d_k=4, d_v=8 (d_v != d_k)"),
        case((3,), 5, 5, 4, 6, "batch of 3, T=5, d_k=4, d_v=6, no mask"),
        case((2,), 2, 7, 3, 5, "cross-attention: batch of 2, T_q=2, T_k=7, d_k=3, d_v=5"),
        case((2, 3), 5, 7, 4, 3,
             "batched (2, 3) leading dims, T_q=5 != T_k=7, d_v != d_k, with (T_q, T_k) mask",
             mask=_mask(g, 5, 7)),
        case((2, 3), 4, 6, 8, 2, "batched (B=2, H=3), T_q=4, T_k=6, with (B, 1, T_q, T_k) mask",
             mask=_mask(g, 2, 1, 4, 6)),
        case((2, 3), 5, 5, 4, 4, "key-padding mask of shape (B, 1, 1, T_k), B=2, H=3, T=5",
             mask=_key_padding(g, 2, 5)[:, None, None, :]),
        case((2,), 5, 5, 3, 7, "causal (T, T) mask, odd T=5, d_k=3, d_v=7", mask=_causal(5)),
        case((2,), 1, 1, 4, 3, "T=1: a single query and key", mask=torch.ones(1, 1, dtype=torch.bool)),
        case((2,), 3, 4, 16, 5, "large logits: q, k entries of size ~6, scores up to ~1e2", scale=6.0),
        case((), 4, 4, 2, 3, "huge logits: scores in the hundreds (exp overflows without the max trick)",
             scale=20.0, mask=_mask(g, 4, 4)),
    ]


def _identity_keys(g: torch.Generator, scores: torch.Tensor, d_v: int = 3) -> tuple:
    """``(q, k, v)`` whose scaled scores ``q k^T / sqrt(d_k)`` are exactly ``scores``: ``d_k = T_k`` must be a
    power of 4 so that ``sqrt(d_k)`` is a power of 2, and ``k = sqrt(d_k) I``."""
    T_k = scores.shape[-1]
    root = int(round(T_k ** 0.5))
    assert root * root == T_k and root & (root - 1) == 0, "T_k must be a power of 4"
    k = torch.eye(T_k, dtype=scores.dtype) * root
    v = randn(g, T_k, d_v, dtype=scores.dtype)
    return scores.clone(), k, v


def sdpa_dtype_cases(seed: int, dtype: str) -> list[Case]:
    """One dtype: batched with a mask, cross-attention, masks as -inf in half precision, extreme scores."""
    g = torch.Generator().manual_seed(seed)

    def x(*shape: int) -> torch.Tensor:
        return randn(g, *shape, dtype=dtype)

    huge = extreme_scores(g, 3, 4, kind="huge", dtype=dtype)  # (T_q=3, T_k=d_k=4), |scores| <= 3e4
    huge_mask = torch.tensor([[True, False, True, True], [False, True, True, False], [True, True, False, True]])
    cases = [
        Case(args=(x(2, 3, 5, 4), x(2, 3, 7, 4), x(2, 3, 7, 6), _mask(g, 5, 7)),
             label=tag("batched (2, 3), T_q=5, T_k=7, d_v=6, with a (T_q, T_k) mask", dtype)),
        Case(args=(x(2, 4, 8), x(2, 4, 8), x(2, 4, 3), _causal(4)), label=tag("causal (T, T) mask, d_k=8", dtype)),
        Case(args=(x(3, 2, 5), x(3, 6, 5), x(3, 6, 2)), label=tag("cross-attention T_q=2, T_k=6, no mask", dtype)),
        Case(args=(*_identity_keys(g, huge), huge_mask),
             label=tag("scores of size ~1e4 with masked (-inf) entries", dtype)),
        Case(args=_identity_keys(g, extreme_scores(g, 3, 16, kind="dominant", dtype=dtype)),
             label=tag("one score per row 60 above the others", dtype)),
    ]
    if dtype in ("float32", "float64"):  # not in half precision, as for softmax_dtype_cases
        cases.append(Case(args=_identity_keys(g, extreme_scores(g, 2, 16, kind="very_negative", dtype=dtype)),
                          label=tag("every score of a row below -100", dtype)))
        low = (randn(g, 3, 16, dtype=dtype) * 5.0 - 3e4).to(DTYPES[dtype])  # float16 would round -3e4 by 16
        cases.append(Case(args=(*_identity_keys(g, low), _mask(g, 3, 16)),
                          label=tag("every allowed score around -3e4, far below -1e4, next to masked entries",
                                    dtype)))
    return cases


def sdpa_mask_cases(seed: int) -> list[Case]:
    """Every broadcast class of a mask against scores (B=2, H=3, T_q=4, T_k=5), and a batch with no head axis."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    for lead in ((2, 3), (3,)):
        for label, mask in mask_broadcasts(g, lead, 4, 5):
            q, k, v = _randn(g, *lead, 4, 6), _randn(g, *lead, 5, 6), _randn(g, *lead, 5, 3)
            cases.append(Case(args=(q, k, v, mask), label=f"scores {(*lead, 4, 5)}, {label}"))
    q = _randn(g, 2, 3, 5, 4)
    cases += [
        Case(args=(q.transpose(-2, -1).contiguous().transpose(-2, -1), non_contiguous(_randn(g, 2, 3, 6, 4)),
                   _randn(g, 2, 6, 3, 5).transpose(1, 2)), label="non-contiguous q, k and v (transposed and strided views)"),
        Case(args=(_randn(g, 2, 5, 4), _randn(g, 2, 5, 4), _randn(g, 2, 5, 2), expanded(_causal(5), 2)),
             label="an expanded mask (stride 0 along the batch)"),
    ]
    return cases


def attention_weights_are_distributions(cases: list[Case], outputs: list) -> None:
    """Every row of ``weights`` is a distribution over the keys that puts exactly 0 on masked keys."""
    for case, output in zip(cases, outputs):
        q, k = case.args[0], case.args[1]
        mask = case.args[3] if len(case.args) > 3 else None
        where = f"case '{case.label}'"
        assert isinstance(output, tuple) and len(output) == 2, \
            f"{where}: should return a pair (out, weights)"
        weights = output[1]
        assert isinstance(weights, torch.Tensor), f"{where}: weights should be a tensor"
        expected = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
        assert tuple(weights.shape) == expected, \
            f"{where}: weights have shape {tuple(weights.shape)}, expected (..., T_q, T_k) = {expected}"
        assert_weight_rows(where, weights, mask, "each query's weights must sum to 1 over the keys (last axis)")


# ---------------------------------------------------------------------------------------------------
# SelfAttention


def self_attention_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case(args=(_randn(g, 3, 4),), init=(4, 2, None, False),
             label="one sequence, no batch dim: T=3, d_model=4, d_k=2, d_v=None (defaults to d_k)"),
        Case(args=(_randn(g, 2, 5, 6),), init=(6, 4, 3, False),
             label="batch of 2, T=5, d_model=6, d_k=4, d_v=3"),
        Case(args=(_randn(g, 2, 4, 6),), init=(6, 3, 5, True),
             label="with bias: batch of 2, T=4, d_model=6, d_k=3, d_v=5"),
        Case(args=(_randn(g, 2, 2, 5, 4), _causal(5)), init=(4, 4, 2, False),
             label="two leading batch dims (2, 2), odd T=5, d_model=d_k=4, d_v=2, causal (T, T) mask"),
        Case(args=(_randn(g, 3, 6, 8), _key_padding(g, 3, 6)[:, None, :]), init=(8, 4, 6, False),
             label="key-padding mask of shape (B, 1, T), B=3, T=6, d_model=8, d_k=4, d_v=6"),
        Case(args=(_randn(g, 2, 1, 5),), init=(5, 3, 2, True), label="T=1: a single token, with bias"),
        *[Case(args=(_randn(g, 2, 3, 6, 4), mask), init=(4, 3, 5, False), label=f"x (2, 3, 6, 4), {label}")
          for label, mask in mask_broadcasts(g, (2, 3), 6, 6)],
        Case(args=(non_contiguous(_randn(g, 2, 5, 4)),), init=(4, 4, 3, False), label="a non-contiguous x"),
        Case(args=(_randn(g, 2, 5, 6),), again=(_randn(g, 2, 5, 6),), init=(6, 4, 3, False),
             label="one module called twice, on another x of the same shape (batch of 2, T=5, d_model=6, d_k=4, d_v=3), the first output overwritten in between"),
    ]


def _self_attention_state(g: torch.Generator, d_model: int, d_k: int, d_v: int, bias: bool) -> dict:
    state = {"W_q.weight": _randn(g, d_k, d_model, scale=d_model ** -0.5),
             "W_k.weight": _randn(g, d_k, d_model, scale=d_model ** -0.5),
             "W_v.weight": _randn(g, d_v, d_model, scale=d_model ** -0.5)}
    if bias:
        state |= {"W_q.bias": _randn(g, d_k), "W_k.bias": _randn(g, d_k), "W_v.bias": _randn(g, d_v)}
    return state


def permutation_pairs_cases(seed: int) -> list[Case]:
    """Pairs ``(x, x permuted along T)`` run through the same weights (cases 2i and 2i + 1)."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    for batch, T, d_model, d_k, d_v, bias, label in [
        ((), 4, 6, 3, 5, False, "one sequence, T=4, d_model=6, d_k=3, d_v=5"),
        ((2,), 5, 4, 4, 4, True, "batch of 2, T=5, d_model=d_k=d_v=4, with bias"),
        ((2, 3), 6, 8, 2, 3, False, "two leading batch dims (2, 3), T=6, d_model=8, d_k=2, d_v=3"),
    ]:
        state = _self_attention_state(g, d_model, d_k, d_v, bias)
        x = _randn(g, *batch, T, d_model)
        perm = torch.randperm(T, generator=g)
        while T > 1 and bool((perm == torch.arange(T)).all()):
            perm = torch.randperm(T, generator=g)
        init = (d_model, d_k, d_v, bias)
        cases.append(Case(args=(x,), init=init, state=state, label=f"{label}: original order"))
        cases.append(Case(args=(x[..., perm, :].clone(),), init=init, state=state,
                          label=f"{label}: tokens permuted by {perm.tolist()}"))
    return cases


def is_permutation_equivariant(cases: list[Case], outputs: list) -> None:
    """``SelfAttention(P x) == P SelfAttention(x)`` for the permutation P of each pair of cases."""
    for i in range(0, len(cases), 2):
        x, x_perm = cases[i].args[0], cases[i + 1].args[0]
        out, out_perm = outputs[i], outputs[i + 1]
        where = f"case '{cases[i + 1].label}'"
        assert isinstance(out, torch.Tensor) and isinstance(out_perm, torch.Tensor), \
            f"{where}: forward should return a tensor"
        assert out.shape[:-1] == x.shape[:-1] and out.shape == out_perm.shape, (
            f"{where}: the output has shape {tuple(out.shape)}, expected one row per token, "
            f"{(*x.shape[:-1], 'd_v')}")
        # recover P from the inputs: row t of x_perm is row perm[t] of x
        same = (x_perm.unsqueeze(-2) == x.unsqueeze(-3)).all(dim=-1)  # (..., T, T)
        perm = same.reshape(-1, *same.shape[-2:])[0].int().argmax(dim=-1)
        expected = out[..., perm, :]
        assert torch.allclose(out_perm, expected, atol=ATOL, rtol=RTOL), (
            f"{where}: self-attention without positional information must be permutation-equivariant: "
            f"permuting the input tokens must permute the output rows the same way, out(P x) = P out(x) "
            f"(atol={ATOL:g}, rtol={RTOL:g}); the largest difference is "
            f"{float((out_perm - expected).abs().max()):.3g}")


# ---------------------------------------------------------------------------------------------------
# sinusoidal_positions


def sinusoidal_cases(seed: int) -> list[Case]:
    del seed  # positions are deterministic; the seed is part of the check's signature only
    return [
        Case(args=(1, 2), label="T=1, d_model=2"),
        Case(args=(3, 4), label="T=3, d_model=4"),
        Case(args=(7, 6), label="odd T=7, d_model=6"),
        Case(args=(5, 10), label="T=5, d_model=10 (d_model/2 odd)"),
        Case(args=(32, 16), label="T=32, d_model=16"),
        Case(args=(12, 64), label="T=12, d_model=64"),
        Case(args=(0, 8), label="T=0: an empty (0, 8) table"),
        Case(args=(4, 5), raises="ValueError", label="odd d_model=5 (ValueError)"),
        Case(args=(4, 0), raises="ValueError", label="d_model=0 (ValueError)"),
        Case(args=(-1, 4), raises="ValueError", label="T=-1 (ValueError)"),
        Case(args=(6, 8), again=(), label="called twice with T=6, d_model=8, the first table overwritten in between: "
                                          "a new tensor each call (no cache)"),
    ]


def sinusoidal_long_cases(seed: int) -> list[Case]:
    """Lengths past the fixed tables of many tutorials (256, 512, 5000)."""
    del seed
    return [Case(args=(T, d), label=f"long sequence T={T}, d_model={d}")
            for T, d in zip(LONG_LENGTHS, (16, 64, 32))]


# ---------------------------------------------------------------------------------------------------
# the contract: every clause of every statement -> the hidden cases that exercise it


def _dtypes(label: str) -> list[str]:
    return [tag(label, d) for d in DTYPES]


_MASK_CLASSES = [label for label, _ in mask_broadcasts(torch.Generator().manual_seed(0), (2, 3), 4, 5)]

CONTRACT = {
    "project_qkv": {
        "q = x @ W_q, k = x @ W_k, v = x @ W_v, in that order": [
            "one sequence, no batch dim: T=3, d_model=4, d_k=2, d_v=3", "square matrices, T=7, d_model=d_k=d_v=8"],
        "any number of leading batch dims, the same matrices for every sequence": [
            "batch of 2, T=5, d_model=6, d_k=4, d_v=3", "two leading batch dims (2, 3), T=4, d_model=5, d_k=3, d_v=2"],
        "d_v may differ from d_k, d_model may be smaller": ["T=1, d_model=3 smaller than d_k=5 and d_v=4"],
        "any floating dtype, the outputs keep it": _dtypes("batch of 2, T=5, d_model=6, d_k=4, d_v=3"),
        "any memory layout": ["a non-contiguous x (a strided view)"],
        "new tensors, the arguments unchanged": ["batch of 2, T=5, d_model=6, d_k=4, d_v=3"],
    },
    "softmax": {
        "exp(x - max) / sum along dim, any dim": [
            "a vector of 5 logits", "shape (2, 3, 6) along dim=1", "shape (5, 4) along dim=0 (columns)",
            "shape (2, 4, 3) along dim=-2", "a single entry along dim=-1 (shape (4, 1))"],
        "float16, bfloat16, float32, float64; the result keeps x's dtype": _dtypes("rows of shape (4, 7)"),
        "-inf entries get weight exactly 0, in every dtype": [
            "rows mixing -inf with finite logits",
            *_dtypes("-inf entries (a mask) among finite logits, one finite entry left")],
        "no overflow at logits around +-1e4, next to -inf entries, in every dtype": [
            "large logits around +1e4 (exp overflows)", "large negative logits around -1e4 (exp underflows)",
            "logits around 1e4 along dim=1", "one dominant logit 1e4, equal logits",
            *_dtypes("logits of size ~1e4 with a -inf column")],
        "every logit of a row far below zero (float32, float64: in half precision such logits are rounded "
        "to 1/4 or 2, see softmax_dtype_cases)": [
            "every logit of every row below -100", "every logit of every row below -100 (float64)"],
        "one logit far above the rest; near-uniform rows over many outcomes": [
            *_dtypes("one logit per row 60 above the others"), "near-uniform rows over 5000 outcomes",
            "logits with standard deviation 50 (exp overflows float32 above 88.7)"],
        "any layout (transposed, strided, expanded)": [
            "a non-contiguous x (a strided view)", "a transposed x along dim=0", "an expanded x (stride 0 along the rows)"],
        "must not call torch.softmax or its family (log_softmax included)": ["ban:torch.softmax"],
        "torch.logsumexp is not in the family (exp(x - logsumexp(x)) is allowed)":
            "not gradable: nothing bans it, so such an answer is graded by its results (tests/student_code: "
            "softmax__correct uses it)",
        "a new tensor, x unchanged": ["rows of shape (4, 7), default dim=-1"],
    },
    "scaled_dot_product_attention": {
        "out = softmax(q k^T / sqrt(d_k)) v and the weights": [
            "one sequence, no batch dim: T=3, d_k=d_v=2, no mask", "batch of 3, T=5, d_k=4, d_v=6, no mask"],
        "T_q may differ from T_k, d_v from d_k": [
            "cross-attention: batch of 2, T_q=2, T_k=7, d_k=3, d_v=5",
            "one sequence, no batch dim: T=4, d_k=4, d_v=8 (d_v != d_k)"],
        "each row of weights a distribution over the keys, exactly 0 where masked": [
            "causal (T, T) mask, odd T=5, d_k=3, d_v=7", "key-padding mask of shape (B, 1, 1, T_k), B=2, H=3, T=5"],
        "a mask of every broadcast class": [f"scores (2, 3, 4, 5), {label}" for label in _MASK_CLASSES] + [
            "scores (3, 4, 5), a 1-D key mask (T_k,)", "scores (3, 4, 5), a per-head mask (3, 4, 5)",
            "an expanded mask (stride 0 along the batch)"],
        "float16, bfloat16, float32, float64; out and weights keep the dtype (masked -inf in float16)":
            _dtypes("batched (2, 3), T_q=5, T_k=7, d_v=6, with a (T_q, T_k) mask") + _dtypes("causal (T, T) mask, d_k=8")
            + _dtypes("cross-attention T_q=2, T_k=6, no mask"),
        "scores around +-1e4 next to masked entries, in every dtype": _dtypes("scores of size ~1e4 with masked (-inf) entries")
            + ["huge logits: scores in the hundreds (exp overflows without the max trick)",
               "large logits: q, k entries of size ~6, scores up to ~1e2"],
        "scores all far below zero (float32, float64), or one far above the rest (every dtype)": [
            "every score of a row below -100", "every score of a row below -100 (float64)"]
            + _dtypes("one score per row 60 above the others"),
        "masked scores removed (-inf), not given a finite fill: allowed scores far below -1e4 too (float32, float64)": [
            "every allowed score around -3e4, far below -1e4, next to masked entries",
            "every allowed score around -3e4, far below -1e4, next to masked entries (float64)"],
        "any layout of q, k, v": ["non-contiguous q, k and v (transposed and strided views)"],
        "T=1": ["T=1: a single query and key"],
        "must not call F.scaled_dot_product_attention": [
            "ban:torch.nn.functional.scaled_dot_product_attention", "ban:aten._scaled_dot_product*"],
        "new tensors, inputs unchanged": ["batch of 3, T=5, d_k=4, d_v=6, no mask"],
        "masked scores may hold any value": "not gradable: the scores are computed inside from q and k, so no "
                                            "caller can put a value at a masked score",
    },
    "SelfAttention": {
        "W_q, W_k, W_v are nn.Linear(d_model, d_k / d_k / d_v, bias), d_v defaults to d_k": [
            "one sequence, no batch dim: T=3, d_model=4, d_k=2, d_v=None (defaults to d_k)",
            "batch of 2, T=5, d_model=6, d_k=4, d_v=3", "with bias: batch of 2, T=4, d_model=6, d_k=3, d_v=5"],
        "forward = attention over W_q(x), W_k(x), W_v(x), any leading dims": [
            "two leading batch dims (2, 2), odd T=5, d_model=d_k=4, d_v=2, causal (T, T) mask",
            "T=1: a single token, with bias"],
        "any mask exercise 3 accepts": [f"x (2, 3, 6, 4), {label}" for label in
                                        [lb for lb, _ in mask_broadcasts(torch.Generator().manual_seed(0), (2, 3), 6, 6)]]
            + ["key-padding mask of shape (B, 1, T), B=3, T=6, d_model=8, d_k=4, d_v=6"],
        "any layout of x": ["a non-contiguous x"],
        "permutation-equivariant without positions": [
            "one sequence, T=4, d_model=6, d_k=3, d_v=5: tokens permuted by [2, 1, 3, 0]"],
        "must not call F.scaled_dot_product_attention": ["ban:torch.nn.functional.scaled_dot_product_attention"],
        "float32 (the layers' dtype)": ["batch of 2, T=5, d_model=6, d_k=4, d_v=3"],
        "a call keeps nothing from the calls before it": [
            "one module called twice, on another x of the same shape (batch of 2, T=5, d_model=6, d_k=4, d_v=3), the first output overwritten in between"],
    },
    "sinusoidal_positions": {
        "PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...), interleaved": [
            "T=3, d_model=4", "odd T=7, d_model=6", "T=5, d_model=10 (d_model/2 odd)", "T=12, d_model=64"],
        "float32 (T, d_model)": ["T=1, d_model=2", "T=32, d_model=16"],
        "any T >= 0: T=0 gives an empty table": ["T=0: an empty (0, 8) table"],
        "long sequences, no table of fixed length (past 256, 512, 5000)": [
            "long sequence T=300, d_model=16", "long sequence T=600, d_model=64", "long sequence T=5003, d_model=32"],
        "raises ValueError for odd or non-positive d_model, negative T": [
            "odd d_model=5 (ValueError)", "d_model=0 (ValueError)", "T=-1 (ValueError)"],
        "returns a new tensor (course rule: functions return new tensors)": [
            "called twice with T=6, d_model=8, the first table overwritten in between: a new tensor each call (no cache)"],
    },
}
