"""What runs inside the sandbox: the student's cells, the visible tests, and the evaluation of checks.

The grader hands over a *plan*: the notebook's code cells in order (the student's own cells, with every
graded test cell replaced by the instructor's visible part), and for each test cell the check cases to
evaluate right after it. This module runs the cells in an IPython shell (so magics and ``display`` work
as in a kernel) and, after each test cell, calls the student's objects on the cases and writes what
they returned as plain data (:mod:`grader.grading.wire`) as one frame per cell on the results pipe (the
only descriptor it has besides the standard ones, pointing at /dev/null). It never sees a reference
output or a hidden test's source, and it decides nothing: the grader judges the results afterwards, in
a process where no student code ran. Everything it sends shares the student's process, so the grader
takes none of it as evidence for points: returned values are judged against the reference, and what it
says about the visible asserts is feedback.

Each frame is sent as soon as it exists, so a notebook that later crashes, loops or exhausts its
memory keeps the results of the test cells it had reached. Converting and encoding are guarded case by
case (``BaseException`` included) and bounded (:data:`wire.MAX_CASE_BYTES`, :data:`wire.MAX_CELL_BYTES`):
one bad return value costs that case, never the cells after it. Printed output is kept up to
:data:`MAX_CELL_OUTPUT` characters per cell and :data:`wire.MAX_OUTPUT_CHARS` for the whole notebook (the
grader cuts what it shows to the same, whatever is sent: this process is the student's).
"""

from __future__ import annotations

import io
import json
import os
import socket
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

    from traitlets.config import Config

    # no history database: the zygote must not hold a file open (root's history.sqlite) that a
    # sandbox could inherit, nor write one
    config = Config({"HistoryManager": {"enabled": False, "hist_file": ":memory:"}})
    shell = GradingShell.instance(colors="NoColor", config=config)
    shell.display_pub.publish = _publish(shell)
    _SHELL = shell
    return shell


def _publish(shell):
    def publish(data=None, metadata=None, **_ignored):
        text = (data or {}).get("text/plain")
        if text is not None:
            print(str(text)[:MAX_CELL_OUTPUT], file=sys.stdout)
    return publish


#: Characters of output this notebook may still keep (one notebook per process: :func:`run` sets it).
_output_left = wire.MAX_OUTPUT_CHARS


def _run_cell(shell, source: str) -> tuple[bool, str, str]:
    """Run one cell; return (ok, output text, error line). The output kept is bounded per cell and by what
    is left of the notebook's (:data:`_output_left`)."""
    global _output_left
    out = BoundedText(max(0, min(MAX_CELL_OUTPUT, _output_left)))
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
    line = "" if error is None else f"{checks._name(type(error))}: {checks._message(error, 2000)}"
    _output_left -= out.kept
    return error is None, out.text(), line


def _send(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _encode_cell(outcomes: list[list[checks.Outcome]]) -> tuple[Any, list[bytes]]:
    """The cell's outcomes as a document and blobs; a case whose outcome cannot be encoded, or is over
    its bound (or the cell's), is replaced by an error outcome saying so."""
    writer = wire.Writer()
    doc = []
    for per_check in outcomes:
        encoded = []
        for outcome in per_check:
            mark = len(writer.blobs)
            try:
                item = writer.encode(outcome)
                size = sum(len(b) for b in writer.blobs[mark:]) + len(json.dumps(item))
                if size > wire.MAX_CASE_BYTES:
                    raise _TooLarge(f"returned {size:,} bytes of results (limit {wire.MAX_CASE_BYTES:,})")
                if writer.nbytes > wire.MAX_CELL_BYTES - (1 << 20):
                    raise _TooLarge(f"this test's results exceed {wire.MAX_CELL_BYTES:,} bytes")
            except BaseException as exc:  # noqa: BLE001 -- costs this case only
                del writer.blobs[mark:]
                reason = (str(exc) if isinstance(exc, _TooLarge)
                          else f"returned something that cannot be sent ({type(exc).__name__})")
                item = writer.encode(checks.Outcome(error=f"TypeError: {reason[:500]}",
                                                    error_types=("TypeError", "Exception", "BaseException")))
            encoded.append(item)
        doc.append(encoded)
    return doc, writer.blobs


class _TooLarge(Exception):
    pass


class _MeterClient:
    """The notebook's end of the meter (:class:`grader.grading.sandbox._Meter`): a metered case's inputs are
    asked for, and its outcome handed in sealed, over the socket at ``fd``; the zygote measures the memory
    in between. Without a meter (the sandbox's own tests run the harness alone) the case is not metered."""

    def __init__(self, fd: int | None, sealer: wire.Sealer):
        self.sock = socket.socket(fileno=fd) if fd is not None else None
        self.sealer = sealer

    def case(self, ids: tuple[int, int, int]) -> checks.Case:
        if self.sock is None:
            raise RuntimeError("no meter")
        self.sock.sendall(b"O" + wire.CASE_IDS.pack(*ids))
        message, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 256)
        try:
            if not message.startswith(b"F"):
                raise RuntimeError("the meter refused this case")
            names = json.loads(message[1:])
            files = {}
            for name, fd in zip(names, fds):
                with os.fdopen(os.dup(fd), "rb") as fh:
                    files[name] = fh.read()
        finally:
            for fd in fds:
                os.close(fd)
        case = wire.decode_files(files)
        if not isinstance(case, checks.Case):
            raise RuntimeError("the meter sent something other than a case")
        return case

    def hand_in(self, ids: tuple[int, int, int], outcome: checks.Outcome) -> None:
        [[item]], blobs = _encode_cell([[outcome]])
        sealed = self.sealer.seal_case(ids, wire.frame({"outcome": item}, blobs))
        self.sock.sendall(b"C" + wire.CASE_IDS.pack(*ids) + len(sealed).to_bytes(4, "big") + sealed)
        if self.sock.recv(1) != b"K":
            raise RuntimeError("the meter did not record this case")


