"""Hidden-test cases, property judges and the contract table for chapter 11 (positions and long context).

``apply_rope`` is checked against the reference in each floating dtype (tolerances per dtype: half precisions
round the rotated pairs, float32 angles drift with the position) and by a property that holds for any correct
rotary embedding whatever its arithmetic: shifting every position by the same amount leaves every query-key
score unchanged, and each row keeps its norm (:func:`scores_depend_on_offsets_only`). Masks are compared
exactly (bool dtype and values). ``linear_attention`` is checked on small cases for its values and on long
sequences under a memory bound that the (T_q, T_k) matrix breaks. ``rope_cached_attention`` (the bug hunt) is
checked against the reference and against full-sequence causal RoPE attention recomputed from the case alone
(:func:`equals_full_sequence_attention`): the cached keys are un-rotated, the sequence rebuilt, and the rows of
the new tokens compared.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from grader.checks import Case
from solutions.long_context import apply_rope

#: Tolerances of the property judges (scores of float64 inputs, and float32 outputs of the bug hunt).
ATOL, RTOL = 1e-4, 1e-4

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


# ---------------------------------------------------------------------------------------------------
# apply_rope


def apply_rope_cases(seed: int, dtype: str = "float32") -> list[Case]:
    """Shapes, positions and bases in one dtype; in float32 also the edge cases and the errors."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]
    name = f"{dtype}: "

    def x(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return _randn(g, *shape, scale=scale, dtype=dt)

    cases = [
        Case(args=(x(6, 8), torch.arange(6)), label=name + "(T=6, d=8), positions 0..5"),
        Case(args=(x(2, 3, 5, 16), torch.arange(10, 15)), label=name + "(B=2, H=3, T=5, d=16), positions 10..14"),
        Case(args=(x(4, 6), torch.tensor([7, 0, 3, 3])),
             label=name + "positions out of order and repeated: [7, 0, 3, 3]"),
        Case(args=(x(3, 32), torch.tensor([5, 17, 40])), kwargs={"base": 500000.0},
             label=name + "base=500000 given as keyword (Llama 3's base), d=32"),
        Case(args=(x(5, 4), torch.arange(5), 100.0), label=name + "base=100 given positionally, d=4"),
        Case(args=(x(4, 64), torch.tensor([1000, 4096, 32767, 32768])),
             label=name + "long positions up to 32768: float64 angles (float32 ones round by up to 2e-3 rad)"),
        Case(args=(x(2, 16), torch.tensor([100000, 131071])), kwargs={"base": 500000.0},
             label=name + "Llama 3's 128k context: positions 100000 and 131071, base=500000"),
    ]
    if dtype != "float32":
        return cases
    wide = x(3, 2, 7, 12)
    cases += [
        Case(args=(x(7, 2), torch.arange(7)), label="d=2: a single pair rotated by the position itself"),
        Case(args=(x(1, 10), torch.tensor([0])), label="T=1 at position 0: the identity"),
        Case(args=(x(2, 9, 6), torch.arange(3, 12, dtype=torch.int32)), label="int32 positions 3..11"),
        Case(args=(x(4, 8), torch.tensor([-3, -1, 0, 2])), label="negative positions: a rotation backwards"),
        Case(args=(wide.transpose(-3, -2), torch.arange(2)),
             label="a non-contiguous x (a transposed view, T=2 along dim -2)"),
        Case(args=(x(1, 5, 8).expand(3, 5, 8), torch.arange(5)),
             label="an expanded x (stride 0 along the batch)"),
        Case(args=(x(9, 64, scale=3.0), torch.arange(0, 900, 100)),
             label="d=64, positions up to 800, entries of size ~3"),
        Case(args=(x(4, 7), torch.arange(4)), raises="ValueError", label="odd d=7: pairs cannot be formed"),
        Case(args=(x(4, 8), torch.arange(5)), raises="ValueError", label="5 positions for T=4 rows"),
        Case(args=(x(4, 8), torch.arange(4.0)), raises="ValueError", label="float positions"),
    ]
    return cases


def offset_shift_cases(seed: int) -> list[Case]:
    """Groups of three: the same queries and keys (stacked as x[0], x[1]) at positions p, p + s1, p + s2."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    for T, d, shifts in [(5, 8, (0, 37, 1000)), (6, 16, (0, 3, 250)), (4, 4, (2, 0, 9))]:
        x = _randn(g, 2, T, d, dtype=torch.float64)
        p = torch.randperm(3 * T, generator=g)[:T]
        for s in shifts:
            cases.append(Case(args=(x, p + s), label=f"T={T}, d={d}, random positions shifted by {s}"))
    return cases


def scores_depend_on_offsets_only(cases: list[Case], outputs: list) -> None:
    """Within each group, rotated q_i . k_j is the same whatever the common shift; every row keeps its norm."""
    scores = []
    for case, out in zip(cases, outputs):
        x = case.args[0]
        where = f"case '{case.label}'"
        assert isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(x.shape), \
            f"{where}: should return a tensor of x's shape {tuple(x.shape)}"
        out = out.double()
        assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=ATOL, rtol=RTOL), \
            f"{where}: a rotation keeps the length of every (query or key) vector, but the norms changed"
        scores.append(out[0] @ out[1].T)  # (T, T): q_i . k_j
    for i in range(0, len(cases), 3):
        for j in (i + 1, i + 2):
            if not torch.allclose(scores[i], scores[j], atol=ATOL, rtol=RTOL):
                raise AssertionError(
                    f"case '{cases[j].label}': shifting every position by the same amount changed the scores "
                    f"q_m . k_n by {float((scores[i] - scores[j]).abs().max()):.3g}; with RoPE they depend on "
                    "m - n only: rotate each pair by position * theta_i, the same way for queries and keys")


# ---------------------------------------------------------------------------------------------------
# alibi_bias


def alibi_bias_cases(seed: int) -> list[Case]:
    del seed  # the bias is deterministic; the seed is part of the check's signature only
    return [
        Case(args=(8, 5, 5), label="8 heads (a power of two), T_q = T_k = 5"),
        Case(args=(1, 3, 3), label="1 head: slope 1/2^8"),
        Case(args=(2, 4, 4), label="2 heads: slopes 1/16, 1/256"),
        Case(args=(16, 3, 3), label="16 heads: slopes 2^-0.5 .. 2^-8"),
        Case(args=(3, 4, 4), label="3 heads (not a power of two): the paper's rule"),
        Case(args=(6, 3, 3), label="6 heads (not a power of two)"),
        Case(args=(12, 2, 2), label="12 heads (not a power of two), as in BLOOM-style configurations"),
        Case(args=(5, 2, 2), label="5 heads (not a power of two)"),
        Case(args=(4, 3, 7), label="4 heads, T_q=3 < T_k=7: queries stand at positions 4, 5, 6"),
        Case(args=(8, 1, 9), label="8 heads, one new query against a cache of 9 (decoding)"),
        Case(args=(2, 0, 4), label="T_q=0: an empty bias"),
        Case(args=(4, 1, 4096), label="4 heads, one query at position 4095"),
        Case(args=(0, 3, 3), raises="ValueError", label="0 heads"),
        Case(args=(2, 5, 3), raises="ValueError", label="T_q=5 > T_k=3"),
        Case(args=(4, 3, 5), again=(), label="called twice with 4 heads, T_q=3, T_k=5, the first bias overwritten in "
                                             "between: a new tensor each call (no cache)"),
    ]


# ---------------------------------------------------------------------------------------------------
# sliding_window_mask


def sliding_window_mask_cases(seed: int) -> list[Case]:
    del seed
    return [
        Case(args=(6, 6, 3), label="T=6, window=3"),
        Case(args=(5, 5, 1), label="window=1: each query sees itself only"),
        Case(args=(5, 5, 5), label="window=T=5: plain causal"),
        Case(args=(4, 4, 100), label="window=100 > T: plain causal"),
        Case(args=(3, 8, 2), label="T_q=3 < T_k=8, window=2: bottom-right aligned"),
        Case(args=(1, 10, 4), label="one query against a cache of 10, window=4"),
        Case(args=(0, 5, 2), label="T_q=0: an empty (0, 5) mask"),
        Case(args=(1024, 1024, 128), label="T=1024, window=128"),  # 1M elements: within the wire's 2M bound
        Case(args=(5, 5, 0), raises="ValueError", label="window=0"),
        Case(args=(6, 4, 2), raises="ValueError", label="T_q=6 > T_k=4"),
        Case(args=(4, 6, 2), again=(), label="called twice with T_q=4, T_k=6, window=2, the first mask overwritten in "
                                             "between: a new tensor each call (no cache)"),
    ]


# ---------------------------------------------------------------------------------------------------
# linear_attention


def linear_attention_cases(seed: int, dtype: str = "float32") -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]
    name = f"{dtype}: "

    def qkv(batch, T_q, T_k, d_k, d_v, scale=1.0):
        return (_randn(g, *batch, T_q, d_k, scale=scale, dtype=dt),
                _randn(g, *batch, T_k, d_k, scale=scale, dtype=dt), _randn(g, *batch, T_k, d_v, dtype=dt))

    cases = [
        Case(args=qkv((), 7, 7, 4, 3), label=name + "non-causal by default, T=7, d_k=4, d_v=3"),
        Case(args=qkv((2, 3), 9, 9, 8, 5), kwargs={"causal": True}, label=name + "causal, (B=2, H=3), T=9"),
        Case(args=(*qkv((2,), 6, 6, 4, 4), True), label=name + "causal given positionally, T=6"),
    ]
    if dtype != "float32":
        return cases
    q, k, v = qkv((2,), 5, 5, 4, 3)
    cases += [
        Case(args=qkv((2,), 5, 11, 4, 6), label="cross-attention T_q=5, T_k=11, non-causal"),
        Case(args=qkv((3,), 1, 1, 4, 2), kwargs={"causal": True}, label="causal, T=1"),
        Case(args=qkv((2,), 8, 8, 4, 4, scale=6.0), kwargs={"causal": True},
             label="causal, large entries (~6): elu(x) + 1 is about 0 for very negative x"),
        Case(args=qkv((2,), 6, 6, 3, 3), kwargs={"eps": 0.5}, label="eps=0.5 (added to each normaliser)"),
        Case(args=qkv((2,), 6, 6, 3, 3), kwargs={"causal": True, "eps": 0.0}, label="causal, eps=0"),
        Case(args=(q.transpose(0, 1).contiguous().transpose(0, 1), k, v), kwargs={"causal": True},
             label="causal, a non-contiguous q (a transposed view)"),
        Case(args=qkv((2,), 4, 6, 3, 3), kwargs={"causal": True}, raises="ValueError",
             label="causal with T_q=4 != T_k=6"),
    ]
    return cases


def linear_attention_memory_cases(seed: int) -> list[Case]:
    """Long sequences: the bound is ``2 * B * T * d_k * d_v`` (prefix states for every position are allowed)
    plus the inputs' size; the ``(T, T)`` matrix of a single sequence is several times larger."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    for batch, T, d_k, d_v, causal in [((2,), 2048, 8, 8, False), ((2,), 2048, 8, 8, True),
                                        ((1, 2), 3000, 4, 8, True), ((1,), 4096, 16, 4, False)]:
        q, k, v = _randn(g, *batch, T, d_k), _randn(g, *batch, T, d_k), _randn(g, *batch, T, d_v)
        n = math.prod(batch)
        io = max(q.numel(), v.numel(), n * T * d_v)
        limit = max(io, 2 * n * T * d_k * d_v) + 4096
        assert T * T > 2 * limit, "the (T, T) matrix of one sequence must break the bound"
        kind = "causal" if causal else "non-causal"
        cases.append(Case(args=(q, k, v), kwargs={"causal": causal}, max_numel=limit,
                          label=f"{kind}, batch {batch}, T={T}, d_k={d_k}, d_v={d_v}, at most {limit:,} elements "
                                "per tensor"))
    return cases


