"""Hidden-test cases for chapter 8 (the O(T²) cost).

Generators ``<name>_cases(seed, **params) -> list[Case]``; their labels are shown to a student whose code
fails a case. The counting functions must return exact Python ``int`` (the comparison checks the type),
so float arithmetic that happens to round right still fails. ``chunked_attention`` is checked twice:
on small cases for its values, and on long sequences with ``max_numel`` for its memory, where building
the whole ``(T_q, T_k)`` matrix -- in torch or numpy, for all heads at once or one head at a time --
exceeds the bound even when the values are right.
"""

from __future__ import annotations

import numpy as np
import torch

from grader.checks import Case
from solutions.cases.families import expanded, mask_broadcasts, non_contiguous, randn, tag

# ---------------------------------------------------------------------------------------------------
# attention_cost, roofline_time

#: Every kind of element size a ``torch.dtype`` has: 1 byte (float8, int8, uint8, bool), 2, 4, 8 and 16
#: (complex128). ``torch.finfo`` knows only the floating ones, ``torch.iinfo`` only the integer ones.
ANY_DTYPES: tuple[torch.dtype, ...] = (
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.float8_e4m3fn, torch.float8_e5m2,
    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64,
    torch.complex128,
)


def attention_cost_cases(seed: int) -> list[Case]:
    """Both kinds, forward and backward, causal or not, block sizes that do and do not divide T (and
    exceed it), every element size, counts past 2^53 (float) and 2^63 (int64), numpy sizes, bad arguments.
    Every expected value fits the results wire (64 bits)."""
    del seed  # the counts are deterministic
    c = []

    def case(label, *args, raises=None, **kwargs):
        c.append(Case(args=args, kwargs=kwargs, label=label, raises=raises))

    case("standard forward, T=4, d=8 (bfloat16 by default)", 4, 8)
    case("standard forward, T=10, d=16, heads=3, batch=2, float32", 10, 16, heads=3, batch=2, dtype=torch.float32)
    case("standard backward, T=7, d=5 (P read back, nothing recomputed)", 7, 5, backward=True)
    case("standard forward, causal: every score is still computed", 9, 4, causal=True)
    case("standard backward, causal: every score is still computed", 9, 4, causal=True, backward=True)
    case("standard: the block sizes change nothing", 12, 4, kind="standard", block_q=3, block_k=5)
    case("T=0: an empty sequence costs nothing", 0, 64, kind="flash")
    case("flash forward, T=512, d=64, blocks 128: K and V read once per query block", 512, 64, kind="flash")
    case("flash forward, T=100 not a multiple of block_q=32 (last block 4 rows)", 100, 16, kind="flash",
         block_q=32, block_k=32)
    case("flash forward, block_q=256 larger than T=100: one pass over K and V", 100, 16, kind="flash",
         block_q=256, block_k=64)
    case("flash forward, block_q=1: K and V read once per query", 20, 8, kind="flash", block_q=1, block_k=4)
    case("flash forward, causal, block_q = block_k = 64, T=1000", 1000, 64, kind="flash", block_q=64,
         block_k=64, causal=True)
    case("flash forward, causal, block_q=48 != block_k=80: key blocks per query block by the last row",
         1000, 32, kind="flash", block_q=48, block_k=80, causal=True)
    case("flash forward, causal, block_q=32 < block_k=128", 500, 32, kind="flash",
         block_q=32, block_k=128, causal=True)
    case("flash forward, causal, one tile (block sizes >= T): nothing skipped", 50, 8, kind="flash",
         block_q=64, block_k=64, causal=True)
    case("flash forward, causal, block_q = block_k = 1: exactly T(T+1)/2 pairs", 37, 8, kind="flash",
         block_q=1, block_k=1, causal=True)
    case("flash backward, T=512, d=64, blocks 128", 512, 64, kind="flash", backward=True)
    case("flash backward, T=300, block_q=64, block_k=128 (partial blocks)", 300, 32, kind="flash",
         block_q=64, block_k=128, backward=True)
    case("flash backward, causal, block_q=48, block_k=80", 1000, 32, kind="flash", block_q=48, block_k=80,
         causal=True, backward=True)
    case("flash backward, causal, heads=8, batch=4, float16", 256, 64, heads=8, batch=4, dtype=torch.float16,
         kind="flash", block_q=64, block_k=32, causal=True, backward=True)
    case("flash backward, causal, block_q = block_k = 1: one query row per tile, T(T+1)/2 tiles", 29, 8,
         dtype=torch.float32, kind="flash", block_q=1, block_k=1, causal=True, backward=True)
    case("flash backward, block_q=96 larger than T=70, block_k=16: one query block, five key blocks", 70, 24,
         kind="flash", block_q=96, block_k=16, backward=True)
    case("all arguments positionally", 64, 16, 2, 3, torch.float32, "flash", 16, 32, True, True)
    for dtype in ANY_DTYPES:
        name = str(dtype).removeprefix("torch.")
        case(f"standard forward in {name} ({dtype.itemsize} bytes per element)", 16, 8, heads=2, dtype=dtype)
        case(f"flash backward, causal, in {name}", 40, 8, dtype=dtype, kind="flash", block_q=16, block_k=8,
             causal=True, backward=True)
    case("standard forward, T=2^20, d=128, heads=96, batch=256: about 1.4e19 FLOPs, past int64 (2^63)",
         2**20, 128, heads=96, batch=256)
    case("flash backward, causal, T=2^20 + 7, d=128, blocks 4096, heads=64, batch=48: past int64",
         2**20 + 7, 128, heads=64, batch=48, kind="flash", block_q=4096, block_k=4096, causal=True,
         backward=True)
    case("flash forward, causal, odd T=1000003, d=101, heads=25, batch=9: beyond float precision (2^53)",
         1_000_003, 101, heads=25, batch=9, kind="flash", block_q=4096, block_k=2048, causal=True)
    case("numpy int64 sizes T=2^20, d=128, heads=96, batch=256: their product wraps in int64",
         np.int64(2**20), np.int64(128), heads=np.int64(96), batch=np.int64(256))
    case("numpy int32 block sizes", 1000, 64, kind="flash", block_q=np.int32(64), block_k=np.int32(96),
         causal=True)
    for label, kwargs, error in (("T=-1", {"T": -1}, "ValueError"), ("d=0", {"d": 0}, "ValueError"),
                                 ("heads=0", {"heads": 0}, "ValueError"), ("batch=0", {"batch": 0}, "ValueError"),
                                 ("block_q=0", {"block_q": 0}, "ValueError"),
                                 ("block_k=-4", {"block_k": -4}, "ValueError"),
                                 ('kind="linear"', {"kind": "linear"}, "ValueError"),
                                 ("T=8.0, a float", {"T": 8.0}, "TypeError"),
                                 ("d=True, a bool", {"d": True}, "TypeError"),
                                 ('dtype="bfloat16", a string', {"dtype": "bfloat16"}, "TypeError"),
                                 ("causal=1, not a bool", {"causal": 1}, "TypeError")):
        full = {"T": 8, "d": 4, "kind": "flash"} | kwargs
        c.append(Case(kwargs=full, label=f"bad argument: {label}", raises=error))
    return c


