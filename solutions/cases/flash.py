"""Hidden-test cases for chapter 9 (FlashAttention).

Generators ``<name>_cases(seed, memory=False) -> list[Case]`` draw every tensor from a
``torch.Generator`` seeded with ``seed``; their labels are shown to a student whose code fails a case.

Two kinds of cases per exercise, checked separately so that a failure names its reason:

- *values* (``memory=False``): small shapes that exercise every branch -- batched leading dims, no batch
  dims, ``T`` not a multiple of the blocks, ``T_q != T_k`` both ways, causal and not, blocks of 1 and
  blocks larger than ``T``, float64, and scores whose maximum keeps growing from block to block (so that
  forgetting a rescale shows);
- *memory* (``memory=True``): longer sequences with a ``max_numel`` bound. The bound is the largest
  tensor a tiled implementation needs (the inputs and outputs, or one tile of scores for every head,
  whichever is larger) with 25 % slack, while one head's ``(T_q, T_k)`` score matrix -- and even one
  block of queries against all keys -- is several times larger. So "compute the full matrix and then
  loop" loses these points however it is disguised. The elements alive at once are bounded too, so
  keeping every tile's scores in a list (the whole matrix in pieces) fails as well.

The memory bound cannot separate a streaming ``online_softmax`` from a full-row one, because the output
itself is as large as the input; that exercise is graded on values and on banned built-ins.
"""

from __future__ import annotations

import math

import torch

from grader.checks import Case
from solutions.flash import naive_attention

#: Slack on the memory bound of memory cases.
SLACK = 1.25


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _bound(*numels: int) -> int:
    return math.ceil(SLACK * max(numels))


# ---------------------------------------------------------------------------------------------------
# online_softmax


def online_softmax_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    rising = torch.linspace(-20.0, 20.0, 41).repeat(3, 1) + _randn(g, 3, 41, scale=0.1)
    masked = _randn(g, 4, 30, scale=3.0)
    masked[0, :8] = float("-inf")  # the whole first block of row 0
    masked[1, 5:20] = float("-inf")
    masked[2, -3:] = float("-inf")  # the last, partial block
    return [
        Case(args=(_randn(g, 5, 37), 8), label="shape (5, 37), block_size=8 (the last block has 5 entries)"),
        Case(args=(_randn(g, 2, 3, 64, scale=4.0), 16), label="shape (2, 3, 64), block_size=16"),
        Case(args=(rising, 6), label="rows that rise from -20 to 20: the running max grows in every block"),
        Case(args=(rising.flip(-1).contiguous(), 6), label="rows that fall from 20 to -20: the max is in block 0"),
        Case(args=(_randn(g, 4, 10), 1), label="block_size=1"),
        Case(args=(_randn(g, 3, 7), 100), label="block_size=100 larger than the row (7 entries)"),
        Case(args=(_randn(g, 1), 3), label="a 1-D input with a single entry"),
        Case(args=(masked, 8), label="-inf entries, including a whole first block of -inf in row 0"),
        Case(args=(1e4 + _randn(g, 3, 20, scale=30.0), 7), label="logits around 1e4 (exp overflows)"),
        Case(args=(_randn(g, 3, 29, scale=5.0, dtype=torch.float64), 5), label="float64, shape (3, 29)"),
    ]


# ---------------------------------------------------------------------------------------------------
# flash_attention_forward


def _qkv(g, batch, T_q, T_k, d, d_v, dtype=torch.float32, scale=1.0):
    q = _randn(g, *batch, T_q, d, scale=scale, dtype=dtype)
    k = _randn(g, *batch, T_k, d, scale=scale, dtype=dtype)
    v = _randn(g, *batch, T_k, d_v, dtype=dtype)
    return q, k, v


def _growing_keys(g: torch.Generator, T_q: int, T_k: int, d: int) -> tuple[torch.Tensor, ...]:
    """Keys whose length grows along the sequence: for every query the best score tends to come late,
    so the running max rises from one key block to the next."""
    q, k, v = _qkv(g, (2,), T_q, T_k, d, d)
    k = k * torch.linspace(0.2, 3.0, T_k)[:, None]
    return q, k, v


#: (batch, T_q, T_k, d, d_v, block_q, block_k, causal, dtype, label) of the value cases.
_FORWARD_VALUES = [
    ((2, 3), 37, 37, 16, 8, 16, 8, False, torch.float32, "(B, H) = (2, 3), T = 37, blocks 16 x 8"),
    ((2, 3), 37, 37, 16, 8, 16, 8, True, torch.float32, "causal, (B, H) = (2, 3), T = 37, blocks 16 x 8"),
    ((2,), 20, 45, 8, 8, 8, 16, True, torch.float32, "causal with T_q = 20 < T_k = 45, blocks 8 x 16"),
    ((2,), 45, 20, 8, 8, 16, 8, True, torch.float32, "causal with T_q = 45 > T_k = 20, blocks 16 x 8"),
    ((3,), 7, 33, 8, 5, 64, 64, False, torch.float32, "cross-attention T_q = 7, T_k = 33, default blocks"),
    ((), 50, 50, 8, 8, 16, 16, True, torch.float32, "no batch dims (T, d), causal, T = 50, blocks 16"),
    ((2, 2), 9, 11, 4, 4, 1, 1, True, torch.float32, "blocks of 1 x 1, causal, T_q = 9, T_k = 11"),
    ((1, 2), 1, 1, 4, 3, 64, 64, True, torch.float32, "T = 1: one query and one key"),
    ((2, 2), 30, 30, 8, 8, 8, 8, True, torch.float64, "float64, causal, T = 30, blocks 8"),
]


