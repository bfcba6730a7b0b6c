"""Chapter 9 benchmark: naive attention, tiled PyTorch, Triton and the SDPA backends, side by side.

Run ``python -m grader.dev.attention_bench`` (``--help`` lists the options). For every case ``(B, H, T, d, dtype,
causal)`` of a table chosen for the device (small on a CPU; on CUDA FlashAttention-2's benchmark shapes,
16k tokens and width 2048 so that every length fills the GPU, bf16, d=64, T in 1024..16384, plus d=128 and
fp16) it measures, for each method, forward and (unless ``--forward-only``) forward plus backward,

* the forward time: the median over repetitions after warm-up; on CUDA each repetition is bracketed
  by CUDA events, on a CPU by ``time.perf_counter`` (with one torch thread unless ``--threads`` says
  otherwise: on a shared machine a second thread that is descheduled stalls every parallel operator, and
  medians become meaningless);
* the throughput in TFLOP/s, from :func:`solutions.complexity.attention_flops` (with ``causal=True`` only
  the ``T (T + 1) / 2`` visible pairs count, so a kernel that skips masked tiles is not flattered);
* the peak memory the call adds on top of its inputs: on CUDA ``torch.cuda.max_memory_allocated`` minus
  the memory allocated before the call; on a CPU the largest total of tensor bytes alive at once during
  the call, recorded by a ``TorchDispatchMode`` that sees every tensor an ATen operator creates and
  notices, through a weak reference, when its storage is freed (deterministic and fast; scratch memory
  that a fused kernel such as SDPA's allocates internally, outside ATen, is not seen);
* the largest absolute difference of the output from the baseline's output (a cheap sanity check).

Methods: ``naive`` (``solutions.flash.naive_attention``, the whole score matrix); ``tiled``
(``solutions.flash.flash_attention_forward``, the chapter's PyTorch FlashAttention; a Python loop over
tiles, so its speed depends strongly on the tile sizes: the best of a few candidates is reported, with
the one chosen); ``triton`` (``solutions.flash_triton``, CUDA only: Triton's CPU interpreter is far too
slow to time; best of a few launch configurations, each checked first); ``sdpa_flash``,
``sdpa_efficient``, ``sdpa_math`` (``F.scaled_dot_product_attention`` pinned to one backend with
``torch.nn.attention.sdpa_kernel``; a backend that cannot run the case is reported as unavailable).
Ratios compare ``tiled`` and ``triton`` with the baseline ``sdpa_flash``; where that backend is
unavailable, with the fastest available SDPA backend, named in the record.

On a CUDA device the run first checks the Triton kernels (forward and backward) against a float64
reference on small odd-sized problems and stores the result under ``"triton_check"``; every launch
configuration is also checked against the baseline's output before it is timed. With
``TRITON_INTERPRET=1`` on a CPU the Triton column runs in the interpreter (to test this plumbing; its
times mean nothing and its config says ``"interpreted": true``).

JSON schema (``"schema": "ch09-flash-bench/1"``), one file per run::

    {
      "schema": "ch09-flash-bench/1",
      "created": "2026-05-09T12:34:56+00:00",        # UTC, ISO 8601
      "command": "python -m grader.dev.attention_bench --quick",  # no host name; paths made repo-relative
      "quick": false,
      "complete": true,                                # false while running / if cut short
      "device": {"type": "cuda" | "cpu", "name": str, "slug": str,
                 "capability": [9, 0] | null, "total_memory_bytes": int | null},
      "env": {"torch": str, "triton": str | null, "cuda": str | null, "cudnn": int | null,
              "python": str, "platform": str, "machine": str, "cpu_count": int, "torch_threads": int,
              "allow_tf32_matmul": bool, "allow_tf32_cudnn": bool, "env_vars": {name: value}},
      "timing": {"method": str, "warmup": int, "min_reps": int, "max_reps": int, "budget_s": float},
      "memory": {"method": str},
      "flops": {"source": str},
      "triton_check": [ {"case": {...}, "errors": {"out": float, "lse": float, "dq": ..., "dk": ..., "dv": ...},
                         "tolerance": float, "ok": bool}, ... ] | null,
      "results": [
        {"case": {"B": int, "H": int, "T": int, "d": int, "dtype": "float32" | "float16" | "bfloat16",
                  "causal": bool},
         "flops": int,
         "methods": {
            "<method>": {"status": "ok", "time_ms": float, "tflops": float, "peak_mem_bytes": int,
                         "reps": int, "max_abs_diff": float | null,   # vs the baseline's output
                         "config": null                                 # naive, sdpa_*
                                 | {"block_q", "block_k", "tried"}      # tiled: the tile sizes chosen
                                 | {"block_m", "block_n", "num_warps", "num_stages",
                                    ["rejected"], ["interpreted"]}}     # triton: the launch chosen
                      | {"status": "unavailable" | "skipped" | "error", "reason": str},
            ...},
         "baseline": "sdpa_flash" | "sdpa_efficient" | "sdpa_math" | null,
         "baseline_note": str,
         "ratios": {"tiled" | "triton" | "naive":
                    {"time_ratio": float, "tflops_ratio": float} | null}}, ...],
      "targets": [{"name": str, "case": {...}, "metric": str, "threshold": float, "value": float | null,
                   "met": bool | null}, ...]
    }

``time_ratio`` is ``time(method) / time(baseline)`` (smaller is better, 1 = as fast as the baseline),
``tflops_ratio`` is ``tflops(method) / tflops(baseline)`` (larger is better); for one case they are
each other's inverse. ``load_recorded(folder)`` reads every such file of a folder, which is how the
chapter plots recorded GPU runs next to its live CPU run; ``result_rows(run)`` flattens one run for
plotting.

Recording on a GPU: ``bash grader/dev/gpu_record.sh`` (checks the environment, runs this module and
writes ``book/ch09_flash/data/bench-<device-slug>-<date>.json``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import re
import shlex
import statistics
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from solutions.flash import flash_attention_forward, naive_attention

SCHEMA = "ch09-flash-bench/1"
REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO / "book" / "ch09_flash" / "data"
METHODS = ("naive", "tiled", "triton", "sdpa_flash", "sdpa_efficient", "sdpa_math")
SDPA_METHODS = ("sdpa_flash", "sdpa_efficient", "sdpa_math")
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}

try:
    from solutions.complexity import attention_flops

    FLOPS_SOURCE = "solutions.complexity.attention_flops"
except ImportError:  # solutions.complexity needs numpy; a bare GPU image may lack it
    FLOPS_SOURCE = "attention_bench fallback (solutions.complexity failed to import)"

    def attention_flops(T: int, d_k: int, d_v: int | None = None, batch: int = 1, heads: int = 1,
                        causal: bool = False) -> int:
        """2 * batch * heads * P * (d_k + d_v), P = T^2 or T (T + 1) / 2: chapter 8's count."""
        d_v = d_k if d_v is None else d_v
        pairs = T * (T + 1) // 2 if causal else T * T
        return 2 * batch * heads * pairs * (d_k + d_v)