def roofline_time_cases(seed: int) -> list[Case]:
    """Compute-bound, memory-bound and balanced kernels with the hardware table's orders of magnitude,
    counts as ints past 2^63, numpy scalars, zero work, and bad arguments."""
    del seed
    h100 = (989e12, 3.35e12)
    return [
        Case(args=(4 * 4096**2 * 128, 2 * 4 * 4096 * 128 * 2, *h100),
             label="compute-bound: a flash forward's counts on an H100 (989 TFLOP/s, 3.35 TB/s)"),
        Case(args=(4 * 4096**2 * 128, (4 * 4096 * 128 + 4 * 4096**2) * 2, *h100),
             label="memory-bound: a standard forward's counts on an H100"),
        Case(args=(10**9, 10**6, 1e12, 1e9), label="balanced: both take exactly 1 ms"),
        Case(args=(3, 7, 2.0, 3.0), label="small counts, times 1.5 s (compute) and 2.33 s (memory)"),
        Case(args=(7, 3, 2.0, 3.0), label="small counts, times 3.5 s (compute) and 1 s (memory)"),
        Case(args=(5, 10**12, 1e15, 1e3), label="memory-bound by far: 5 FLOPs, 1e12 bytes at 1 kB/s"),
        Case(args=(10**15, 10**9, 1e12, 1e3),
             label="more FLOPs than bytes, yet memory-bound: the ridge point is 1e9 FLOP/B"),
        Case(args=(0, 0, 1e12, 1e9), label="no work at all: 0 seconds"),
        Case(args=(2**64 - 1, 2**63 + 1, 1e15, 1e12), label="counts past int64 as Python ints"),
        Case(args=(np.int64(10**12), np.float64(2.5e9), np.float32(1e12), 1e9),
             label="numpy scalars for the counts and the peak"),
        Case(args=(1.5e12, 7e8, 1e12, 1e9), label="float counts"),
        Case(args=(-1, 10, 1e12, 1e9), raises="ValueError", label="negative FLOPs"),
        Case(args=(10, -1, 1e12, 1e9), raises="ValueError", label="negative bytes"),
        Case(args=(10, 10, 0.0, 1e9), raises="ValueError", label="peak_flops = 0"),
        Case(args=(10, 10, 1e12, -3e9), raises="ValueError", label="negative bandwidth"),
        Case(args=(np.float32(3.0), np.float32(7.0), np.float32(11.0), np.float32(13.0)),
             label="numpy float32 scalars only: computed in float64, not rounded to float32"),
        Case(args=(np.float32(3e38), np.float32(1.0), np.float32(1e-3), np.float32(1e9)),
             label="numpy float32 counts whose time, 3e41 s, overflows float32 but not float64"),
        Case(args=(1e300, 1.0, 1e-10, 1e9), label="a time past the float range is inf"),
        Case(args=(float("inf"), 10, 1e12, 1e9), raises="ValueError", label="infinite FLOPs"),
        Case(args=(10, 10, 1e12, float("nan")), raises="ValueError", label="a NaN bandwidth"),
        Case(args=(True, 10, 1e12, 1e9), raises="TypeError", label="a bool count (not a number of FLOPs)"),
        Case(args=(10, 10, 1e12, np.True_), raises="TypeError", label="a numpy bool bandwidth"),
        Case(args=("10", 10, 1e12, 1e9), raises="TypeError", label="a string count"),
    ]


