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

# ---------------------------------------------------------------------------------------------------
# attention_flops, attention_matrix_bytes, rnn_flops


def attention_flops_cases(seed: int) -> list[Case]:
    del seed  # the counts are deterministic; the seed is part of the check's signature only
    return [
        Case(args=(4, 8), label="T=4, d_k=8 (d_v defaults to d_k)"),
        Case(args=(10, 16, 4), label="T=10, d_k=16, d_v=4 (d_v != d_k)"),
        Case(args=(7, 3), kwargs={"batch": 5, "heads": 2}, label="T=7, d_k=3, batch=5, heads=2"),
        Case(args=(1, 64), label="T=1: a single token"),
        Case(args=(0, 64), label="T=0: an empty sequence costs nothing"),
        Case(args=(9, 4), kwargs={"causal": True}, label="causal, odd T=9: T(T+1)/2 = 45 pairs, diagonal included"),
        Case(args=(8, 2, 6), kwargs={"batch": 3, "heads": 4, "causal": True},
             label="causal, T=8, d_k=2, d_v=6, batch=3, heads=4"),
        Case(args=(5, 8), kwargs={"causal": False}, label="causal=False given explicitly"),
        Case(args=(100_000, 128), kwargs={"batch": 8, "heads": 32},
             label="T=100000, d_k=128, batch=8, heads=32 (about 1.3e15 FLOPs)"),
        Case(args=(1_000_003, 101, 98), kwargs={"batch": 9, "heads": 25, "causal": True},
             label="causal, T=1000003, d_k=101, d_v=98, batch=9, heads=25 (about 4.5e16: beyond float precision)"),
    ]


def attention_matrix_bytes_cases(seed: int) -> list[Case]:
    """float32 by default, then every element size: 2 (half precisions), 8, and 1 (int8, and bool, which
    PyTorch stores as one byte per element, not one bit)."""
    del seed
    cases = [
        Case(args=(3,), label="T=3, float32 by default: 9 scores of 4 bytes"),
        Case(args=(1000,), label="T=1000, float32"),
        Case(args=(16,), kwargs={"batch": 2, "heads": 3}, label="T=16, batch=2, heads=3"),
        Case(args=(100_000,), label="T=100000, float32: the popular 40 GB"),
        Case(args=(131_071,), kwargs={"batch": 4, "heads": 40}, label="T=131071, batch=4, heads=40"),
        Case(args=(0,), label="T=0"),
        Case(args=(5, 1, 1), label="T=5, batch=1, heads=1 given positionally"),
    ]
    for dtype, label in ((torch.float32, "float32 given explicitly"), (torch.float16, "float16: 2 bytes"),
                         (torch.bfloat16, "bfloat16: 2 bytes"), (torch.float64, "float64: 8 bytes"),
                         (torch.int8, "int8: 1 byte"), (torch.bool, "bool: 1 byte per element in PyTorch, not 1 bit")):
        cases.append(Case(args=(12,), kwargs={"batch": 2, "heads": 3, "dtype": dtype},
                          label=f"T=12, batch=2, heads=3, {label}"))
    cases.append(Case(args=(100_000, 1, 1, torch.bfloat16), label="T=100000, bfloat16 given positionally"))
    return cases


def rnn_flops_cases(seed: int) -> list[Case]:
    del seed
    return [
        Case(args=(10, 4), label="T=10, d=4"),
        Case(args=(1, 1), label="T=1, d=1"),
        Case(args=(7, 3), kwargs={"batch": 5}, label="T=7, d=3, batch=5"),
        Case(args=(0, 16), label="T=0"),
        Case(args=(100_000, 1024, 8), label="T=100000, d=1024, batch=8 given positionally"),
        Case(args=(10_000_019, 12_289), kwargs={"batch": 67},
             label="T=10000019, d=12289, batch=67 (about 4e17: beyond float precision)"),
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
    ]


def _memory_case(g: torch.Generator, batch: tuple[int, ...], T_q: int, T_k: int, d_k: int, d_v: int,
                 chunk: int, label: str, mask: torch.Tensor | None = None) -> Case:
    q, k, v = _randn(g, *batch, T_q, d_k), _randn(g, *batch, T_k, d_k), _randn(g, *batch, T_k, d_v)
    n_batch = int(np.prod(batch)) if batch else 1
    chunk_scores = n_batch * min(chunk, T_q) * T_k
    io = max(q.numel(), k.numel(), v.numel(), n_batch * T_q * d_v, 0 if mask is None else mask.numel())
    # room for two chunk-sized temporaries at once (e.g. scores and their exponentials as numpy float64)
    limit = max(io, 2 * chunk_scores) + 4096
    assert n_batch * T_q * T_k > 4 * limit and T_q * T_k > 2 * limit, "the full matrix must break the bound"
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
    ]