#: What a metered case's place in the cell's frame holds: its outcome went to the meter (the grader takes
#: it from there, or counts the case as not measured).
METERED = checks.Outcome(error="MemoryNotMeasured: this case's outcome went to the meter", error_types=())


def _evaluate(shell, check: PlannedCheck, where: tuple[int, int], meter: _MeterClient) -> list[checks.Outcome]:
    obj = shell.user_ns.get(check.target)
    if obj is None and check.target not in shell.user_ns:
        return [checks.Outcome(error=f"NameError: `{check.target}` is not defined (run the cell that defines it)",
                               error_types=("NameError", "Exception"))] * len(check.cases)
    outcomes = []
    with torch.random.fork_rng(devices=[]):
        for i, case in enumerate(check.cases):
            if not checks.metered(case):
                outcomes += checks.evaluate(obj, [case], check.banned)
                continue
            try:
                ids = (*where, i)
                [outcome] = checks.evaluate(obj, [meter.case(ids)], check.banned)
                meter.hand_in(ids, outcome)
            except BaseException:  # noqa: BLE001 -- no meter, or it was broken: this case is not measured
                pass
            outcomes.append(METERED)
    return outcomes


def warm() -> None:
    """Exercise the shell and an error once in the zygote, so every fork starts with it all loaded."""
    shell = _shell()
    for source in ("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()",
                   "1 / 0", "%matplotlib inline"):
        _run_cell(shell, source)
    shell.reset(new_session=False)


def run(plan: list[PlannedCell], results: int, sealer: wire.Sealer, meter: int | None = None) -> None:
    """Run the plan; ``results`` is the write end of the results pipe, every frame sealed by ``sealer``;
    ``meter`` the notebook's end of the meter socket (metered cases)."""
    global _output_left
    shell = _shell()
    metering = _MeterClient(meter, sealer)
    _output_left = wire.MAX_OUTPUT_CHARS
    for index, cell in enumerate(plan):
        ok, output, error = _run_cell(shell, cell.source)
        header = {"t": "cell", "index": index, "ok": ok, "output": output, "error": error, "outcomes": None}
        blobs: list[bytes] = []
        if cell.kind == "test":
            outcomes = []
            for j, check in enumerate(cell.checks):
                try:
                    outcomes.append(_evaluate(shell, check, (index, j), metering))
                except BaseException as exc:  # noqa: BLE001 -- the check's cases all fail, the cell goes on
                    message = checks._message(exc)
                    outcomes.append([checks.Outcome(error=f"{type(exc).__name__}: {message}",
                                                    error_types=(type(exc).__name__, "Exception"))]
                                    * len(check.cases))
            header["outcomes"], blobs = _encode_cell(outcomes)
        try:
            data = wire.frame(header, blobs)
        except BaseException:  # noqa: BLE001 -- say so rather than stop: the later cells still count
            data = wire.frame({**header, "outcomes": None, "output": "",
                               "error": "the results of this cell could not be sent"})
        _send(results, sealer.seal(data))
    _send(results, sealer.seal(wire.frame({"t": "done", "cells": len(plan)})))