# ---------------------------------------------------------------------------------------------------
# loglog_slope


def loglog_slope_cases(seed: int) -> list[Case]:
    """Exact power laws, noisy and unevenly spaced measurements, all input types, and bad input.

    The noisy cases have multiplicative noise of about 20% and unsorted, unevenly spaced x: the
    least-squares slope differs clearly from the slope between the end points, from the average of the
    slopes between neighbours, from a fit of ``x`` on ``y`` and from a fit on linear axes.
    """
    rng = np.random.default_rng(seed)

    def noisy(n: int, p: float, c: float) -> tuple[np.ndarray, np.ndarray]:
        x = np.exp(rng.uniform(np.log(16), np.log(4096), n))
        y = c * x**p * np.exp(rng.normal(0.0, 0.2, n))
        return x, y

    x1, y1 = noisy(9, 2.0, 3e-9)
    x2, y2 = noisy(6, 1.0, 5.0)
    x3, y3 = noisy(12, 1.7, 1e-3)
    return [
        Case(args=([1, 2, 4, 8], [3, 12, 48, 192]), label="y = 3 x^2 as Python lists of ints"),
        Case(args=(np.array([10.0, 100.0, 1000.0]), np.array([2.0, 0.2, 0.02])),
             label="y = 20 / x as numpy arrays: slope -1"),
        Case(args=(torch.tensor([2.0, 3.0, 5.0, 7.0, 11.0], dtype=torch.float64),
                   torch.tensor([2.0, 3.0, 5.0, 7.0, 11.0], dtype=torch.float64) ** 1.5),
             label="y = x^1.5 as float64 tensors"),
        Case(args=([5.0, 50.0], [7.0, 7.0]), label="two points, constant y: slope 0"),
        Case(args=(x1.tolist(), y1.tolist()), label="9 noisy timings around y ~ x^2, x unsorted and unevenly spaced"),
        Case(args=(x2, y2), label="6 noisy points around y ~ x, numpy arrays"),
        Case(args=(torch.from_numpy(x3), torch.from_numpy(y3)), label="12 noisy points around y ~ x^1.7, tensors"),
        Case(args=([1.0, 2.0, 0.0], [1.0, 4.0, 9.0]), raises="ValueError", label="an x equal to 0"),
        Case(args=([1.0, 2.0, 3.0], [1.0, -4.0, 9.0]), raises="ValueError", label="a negative y"),
        Case(args=([4.0], [16.0]), raises="ValueError", label="a single point"),
        Case(args=([], []), raises="ValueError", label="no points at all"),
    ]


