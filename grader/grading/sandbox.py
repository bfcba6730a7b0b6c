"""The sandbox every student notebook runs in, forked from a warm interpreter.

A *zygote* is a long-lived trusted process (``python -m grader.grading.sandbox``) that imports torch, numpy,
IPython and the harness once (about 2 s), then serves jobs one at a time from its stdin: for each it
forks a child that walls itself in and runs :mod:`grader.grading.harness` on the job's plan. A submission thus
costs a ``fork`` instead of a kernel start and ``import torch``.

The child, before any student code runs:

* leaves the zygote's session and stdio (student output never reaches the protocol pipe);
* enters new mount, network and PID namespaces (``unshare``): no network at all (only a downed
  loopback), a fresh ``/tmp``, and the course, the gradebook, the workspace, the other submissions and
  the hidden tests' cases covered by empty mounts -- only the Python environment stays visible;
* forks the process that runs the notebook as PID 1 of the new namespace, so that killing it kills every
  process the notebook started, whatever it did with sessions or signals;
* sets rlimits (CPU seconds, address space, processes, file size, no core files), drops to an
  unprivileged user of its own (one uid per worker, so workers cannot touch each other), clears the
  environment (no grading-mode signal: the variables are those of a plain kernel), and changes into an
  empty working folder.

The zygote enforces the wall-clock limit of the whole notebook and kills the namespace on expiry.

Where namespaces are not available (not root, or a container that forbids ``unshare``), the child runs
with rlimits, its own session and, as root, an unprivileged uid only; :func:`probe` says so and
``grader autograde`` prints the weaker isolation once at the start of a run.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000

BASE_UID, LAST_UID = 61000, 64999  # sandbox users: one uid per live zygote on this machine

#: Imported once by the zygote, so that no notebook pays for them (and a notebook's imports cannot be
#: shadowed by files: the sandbox's working folder holds nothing but what the notebook writes).
WARM = ["seaborn", "pandas", "scipy", "sympy", "torch._dynamo", "torch.nn.functional", "torch.utils.benchmark",
        "tracemalloc", "bdb", "pdb", "stack_data", "IPython.core.ultratb", "matplotlib.pyplot", "psutil",
        "resource"]


@dataclass
class Limits:
    wall: float = 300.0  # seconds for the whole notebook
    cpu: int = 600  # CPU seconds (all threads together)
    memory: int = 4 << 30  # bytes of address space on top of the warm interpreter's
    processes: int = 64
    file_size: int = 64 << 20
    threads: int = 1  # torch intra-op threads


@dataclass
class Finished:
    status: str  # "finished" | "timeout" | "died"
    detail: str
    seconds: float
    isolation: str


# ---------------------------------------------------------------------------------------------------
# parent side


class Zygote:
    """A warm interpreter serving sandboxed jobs; one per concurrent grading slot."""

    def __init__(self, slot: int, hide: list[Path]):
        env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1"}
        self.uid, self._lock = _claim_uid() if os.geteuid() == 0 else (os.geteuid(), None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "grader.grading.sandbox", str(self.uid), *map(str, hide)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
            start_new_session=True)
        hello = self.proc.stdout.readline()
        if not hello:
            raise RuntimeError("the grading sandbox did not start")
        info = json.loads(hello)
        self.isolation = info["isolation"]

    def run(self, job: Path, limits: Limits) -> Finished:
        self.proc.stdin.write(json.dumps({"job": str(job), "limits": asdict(limits)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the grading sandbox stopped unexpectedly")
        return Finished(**json.loads(line))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def _claim_uid() -> tuple[int, int]:
    """A sandbox uid no other live zygote on this machine uses (other grading runs included): the
    uid's lock file stays locked for as long as this zygote lives."""
    import fcntl

    folder = Path("/run/lock") if Path("/run/lock").is_dir() else Path("/tmp")
    for uid in range(BASE_UID, LAST_UID + 1):
        fd = os.open(folder / f"grader-sandbox-{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return uid, fd
        except OSError:
            os.close(fd)
    raise RuntimeError("no free sandbox uid")


# ---------------------------------------------------------------------------------------------------
# zygote side

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                       data.encode() if data else None), f"mount {target}")


