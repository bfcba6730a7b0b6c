"""Execute a notebook in its own folder and say exactly which cell failed."""

from __future__ import annotations

import copy
import os
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


def execute(nb: nbformat.NotebookNode, cwd: Path, *, label: str, timeout: int = 300) -> nbformat.NotebookNode:
    """Return an executed copy of ``nb``; raise :class:`ExecutionFailed` on the first failing cell."""
    nb = copy.deepcopy(nb)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                            record_timing=False, extra_arguments=QUIET_KERNEL + FIGURE_KERNEL,
                            resources={"metadata": {"path": str(cwd)}})
    try:
        client.execute(env={**os.environ, **KERNEL_ENV})
    except CellTimeoutError as exc:
        raise ExecutionFailed(f"{label}: a cell ran longer than {timeout} s ({exc})") from None
    except DeadKernelError as exc:
        raise ExecutionFailed(f"{label}: the kernel died ({exc})") from None
    except CellExecutionError as exc:
        raise ExecutionFailed(_describe(nb, label, exc)) from None
    return nb