# ---------------------------------------------------------------------------------------------------
# cases


def make_case(B: int, H: int, T: int, d: int, dtype: str = "float32", causal: bool = False) -> dict[str, Any]:
    """One benchmark case as a JSON-ready dict (``dtype`` by its torch name)."""
    return {"B": int(B), "H": int(H), "T": int(T), "d": int(d), "dtype": str(DTYPES[dtype]).removeprefix("torch."),
            "causal": bool(causal)}


def default_cases(device: str, quick: bool = False) -> list[dict[str, Any]]:
    """The table of cases for a device.

    CPU: fp32, B=1, H=4, d=64, T in {256, 1024, 2048}, causal or not (the whole run takes about a
    minute on two cores). CUDA: FlashAttention-2's benchmark shapes (16k tokens per batch, model width
    2048: B = 16384 / T, H = 2048 / d), bf16, d=64, T in {1024, ..., 16384}, causal or not; plus d=128 at
    T=4096 and 16384 and fp16 at T=8192. ``quick``: two tiny cases (and a bf16 one on CUDA), for tests.
    """
    if quick:
        cases = [make_case(1, 2, 64, 32, "float32", False), make_case(1, 2, 96, 32, "float32", True)]
        if device == "cuda":
            cases.append(make_case(1, 2, 128, 64, "bfloat16", True))
        return cases
    if device == "cuda":
        # FlashAttention-2's benchmark shape: batch x length = 16k tokens and 2048 model width, so every
        # length fills the GPU with B * H * T / block_q query tiles (B = 16384 / T, H = 2048 / d)
        def fa2(T: int, d: int, dtype: str, causal: bool) -> dict[str, Any]:
            return make_case(max(1, 16384 // T), 2048 // d, T, d, dtype, causal)

        cases = [fa2(T, 64, "bfloat16", causal) for T in (1024, 2048, 4096, 8192, 16384) for causal in (False, True)]
        cases += [fa2(T, 128, "bfloat16", causal) for T in (4096, 16384) for causal in (False, True)]
        cases += [fa2(8192, 64, "float16", causal) for causal in (False, True)]
        return cases
    return [make_case(1, 4, T, 64, "float32", causal) for T in (256, 1024, 2048) for causal in (False, True)]


def parse_case(spec: str) -> dict[str, Any]:
    """``"B,H,T,d[,dtype[,causal]]"``, e.g. ``"4,16,8192,64,bf16,1"``; causal is 0/1/true/false/causal."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not 4 <= len(parts) <= 6:
        raise argparse.ArgumentTypeError(f"case {spec!r}: expected B,H,T,d[,dtype[,causal]]")
    try:
        B, H, T, d = (int(p) for p in parts[:4])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"case {spec!r}: B, H, T, d must be integers") from exc
    dtype = parts[4] if len(parts) > 4 else "float32"
    if dtype not in DTYPES:
        raise argparse.ArgumentTypeError(f"case {spec!r}: dtype must be one of {sorted(DTYPES)}")
    causal_s = parts[5].lower() if len(parts) > 5 else "0"
    if causal_s not in ("0", "1", "true", "false", "causal", "full"):
        raise argparse.ArgumentTypeError(f"case {spec!r}: causal must be 0/1/true/false/causal/full")
    if min(B, H, T, d) < 1:
        raise argparse.ArgumentTypeError(f"case {spec!r}: sizes must be positive")
    return make_case(B, H, T, d, dtype, causal_s in ("1", "true", "causal"))


def case_label(case: dict[str, Any]) -> str:
    return (f"B={case['B']} H={case['H']} T={case['T']} d={case['d']} {case['dtype']}"
            f"{' causal' if case['causal'] else ''}")


# ---------------------------------------------------------------------------------------------------
# measuring


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], Any], device: torch.device, warmup: int = 1, min_reps: int = 3,
              max_reps: int = 50, budget_s: float = 0.5) -> tuple[float, int]:
    """Median seconds of ``fn()`` over repetitions after ``warmup`` calls: ``(median_s, reps)``.

    The number of repetitions fills about ``budget_s`` seconds, within ``[min_reps, max_reps]``. On
    CUDA each repetition is bracketed by CUDA events (the device's own clock, no host overhead between
    launches); on a CPU by ``time.perf_counter``.
    """
    for _ in range(warmup):
        fn()
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    estimate = max(time.perf_counter() - t0, 1e-6)
    reps = int(min(max_reps, max(min_reps, budget_s / estimate)))
    if device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        times = [start.elapsed_time(end) / 1e3 for start, end in events]
    else:
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times), reps


class PeakTensorBytes(TorchDispatchMode):
    """Records the largest total of tensor bytes alive at once among the tensors created inside it.

    Every ATen call returns its outputs through ``__torch_dispatch__``; an output whose storage is not
    one of the call's inputs' storages is a new allocation (views and in-place results share their
    input's storage and are not counted again). A ``weakref.finalize`` on the storage subtracts its bytes
    when it is freed. ``peak`` is therefore what ``torch.cuda.max_memory_allocated`` would report for
    the same code, minus allocator rounding and minus scratch buffers a fused kernel allocates itself.
    """

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self._seen: set[int] = set()

    def _release(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.current -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: D105
        out = func(*args, **(kwargs or {}))
        inputs = {id(t.untyped_storage()) for t in tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor) and t.layout == torch.strided}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
                continue
            storage = t.untyped_storage()
            key = id(storage)
            if key in inputs or key in self._seen:
                continue
            nbytes = storage.nbytes()
            self._seen.add(key)
            self.current += nbytes
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._release, key, nbytes)
        return out


def peak_memory(fn: Callable[[], Any], device: torch.device) -> int:
    """Bytes the call adds at its peak on top of what was allocated before (inputs excluded)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return int(peak)
    with PeakTensorBytes() as mode:
        result = fn()
        peak = mode.peak
    del result
    return int(peak)


MEMORY_METHOD = {
    "cuda": "torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated() before the call (inputs excluded)",
    "cpu": "peak total bytes of tensors created by ATen ops during the call and alive at once "
           "(TorchDispatchMode + weakref on storages; inputs excluded; scratch inside fused kernels unseen)",
}


def _available_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _score_bytes(case: dict[str, Any], rows: int, cols: int) -> int:
    """Bytes of one fp32-or-wider ``(B, H, rows, cols)`` tensor of scores."""
    elt = max(4, DTYPES[case["dtype"]].itemsize)
    return case["B"] * case["H"] * rows * cols * elt


# ---------------------------------------------------------------------------------------------------
# the methods


_SDPA_BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_efficient": "EFFICIENT_ATTENTION", "sdpa_math": "MATH"}


def _sdpa_call(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, _SDPA_BACKENDS[name])

    def call():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return call


def _first_line(exc: BaseException | str) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def tiled_candidates(case: dict[str, Any], device: torch.device, override: list[tuple[int, int]] | None):
    """Tile sizes to try for the tiled PyTorch forward.

    Every tile costs about ten PyTorch operations, each a kernel launch on a GPU, so on CUDA big tiles
    win (a whole column of queries at once, a few hundred to a few thousand keys per step). The memory
    of one step is ``B * H * block_q * block_k`` scores, never ``T x T`` (unless block_q = block_k = T).
    """
    T = case["T"]
    if override:
        return [(min(bq, T), min(bk, T)) for bq, bk in override]
    if device.type == "cuda":
        cands = [(T, 512), (T, 1024), (T, 2048), (min(T, 4096), 1024), (min(T, 2048), 2048)]
    else:
        cands = [(128, 128)]
    out = []
    for bq, bk in cands:
        bq, bk = min(bq, T), min(bk, T)
        if (bq, bk) not in out:
            out.append((bq, bk))
    return out


def triton_candidates(d: int) -> list[dict[str, int]]:
    """Launch configurations tried for the Triton forward on CUDA (the best one is reported)."""
    grid = [(128, 64, 4, 3), (128, 64, 4, 4), (128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 3)]
    if d >= 128:
        grid = [(128, 64, 8, 3), (128, 32, 8, 3), (64, 64, 4, 3), (128, 128, 8, 2)]
    return [dict(block_m=bm, block_n=bn, num_warps=w, num_stages=s) for bm, bn, w, s in grid]


def _triton_module():
    """``solutions.flash_triton`` or an explanation why it cannot be used here."""
    try:
        import solutions.flash_triton as ft
    except Exception as exc:  # pragma: no cover - the module guards its own triton import
        return None, f"solutions.flash_triton failed to import: {_first_line(exc)}"
    if not ft.HAVE_TRITON:
        return None, "triton is not installed (pip install -e '.[triton]')"
    return ft, ""


def _select(configs: Iterable[Any], make_call: Callable[[Any], Callable[[], Any]], device: torch.device,
            check: Callable[[Any], float] | None = None, tol: float | None = None):
    """Time each config briefly; return ``(best_config, call, notes)`` (best = smallest median)."""
    best, best_t, notes = None, math.inf, []
    for cfg in configs:
        try:
            call = make_call(cfg)
            result = call()
            if check is not None and tol is not None:
                err = check(result)
                if not err <= tol:
                    notes.append(f"{cfg}: wrong result (max abs diff {err:.3g} > {tol:g})")
                    continue
            del result
            t, _ = time_call(call, device, warmup=1, min_reps=3, max_reps=10, budget_s=0.1)
        except Exception as exc:  # a config may not fit the device (shared memory, registers, memory)
            notes.append(f"{cfg}: {_first_line(exc)}")
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        if t < best_t:
            best, best_t = cfg, t
    return best, notes


def _tolerance(dtype: str) -> float:
    return {"float32": 2e-3, "float16": 2e-2, "bfloat16": 6e-2}[dtype]


def bench_case(case: dict[str, Any], device: torch.device, methods: Iterable[str], budget_s: float,
               min_reps: int, max_reps: int, tiled_blocks: list[tuple[int, int]] | None = None,
               seed: int = 0) -> dict[str, Any]:
    """Measure every method on one case; returns the ``results`` entry of the schema."""
    B, H, T, d, causal = case["B"], case["H"], case["T"], case["d"], case["causal"]
    dtype = DTYPES[case["dtype"]]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, d, generator=gen).to(device=device, dtype=dtype) for _ in range(3))
    flops = attention_flops(T, d, batch=B, heads=H, causal=causal)
    available = _available_bytes(device)
    methods = list(methods)
    rec: dict[str, Any] = {}
    reference: torch.Tensor | None = None

    def skip_for_memory(need: int) -> str | None:
        if available is not None and need > 0.8 * available:
            return f"needs about {need / 2**30:.1f} GiB, {available / 2**30:.1f} GiB free"
        return None

    # SDPA backends first: the baseline's output is the reference for the others' max_abs_diff
    order = [m for m in SDPA_METHODS if m in methods] + [m for m in methods if m not in SDPA_METHODS]
    for name in order:
        config: dict[str, Any] | None = None
        if name in SDPA_METHODS:
            call = _sdpa_call(name, q, k, v, causal)
            if name == "sdpa_math":
                why = skip_for_memory(3 * _score_bytes(case, T, T))
                if why:
                    rec[name] = {"status": "skipped", "reason": why}
                    continue
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    call()
                except RuntimeError as exc:
                    hints = "; ".join(_first_line(str(w.message)) for w in caught)
                    rec[name] = {"status": "unavailable", "reason": _first_line(exc) + (f" ({hints})" if hints else "")}
                    continue
        elif name == "naive":
            why = skip_for_memory(3 * _score_bytes(case, T, T))
            if why:
                rec[name] = {"status": "skipped", "reason": why}
                continue

            def call():
                return naive_attention(q, k, v, causal)
        elif name == "tiled":
            cands = [c for c in tiled_candidates(case, device, tiled_blocks)
                     if not skip_for_memory(4 * _score_bytes(case, c[0], c[1]))]
            if not cands:
                rec[name] = {"status": "skipped", "reason": "no tile size fits in memory"}
                continue

            def make_tiled(c):
                return lambda: flash_attention_forward(q, k, v, c[0], c[1], causal)

            best, notes = (cands[0], []) if len(cands) == 1 else _select(cands, make_tiled, device)
            if best is None:
                rec[name] = {"status": "error", "reason": "; ".join(notes)[:1000]}
                continue
            config = {"block_q": best[0], "block_k": best[1], "tried": [list(c) for c in cands]}
            call = make_tiled(best)
        elif name == "triton":
            ft, why = _triton_module()
            if ft is None:
                rec[name] = {"status": "unavailable", "reason": why}
                continue
            if device.type != "cuda" and not ft.interpreting():
                rec[name] = {"status": "skipped",
                             "reason": "CPU: Triton's interpreter (TRITON_INTERPRET=1) is correct but orders of "
                                       "magnitude too slow to time; the kernel is benchmarked on CUDA only"}
                continue
            if d not in ft.SUPPORTED_HEAD_DIMS:
                rec[name] = {"status": "unavailable", "reason": f"d={d} not in {ft.SUPPORTED_HEAD_DIMS}"}
                continue

            def make_triton(c, ft=ft):
                return lambda: ft.triton_flash_attention_forward(q, k, v, causal, **c)

            def err_vs_ref(result, ref=reference):
                return 0.0 if ref is None else (result[0].float() - ref.float()).abs().max().item()

            best, notes = _select(triton_candidates(d), make_triton, device, err_vs_ref, _tolerance(case["dtype"]))
            if best is None:
                rec[name] = {"status": "error", "reason": "; ".join(notes)[:1000]}
                continue
            config = dict(best, rejected=notes) if notes else dict(best)
            if ft.interpreting():
                config["interpreted"] = True  # TRITON_INTERPRET=1 on a CPU: checks the plumbing, times nothing
            call = make_triton(best)
        else:
            raise ValueError(f"unknown method {name!r}; known: {METHODS}")

        try:
            first = call()
            out = first[0] if isinstance(first, tuple) else first
            diff = None if reference is None else (out.float() - reference.float()).abs().max().item()
            if reference is None and name in SDPA_METHODS:
                reference = out
            del first, out
            t, reps = time_call(call, device, warmup=1, min_reps=min_reps, max_reps=max_reps, budget_s=budget_s)
            mem = peak_memory(call, device)
        except torch.cuda.OutOfMemoryError as exc:
            rec[name] = {"status": "skipped", "reason": f"out of memory: {_first_line(exc)}"}
            torch.cuda.empty_cache()
            continue
        except RuntimeError as exc:
            rec[name] = {"status": "error", "reason": _first_line(exc)}
            continue
        rec[name] = {"status": "ok", "time_ms": t * 1e3, "tflops": flops / t / 1e12, "peak_mem_bytes": mem,
                     "reps": reps, "max_abs_diff": diff, "config": config}
        if device.type == "cuda":
            torch.cuda.empty_cache()

    baseline, note = _baseline(rec)
    ratios: dict[str, Any] = {}
    for name in ("tiled", "triton", "naive"):
        m = rec.get(name)
        if baseline is None or m is None or m.get("status") != "ok":
            ratios[name] = None
            continue
        b = rec[baseline]
        ratios[name] = {"time_ratio": m["time_ms"] / b["time_ms"], "tflops_ratio": m["tflops"] / b["tflops"]}
    return {"case": case, "flops": flops, "methods": {m: rec[m] for m in methods if m in rec},
            "baseline": baseline, "baseline_note": note, "ratios": ratios}


#: Methods timed forward and backward (autograd through each; the tiled Python reference is a read-along).
BACKWARD_METHODS = ("sdpa_flash", "sdpa_efficient", "sdpa_math", "naive", "triton")
#: FLOPs of a forward plus backward pass, in units of the forward's: the backward's five matrix products
#: against the forward's two (FlashAttention-2's count, recomputation not counted).
BACKWARD_FLOPS_FACTOR = 3.5


def bench_backward(case: dict[str, Any], device: torch.device, methods: Iterable[str], budget_s: float,
                   min_reps: int, max_reps: int, seed: int = 0) -> dict[str, Any]:
    """Forward plus backward of every method that has one, on one case (``backward`` entry of a result)."""
    B, H, T, d, causal = case["B"], case["H"], case["T"], case["d"], case["causal"]
    dtype = DTYPES[case["dtype"]]
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    q, k, v, g = (torch.randn(B, H, T, d, generator=gen).to(device=device, dtype=dtype) for _ in range(4))
    flops = int(BACKWARD_FLOPS_FACTOR * attention_flops(T, d, batch=B, heads=H, causal=causal))
    available = _available_bytes(device)
    rec: dict[str, Any] = {}
    for name in [m for m in BACKWARD_METHODS if m in methods]:
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        if name in SDPA_METHODS:
            forward = _sdpa_call(name, *leaves, causal)
        elif name == "naive":
            def forward(leaves=leaves):
                return naive_attention(*leaves, causal)
        else:
            ft, why = _triton_module()
            if ft is None or (device.type != "cuda"):
                rec[name] = {"status": "skipped" if ft is not None else "unavailable",
                             "reason": why or "the Triton kernel is timed on CUDA only"}
                continue

            def forward(leaves=leaves, ft=ft):
                return ft.triton_flash_attention(*leaves, causal)
        if name in ("naive", "sdpa_math") and available is not None and 4 * _score_bytes(case, T, T) > 0.8 * available:
            rec[name] = {"status": "skipped", "reason": "the score matrix and its gradient do not fit"}
            continue

        def call(forward=forward, leaves=leaves):
            for t in leaves:
                t.grad = None
            out = forward()
            out = out[0] if isinstance(out, tuple) else out
            out.backward(g)
            return leaves[0].grad

        try:
            call()
            t, reps = time_call(call, device, warmup=1, min_reps=min_reps, max_reps=max_reps, budget_s=budget_s)
            mem = peak_memory(call, device)
        except torch.cuda.OutOfMemoryError as exc:
            rec[name] = {"status": "skipped", "reason": f"out of memory: {_first_line(exc)}"}
            torch.cuda.empty_cache()
            continue
        except (RuntimeError, TypeError, ValueError) as exc:
            rec[name] = {"status": "unavailable" if name in SDPA_METHODS else "error", "reason": _first_line(exc)}
            continue
        rec[name] = {"status": "ok", "time_ms": t * 1e3, "tflops": flops / t / 1e12, "peak_mem_bytes": mem,
                     "reps": reps}
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return {"flops": flops, "flops_factor": BACKWARD_FLOPS_FACTOR, "methods": rec}


def _baseline(rec: dict[str, Any]) -> tuple[str | None, str]:
    flash = rec.get("sdpa_flash")
    if flash is not None and flash.get("status") == "ok":
        return "sdpa_flash", "SDPA flash backend"
    ok = [m for m in SDPA_METHODS if rec.get(m, {}).get("status") == "ok"]
    if not ok:
        return None, "no SDPA backend ran: no ratios"
    best = min(ok, key=lambda m: rec[m]["time_ms"])
    why = flash["reason"] if flash is not None and "reason" in flash else "not measured"
    return best, f"SDPA flash unavailable ({why}); ratios use the fastest available SDPA backend, {best}"


# ---------------------------------------------------------------------------------------------------
# Triton self-check on CUDA


def triton_self_check(device: torch.device) -> list[dict[str, Any]] | None:
    """Forward and backward of the Triton kernel vs float64 attention on small odd-sized problems."""
    ft, _ = _triton_module()
    if ft is None or (device.type != "cuda" and not ft.interpreting()):
        return None
    checks = []
    specs = [  # (B, H, T_q, T_k, d, dtype, causal)
        (2, 3, 100, 100, 64, "float32", False), (1, 2, 257, 190, 64, "float16", True),
        (2, 2, 190, 257, 128, "bfloat16", True), (1, 2, 128, 128, 16, "bfloat16", False),
        (1, 3, 77, 77, 32, "float16", True), (1, 1, 1, 300, 64, "bfloat16", False),
    ]
    if device.type != "cuda":  # the CPU interpreter (tests of this function): small, and it has no bf16
        specs = [(1, 1, min(T_q, 40), min(T_k, 40), min(d, 32), "float32" if dt == "bfloat16" else dt, causal)
                 for B, H, T_q, T_k, d, dt, causal in specs[:3]]
    for B, H, T_q, T_k, d, dt, causal in specs:
        gen = torch.Generator(device="cpu").manual_seed(T_q * 1000 + T_k)
        dtype = DTYPES[dt]
        q = torch.randn(B, H, T_q, d, generator=gen).to(device, dtype)
        k = torch.randn(B, H, T_k, d, generator=gen).to(device, dtype)
        v = torch.randn(B, H, T_k, d, generator=gen).to(device, dtype)
        g = torch.randn(B, H, T_q, d, generator=gen).to(device, dtype)
        case = {"B": B, "H": H, "T_q": T_q, "T_k": T_k, "d": d, "dtype": dt, "causal": causal}
        try:
            qt, kt, vt = (x.detach().clone().requires_grad_() for x in (q, k, v))
            out, lse = ft.triton_flash_attention(qt, kt, vt, causal=causal)
            out.backward(g)
            q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
            s = q64 @ k64.transpose(-2, -1) / math.sqrt(d)
            if causal:
                s = s.masked_fill(torch.ones(T_q, T_k, dtype=torch.bool, device=device).tril().logical_not(), -math.inf)
            ref_lse = torch.logsumexp(s, -1)
            ref = torch.softmax(s, -1) @ v64
            ref.backward(g.double())
            errors = {"out": (out.double() - ref).abs().max().item(),
                      "lse": (lse.double() - ref_lse).abs().max().item(),
                      "dq": (qt.grad.double() - q64.grad).abs().max().item(),
                      "dk": (kt.grad.double() - k64.grad).abs().max().item(),
                      "dv": (vt.grad.double() - v64.grad).abs().max().item()}
            tol = _tolerance(dt)
            checks.append({"case": case, "errors": errors, "tolerance": tol,
                           "ok": all(e <= tol * (4 if n.startswith("d") else 1) for n, e in errors.items())})
        except Exception as exc:  # record, don't crash the benchmark
            checks.append({"case": case, "errors": None, "tolerance": None, "ok": False, "error": _first_line(exc)})
    return checks


# ---------------------------------------------------------------------------------------------------
# environment, targets, output


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(device: torch.device) -> dict[str, Any]:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {"type": "cuda", "name": props.name, "slug": _slug(props.name),
                "capability": [props.major, props.minor], "total_memory_bytes": int(props.total_memory)}
    return {"type": "cpu", "name": _cpu_name(), "slug": _slug(f"cpu-{platform.machine()}"),
            "capability": None, "total_memory_bytes": None}


def environment() -> dict[str, Any]:
    ft, _ = _triton_module()
    return {
        "torch": torch.__version__,
        "triton": ft.TRITON_VERSION if ft is not None else None,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": platform.python_version(),
        "platform": platform.platform(),  # OS and kernel release; no host name
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "allow_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "env_vars": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
                                                "TRITON_INTERPRET", "PYTORCH_CUDA_ALLOC_CONF") if k in os.environ},
    }