# ---------------------------------------------------------------------------------------------------
# chunked_attention


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _mask(g: torch.Generator, *shape: int, p_keep: float = 0.6) -> torch.Tensor:
    """Random bool mask (True = may attend) in which no query row is fully masked."""
    mask = torch.rand(*shape, generator=g) < p_keep
    mask[..., 0] |= ~mask.any(dim=-1)
    return mask


def _key_padding(lengths: list[int], T_k: int) -> torch.Tensor:
    """``(B, T_k)`` with ``mask[b, j] = j < lengths[b]``."""
    return torch.arange(T_k)[None, :] < torch.tensor(lengths)[:, None]


def chunked_attention_cases(seed: int) -> list[Case]:
    """Small cases for the values: shapes, chunk sizes around T_q, every mask shape, fully masked rows."""
    g = torch.Generator().manual_seed(seed)

    def case(batch: tuple[int, ...], T_q: int, T_k: int, d_k: int, d_v: int, chunk: int, label: str,
             mask: torch.Tensor | None = None, scale: float = 1.0, dtype=torch.float32) -> Case:
        q = _randn(g, *batch, T_q, d_k, scale=scale, dtype=dtype)
        k = _randn(g, *batch, T_k, d_k, scale=scale, dtype=dtype)
        v = _randn(g, *batch, T_k, d_v, dtype=dtype)
        return Case(args=(q, k, v, chunk), kwargs={} if mask is None else {"mask": mask}, label=label)

    causal9 = torch.ones(9, 9, dtype=torch.bool).tril()
    holes = _mask(g, 2, 7, 5)
    holes[0, 1] = False  # query 1 of batch 0 and query 6 of batch 1 may attend to nothing
    holes[1, 6] = False
    return [
        case((), 5, 5, 4, 4, 2, "one sequence, no batch dim: T=5, chunk_size=2 (last chunk has 1 query)"),
        case((3,), 7, 7, 4, 6, 3, "batch of 3, T=7, d_k=4, d_v=6, chunk_size=3"),
        case((2, 3), 10, 6, 4, 3, 4, "leading dims (2, 3), cross-attention T_q=10, T_k=6, chunk_size=4"),
        case((2,), 3, 11, 5, 2, 2, "cross-attention T_q=3 < T_k=11, chunk_size=2"),
        case((2,), 6, 6, 3, 3, 1, "chunk_size=1: one query at a time"),
        case((2,), 5, 8, 4, 4, 64, "chunk_size=64 larger than T_q=5: a single chunk"),
        case((2,), 6, 6, 4, 5, 6, "chunk_size equal to T_q=6"),
        case((2,), 9, 9, 4, 3, 4, "causal (T, T) mask, T=9, chunk_size=4: rows differ from chunk to chunk",
             mask=causal9),
        case((2, 2), 8, 5, 3, 4, 3, "per-batch random mask of shape (B, 1, T_q, T_k), chunk_size=3",
             mask=_mask(g, 2, 1, 8, 5)),
        case((2, 3), 7, 7, 4, 4, 3, "key-padding mask of shape (B, 1, 1, T_k), chunk_size=3",
             mask=_key_padding([7, 4], 7)[:, None, None, :]),
        case((3,), 6, 6, 2, 2, 4, "key-padding mask of shape (B, 1, T_k), chunk_size=4",
             mask=_key_padding([6, 2, 5], 6)[:, None, :]),
        case((2,), 7, 5, 3, 3, 3, "two query rows whose keys are all masked: their outputs must be zeros",
             mask=holes),
        case((2,), 6, 8, 8, 3, 4, "huge logits: scores in the hundreds (exp overflows without the max trick)",
             scale=8.0, mask=_mask(g, 6, 8)),
        case((2, 2), 5, 7, 4, 6, 2, "float64 inputs (the dtype must be kept)", mask=_mask(g, 5, 7),
             dtype=torch.float64),
    ] + [case((2, 3), 6, 7, 4, 3, 4, f"mask class: {name}", mask=m)
         for name, m in mask_broadcasts(g, (2, 3), 6, 7)] + [
        Case(args=(non_contiguous(_randn(g, 2, 6, 4)), non_contiguous(_randn(g, 2, 9, 4)),
                   non_contiguous(_randn(g, 2, 9, 3)), 4), label="non-contiguous q, k and v (strided views)"),
        Case(args=(expanded(_randn(g, 6, 4), 3), _randn(g, 3, 8, 4), _randn(g, 3, 8, 5), 5),
             label="an expanded q (stride 0 along the batch)"),
        Case(args=(_randn(g, 5, 4), _randn(g, 5, 4), _randn(g, 5, 4), 0), raises="ValueError",
             label="chunk_size=0"),
        Case(args=(_randn(g, 5, 4), _randn(g, 5, 4), _randn(g, 5, 4), 2.0), raises="TypeError",
             label="chunk_size=2.0, a float (TypeError, as attention_cost's sizes)"),
        Case(args=(_randn(g, 5, 4), _randn(g, 5, 4), _randn(g, 5, 4), True), raises="TypeError",
             label="chunk_size=True, a bool (TypeError)"),
        Case(args=(_randn(g, 2, 7, 4), _randn(g, 2, 5, 4), _randn(g, 2, 5, 3), np.int64(3)),
             label="chunk_size given as a numpy integer"),
        Case(args=(_randn(g, 5, 4), _randn(g, 5, 4), _randn(g, 5, 4), 2),
             kwargs={"mask": torch.ones(5, 5)}, raises="TypeError", label="a float mask (not bool)"),
    ]


