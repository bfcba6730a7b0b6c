"""What runs inside the sandbox: the student's cells, the visible tests, and the evaluation of checks.

The grader hands over a *plan*: the notebook's code cells in order (the student's own cells, with every
graded test cell replaced by the instructor's visible part), and for each test cell the check cases to
evaluate right after it. This module runs the cells in an IPython shell (so magics and ``display`` work
as in a kernel) and, after each test cell, calls the student's objects on the cases and writes what
they returned as plain data (:mod:`grader.grading.wire`) into the results folder. It never sees a reference
output or a hidden test's source, and it decides nothing: the grader judges the results afterwards, in
a process where no student code ran.

Each result is written as soon as it exists, so a notebook that later crashes, loops or exhausts its
memory keeps the results of the test cells it had reached.
"""

from __future__ import annotations

import io
import json
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import checks
from . import wire

MAX_CELL_OUTPUT = 20_000  # characters of stdout/stderr kept per cell (the rest is counted, not kept)


@dataclass
class PlannedCheck:
    target: str
    banned: list[str]
    cases: list[checks.Case]


@dataclass
class PlannedCell:
    kind: str  # "code" | "test"
    source: str
    grade_id: str = ""
    checks: list[PlannedCheck] = field(default_factory=list)


class BoundedText(io.TextIOBase):
    """A stdout/stderr replacement that keeps the first ``limit`` characters and counts the rest."""

    def __init__(self, limit: int = MAX_CELL_OUTPUT):
        self.limit, self.parts, self.kept, self.dropped = limit, [], 0, 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        s = str(s)
        room = self.limit - self.kept
        if room > 0:
            self.parts.append(s[:room])
            self.kept += min(len(s), room)
        self.dropped += max(0, len(s) - max(room, 0))
        return len(s)

    def text(self) -> str:
        text = "".join(self.parts)
        if self.dropped:
            text += f"\n[... {self.dropped} more characters of output not kept]\n"
        return text


_SHELL = None


def _shell():
    global _SHELL
    if _SHELL is not None:
        return _SHELL
    from IPython.core.interactiveshell import InteractiveShell

    class GradingShell(InteractiveShell):
        def enable_gui(self, gui=None):  # no event loop here; %matplotlib inline becomes a no-op
            return None

        def enable_matplotlib(self, gui=None):
            return None, None

    shell = GradingShell.instance(colors="NoColor")
    shell.display_pub.publish = _publish(shell)
    _SHELL = shell
    return shell


def _publish(shell):
    def publish(data=None, metadata=None, **_ignored):
        text = (data or {}).get("text/plain")
        if text is not None:
            print(str(text)[:MAX_CELL_OUTPUT], file=sys.stdout)
    return publish


def _run_cell(shell, source: str) -> tuple[bool, str, str]:
    """Run one cell; return (ok, output text, error line)."""
    out = BoundedText()
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = out
    try:
        with warnings.catch_warnings():
            result = shell.run_cell(source, store_history=False, silent=False)
        error = result.error_before_exec or result.error_in_exec
    except BaseException as exc:  # noqa: BLE001 -- whatever the cell raised is its own failure
        error = exc
    finally:
        sys.stdout, sys.stderr = saved
    line = "" if error is None else f"{type(error).__name__}: {str(error)[:2000]}"
    return error is None, out.text(), line


def _write_json(results: int, name: str, obj: Any) -> None:
    data = json.dumps(obj).encode()
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600, dir_fd=results)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _evaluate(shell, check: PlannedCheck) -> list[checks.Outcome]:
    obj = shell.user_ns.get(check.target)
    if obj is None and check.target not in shell.user_ns:
        return [checks.Outcome(error=f"NameError: `{check.target}` is not defined (run the cell that defines it)",
                               error_types=("NameError", "Exception"))] * len(check.cases)
    with torch.random.fork_rng(devices=[]):
        return checks.evaluate(obj, check.cases, check.banned)


def warm() -> None:
    """Exercise the shell and an error once in the zygote, so every fork starts with it all loaded."""
    shell = _shell()
    for source in ("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()",
                   "1 / 0", "%matplotlib inline"):
        _run_cell(shell, source)
    shell.reset(new_session=False)


def run(plan: list[PlannedCell], results: int) -> None:
    """Run the plan; ``results`` is a directory file descriptor for the results."""
    shell = _shell()
    for index, cell in enumerate(plan):
        ok, output, error = _run_cell(shell, cell.source)
        record = {"index": index, "ok": ok, "output": output, "error": error}
        if cell.kind == "test":
            outcomes = [_evaluate(shell, check) for check in cell.checks]
            tmp = f".tmp-{index}"
            os.mkdir(tmp, 0o700, dir_fd=results)
            sub = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY, dir_fd=results)
            try:
                wire.write_at(sub, outcomes)
            finally:
                os.close(sub)
            os.rename(tmp, f"cell-{index}", src_dir_fd=results, dst_dir_fd=results)
        _write_json(results, f"cell-{index}.json", record)
    _write_json(results, "done.json", {"cells": len(plan)})