def flash_forward_cases(seed: int, memory: bool = False) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    if memory:
        return [_forward_memory_case(g, *spec) for spec in _MEMORY]
    cases = []
    for batch, T_q, T_k, d, d_v, bq, bk, causal, dtype, label in _FORWARD_VALUES:
        cases.append(Case(args=_qkv(g, batch, T_q, T_k, d, d_v, dtype),
                          kwargs={"block_q": bq, "block_k": bk, "causal": causal}, label=label))
    cases.append(Case(args=_growing_keys(g, 24, 40, 8), kwargs={"block_q": 8, "block_k": 8},
                      label="keys growing along T (the running max rises block after block), blocks 8"))
    cases.append(Case(args=_qkv(g, (2,), 19, 19, 16, 16, scale=3.0),
                      kwargs={"block_q": 8, "block_k": 8, "causal": True},
                      label="large scores (entries of q, k ~ 3, scores up to ~100), causal, T = 19"))
    return cases


#: (batch, T_q, T_k, d, d_v, block_q, block_k, causal) of the memory cases: T_q x T_k per head far above
#: the bound; large tiles keep the number of Python iterations (and the grading time) small.
_MEMORY = [
    ((1, 1), 1024, 1024, 8, 8, 128, 128, False),
    ((2, 2), 384, 640, 8, 8, 64, 128, True),
    ((), 1000, 1000, 4, 4, 100, 125, True),
]


def _memory_label(batch, T_q, T_k, d, bq, bk, causal, bound) -> str:
    heads = math.prod(batch)
    return (f"memory: {'causal, ' if causal else ''}leading dims {batch}, T_q = {T_q}, T_k = {T_k}, d = {d}, "
            f"blocks {bq} x {bk}; one head's score matrix has {T_q * T_k:,} entries, "
            f"{heads * T_q * T_k:,} for all heads, and no tensor may exceed {bound:,}")


def _memory_bound(batch, T_q, T_k, d, d_v, bq, bk) -> tuple[int, int]:
    """``(largest tensor, elements alive at once)`` a tiled implementation needs."""
    heads = math.prod(batch)
    bq, bk = min(bq, T_q), min(bk, T_k)
    io = max(heads * T_q * d, heads * T_k * d, heads * T_k * d_v, heads * T_q * d_v)
    tile = heads * (bq * bk + bq * max(d, d_v))
    bound = _bound(io, tile)
    # one head's scores, and one block of queries against all keys for every head, must break the bound
    assert T_q * T_k > 4 * bound and heads * bq * T_k > 1.5 * bound, "memory case too weak"
    # alive at once: outputs and their per-block pieces, running statistics, a few tiles of temporaries;
    # every tile's scores kept (the whole matrix, in pieces) must break it
    live = 4 * io + 6 * tile + 4096
    assert heads * T_q * T_k > 1.5 * live, "memory case too weak for the live bound"
    return bound, live


def _forward_memory_case(g, batch, T_q, T_k, d, d_v, bq, bk, causal) -> Case:
    bound, live = _memory_bound(batch, T_q, T_k, d, d_v, bq, bk)
    return Case(args=_qkv(g, batch, T_q, T_k, d, d_v), kwargs={"block_q": bq, "block_k": bk, "causal": causal},
                max_numel=bound, max_live=live, label=_memory_label(batch, T_q, T_k, d, bq, bk, causal, bound))


# ---------------------------------------------------------------------------------------------------
# flash_attention_backward


def _backward_args(g, batch, T_q, T_k, d, d_v, causal, dtype=torch.float32, scale=1.0):
    """``(grad_out, q, k, v, out, lse)`` with ``out`` and ``lse`` from float64 attention."""
    q, k, v = _qkv(g, batch, T_q, T_k, d, d_v, torch.float64, scale)
    out, lse = naive_attention(q, k, v, causal)
    grad_out = _randn(g, *batch, T_q, d_v, dtype=torch.float64)
    return tuple(t.to(dtype) for t in (grad_out, q, k, v, out, lse))


def flash_backward_cases(seed: int, memory: bool = False) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    if memory:
        cases = []
        for batch, T_q, T_k, d, d_v, bq, bk, causal in _MEMORY:
            bound, live = _memory_bound(batch, T_q, T_k, d, d_v, bq, bk)
            cases.append(Case(args=_backward_args(g, batch, T_q, T_k, d, d_v, causal),
                              kwargs={"block_q": bq, "block_k": bk, "causal": causal}, max_numel=bound,
                              max_live=live,
                              label=_memory_label(batch, T_q, T_k, d, bq, bk, causal, bound)))
        return cases
    cases = []
    for batch, T_q, T_k, d, d_v, bq, bk, causal, dtype, label in _FORWARD_VALUES:
        cases.append(Case(args=_backward_args(g, batch, T_q, T_k, d, d_v, causal, dtype),
                          kwargs={"block_q": bq, "block_k": bk, "causal": causal}, label=label))
    cases.append(Case(args=_backward_args(g, (2,), 24, 40, 8, 8, False, scale=2.0),
                      kwargs={"block_q": 8, "block_k": 16}, label="peaked attention (scores ~ 16), blocks 8 x 16"))
    return cases