def chunked_attention_dtype_cases(seed: int, dtype: str = "float32") -> list[Case]:
    """The same shapes in each floating dtype: the output keeps q's dtype."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = randn(g, 2, 3, 9, 8, dtype=dtype), randn(g, 2, 3, 11, 8, dtype=dtype), randn(g, 2, 3, 11, 5, dtype=dtype)
    causal = torch.ones(9, 11, dtype=torch.bool).tril(2)
    return [Case(args=(q, k, v, 4), label=tag("(2, 3) heads, T_q=9, T_k=11, chunk_size=4", dtype)),
            Case(args=(q, k, v, 3), kwargs={"mask": causal},
                 label=tag("(2, 3) heads, a (T_q, T_k) causal mask, chunk_size=3", dtype))]


def _memory_case(g: torch.Generator, batch: tuple[int, ...], T_q: int, T_k: int, d_k: int, d_v: int,
                 chunk: int, label: str, mask: torch.Tensor | None = None, one_head: bool = True) -> Case:
    q, k, v = _randn(g, *batch, T_q, d_k), _randn(g, *batch, T_k, d_k), _randn(g, *batch, T_k, d_v)
    n_batch = int(np.prod(batch)) if batch else 1
    chunk_scores = n_batch * min(chunk, T_q) * T_k
    io = max(q.numel(), k.numel(), v.numel(), n_batch * T_q * d_v, 0 if mask is None else mask.numel())
    # room for two chunk-sized temporaries at once (e.g. scores and their exponentials as numpy float64)
    limit = max(io, 2 * chunk_scores) + 4096
    # the whole matrix of all heads breaks the bound; one head's breaks it too unless the mask is as large
    assert n_batch * T_q * T_k > 4 * limit and (T_q * T_k > 2 * limit or not one_head), \
        "the full matrix must break the bound"
    # alive at once: the output, its chunks or running sums, and a few chunk-sized temporaries;
    # keeping every chunk's scores (the whole matrix, in pieces) is more
    live = 3 * io + 4 * chunk_scores + 4096
    assert n_batch * T_q * T_k > live, "keeping every chunk's scores must break the live bound"
    return Case(args=(q, k, v, chunk), kwargs={} if mask is None else {"mask": mask}, label=label,
                max_numel=limit, max_live=live)


def chunked_attention_memory_cases(seed: int) -> list[Case]:
    """Long sequences under a memory bound of about two chunks of scores.

    The bound is ``max(largest input or output, 2 * batch * chunk_size * T_k)`` elements; the whole
    ``(T_q, T_k)`` matrix of even a single head is at least twice that, of all heads at least four times.
    The elements alive at once are bounded too (three outputs' worth and four chunks of scores), so
    keeping every chunk's scores in a list fails as well.
    """
    g = torch.Generator().manual_seed(seed)
    return [
        _memory_case(g, (2,), 1024, 1024, 16, 16, 32, "T=1024, batch of 2, chunk_size=32, no mask"),
        _memory_case(g, (1, 2), 1500, 1500, 8, 8, 48,
                     "T=1500 (not a multiple of chunk_size=48), batch 1, 2 heads, no mask"),
        _memory_case(g, (2,), 512, 2048, 16, 24, 10,
                     "cross-attention T_q=512, T_k=2048, d_v=24, chunk_size=10, key-padding mask (B, 1, T_k)",
                     mask=_key_padding([2048, 1000], 2048)[:, None, :]),
        _memory_case(g, (2, 2), 1024, 1024, 8, 8, 24,
                     "T=1024 (not a multiple of chunk_size=24), batch 2, 2 heads, key-padding mask (B, 1, 1, T_k)",
                     mask=_key_padding([700, 1024], 1024)[:, None, None, :]),
        _memory_case(g, (2,), 1024, 1024, 8, 8, 32, "T=1024, batch of 2, a 1-D key mask (T_k,)",
                     mask=_key_padding([900], 1024)[0]),
        _memory_case(g, (4, 2), 1024, 1024, 8, 8, 32,
                     "T=1024, batch 4, 2 heads, a causal (T, T) mask shared by every head",
                     mask=torch.ones(1024, 1024, dtype=torch.bool).tril(), one_head=False),
        _memory_case(g, (6, 2), 512, 512, 8, 8, 16,
                     "T=512, batch 6, 2 heads, a per-head mask (H, T_q, T_k) = (2, 512, 512)",
                     mask=_mask(g, 2, 512, 512), one_head=False),
    ]


# ---------------------------------------------------------------------------------------------------
# the contract: every clause of each exercise's statement -> the hidden cases that exercise it

_STD = "standard forward, T=4, d=8 (bfloat16 by default)"
CONTRACT = {
    "attention_cost": {
        "returns {'flops': int, 'hbm_bytes': int}, totals over batch * heads heads":
            [_STD, "standard forward, T=10, d=16, heads=3, batch=2, float32",
             "flash backward, causal, heads=8, batch=4, float16"],
        "standard forward: 4 T^2 d FLOPs, (4 T d + 4 T^2) E bytes (S and P through HBM)":
            [_STD, "standard forward, T=10, d=16, heads=3, batch=2, float32"],
        "standard backward: P read back, 8 T^2 d FLOPs, (8 T d + 7 T^2) E bytes":
            ["standard backward, T=7, d=5 (P read back, nothing recomputed)"],
        "standard: causal changes nothing (every score computed, the mask fused into the softmax)":
            ["standard forward, causal: every score is still computed",
             "standard backward, causal: every score is still computed"],
        "standard: the block sizes are not used": ["standard: the block sizes change nothing"],
        "flash forward: Q read once, K and V once per query block (ceil(T / block_q) passes), O and L written":
            ["flash forward, T=512, d=64, blocks 128: K and V read once per query block",
             "flash forward, block_q=1: K and V read once per query",
             "flash forward, block_q=256 larger than T=100: one pass over K and V"],
        "blocks that do not divide T: the last block is shorter":
            ["flash forward, T=100 not a multiple of block_q=32 (last block 4 rows)",
             "flash backward, T=300, block_q=64, block_k=128 (partial blocks)"],
        "flash causal: a tile is computed when its first key <= its block's last query, and computed whole":
            ["flash forward, causal, block_q = block_k = 64, T=1000",
             "flash forward, causal, block_q=48 != block_k=80: key blocks per query block by the last row",
             "flash forward, causal, block_q=32 < block_k=128",
             "flash forward, causal, one tile (block sizes >= T): nothing skipped",
             "flash forward, causal, block_q = block_k = 1: exactly T(T+1)/2 pairs"],
        "flash backward: 10 R d FLOPs (S recomputed); D pass, K, V, dK, dV once, Q, dO, L, D, dQ per tile":
            ["flash backward, T=512, d=64, blocks 128", "flash backward, causal, block_q=48, block_k=80",
             "flash backward, causal, heads=8, batch=4, float16",
             "flash backward, causal, block_q = block_k = 1: one query row per tile, T(T+1)/2 tiles",
             "flash backward, block_q=96 larger than T=70, block_k=16: one query block, five key blocks"],
        "row statistics (L, D) are 4 bytes whatever the dtype":
            ["flash backward, causal, in float64", "flash backward, causal, in bool",
             "flash backward, causal, in complex128"],
        "any torch.dtype: E = dtype.itemsize (1, 2, 4, 8 and 16 bytes, floating or not)":
            [f"standard forward in {str(dt).removeprefix('torch.')} ({dt.itemsize} bytes per element)"
             for dt in ANY_DTYPES],
        "T=0 costs nothing": ["T=0: an empty sequence costs nothing"],
        "all parameters positional in the stated order": ["all arguments positionally"],
        "exact Python ints past 2^63 (no int64 wrap-around)":
            ["standard forward, T=2^20, d=128, heads=96, batch=256: about 1.4e19 FLOPs, past int64 (2^63)",
             "flash backward, causal, T=2^20 + 7, d=128, blocks 4096, heads=64, batch=48: past int64"],
        "exact past 2^53 (no float arithmetic)":
            ["flash forward, causal, odd T=1000003, d=101, heads=25, batch=9: beyond float precision (2^53)"],
        "sizes may be numpy integers (converted, not wrapped)":
            ["numpy int64 sizes T=2^20, d=128, heads=96, batch=256: their product wraps in int64",
             "numpy int32 block sizes"],
        "ValueError: T < 0, d, heads, batch, block_q or block_k < 1, an unknown kind":
            ["bad argument: T=-1", "bad argument: d=0", "bad argument: heads=0", "bad argument: batch=0",
             "bad argument: block_q=0", "bad argument: block_k=-4", 'bad argument: kind="linear"'],
        "TypeError: a size that is a float or a bool, a dtype that is not a torch.dtype, a non-bool flag":
            ["bad argument: T=8.0, a float", "bad argument: d=True, a bool",
             'bad argument: dtype="bfloat16", a string', "bad argument: causal=1, not a bool"],
    },
    "roofline_time": {
        "max(flops / peak_flops, hbm_bytes / bandwidth), in seconds":
            ["compute-bound: a flash forward's counts on an H100 (989 TFLOP/s, 3.35 TB/s)",
             "memory-bound: a standard forward's counts on an H100", "balanced: both take exactly 1 ms",
             "small counts, times 1.5 s (compute) and 2.33 s (memory)",
             "small counts, times 3.5 s (compute) and 1 s (memory)"],
        "the regime is set by the ridge point, not by comparing FLOPs with bytes":
            ["more FLOPs than bytes, yet memory-bound: the ridge point is 1e9 FLOP/B",
             "memory-bound by far: 5 FLOPs, 1e12 bytes at 1 kB/s"],
        "returns a float, also for zero work": ["no work at all: 0 seconds", "float counts"],
        "counts may be ints of any size, floats or numpy scalars":
            ["counts past int64 as Python ints", "numpy scalars for the counts and the peak", "float counts"],
        "ValueError: negative counts, a peak or bandwidth <= 0":
            ["negative FLOPs", "negative bytes", "peak_flops = 0", "negative bandwidth"],
        "ValueError for values that are not finite": ["infinite FLOPs", "a NaN bandwidth"],
        "computed in float64 whatever the inputs' types (numpy float32 too)":
            ["numpy float32 scalars only: computed in float64, not rounded to float32",
             "numpy float32 counts whose time, 3e41 s, overflows float32 but not float64"],
        "a time past the float range is inf": ["a time past the float range is inf"],
        "OverflowError for an int count past the float range (about 1.8e308)":
            "not gradable: the wire to the sandbox carries integers of at most 64 bits; the reference tests "
            "check it",
        "TypeError for a value that is not a number (a bool, a string)":
            ["a bool count (not a number of FLOPs)", "a numpy bool bandwidth", "a string count"],
    },
    "loglog_slope": {
        "the least-squares slope of log y on log x (all points, not the end points)":
            ["9 noisy timings around y ~ x^2, x unsorted and unevenly spaced",
             "6 noisy points around y ~ x, numpy arrays",
             "12 noisy points around y ~ x^1.7, tensors"],
        "exact power laws give their exponent, negative ones too":
            ["y = 3 x^2 as Python lists of ints", "y = 20 / x as numpy arrays: slope -1",
             "two points, constant y: slope 0"],
        "xs, ys may be lists, numpy arrays or tensors":
            ["y = 3 x^2 as Python lists of ints", "y = 20 / x as numpy arrays: slope -1",
             "y = x^1.5 as float64 tensors"],
        "returns a Python float": ["y = 3 x^2 as Python lists of ints", "y = x^1.5 as float64 tensors"],
        "ValueError for a value <= 0": ["an x equal to 0", "a negative y"],
        "ValueError for fewer than two points": ["a single point", "no points at all"],
    },
    "chunked_attention": {
        "equals softmax(q k^T / sqrt(d_k)) v for any leading dims":
            ["one sequence, no batch dim: T=5, chunk_size=2 (last chunk has 1 query)",
             "batch of 3, T=7, d_k=4, d_v=6, chunk_size=3"],
        "T_q != T_k and d_v != d_k": ["leading dims (2, 3), cross-attention T_q=10, T_k=6, chunk_size=4",
                                       "cross-attention T_q=3 < T_k=11, chunk_size=2"],
        "chunk_size that does not divide T_q, equals it, exceeds it, or is 1":
            ["one sequence, no batch dim: T=5, chunk_size=2 (last chunk has 1 query)",
             "chunk_size=64 larger than T_q=5: a single chunk", "chunk_size equal to T_q=6",
             "chunk_size=1: one query at a time"],
        "a bool mask broadcastable to the scores, every broadcast class":
            ["causal (T, T) mask, T=9, chunk_size=4: rows differ from chunk to chunk",
             "per-batch random mask of shape (B, 1, T_q, T_k), chunk_size=3",
             "key-padding mask of shape (B, 1, 1, T_k), chunk_size=3",
             "key-padding mask of shape (B, 1, T_k), chunk_size=4",
             "mask class: a 1-D key mask (T_k,)", "mask class: a 2-D mask (T_q, T_k) shared by the batch",
             "mask class: a key mask (1, T_k) broadcast over the queries",
             "mask class: a query-column mask (T_q, 1) with every row kept",
             "mask class: a per-head mask (3, 6, 7)", "mask class: a mask of full rank (2, 3, 6, 7)",
             "mask class: a padding mask (B, 1, 1, T_k) = (2, 1, 1, 7)",
             "mask class: a per-head mask (1, H, T_q, T_k) = (1, 3, 6, 7)",
             "mask class: a per-batch mask (B, 1, T_q, T_k) = (2, 1, 6, 7)"],
        "a fully masked query row gives zeros, not NaN":
            ["two query rows whose keys are all masked: their outputs must be zeros"],
        "a stable softmax (huge logits)": ["huge logits: scores in the hundreds (exp overflows without the max trick)"],
        "keeps the dtype: float16, bfloat16, float32, float64":
            ["(2, 3) heads, T_q=9, T_k=11, chunk_size=4 (float16)",
             "(2, 3) heads, T_q=9, T_k=11, chunk_size=4 (bfloat16)",
             "(2, 3) heads, T_q=9, T_k=11, chunk_size=4", "(2, 3) heads, T_q=9, T_k=11, chunk_size=4 (float64)",
             "(2, 3) heads, a (T_q, T_k) causal mask, chunk_size=3 (float16)",
             "float64 inputs (the dtype must be kept)"],
        "non-contiguous and expanded inputs": ["non-contiguous q, k and v (strided views)",
                                               "an expanded q (stride 0 along the batch)"],
        "no tensor beyond about 2 B c T_k elements (besides inputs and output), for every mask shape":
            ["memory", "T=1024, batch of 2, chunk_size=32, no mask",
             "cross-attention T_q=512, T_k=2048, d_v=24, chunk_size=10, key-padding mask (B, 1, T_k)",
             "T=1024 (not a multiple of chunk_size=24), batch 2, 2 heads, key-padding mask (B, 1, 1, T_k)",
             "T=1024, batch of 2, a 1-D key mask (T_k,)",
             "T=1024, batch 4, 2 heads, a causal (T, T) mask shared by every head",
             "T=512, batch 6, 2 heads, a per-head mask (H, T_q, T_k) = (2, 512, 512)"],
        "the memory bound with a full-rank (B, H, T_q, T_k) mask":
            "not gradable: such a mask is itself as large as all the scores, so no bound separates the two",
        "the chunks' scores are not all kept alive at once (max_live)": ["memory"],
        "does not call F.scaled_dot_product_attention":
            ["ban:torch.nn.functional.scaled_dot_product_attention", "ban:aten._scaled_dot_product*",
             "ban:aten._safe_softmax"],
        "returns only the output (..., T_q, d_v)": ["batch of 3, T=7, d_k=4, d_v=6, chunk_size=3"],
        "ValueError for chunk_size < 1, TypeError for a non-bool mask": ["chunk_size=0", "a float mask (not bool)"],
        "TypeError for a chunk_size that is not an integer (a float, a bool), as attention_cost's sizes":
            ["chunk_size=2.0, a float (TypeError, as attention_cost's sizes)", "chunk_size=True, a bool (TypeError)"],
        "numpy integers are integers": ["chunk_size given as a numpy integer"],
        "q, k and v are not modified": "visible only: the visible test compares them with copies",
    },
}