# ---------------------------------------------------------------------------------------------------
# rope_cached_attention (the bug hunt)


def _cached_args(g: torch.Generator, batch: tuple[int, ...], T_past: int, T_new: int, d: int, d_v: int,
                 dtype=torch.float32, base: float = 10000.0) -> tuple[torch.Tensor, ...]:
    """New raw q, k, v and a cache of T_past keys rotated at 0..T_past-1 (as a correct decoder left it)."""
    k_past = _randn(g, *batch, T_past, d, dtype=dtype)
    k_cache = apply_rope(k_past, torch.arange(T_past), base)
    return (_randn(g, *batch, T_new, d, dtype=dtype), _randn(g, *batch, T_new, d, dtype=dtype),
            _randn(g, *batch, T_new, d_v, dtype=dtype), k_cache, _randn(g, *batch, T_past, d_v, dtype=dtype))


def rope_cached_attention_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case(args=_cached_args(g, (2,), 0, 5, 8, 4), label="a prompt of 5 tokens, empty cache"),
        Case(args=_cached_args(g, (2,), 6, 1, 8, 4), label="one new token after a cache of 6"),
        Case(args=_cached_args(g, (2, 3), 9, 1, 16, 8), label="(B=2, H=3), one token after a cache of 9"),
        Case(args=_cached_args(g, (2,), 5, 3, 8, 4),
             label="three new tokens after a cache of 5: new token t sees the cache and new tokens <= t"),
        Case(args=_cached_args(g, (1,), 40, 4, 4, 4), label="four new tokens after a cache of 40, d=4"),
        Case(args=_cached_args(g, (2,), 7, 2, 8, 4, base=100.0), kwargs={"base": 100.0},
             label="base=100 (the cache was rotated with base 100 too), two new tokens after 7"),
        Case(args=_cached_args(g, (2,), 6, 2, 8, 4, dtype=torch.float64), label="float64, two new tokens after 6"),
    ]


