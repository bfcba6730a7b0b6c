"""The sandbox's seccomp filter (grader/grading/seccomp.py), in a forked child of this process: new
namespaces, ptrace and the other denied calls fail with EPERM, while threads, fork, subprocesses, torch's
own threads and a multiprocessing pool keep working (clone3's ENOSYS falls back to clone)."""

from __future__ import annotations

import ctypes
import os
import platform

import pytest

from grader.grading import seccomp

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
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports over the pipe and never returns into pytest
        os.close(read)
        code = 1
        try:
            assert ctypes.CDLL(None).prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
            seccomp.install()
            scope: dict = {}
            exec(CHILD, scope)
            os.write(write, repr(scope["out"]).encode())
            code = 0
        except BaseException as exc:  # noqa: BLE001 -- reported to the parent
            os.write(write, repr({"error": repr(exc)}).encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as fh:
        report = eval(fh.read())  # noqa: S307 -- our own child's repr of a dict of bools
    os.waitpid(pid, 0)
    assert "error" not in report, report
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
