"""Run a plain ``nbgrader`` command for the course, as its own process group, with a time limit.

nbgrader starts kernels in sessions of their own, so on a timeout the whole process tree is killed,
kernels included, not only the process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from .course import Course, Workspace


@dataclass
class Result:
    returncode: int | None  # None: killed on timeout
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def last_error(self) -> str:
        lines = [ln.strip() for ln in self.output.splitlines() if ln.strip()]
        errors = [ln for ln in lines if "[ERROR]" in ln or "Error" in ln.split(":")[0]]
        return (errors or lines or ["no output"])[-1][:300]


def _kill_tree(pid: int) -> None:
    try:
        parent = psutil.Process(pid)
        procs = parent.children(recursive=True) + [parent]
    except psutil.NoSuchProcess:
        procs = []
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def nbgrader(course: Course, args: list[str], *, workspace: Workspace | None = None,
             timeout: float | None = None, log_file: Path | None = None) -> Result:
    cmd = [sys.executable, "-m", "nbgrader", *args, *(workspace.nbgrader_args() if workspace else [])]
    env = dict(os.environ)
    # nbgrader runs `alembic` (its gradebook migrations) from PATH: use the one beside this interpreter
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.Popen(cmd, cwd=course.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, text=True, errors="replace")
    try:
        out, _ = proc.communicate(timeout=timeout)
        result = Result(proc.returncode, out)
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)
        out, _ = proc.communicate()
        result = Result(None, out)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text(" ".join(cmd) + "\n\n" + result.output)
    return result