def equals_full_sequence_attention(cases: list[Case], outputs: list) -> None:
    """The new tokens' outputs are the last rows of causal RoPE attention over the whole sequence, rebuilt from
    the case: the cached keys rotated back to raw keys, then everything rotated at positions 0..T-1."""
    for case, out in zip(cases, outputs):
        q, k, v, k_cache, v_cache = case.args
        base = case.kwargs.get("base", 10000.0)
        where = f"case '{case.label}'"
        assert isinstance(out, tuple) and len(out) == 3, f"{where}: should return (out, k_cache, v_cache)"
        got = out[0]
        P, T_new = k_cache.shape[-2], q.shape[-2]
        T = P + T_new
        raw_past = apply_rope(k_cache, -torch.arange(P), base)  # rotate back
        k_full = torch.cat((raw_past, k), dim=-2).double()
        v_full = torch.cat((v_cache, v), dim=-2).double()
        q_full = torch.cat((torch.zeros_like(raw_past), q), dim=-2).double()  # earlier queries do not matter
        pos = torch.arange(T)
        full = F.scaled_dot_product_attention(apply_rope(q_full, pos, base), apply_rope(k_full, pos, base), v_full,
                                              is_causal=True)[..., P:, :]
        assert isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(full.shape), \
            f"{where}: out should have shape (..., T_new, d_v) = {tuple(full.shape)}"
        err = float((got.double() - full).abs().max())
        assert err <= ATOL + RTOL * float(full.abs().max()), (
            f"{where}: differs by {err:.3g} from full-sequence causal attention with RoPE at positions 0..{T - 1}: "
            f"the new tokens stand at positions {P}..{T - 1} (not 0..{T_new - 1}), q and k are rotated alike, and "
            "new token t attends to the whole cache and to the new tokens up to t")


