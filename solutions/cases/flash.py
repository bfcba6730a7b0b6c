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
from solutions.cases.families import DTYPES, extreme_scores, non_contiguous, randn, tag
from solutions.flash import naive_attention

#: Slack on the memory bound of memory cases.
SLACK = 1.25


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _bound(*numels: int) -> int:
    return math.ceil(SLACK * max(numels))


# ---------------------------------------------------------------------------------------------------
# online_softmax


def online_softmax_cases(seed: int, dtype: str = "float32") -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    if dtype != "float32":
        masked = randn(g, 3, 30, scale=3.0, dtype=dtype)
        masked[0, :8] = float("-inf")
        masked[2, -3:] = float("-inf")
        return [
            Case(args=(randn(g, 5, 37, dtype=dtype), 8), label=tag("shape (5, 37), block_size=8", dtype)),
            Case(args=((torch.linspace(-20.0, 20.0, 41).repeat(3, 1)).to(DTYPES[dtype]), 6),
                 label=tag("rows that rise from -20 to 20: the running max grows in every block", dtype)),
            Case(args=(masked, 8), label=tag("-inf entries, a whole first block of -inf in row 0", dtype)),
            Case(args=(extreme_scores(g, 3, 20, kind="huge", dtype=dtype), 7),
                 label=tag("entries of size ~1e4 (exp overflows)", dtype)),
            Case(args=(extreme_scores(g, 3, 25, kind="very_negative", dtype=dtype), 6),
                 label=tag("every entry below -100", dtype)),
        ]
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
        Case(args=(extreme_scores(g, 4, 30, kind="very_negative"), 7),
             label="every entry of every row below -100 (a running maximum started at 0 underflows)"),
        Case(args=(extreme_scores(g, 4, 30, kind="dominant"), 8), label="one entry per row 60 above the others"),
        Case(args=(non_contiguous(_randn(g, 3, 26)), 8), label="a non-contiguous x (stride 2 along the row)"),
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
    q, k, v = _very_negative(g, 20, 30, 8)
    cases.append(Case(args=(q, k, v), kwargs={"block_q": 8, "block_k": 8, "causal": True},
                      label="extreme rows: every score below -100, causal, T_q = 20, T_k = 30, blocks 8"))
    q, k, v = (non_contiguous(t) for t in _qkv(g, (2,), 21, 30, 8, 8))
    cases.append(Case(args=(q, k, v), kwargs={"block_q": 8, "block_k": 16, "causal": True},
                      label="non-contiguous q, k, v (stride 2 along d), causal, T_q = 21, T_k = 30"))
    return cases


def _very_negative(g: torch.Generator, T_q: int, T_k: int, d: int) -> tuple[torch.Tensor, ...]:
    """q and k pointing in opposite directions: every score about -150 (a running maximum started at 0
    underflows to an empty sum)."""
    base = _randn(g, d, dtype=torch.float64).abs() + 1.0
    base = base / base.norm() * math.sqrt(150.0 * math.sqrt(d))
    q = (base + _randn(g, 1, T_q, d, scale=0.05, dtype=torch.float64)).float()
    k = (-base + _randn(g, 1, T_k, d, scale=0.05, dtype=torch.float64)).float()
    return q, k, _randn(g, 1, T_k, d)