def command_line(argv: list[str]) -> str:
    """``python -m grader.dev.attention_bench ...`` with paths inside the repo made relative (no home or host)."""
    args = []
    for a in argv:
        p = Path(a)
        if p.is_absolute():
            try:
                a = str(p.resolve().relative_to(REPO))
            except ValueError:
                a = "<path>/" + p.name
        args.append(a)
    return shlex.join(["python", "-m", "grader.dev.attention_bench", *args])


TARGETS = (
    # (name, metric, threshold, case filter)
    ("triton >= 0.7x SDPA-flash TFLOP/s at T >= 4096", "triton.tflops_ratio", 0.7,
     lambda c: c["T"] >= 4096 and c["device_type"] == "cuda"),
    ("tiled <= 4x SDPA-flash time at bf16, d=64, T=8192", "tiled.time_ratio", 4.0,
     lambda c: (c["dtype"], c["d"], c["T"]) == ("bfloat16", 64, 8192)
     and c["device_type"] == "cuda"),
)


def evaluate_targets(results: list[dict[str, Any]], device_type: str) -> list[dict[str, Any]]:
    """The chapter's performance targets, judged on the cases they concern (only against SDPA-flash)."""
    out = []
    for name, metric, threshold, applies in TARGETS:
        method, field = metric.split(".")
        for r in results:
            if not applies(dict(r["case"], device_type=device_type)):
                continue
            ratio = r["ratios"].get(method) if r["baseline"] == "sdpa_flash" else None
            value = None if ratio is None else ratio[field]
            met = None if value is None else (value >= threshold if field == "tflops_ratio" else value <= threshold)
            out.append({"name": name, "case": r["case"], "metric": metric, "threshold": threshold,
                        "value": value, "met": met})
    return out


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def format_table(run: dict[str, Any]) -> str:
    """A plain-text table of a run (what ``main`` prints)."""
    lines = [f"{run['device']['name']} ({run['device']['type']}), torch {run['env']['torch']}, "
             f"triton {run['env']['triton']}, {run['created']}"]
    for r in run["results"]:
        lines.append("")
        lines.append(f"{case_label(r['case'])}: {r['flops'] / 1e9:.3g} GFLOP; baseline: {r['baseline']}"
                     + ("" if r["baseline"] in ("sdpa_flash", None) else f" [{r['baseline_note']}]"))
        lines.append(f"  {'method':<15}{'time ms':>11}{'TFLOP/s':>10}{'peak mem':>12}{'max|diff|':>11}  notes")
        for name, m in r["methods"].items():
            if m["status"] == "ok":
                diff = "-" if m["max_abs_diff"] is None else f"{m['max_abs_diff']:.1e}"
                cfg = "" if not m.get("config") else " ".join(f"{k}={v}" for k, v in m["config"].items()
                                                              if k not in ("tried", "rejected"))
                lines.append(f"  {name:<15}{m['time_ms']:>11.3f}{m['tflops']:>10.4f}"
                             f"{_fmt_bytes(m['peak_mem_bytes']):>12}{diff:>11}  {cfg}")
            else:
                lines.append(f"  {name:<15}{m['status']:>11}  {m['reason'][:110]}")
        for name, ratio in r["ratios"].items():
            if ratio is not None and name != "naive":
                lines.append(f"  {name}/{r['baseline']}: time x{ratio['time_ratio']:.2f}, "
                             f"TFLOP/s x{ratio['tflops_ratio']:.3f}")
        for name, m in r.get("backward", {}).get("methods", {}).items():
            if m["status"] == "ok":
                lines.append(f"  {name + ' fwd+bwd':<24}{m['time_ms']:>9.3f} ms {m['tflops']:>8.3f} TFLOP/s "
                             f"{_fmt_bytes(m['peak_mem_bytes']):>12}")
            else:
                lines.append(f"  {name + ' fwd+bwd':<24}{m['status']:>11}  {m['reason'][:100]}")
    for t in run.get("targets", []):
        verdict = {True: "MET", False: "NOT MET", None: "n/a"}[t["met"]]
        value = "-" if t["value"] is None else f"{t['value']:.3f}"
        lines.append(f"target [{verdict}] {t['name']} ({case_label(t['case'])}): {t['metric']} = {value}")
    if run.get("triton_check"):
        bad = [c for c in run["triton_check"] if not c["ok"]]
        lines.append(f"triton self-check: {len(run['triton_check']) - len(bad)}/{len(run['triton_check'])} ok"
                     + "".join(f"\n  FAILED {c['case']}: {c.get('errors') or c.get('error')}" for c in bad))
    return "\n".join(lines)


