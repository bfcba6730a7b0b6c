"""The sandbox's seccomp filter (grader/grading/seccomp.py), in a forked child of this process: new
namespaces, ptrace and the other denied calls fail with EPERM, while threads, fork, subprocesses, torch's
own threads and a multiprocessing pool keep working (clone3's ENOSYS falls back to clone). The child is a
fresh interpreter with a time limit, so a hang fails the test instead of stalling the suite."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from grader.grading import seccomp

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not seccomp.supported(), reason=f"no seccomp table for {platform.machine()}")

CHILD = r"""
import ctypes, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
def denied(result):
    return result == -1 and ctypes.get_errno() == 1  # EPERM
out = {}
out["userns"] = denied(libc.unshare(0x10000000))
out["mountns"] = denied(libc.unshare(0x00020000))
out["unshare_cli"] = subprocess.run(["unshare", "-Ur", "true"], capture_output=True).returncode != 0
out["ptrace"] = denied(libc.ptrace(16, os.getppid(), None, None))  # PTRACE_ATTACH
out["setns"] = denied(libc.setns(-1, 0))
seen = []
t = threading.Thread(target=lambda: seen.append(1)); t.start(); t.join()
out["thread"] = seen == [1]
out["subprocess"] = subprocess.run(["true"]).returncode == 0
pid = os.fork()
if pid == 0:
    os._exit(7)
out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
import torch
torch.set_num_threads(2)
out["torch"] = float(torch.ones(300, 300).matmul(torch.ones(300, 300))[0, 0]) == 300.0
import multiprocessing as mp
with mp.get_context("fork").Pool(2) as pool:
    out["pool"] = pool.map(abs, [-1, -2]) == [1, 2]
"""


def test_the_filter_denies_namespaces_and_ptrace_and_keeps_threads_and_processes():
    # a fresh interpreter, not a fork of this worker: a fork of a process whose torch thread pool already
    # runs can hang in its first parallel matmul, and a hang here must fail the test, not stall the suite
    script = ("import ctypes, json\n"
              "from grader.grading import seccomp\n"
              "assert ctypes.CDLL(None).prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS\n"
              "seccomp.install()\n"
              + CHILD + "print(json.dumps(out))\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert all(report.values()), {k: v for k, v in report.items() if not v}


def test_the_program_checks_the_architecture_first_and_every_jump_lands_inside():
    for machine in seccomp.TABLES:
        code = seccomp.program(machine)
        assert code[0] == (seccomp.LD_W_ABS, 0, 0, seccomp.ARCH_OFFSET)
        assert code[1][3] == seccomp.TABLES[machine][0]
        for i, (op, jt, jf, _) in enumerate(code):
            if op & 0x07 == 0x05:  # a jump
                assert i + 1 + max(jt, jf) < len(code)
        assert code[-1] == (seccomp.RET_K, 0, 0, seccomp.RET_KILL_PROCESS)