#: (batch, T_q, T_k, d, d_v, block_q, block_k, causal) of the memory cases: T_q x T_k per head far above
#: the bound; tiles as large as :func:`_memory_bound`'s margins allow keep the number of tiles, hence of
#: metered operators (and the grading time), small.
_MEMORY = [
    ((1, 1), 1024, 1024, 8, 8, 256, 256, False),
    # the grader's kernel measure sees the whole matrix of this one (64 MiB in float32) on any thread, in any
    # process of the notebook's, in numpy or a mapped file: far above its allowance of 16 MiB
    ((), 4096, 4096, 8, 8, 512, 512, False),
    ((2, 2), 384, 640, 8, 8, 64, 128, True),
    ((), 1000, 1000, 4, 4, 200, 250, True),
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
    cases.append(Case(args=tuple(non_contiguous(t) for t in _backward_args(g, (2,), 21, 30, 8, 8, True)),
                      kwargs={"block_q": 8, "block_k": 16, "causal": True},
                      label="non-contiguous grad_out, q, k, v, out, lse (stride 2 along the last dim), causal"))
    return cases


# ---------------------------------------------------------------------------------------------------
# triton_attention_forward (the Triton exercise, run by Triton's interpreter on the CPU)
#
# The interpreter is slow (each tl operation is a numpy call on a whole tile), so the value cases are a few
# heads of a few dozen positions. The launcher fixes the tiles at 16 queries x 32 keys there, so T = 37 has
# a partial last block of queries and of keys, and T_k = 20 is one partial key block. Under the interpreter
# a kernel's tiles are numpy arrays: the memory
# case bounds what numpy allocates (``max_numel`` also bounds Python-side allocations at 8 bytes per
# element plus an allowance), so a kernel that loads a whole row of keys at once fails it.

#: (B, H, T_q, T_k, d, causal, label) of the value cases; every dtype runs all of them.
_TRITON_VALUES = [
    (1, 2, 37, 37, 16, False, "(B, H) = (1, 2), T = 37: a partial last block of queries and of keys"),
    (1, 2, 37, 37, 16, True, "causal, (B, H) = (1, 2), T = 37"),
    (2, 1, 20, 45, 16, True, "causal with T_q = 20 < T_k = 45 (the last keys are seen by no query)"),
    (1, 1, 45, 20, 32, True, "causal with T_q = 45 > T_k = 20 (the last queries see every key), d = 32"),
    (1, 1, 7, 50, 16, False, "cross-attention T_q = 7, T_k = 50"),
    (1, 1, 64, 64, 16, True, "causal, T = 64: whole blocks only"),
    (1, 1, 1, 1, 16, True, "T = 1: one query and one key"),
]


def triton_forward_cases(seed: int, dtype: str = "float32", memory: bool = False) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    if memory:
        # the interpreter's first call of a kernel object parses and rewrites its source (megabytes of Python
        # objects, once): a small unbounded case first, so the bound sees only the kernel's own arrays
        warm = Case(args=tuple(randn(g, 1, 1, 1, 16) for _ in range(3)),
                    label="memory check's first call: T = 1, not bounded (the interpreter sets the kernel up)")
        return [warm] + [_triton_memory_case(g, *spec) for spec in _TRITON_MEMORY]
    cases = []
    for B, H, T_q, T_k, d, causal, label in _TRITON_VALUES:
        q, k, v = (randn(g, B, H, T, d, dtype=dtype) for T in (T_q, T_k, T_k))
        cases.append(Case(args=(q, k, v), kwargs={"causal": causal}, label=tag(label, dtype)))
    if dtype != "float32":  # the interpreter is slow: the half-precision check keeps the cases that differ in kind
        return cases[:4] + [_triton_very_negative(g, dtype)]
    # the running maximum rises from one key block to the next: forgetting a rescale shows
    q, k, v = (randn(g, 1, 1, T, 16, dtype=torch.float64) for T in (24, 48, 48))
    k = k * torch.linspace(0.2, 3.0, 48, dtype=torch.float64)[:, None]
    cases.append(Case(args=tuple(t.to(DTYPES[dtype]) for t in (q, k, v)),
                      label=tag("keys growing along T (the running max rises block after block), T_k = 48", dtype)))
    cases.append(_triton_very_negative(g, dtype))
    # the same values in strided views: (B, T, H, d) memory seen as (B, H, T, d)
    q, k, v = (non_contiguous(randn(g, 1, 2, T, 16, dtype=dtype)) for T in (21, 30, 30))
    cases.append(Case(args=(q, k, v), kwargs={"causal": True},
                      label=tag("non-contiguous q, k, v (stride 2 along d), causal, T_q = 21, T_k = 30", dtype)))
    return cases


def _triton_very_negative(g: torch.Generator, dtype: str) -> Case:
    """Every score of every row far below zero (about -144): a running maximum started at 0 underflows."""
    base = randn(g, 16, dtype=torch.float64).abs() + 1.0
    base = base / base.norm() * 24.0
    q = (base + randn(g, 1, 1, 20, 16, scale=0.05, dtype=torch.float64)).to(DTYPES[dtype])
    k = (-base + randn(g, 1, 1, 40, 16, scale=0.05, dtype=torch.float64)).to(DTYPES[dtype])
    v = randn(g, 1, 1, 40, 16, dtype=dtype)
    return Case(args=(q, k, v), kwargs={"causal": True},
                label=tag("extreme rows: every score below -100 (about -144), causal, T = 20 x 40", dtype))


#: (T_q, T_k, d, causal) of the memory cases: one head whose keys are far longer than a tile.
_TRITON_MEMORY = [(16, 1024, 16, False), (48, 4096, 16, True)]
#: The memory bound: the largest tensor the launcher creates is the output (at most 768 elements here), and
#: numpy may allocate 8 bytes per bounded element plus a 256 KiB allowance (the interpreter's own arrays take
#: about 150 to 200 KiB); a kernel that loads all keys of a row at once needs a (T_k, d) tile of pointers
#: (int64: 512 KiB at T_k = 4096), another of keys and a (16, T_k) row block of scores, beyond the bound.
TRITON_MAX_NUMEL = 8192


def _triton_memory_case(g, T_q, T_k, d, causal) -> Case:
    q, k, v = (randn(g, 1, 1, T, d) for T in (T_q, T_k, T_k))
    return Case(args=(q, k, v), kwargs={"causal": causal}, max_numel=TRITON_MAX_NUMEL,
                label=(f"memory: {'causal, ' if causal else ''}T_q = {T_q}, T_k = {T_k}, d = {d}; one row block of "
                       f"scores against all keys has {16 * T_k:,} entries, and no tensor may exceed "
                       f"{TRITON_MAX_NUMEL:,} elements (numpy arrays: {8 * TRITON_MAX_NUMEL:,} bytes plus "
                       "256 KiB in all)"))


# ---------------------------------------------------------------------------------------------------
# contract tables (grader/dev/contracts.py): each clause of an exercise's statement -> the cases that test it

_SOFTMAX_DTYPES = [tag("shape (5, 37), block_size=8", dt) for dt in ("float16", "bfloat16")]

CONTRACT = {
    "online_softmax": {
        "softmax over the last dim, read in blocks of block_size (the last block may be shorter)":
            ["shape (5, 37), block_size=8 (the last block has 5 entries)", "shape (2, 3, 64), block_size=16",
             "block_size=1", "block_size=100 larger than the row (7 entries)"],
        "the running sum is rescaled when a later block raises the maximum":
            ["rows that rise from -20 to 20: the running max grows in every block",
             "rows that fall from 20 to -20: the max is in block 0"],
        "works on all rows at once: any leading dims, a 1-D input": ["shape (2, 3, 64), block_size=16",
                                                                     "a 1-D input with a single entry"],
        "-inf entries get weight exactly 0, even a whole block of -inf":
            ["-inf entries, including a whole first block of -inf in row 0",
             "-inf entries, a whole first block of -inf in row 0 (float16)"],
        "stable for extreme rows: logits around 1e4, every entry below -100, one dominant entry":
            ["logits around 1e4 (exp overflows)",
             "every entry of every row below -100 (a running maximum started at 0 underflows)",
             "one entry per row 60 above the others", "every entry below -100 (bfloat16)"],
        "keeps x's dtype: float16, bfloat16, float32, float64":
            [*_SOFTMAX_DTYPES, "shape (5, 37), block_size=8 (the last block has 5 entries)", "float64, shape (3, 29)"],
        "any layout of x (a strided view)": ["a non-contiguous x (stride 2 along the row)"],
        "streams: apart from the output, no temporary larger than (rows, block_size)":
            "not gradable: the output is as large as x, and a correct answer that concatenates its output blocks "
            "holds two full-size tensors at once, as many as a whole-row softmax does (x - max, then exp)",
        "the maximum is updated block by block rather than taken up front":
            "not gradable: a maximum taken up front in one reduction gives the same values and needs no more "
            "memory (a (rows,) tensor)",
        "does not call torch.softmax, its log_softmax versions or torch.logsumexp":
            ["ban:torch.softmax", "ban:torch.logsumexp", "ban:aten._softmax"],
        "returns a new tensor and leaves x unchanged": ["shape (5, 37), block_size=8 (the last block has 5 entries)"],
        "a row made only of -inf may give NaN": "not gradable: either result is allowed",
    },
    "flash_attention_forward": {
        "out = softmax(q k^T / sqrt(d)) v and lse = the natural-log log-sum-exp of each query's scores":
            ["(B, H) = (2, 3), T = 37, blocks 16 x 8", "cross-attention T_q = 7, T_k = 33, default blocks"],
        "loops over query and key blocks with the online-softmax rescale of m, l and the accumulator":
            ["keys growing along T (the running max rises block after block), blocks 8"],
        "any leading dims, including none": ["(B, H) = (2, 3), T = 37, blocks 16 x 8",
                                             "no batch dims (T, d), causal, T = 50, blocks 16"],
        "T_q may differ from T_k; neither need be a multiple of the blocks":
            ["causal with T_q = 20 < T_k = 45, blocks 8 x 16", "causal with T_q = 45 > T_k = 20, blocks 16 x 8",
             "cross-attention T_q = 7, T_k = 33, default blocks", "(B, H) = (2, 3), T = 37, blocks 16 x 8"],
        "blocks of 1, and blocks larger than T": ["blocks of 1 x 1, causal, T_q = 9, T_k = 11",
                                                  "T = 1: one query and one key"],
        "causal is top-left aligned (query i sees keys j <= i)":
            ["causal, (B, H) = (2, 3), T = 37, blocks 16 x 8", "causal with T_q = 20 < T_k = 45, blocks 8 x 16",
             "causal with T_q = 45 > T_k = 20, blocks 16 x 8"],
        "stable for extreme rows: large scores, every score below -100":
            ["large scores (entries of q, k ~ 3, scores up to ~100), causal, T = 19",
             "extreme rows: every score below -100, causal, T_q = 20, T_k = 30, blocks 8"],
        "out and lse keep q's dtype, float32 or float64": ["(B, H) = (2, 3), T = 37, blocks 16 x 8",
                                                            "float64, causal, T = 30, blocks 8"],
        "inputs may be strided views and are left unchanged":
            ["non-contiguous q, k, v (stride 2 along d), causal, T_q = 21, T_k = 30"],
        "never creates a tensor with T_q x T_k elements per head (nor keeps every tile), causal or not": ["memory"],
        "skips the fully masked tiles when causal":
            "not gradable: visiting them only adds zeros (same values, same memory); the statement says so",
        "does not call F.scaled_dot_product_attention or a softmax built-in":
            ["ban:torch.nn.functional.scaled_dot_product_attention", "ban:torch.softmax"],
    },
    "flash_attention_backward": {
        "(dq, dk, dv) of attention from grad_out, q, k, v, out, lse (P recomputed from lse, D from dO and O)":
            ["(B, H) = (2, 3), T = 37, blocks 16 x 8", "peaked attention (scores ~ 16), blocks 8 x 16"],
        "dk = dS^T Q / sqrt(d), dq = dS K / sqrt(d), dv = P^T dO, with d_v != d":
            ["(B, H) = (2, 3), T = 37, blocks 16 x 8", "cross-attention T_q = 7, T_k = 33, default blocks"],
        "T_q may differ from T_k; partial blocks, blocks of 1, blocks larger than T":
            ["causal with T_q = 20 < T_k = 45, blocks 8 x 16", "causal with T_q = 45 > T_k = 20, blocks 16 x 8",
             "blocks of 1 x 1, causal, T_q = 9, T_k = 11", "T = 1: one query and one key"],
        "causal is top-left aligned": ["causal, (B, H) = (2, 3), T = 37, blocks 16 x 8",
                                       "causal with T_q = 20 < T_k = 45, blocks 8 x 16"],
        "any leading dims, including none": ["no batch dims (T, d), causal, T = 50, blocks 16"],
        "gradients have the shapes and dtypes of q, k, v (float32, float64)":
            ["(B, H) = (2, 3), T = 37, blocks 16 x 8", "float64, causal, T = 30, blocks 8"],
        "inputs may be strided views and are left unchanged":
            ["non-contiguous grad_out, q, k, v, out, lse (stride 2 along the last dim), causal"],
        "never creates a T_q x T_k tensor per head, causal or not": ["memory"],
        "does not call F.scaled_dot_product_attention or a softmax built-in":
            ["ban:torch.nn.functional.scaled_dot_product_attention", "ban:torch.softmax"],
    },
    "triton_attention_forward": {
        "out = softmax(q k^T / sqrt(d)) v and lse = m + log(l) (natural log), against float64 attention":
            ["(B, H) = (1, 2), T = 37: a partial last block of queries and of keys",
             "cross-attention T_q = 7, T_k = 50"],
        "the online-softmax update rescales l_i and acc when the maximum rises":
            ["keys growing along T (the running max rises block after block), T_k = 48"],
        "a partial last block: keys past T_k load as 0 and score -inf; rows past T_q are not stored":
            ["(B, H) = (1, 2), T = 37: a partial last block of queries and of keys",
             "causal with T_q = 45 > T_k = 20 (the last queries see every key), d = 32"],
        "causal, top-left aligned: the diagonal blocks masked, the blocks after it skipped":
            ["causal, (B, H) = (1, 2), T = 37", "causal with T_q = 20 < T_k = 45 (the last keys are seen by no query)",
             "causal with T_q = 45 > T_k = 20 (the last queries see every key), d = 32",
             "causal, T = 64: whole blocks only"],
        "T_q != T_k, and a single position": ["cross-attention T_q = 7, T_k = 50", "T = 1: one query and one key"],
        "float16 inputs: out in float16, lse in float32; float32 inputs: both float32":
            [tag("(B, H) = (1, 2), T = 37: a partial last block of queries and of keys", "float16"),
             tag("causal, (B, H) = (1, 2), T = 37", "float16"), "causal, (B, H) = (1, 2), T = 37"],
        "stable when every score of a row is far below zero":
            ["extreme rows: every score below -100 (about -144), causal, T = 20 x 40",
             tag("extreme rows: every score below -100 (about -144), causal, T = 20 x 40", "float16")],
        "strided inputs (the launcher copies them)":
            ["non-contiguous q, k, v (stride 2 along d), causal, T_q = 21, T_k = 30"],
        "tiles only: never all keys of a row at once (NumPy arrays bounded in the interpreter), causal or not":
            ["memory"],
        "blocks at or before the diagonal run without a mask":
            "not gradable: masking them too gives the same values and memory",
        "compiles for a GPU; its speed": "not gradable: the grader runs Triton's CPU interpreter",
        "bfloat16 inputs (GPU only)": "not gradable: Triton's interpreter has no bfloat16",
        "the launcher stays as given": "not gradable: it runs as the student's cell has it; the values are graded",
        "no F.scaled_dot_product_attention, no softmax built-in":
            ["ban:torch.nn.functional.scaled_dot_product_attention", "ban:torch.softmax"],
    },
}