def default_out(device: dict[str, Any], created: _dt.datetime) -> Path:
    path = DATA_DIR / f"bench-{device['slug']}-{created:%Y-%m-%d}.json"
    n = 2
    while path.exists():
        path = DATA_DIR / f"bench-{device['slug']}-{created:%Y-%m-%d}-{n}.json"
        n += 1
    return path


def run_benchmark(cases: list[dict[str, Any]], device: torch.device, methods: Iterable[str] = METHODS,
                  budget_s: float = 0.5, min_reps: int = 3, max_reps: int = 50,
                  tiled_blocks: list[tuple[int, int]] | None = None, check_triton: bool = True,
                  quick: bool = False, argv: list[str] | None = None,
                  progress: Callable[[str], None] | None = None,
                  on_update: Callable[[dict[str, Any]], None] | None = None,
                  backward: bool = True) -> dict[str, Any]:
    """Run the table and return the record (the JSON document of the schema above); with ``backward``,
    every result also times forward plus backward (``result["backward"]``).

    ``on_update(run)`` is called after every case with the partial record (``"complete": false``), so a
    run cut short by a time limit still leaves its finished cases on disk.
    """
    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    methods = list(methods)
    run: dict[str, Any] = {
        "schema": SCHEMA,
        "created": created.isoformat(),
        "command": command_line(sys.argv[1:] if argv is None else argv),
        "quick": quick,
        "complete": False,
        "device": device_info(device),
        "env": environment(),
        "timing": {"method": "CUDA events, median" if device.type == "cuda" else "time.perf_counter, median",
                   "warmup": 1, "min_reps": min_reps, "max_reps": max_reps, "budget_s": budget_s},
        "memory": {"method": MEMORY_METHOD[device.type]},
        "flops": {"source": FLOPS_SOURCE},
        "triton_check": None,
        "results": [],
    }
    if check_triton and "triton" in methods:
        run["triton_check"] = triton_self_check(device)
        if progress and run["triton_check"] is not None:
            ok = sum(c["ok"] for c in run["triton_check"])
            progress(f"Triton kernels vs float64: {ok}/{len(run['triton_check'])} checks ok")
    for case in cases:
        if progress:
            progress(f"{case_label(case)} ...")
        t0 = time.perf_counter()
        result = bench_case(case, device, methods, budget_s, min_reps, max_reps, tiled_blocks)
        if backward:
            result["backward"] = bench_backward(case, device, methods, budget_s, min_reps, max_reps)
        run["results"].append(result)
        run["targets"] = evaluate_targets(run["results"], device.type)
        if progress:
            progress(f"  done in {time.perf_counter() - t0:.1f} s")
        if on_update:
            on_update(run)
    run["complete"] = True
    return run