# ---------------------------------------------------------------------------------------------------
# the contract table (grader/dev/contracts.py)

CONTRACT = {
    "apply_rope": {
        "the frequencies and the angles in float64 (exact at long positions, where float32 angles are off)": [
            f"{dt}: {label}" for dt in DTYPES for label in (
                "long positions up to 32768: float64 angles (float32 ones round by up to 2e-3 rad)",
                "Llama 3's 128k context: positions 100000 and 131071, base=500000")],
        "rotates each pair (x[2i], x[2i+1]) by positions[t] * base^(-2i/d) (interleaved, RoFormer)":
            ["float32: (T=6, d=8), positions 0..5", "d=2: a single pair rotated by the position itself",
             "d=64, positions up to 800, entries of size ~3"],
        "works on any leading batch dims (..., T, d)": ["float32: (B=2, H=3, T=5, d=16), positions 10..14"],
        "uses the given positions, not 0..T-1 (any order, repeats, negative, int32)":
            ["float32: positions out of order and repeated: [7, 0, 3, 3]", "int32 positions 3..11",
             "negative positions: a rotation backwards"],
        "base is a parameter (positional or keyword), default 10000":
            ["float32: base=500000 given as keyword (Llama 3's base), d=32",
             "float32: base=100 given positionally, d=4"],
        "position 0 is the identity": ["T=1 at position 0: the identity"],
        "keeps x's dtype, in float16, bfloat16, float32 and float64":
            ["float16: (T=6, d=8), positions 0..5", "bfloat16: (T=6, d=8), positions 0..5",
             "float64: (T=6, d=8), positions 0..5"],
        "accepts non-contiguous and expanded x": ["a non-contiguous x (a transposed view, T=2 along dim -2)",
                                                  "an expanded x (stride 0 along the batch)"],
        "q_m . k_n depends only on m - n, and each row keeps its norm":
            ["T=5, d=8, random positions shifted by 1000", "T=4, d=4, random positions shifted by 9"],
        "raises ValueError for odd d, a positions length other than T, float positions":
            ["odd d=7: pairs cannot be formed", "5 positions for T=4 rows", "float positions"],
        "returns a new tensor and leaves x unchanged": ["float32: (T=6, d=8), positions 0..5"],
    },
    "alibi_bias": {
        "returns float32 (n_heads, T_q, T_k) = -m_h * |p_i - j|": ["8 heads (a power of two), T_q = T_k = 5"],
        "slopes 2^(-8h/n), h = 1..n, in that order, for n a power of two":
            ["1 head: slope 1/2^8", "2 heads: slopes 1/16, 1/256", "16 heads: slopes 2^-0.5 .. 2^-8"],
        "the paper's rule and order for other n: slopes of c = 2^floor(log2 n), then every other slope of 2c "
        "(head 1 is then not always the steepest)":
            ["3 heads (not a power of two): the paper's rule", "6 heads (not a power of two)",
             "12 heads (not a power of two), as in BLOOM-style configurations", "5 heads (not a power of two)"],
        "bottom-right aligned: query i stands at T_k - T_q + i":
            ["4 heads, T_q=3 < T_k=7: queries stand at positions 4, 5, 6",
             "8 heads, one new query against a cache of 9 (decoding)", "4 heads, one query at position 4095"],
        "T_q = 0 gives an empty bias": ["T_q=0: an empty bias"],
        "raises ValueError for n_heads < 1 or T_q > T_k": ["0 heads", "T_q=5 > T_k=3"],
        "returns a new tensor (course rule: functions return new tensors)": [
            "called twice with 4 heads, T_q=3, T_k=5, the first bias overwritten in between: a new tensor each call "
            "(no cache)"],
    },
    "sliding_window_mask": {
        "bool (T_q, T_k), True where p_i - window < j <= p_i": ["T=6, window=3", "T=1024, window=128"],
        "the query itself is included: window=1 is the diagonal": ["window=1: each query sees itself only"],
        "a window of T or more is the causal mask": ["window=T=5: plain causal", "window=100 > T: plain causal"],
        "bottom-right aligned like a cache": ["T_q=3 < T_k=8, window=2: bottom-right aligned",
                                              "one query against a cache of 10, window=4"],
        "T_q = 0 gives an empty mask": ["T_q=0: an empty (0, 5) mask"],
        "raises ValueError for window < 1 or T_q > T_k": ["window=0", "T_q=6 > T_k=4"],
        "returns a new tensor (course rule: functions return new tensors)": [
            "called twice with T_q=4, T_k=6, window=2, the first mask overwritten in between: a new tensor each call "
            "(no cache)"],
        "attention with a window needs O(T * window) memory":
            "not gradable: the mask itself is (T_q, T_k); the chapter's demo measures sliding-window attention",
    },
    "linear_attention": {
        "non-causal: phi(Q) (phi(K)^T V) / (phi(Q) phi(K)^T 1 + eps), phi = elu + 1":
            ["float32: non-causal by default, T=7, d_k=4, d_v=3", "cross-attention T_q=5, T_k=11, non-causal"],
        "causal: query i sums over keys j <= i only (prefix sums)":
            ["float32: causal, (B=2, H=3), T=9", "float32: causal given positionally, T=6", "causal, T=1"],
        "phi(x) = elu(x) + 1 exactly, also for large entries":
            ["causal, large entries (~6): elu(x) + 1 is about 0 for very negative x"],
        "eps is added to each normaliser": ["eps=0.5 (added to each normaliser)", "causal, eps=0"],
        "keeps the dtype, in float16, bfloat16, float32 and float64":
            ["float16: causal, (B=2, H=3), T=9", "bfloat16: causal, (B=2, H=3), T=9",
             "float64: causal, (B=2, H=3), T=9"],
        "accepts non-contiguous inputs": ["causal, a non-contiguous q (a transposed view)"],
        "never builds a (T_q, T_k) tensor": ["memory"],
        "raises ValueError when causal and T_q != T_k": ["causal with T_q=4 != T_k=6"],
    },
    "rope_cached_attention": {
        "new tokens at absolute positions T_past.., equal to full-sequence causal RoPE attention":
            ["one new token after a cache of 6", "(B=2, H=3), one token after a cache of 9",
             "four new tokens after a cache of 40, d=4"],
        "with an empty cache it is causal RoPE attention of the prompt": ["a prompt of 5 tokens, empty cache"],
        "several new tokens: bottom-right causal over cache and new tokens":
            ["three new tokens after a cache of 5: new token t sees the cache and new tokens <= t"],
        "returns the caches extended by the rotated keys and the values": ["one new token after a cache of 6"],
        "base is a parameter": ["base=100 (the cache was rotated with base 100 too), two new tokens after 7"],
        "keeps float64": ["float64, two new tokens after 6"],
    },
}