def _hide(path: Path, keep: list[Path]) -> None:
    """Cover ``path`` with an empty read-only mount, except the ``keep`` folders inside it."""
    if not path.exists() or path.is_symlink():
        return
    if any(k == path for k in keep):
        return
    if any(path in k.parents for k in keep):
        for child in path.iterdir():
            _hide(child, keep)
        return
    if path.is_dir():
        _mount("tmpfs", str(path), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0555")
    else:
        _mount("/dev/null", str(path), None, MS_BIND)


def _visible(path: Path, hide: list[Path], keep: list[Path]) -> bool:
    def under(p: Path, roots: list[Path]) -> bool:
        return any(p == r or r in p.parents for r in roots)

    return under(path, keep) or not under(path, hide)


def _blocked_ancestor(path: Path) -> Path | None:
    """The highest ancestor of ``path`` that other users cannot traverse (``/root`` for a pyenv Python)."""
    for ancestor in reversed(path.parents):
        if ancestor != Path("/") and not ancestor.stat().st_mode & 0o001:
            return ancestor
    return None


def _expose(keep: list[Path]) -> None:
    """Make the Python installation readable by the sandbox user without opening what it lives in:
    cover the closed ancestor (``/root``) with an empty tmpfs and bind the installation back into it."""
    for i, path in enumerate(keep):
        closed = _blocked_ancestor(path)
        if closed is None or not path.is_dir():
            continue
        staging = Path(f"/tmp/.python{i}")
        staging.mkdir()
        _mount(str(path), str(staging), None, MS_BIND | MS_REC)
        if not os.path.ismount(closed) or closed not in _covered:
            _mount("tmpfs", str(closed), "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
            _covered.add(closed)
        path.mkdir(parents=True, exist_ok=True)
        for parent in [path, *path.parents]:
            if parent == closed:
                break
            parent.chmod(0o755)
        _mount(str(staging), str(path), None, MS_BIND | MS_REC)
        _libc.umount2(str(staging).encode(), 2)  # MNT_DETACH


_covered: set[Path] = set()


def probe() -> str:
    """Which isolation this machine allows, in words (run in a throwaway child)."""
    if os.geteuid() != 0:
        return "weak: not running as root, so no namespaces and no separate user (rlimits and a session only)"
    pid = os.fork()
    if pid == 0:
        code = 0 if _libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID) == 0 else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        return "full: mount, network and PID namespaces, an unprivileged uid, rlimits"
    return "weak: unshare() is not permitted here (a container?), so an unprivileged uid and rlimits only"


def _limit(limits: Limits) -> None:
    import resource

    vm = 0
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                vm = int(line.split()[1]) * 1024
    for name, value in ((resource.RLIMIT_AS, vm + limits.memory), (resource.RLIMIT_CPU, limits.cpu),
                        (resource.RLIMIT_NPROC, limits.processes), (resource.RLIMIT_FSIZE, limits.file_size),
                        (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(name, (value, value))


def _leader(job: Path, limits: Limits, uid: int, hide: list[Path], full: bool, plan, results_fd: int,
            report_fd: int) -> None:
    """The forked child: wall itself in, then fork the notebook's process and wait for it."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.setsid()
    if full:
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID), "unshare")
        _mount("none", "/", None, MS_REC | MS_PRIVATE)
        keep = [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]
        # a Python installation under /tmp (a checkout in /tmp) must survive the fresh /tmp: hold it
        # open, and bind it back at its own path afterwards
        held = {k: os.open(k, os.O_PATH) for k in keep if Path("/tmp") in k.parents}
        for path in hide:
            _hide(path, keep)
        _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=512m,mode=1777")
        for path, fd in held.items():
            path.mkdir(parents=True, exist_ok=True)
            for parent in [path, *path.parents]:
                if parent == Path("/tmp"):
                    break
                parent.chmod(0o755)
            _mount(f"/proc/self/fd/{fd}", str(path), None, MS_BIND | MS_REC)
            os.close(fd)
        _expose(keep)
    keep = [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]
    work = Path("/tmp/work") if full else job / "work"
    work.mkdir(mode=0o700, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(work, uid, uid)
    child = os.fork()
    if child == 0:
        try:
            if full:
                try:
                    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                except OSError:
                    pass
            _limit(limits)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            os.chdir(work)
            os.umask(0o077)
            sys.argv[:] = ["ipykernel_launcher.py"]
            os.environ.clear()
            os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8",
                               "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1"})
            sys.path[:] = [p for p in sys.path if p and _visible(Path(p).resolve(), hide, keep)]
            import torch

            torch.set_num_threads(max(1, limits.threads))
            from . import harness

            harness.run(plan, results_fd)
            code = 0
        except BaseException:  # noqa: BLE001 -- the harness itself failed; the exit code says so
            code = 70
            try:
                import traceback

                fd = os.open("harness-error.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600, dir_fd=results_fd)
                os.write(fd, traceback.format_exc()[-8000:].encode())
                os.close(fd)
            except OSError:
                pass
        os._exit(code)
    os.write(report_fd, f"{child}\n".encode())
    os.close(report_fd)
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(min(os.waitstatus_to_exitcode(status), 127))


def _describe(code: int) -> str:
    if code == 0:
        return ""
    if code == 70:
        return "the grading harness failed inside the sandbox"
    if code > 128:
        sig = code - 128
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGXCPU:
            return "the notebook used up its CPU time limit"
        if sig == signal.SIGKILL:
            return "the notebook's process was killed (out of memory?)"
        return f"the notebook's process crashed ({name})"
    return f"the notebook's process exited with code {code} (os._exit or a crash)"


def _sweep(uid: int) -> None:
    """Kill any process left running as the worker's uid (weak isolation has no PID namespace)."""
    if uid == os.geteuid():
        return
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass


def _load_plan(job: Path, cache: dict):
    from . import harness, wire

    spec = json.loads((job / "plan.json").read_text())
    plan = []
    for cell in spec["cells"]:
        planned = []
        for check in cell.get("checks", []):
            folder = check["cases"]
            if folder not in cache:
                cache[folder] = wire.read(Path(folder))
            planned.append(harness.PlannedCheck(check["target"], list(check["banned"]), cache[folder]))
        plan.append(harness.PlannedCell(cell["kind"], cell["source"], cell.get("grade_id", ""), planned))
    return plan


def _serve_one(request: dict, uid: int, hide: list[Path], full: bool, isolation: str, cache: dict) -> dict:
    job = Path(request["job"])
    limits = Limits(**request["limits"])
    start = time.monotonic()
    plan = _load_plan(job, cache)
    results = job / "results"
    results.mkdir(mode=0o700, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(results, uid, uid)
    results_fd = os.open(results, os.O_RDONLY | os.O_DIRECTORY)
    read_end, write_end = os.pipe()
    leader = os.fork()
    if leader == 0:
        os.close(read_end)
        try:
            _leader(job, limits, uid, hide, full, plan, results_fd, write_end)
        finally:
            os._exit(71)
    os.close(write_end)
    os.close(results_fd)
    inner = None
    with os.fdopen(read_end) as report:
        os.set_blocking(report.fileno(), True)
        line = report.readline()
        if line.strip().isdigit():
            inner = int(line)
    deadline = start + limits.wall
    status = "finished"
    while True:
        done, wait_status = os.waitpid(leader, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(wait_status)
            code = 128 - code if code < 0 else code  # the leader itself killed by a signal
            break
        if time.monotonic() > deadline:
            for pid in (inner, leader):
                if pid:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            os.waitpid(leader, 0)
            status, code = "timeout", -1
            break
        time.sleep(0.02)
    if not full:
        _sweep(uid)  # with a PID namespace, killing its first process killed the rest
    seconds = time.monotonic() - start
    if status == "timeout":
        detail = f"the notebook ran longer than {limits.wall:.0f} s and was stopped"
    else:
        detail = _describe(code)
        if code == 71:
            detail = "the sandbox could not be set up"
        status = "finished" if code == 0 else "died"
    return {"status": status, "detail": detail, "seconds": seconds, "isolation": isolation}


def serve(uid: int, hide: list[Path]) -> None:
    os.environ["MPLBACKEND"] = "Agg"
    import IPython.core.interactiveshell  # noqa: F401 -- warm: imported once, used by every fork
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import numpy  # noqa: F401
    import torch

    torch.set_num_threads(1)  # no OpenMP pool may exist when forking
    for name in WARM:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 -- an optional library; the notebook will say if it needs it
            pass
    from . import harness

    harness.warm()

    isolation = probe()
    full = isolation.startswith("full")
    cache: dict = {}
    out = sys.stdout
    out.write(json.dumps({"uid": uid, "isolation": isolation}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = _serve_one(json.loads(line), uid, hide, full, isolation, cache)
        except Exception as exc:  # noqa: BLE001 -- report, keep serving
            reply = {"status": "died", "detail": f"the sandbox failed: {type(exc).__name__}: {exc}",
                     "seconds": 0.0, "isolation": isolation}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]), [Path(p).resolve() for p in sys.argv[2:]])