def load_recorded(folder: str | os.PathLike[str], device_type: str | None = None) -> list[dict[str, Any]]:
    """Every benchmark record (schema ``ch09-flash-bench/1``) in ``folder``, oldest first.

    Files that are not JSON or carry another schema are ignored; a missing folder gives ``[]``. Each
    record gets a ``"path"`` entry (the file it came from). ``device_type="cuda"`` keeps GPU runs only.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    runs = []
    for path in sorted(folder.glob("*.json")):
        try:
            run = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(run, dict) or run.get("schema") != SCHEMA:
            continue
        if device_type is not None and run.get("device", {}).get("type") != device_type:
            continue
        run["path"] = str(path)
        runs.append(run)
    return sorted(runs, key=lambda r: (r.get("created", ""), r["path"]))


def result_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat dict per (case, method) that ran: case fields, method, time_ms, tflops, peak_mem_bytes,
    plus the device name and whether the run was recorded (for plotting, e.g. with seaborn)."""
    rows = []
    for r in run["results"]:
        for name, m in r["methods"].items():
            if m.get("status") == "ok":
                rows.append({**r["case"], "method": name, "time_ms": m["time_ms"], "tflops": m["tflops"],
                             "peak_mem_bytes": m["peak_mem_bytes"], "device": run["device"]["name"],
                             "created": run["created"]})
    return rows


