"""Execute a notebook in its own folder and say exactly which cell failed."""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from .course import GraderError

# ipykernel warns on every start that its local TCP sockets are unencrypted; that is noise here
QUIET_KERNEL = ["--IPKernelApp.log_level=ERROR"]
# One intra-op thread per kernel. The demos use small tensors, where threads gain little, and on a busy
# machine (CI, parallel jobs) OpenMP threads that compete for the cores make a chapter 10x slower:
# chapter 6 took 151 s instead of 18 s with one other process running.
KERNEL_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# Figures are saved at twice their size on the page ("retina": the PNG has 2x the pixels and says its
# display size), so that they are sharp on high-DPI screens; the book shows them at the display size.
FIGURE_KERNEL = ["--InlineBackend.figure_formats=retina"]


class ExecutionFailed(GraderError):
    """A cell raised (or timed out): the message names the notebook, the cell and the error."""


def _describe(nb: nbformat.NotebookNode, label: str, exc: Exception) -> str:
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                first = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
                return (f"{label}: cell {index} (id {cell.get('id', '?')}) raised "
                        f"{out.get('ename')}: {out.get('evalue')}\n    first line of the cell: {first}")
    return f"{label}: {type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"


def _client(nb: nbformat.NotebookNode, cwd: Path, timeout: int) -> NotebookClient:
    return NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                          record_timing=False, extra_arguments=QUIET_KERNEL + FIGURE_KERNEL,
                          resources={"metadata": {"path": str(cwd)}})


def _failure(nb: nbformat.NotebookNode, label: str, timeout: int, exc: Exception) -> ExecutionFailed:
    if isinstance(exc, CellTimeoutError):
        return ExecutionFailed(f"{label}: a cell ran longer than {timeout} s ({exc})")
    if isinstance(exc, DeadKernelError):
        return ExecutionFailed(f"{label}: the kernel died ({exc})")
    return ExecutionFailed(_describe(nb, label, exc))


def execute(nb: nbformat.NotebookNode, cwd: Path, *, label: str, timeout: int = 300) -> nbformat.NotebookNode:
    """Return an executed copy of ``nb``; raise :class:`ExecutionFailed` on the first failing cell."""
    nb = copy.deepcopy(nb)
    try:
        _client(nb, cwd, timeout).execute(env={**os.environ, **KERNEL_ENV})
    except (CellTimeoutError, DeadKernelError, CellExecutionError) as exc:
        raise _failure(nb, label, timeout, exc) from None
    return nb


def parallel_kernels() -> int:
    """How many notebooks run at once: one kernel per core this process may use (each kernel is one
    thread: :data:`KERNEL_ENV`), at most 4 (memory: a kernel with torch and its figures takes ~1 GB)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4))


def execute_many(jobs: list[tuple[nbformat.NotebookNode, Path, str]], *, timeout: int = 300,
                 parallel: int | None = None,
                 done: Callable[[int, nbformat.NotebookNode, float], None] | None = None
                 ) -> list[nbformat.NotebookNode]:
    """Execute several notebooks, ``parallel`` kernels at a time (default: :func:`parallel_kernels`), in one
    event loop of this thread (nbclient's async API: the kernels are processes, so the cores are used).
    ``done(i, nb, seconds)`` is called as each one finishes, in the order they finish; the first failure
    stops the others and raises :class:`ExecutionFailed`."""
    import time

    slots = asyncio.Semaphore(parallel or parallel_kernels())
    results: list[nbformat.NotebookNode | None] = [None] * len(jobs)

    async def one(i: int) -> None:
        source, cwd, label = jobs[i]
        nb = copy.deepcopy(source)
        async with slots:
            start = time.perf_counter()
            try:
                await _client(nb, cwd, timeout).async_execute(env={**os.environ, **KERNEL_ENV})
            except (CellTimeoutError, DeadKernelError, CellExecutionError) as exc:
                raise _failure(nb, label, timeout, exc) from None
            results[i] = nb
            if done is not None:
                done(i, nb, time.perf_counter() - start)

    async def run_all() -> None:
        tasks = [asyncio.ensure_future(one(i)) for i in range(len(jobs))]
        try:
            await asyncio.gather(*tasks)
        finally:  # a failure stops the others (their kernels are shut down by nbclient's cleanup)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    if jobs:
        asyncio.run(run_all())
    return results  # type: ignore[return-value]