# ---------------------------------------------------------------------------------------------------
# command line


def _blocks_arg(text: str) -> list[tuple[int, int]]:
    try:
        pairs = [tuple(int(x) for x in item.split(":")) for item in text.split(",") if item]
    except ValueError as exc:
        raise argparse.ArgumentTypeError("tile sizes look like 128:128,256:64") from exc
    if not pairs or any(len(p) != 2 or min(p) < 1 for p in pairs):
        raise argparse.ArgumentTypeError("tile sizes look like 128:128,256:64")
    return pairs  # type: ignore[return-value]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m grader.dev.attention_bench",
        description="Time naive attention, the tiled PyTorch FlashAttention, the Triton kernel and the SDPA "
                    "backends (forward pass); print a table and write a JSON record.",
        epilog="Example: python -m grader.dev.attention_bench --cases 4,16,8192,64,bf16,1 --out /tmp/run.json",
    )
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available, else cpu")
    p.add_argument("--quick", action="store_true", help="tiny cases and few repetitions (for tests)")
    p.add_argument("--cases", nargs="+", type=parse_case, metavar="B,H,T,d[,dtype[,causal]]",
                   help="replace the device's default table, e.g. 4,16,8192,64,bf16,1")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="methods to run")
    p.add_argument("--tiled-blocks", type=_blocks_arg, metavar="BQ:BK[,BQ:BK...]",
                   help="tile sizes to try for the tiled PyTorch forward (best one is reported)")
    p.add_argument("--budget", type=float, help="seconds of repetitions per measurement (default 0.5, quick 0.05)")
    p.add_argument("--max-reps", type=int, default=50, help="at most this many timed repetitions")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads for a CPU run (default 1: steady timings on a shared machine; "
                        "0 keeps torch's default)")
    p.add_argument("--no-check", action="store_true", help="skip the Triton self-check on CUDA")
    p.add_argument("--forward-only", action="store_true", help="time the forward pass only (no fwd+bwd rows)")
    p.add_argument("--out", type=Path, help="JSON path (default: book/ch09_flash/data/bench-<device>-<date>.json; "
                                            "--quick runs are only written with --out)")
    p.add_argument("--no-save", action="store_true", help="print only")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    cases = args.cases or default_cases(device.type, args.quick)
    budget = args.budget if args.budget is not None else (0.05 if args.quick else 0.5)
    save = not (args.no_save or (args.quick and args.out is None))
    out = args.out or default_out(device_info(device), _dt.datetime.now(_dt.timezone.utc))

    def write(run: dict[str, Any]) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".partial")
        tmp.write_text(json.dumps(run, indent=1) + "\n")
        tmp.replace(out)  # atomic: readers never see half a file

    run = run_benchmark(cases, device, args.methods, budget_s=budget, min_reps=3,
                        max_reps=min(args.max_reps, 10) if args.quick else args.max_reps,
                        tiled_blocks=args.tiled_blocks, check_triton=not args.no_check, quick=args.quick,
                        argv=sys.argv[1:] if argv is None else argv,
                        progress=lambda s: print(s, file=sys.stderr, flush=True),
                        on_update=write if save else None, backward=not args.forward_only)
    print(format_table(run))
    if save:
        write(run)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
