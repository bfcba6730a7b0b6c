"""The sandbox every student notebook runs in, forked from a warm interpreter.

A *zygote* is a long-lived trusted process (``python -m grader.grading.sandbox``) that imports torch, numpy,
IPython and the harness once (about 2 s), then serves jobs one at a time from its stdin: for each it
forks a *leader* that walls itself in and forks the process that runs :mod:`grader.grading.harness` on the
job's plan. A submission thus costs a ``fork`` instead of a kernel start and ``import torch``. The zygote
never holds a student's code or answers in its memory (the plan is read after the fork, the results are
moved pipe to file by ``splice``), so nothing of one submission can be found in the next one's memory.

The notebook's process, before any student code runs:

* leaves the zygote's session and stdio (student output never reaches the protocol pipe);
* is PID 1 of new mount, network, PID and IPC namespaces (``unshare``): no network at all (only a downed
  loopback, no abstract Unix sockets of the host), SysV IPC objects of its own that die with the job, and
  killing it kills every process it started;
* gets a root built from an **allow-list** (:func:`_enter_root`) and entered with ``pivot_root``, the host's
  tree detached: a read-only Python installation and system directories (``/usr``, ``/lib*``, symlinks
  ``/bin`` ...), a handful of read-only files of ``/etc`` plus a generated ``passwd``, ``/dev`` with
  null/zero/full/random/urandom only, a private size-capped ``/tmp`` and ``/dev/shm``, its own ``/proc``;
  any course folder that an allowed directory would show is covered;
* closes every descriptor except stdin/stdout/stderr (``/dev/null``), the write end of the results
  pipe (fd 3) and that of the ready pipe (closed in turn just before the first cell, see below), and checks
  that nothing else is open (:func:`_close_fds`), or refuses to run;
* sets rlimits (CPU seconds, address space, processes, file size, no core files), ``no_new_privs``, a
  seccomp filter (:mod:`grader.grading.seccomp`: no new namespaces, no ptrace, no kernel interfaces), drops
  to an unprivileged user of its own (one uid per worker, so workers cannot touch each other; dumpable
  again, so that its own ``/proc/self`` files are its own and the memory meter can reset its peak), clears the
  environment (no grading-mode signal: the variables are those of a plain kernel), and changes into an
  empty working folder.

The results come back only over the pipe (:mod:`grader.grading.wire` frames); the zygote copies them into a
file of the job's private folder, stopping at ``wire.MAX_STREAM_BYTES``, and enforces the wall-clock limit
of the whole notebook, killing the namespace on expiry.

Who ended a job is decided from what the notebook cannot write. The grader's own code in the notebook's
process writes one byte on a pipe of its own (the *ready* pipe, closed before any student code) once the
walls are up, just before the first cell. Without that byte, the sandbox could not be set up: the grader's
fault (``outside``), whatever the exit code. With it, every end of the process is the notebook's doing (an
exit code, a crash, its memory or CPU limit: the cells it reached count), except what only the outside can
do: the wall-clock timer (the grader's, recorded as a timeout), a signal to the leader, or a SIGKILL of the
notebook's process that neither its cgroup's memory limit nor its CPU limit explains. That last one is
believed only under full isolation: as PID 1 of its namespace the process cannot be sent SIGKILL from
inside, and the seccomp filter keeps it from lowering its own CPU limit to be killed by the kernel; weaker
isolation lets a notebook signal itself, so there a SIGKILL is its own.

Where namespaces are not available (not root, or a container that forbids ``unshare``), the child runs
with rlimits, its own session, the same descriptor hygiene and results pipe, and, as root, an
unprivileged uid only; :func:`probe` says so and ``grader autograde`` prints the weaker isolation once at
the start of a run.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import importlib
import json
import os
import platform
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import audit, seccomp  # imported before the walls: the sandbox cannot read the course folder
from .seccomp import CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID  # one table of the flags

NAMESPACES = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}.get(platform.machine())

RESULTS_FD = 3  # the results pipe's write end, inside the sandbox
METER_FD = 4  # the notebook's end of the meter socket (:class:`_Meter`), inside the sandbox
READY = b"R"  # what the ready pipe carries once the sandbox is set up, before any student code
BASE_UID, LAST_UID = 61000, 64999  # sandbox users: one uid per live zygote on this machine
LOCK_FOLDER = Path("/run/lock/grader-sandbox")  # root-only: the uid locks

#: What of the host the sandbox sees, read-only: these system folders (or their symlinks) and files of
#: /etc, on top of the Python installation itself.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("ld.so.cache", "ld.so.conf", "localtime", "nsswitch.conf", "host.conf", "mime.types")
DEVICES = ("null", "zero", "full", "random", "urandom")

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
    tmp_size: int = 256 << 20  # the private /tmp (tmpfs: counted in memory, never on the host's disk)
    shm_size: int = 64 << 20  # the private /dev/shm


@dataclass
class Finished:
    status: str  # "finished" | "timeout" | "died"
    detail: str
    seconds: float
    isolation: str
    results_over: bool = False  # the notebook sent more than wire.MAX_STREAM_BYTES; the rest was dropped
    outside: bool = False  # not the notebook's doing: killed from outside, or the sandbox itself failed
    peak_rss: int = -1  # bytes: the kernel's largest resident set of the notebook's processes (-1: unknown)


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

    def run(self, job: Path, limits: Limits, cases: list[str], key: bytes) -> Finished:
        """Run the job in ``job`` (a folder only root can read: its ``plan.json``); the results stream
        lands in ``job/results.stream``, its frames sealed under ``key`` (:class:`grader.grading.wire.Sealer`).
        ``cases`` are the case folders the plan refers to."""
        request = {"job": str(job), "limits": asdict(limits), "cases": sorted(set(cases)), "key": key.hex()}
        self.proc.stdin.write(json.dumps(request) + "\n")
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


def _private_folder(folder: Path) -> int:
    """Open ``folder`` (created root-only if missing), refusing a symlink or one that others can write."""
    try:
        folder.mkdir(mode=0o700, parents=False)
    except FileExistsError:
        pass
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise RuntimeError(f"{folder} is not private to this user; remove it")
    return fd


def _claim_uid() -> tuple[int, int]:
    """A sandbox uid no other live zygote on this machine uses (other grading runs included): the
    uid's lock file stays locked for as long as this zygote lives. The locks live in a root-only folder
    and are opened without following links."""
    parent = LOCK_FOLDER.parent if LOCK_FOLDER.parent.is_dir() else Path(tempfile.gettempdir())
    folder = _private_folder(parent / LOCK_FOLDER.name)
    try:
        for uid in range(BASE_UID, LAST_UID + 1):
            fd = os.open(f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=folder)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return uid, fd
            except OSError:
                os.close(fd)
    finally:
        os.close(folder)
    raise RuntimeError("no free sandbox uid")


# ---------------------------------------------------------------------------------------------------
# zygote side

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode() if source else None, target.encode(),
                       fstype.encode() if fstype else None, flags, data.encode() if data else None),
           f"mount {target}")


def _bind(fd: int, target: str, writable: bool = False) -> None:
    """Bind what ``fd`` (an O_PATH descriptor) names onto ``target``, read-only, no setuid, no devices."""
    _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
    if not writable:
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _inside(path: Path, roots) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _python_dirs() -> list[Path]:
    return sorted({Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})


def _enter_root(limits: Limits, uid: int, hide: list[Path], *, proc: bool = True) -> None:
    """Build the sandbox's root from the allow-list on a fresh tmpfs and ``pivot_root`` into it; the
    host's tree is detached. Runs as root in a new mount namespace (and, with ``proc``, as PID 1 of a new
    PID namespace, which gets its own /proc)."""
    if SYS_PIVOT_ROOT is None:
        raise OSError(f"pivot_root: unknown system call number on {platform.machine()}")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    python = _python_dirs()
    system = [Path(p) for p in SYSTEM if os.path.lexists(p)]
    system_dirs = [p for p in system if not p.is_symlink() and p.is_dir()]
    # hold every source open before anything is mounted over it (a Python under /tmp survives the new /tmp)
    held: dict[str, int] = {}

    def hold(path) -> int:
        held[str(path)] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        return held[str(path)]

    for p in [*system_dirs, *python]:
        hold(p)
    for name in ETC_FILES:
        if os.path.isfile(f"/etc/{name}"):
            hold(f"/etc/{name}")
    for name in DEVICES:
        hold(f"/dev/{name}")
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700")
    root = "/tmp/root"
    os.mkdir(root, 0o755)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0755")
    for folder in ("tmp", "dev", "proc", "etc"):
        os.mkdir(f"{root}/{folder}", 0o755)
    _mount("tmpfs", f"{root}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={limits.tmp_size},mode=1777")
    _mount("tmpfs", f"{root}/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    for name in DEVICES:
        open(f"{root}/dev/{name}", "w").close()
        _mount(f"/proc/self/fd/{held['/dev/' + name]}", f"{root}/dev/{name}", None, MS_BIND)
    os.mkdir(f"{root}/dev/shm", 0o1777)
    _mount("tmpfs", f"{root}/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={limits.shm_size},mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    for p in system:
        if p.is_symlink():
            os.symlink(os.readlink(p), f"{root}{p}")
        elif p in system_dirs:
            os.mkdir(f"{root}{p}", 0o755)
            _bind(held[str(p)], f"{root}{p}")
    # a course folder (or workspace, or the submissions) that an allowed system folder would show is
    # covered by an empty read-only tmpfs; a Python installation inside it is bound back below
    for h in hide:
        if _inside(h, system_dirs) and os.path.isdir(f"{root}{h}"):
            _mount("tmpfs", f"{root}{h}", "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
    for p in python:
        visible = _inside(p, system_dirs) and not any(_inside(p, [h]) for h in hide if _inside(h, system_dirs))
        if visible:
            continue
        os.makedirs(f"{root}{p}", 0o755, exist_ok=True)
        _bind(held[str(p)], f"{root}{p}")
    for h in hide:
        if _inside(h, system_dirs) and os.path.isdir(f"{root}{h}"):
            _mount(None, f"{root}{h}", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
    for name in ETC_FILES:
        if f"/etc/{name}" in held:
            open(f"{root}/etc/{name}", "w").close()
            _bind(held[f"/etc/{name}"], f"{root}/etc/{name}")
    with open(f"{root}/etc/passwd", "w") as fh:
        fh.write(f"root:x:0:0:root:/root:/bin/false\nsandbox:x:{uid}:{uid}:sandbox:/tmp/work:/bin/false\n")
    with open(f"{root}/etc/group", "w") as fh:
        fh.write(f"root:x:0:\nsandbox:x:{uid}:\n")
    os.mkdir(f"{root}/tmp/work", 0o700)
    os.chown(f"{root}/tmp/work", uid, uid)
    for fd in held.values():
        os.close(fd)
    os.chdir(root)
    _check(_libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the host's root")
    os.chdir("/")
    if proc:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4m,mode=0755")


def _open_fds() -> set[int]:
    """The descriptors open in this process (the listing's own descriptor is closed by then)."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.add(fd)
    return found


def _close_fds(keep: set[int]) -> None:
    """Close every descriptor not in ``keep``, then check that only ``keep`` is open."""
    for fd in _open_fds() - keep:
        try:
            os.close(fd)
        except OSError:
            pass
    left = _open_fds()
    if left != keep:
        raise RuntimeError(f"descriptors {sorted(left ^ keep)} are open or missing in the sandbox")


def probe() -> str:
    """Which isolation this machine allows, in words: a throwaway child tries the namespaces and builds
    (and enters) the allow-list root."""
    if os.geteuid() != 0:
        return "weak: not running as root, so no namespaces and no separate user (rlimits and a session only)"
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.dup2(os.open(os.devnull, os.O_RDWR), 2)
            if _libc.unshare(NAMESPACES) == 0:
                code = 2
                _enter_root(Limits(), BASE_UID, [], proc=False)
                code = 0
        except BaseException:  # noqa: BLE001 -- the exit code says how far it got
            pass
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return ("full: mount, network, PID and IPC namespaces, an allow-list root (pivot_root), "
                "an unprivileged uid, rlimits, "
                + ("a seccomp filter (no new namespaces, no ptrace)" if seccomp.supported()
                   else f"no seccomp filter (no table for {platform.machine()})"))
    if code == 2:
        return "weak: the allow-list root could not be built here, so an unprivileged uid and rlimits only"
    return "weak: unshare() is not permitted here (a container?), so an unprivileged uid and rlimits only"


class Cgroups:
    """One cgroup per job, so that one submission cannot take another's CPU, memory or process slots:
    equal CPU weight, a CPU quota of ``limits.threads`` cores, ``memory`` (page cache and tmpfs pages the
    job writes included) and ``processes`` as kernel limits. Works on cgroup v1 (one folder per controller,
    under the zygote's own cgroup) and v2 (one folder under the zygote's cgroup, which must delegate the
    controllers); :meth:`detect` says which, or why neither."""

    V1 = ("cpu", "memory", "pids")
    V2 = ("cpu", "memory", "pids")

    def __init__(self, version: str, bases: dict[str, Path]):
        self.version, self.bases, self.count = version, bases, 0

    @classmethod
    def detect(cls) -> tuple[Cgroups | None, str]:
        if os.geteuid() != 0:
            return None, "not root"
        mine = {}
        try:
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                for c in controllers.split(","):
                    mine[c] = path
        except OSError as exc:
            return None, str(exc)
        v1 = {c: Path("/sys/fs/cgroup", c, mine[c].lstrip("/")) for c in cls.V1 if c in mine}
        if len(v1) == len(cls.V1) and all((b / "cgroup.procs").exists() for b in v1.values()):
            probe = cls("v1", v1)
            try:
                probe.close(probe.create(Limits()))
                return probe, "v1: cpu, memory, pids"
            except OSError as exc:
                return None, f"cgroup v1 not writable ({exc.strerror})"
        if "" in mine and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            base = Path("/sys/fs/cgroup", mine[""].lstrip("/"))
            try:
                available = (base / "cgroup.controllers").read_text().split()
                if not set(cls.V2) <= set(available):
                    missing = ", ".join(sorted(set(cls.V2) - set(available)))
                    return None, f"cgroup v2 without the {missing} controller(s)"
                (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in cls.V2))
                probe = cls("v2", {"": base})
                probe.close(probe.create(Limits()))
                return probe, "v2: cpu, memory, pids"
            except OSError as exc:
                return None, f"cgroup v2 not delegated here ({exc.strerror})"
        return None, "no cgroup cpu, memory and pids controllers"

    def create(self, limits: Limits) -> list[Path]:
        self.count += 1
        name = f"grader-job-{os.getpid()}-{self.count}"
        made = []
        try:
            for controller, base in self.bases.items():
                folder = base / name
                folder.mkdir(mode=0o700)
                made.append(folder)
                if self.version == "v1":
                    values = {"cpu": {"cpu.shares": "1024", "cpu.cfs_period_us": "100000",
                                      "cpu.cfs_quota_us": str(100000 * max(1, limits.threads))},
                              "memory": {"memory.limit_in_bytes": str(limits.memory + (512 << 20))},
                              "pids": {"pids.max": str(limits.processes)}}[controller]
                else:
                    values = {"cpu.weight": "100", "cpu.max": f"{100000 * max(1, limits.threads)} 100000",
                              "memory.max": str(limits.memory + (512 << 20)), "memory.swap.max": "0",
                              "pids.max": str(limits.processes)}
                for key, value in values.items():
                    if (folder / key).exists():
                        (folder / key).write_text(value)
                if controller in ("memory", ""):  # the job's processes live in main/, metered cases beside it
                    if self.version == "v2":
                        (folder / "cgroup.subtree_control").write_text("+memory")
                    (folder / "main").mkdir(mode=0o700)
                    made[-1] = folder / "main"
        except OSError:
            self.close(made)
            raise
        return made

    @staticmethod
    def memory_main(folders: list[Path]) -> Path | None:
        """The job's memory cgroup for its processes (``main``), beside which metered cases get theirs."""
        return next((f for f in folders if f.name == "main"), None)

    @staticmethod
    def oom_kills(folders: list[Path]) -> int:
        """How many processes the kernel killed in the job's cgroup for going over its memory limit
        (``oom_kill`` of v2's ``memory.events`` or v1's ``memory.oom_control``; v1 kernels without that
        line: the limit was hit, ``failcnt``)."""
        kills = 0
        for folder in folders:
            folder = folder.parent if folder.name == "main" else folder  # the job's folder holds the limit
            for name in ("memory.events", "memory.oom_control"):
                try:
                    text = (folder / name).read_text()
                except OSError:
                    continue
                fields = dict(line.split()[:2] for line in text.splitlines() if len(line.split()) >= 2)
                if "oom_kill" in fields:
                    kills += int(fields["oom_kill"])
                elif name == "memory.oom_control":
                    try:
                        kills += int((folder / "memory.failcnt").read_text()) > 0
                    except (OSError, ValueError):
                        pass
        return kills

    @staticmethod
    def join(folders: list[Path]) -> None:
        for folder in folders:
            (folder / "cgroup.procs").write_text(str(os.getpid()))

    @staticmethod
    def close(folders: list[Path]) -> None:
        every = []
        for folder in folders:
            if folder.name == "main":  # a metered case's folder left open, main/, then the job's
                every += [*sorted(folder.parent.glob("case-*")), folder, folder.parent]
            else:
                every.append(folder)
        for folder in every:
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)



class _Window:
    """One metered case's memory cgroup, beside the job's ``main``: opened by moving every process of the
    job into a fresh one (so its peak counts only what is charged from then on, on every thread and in
    every process of the job, tmpfs and mapped pages included), closed by reading its peak and moving them
    back. Reads and moves are the zygote's; the notebook cannot reach the cgroup file system."""

    def __init__(self, main: Path, number: int):
        self.main, self.folder = main, main.parent / f"case-{number}"
        self.folder.mkdir(mode=0o700)
        self._move(self.main, self.folder)

    @staticmethod
    def _move(source: Path, target: Path) -> None:
        for _ in range(100):  # a process forked while moving lands where its parent was: again until none
            pids = (source / "cgroup.procs").read_text().split()
            if not pids:
                return
            for pid in pids:
                try:
                    (target / "cgroup.procs").write_text(pid)
                except OSError as exc:
                    if exc.errno != errno.ESRCH:  # not: it ended meanwhile
                        raise
        raise OSError("the job's processes kept multiplying while being moved")

    def close(self) -> int:
        """The window's peak memory in bytes (-1 if unreadable); its processes are back in ``main``."""
        peak = -1
        for name in ("memory.max_usage_in_bytes", "memory.peak"):  # v1, v2
            try:
                peak = int((self.folder / name).read_text().split()[0])
                break
            except (OSError, ValueError, IndexError):
                continue
        try:
            self._move(self.folder, self.main)
        finally:
            Cgroups.close([self.folder])
        return peak


class _Meter:
    """The zygote's end of a job's meter socket. A metered case (:func:`grader.checks.metered`) runs in a
    window: the notebook's process asks for it (``O`` + its ids), the zygote opens a :class:`_Window` and
    only then sends the descriptors of the case's files (inputs included, which the plan never held); the
    process ends it by sending the case's sealed outcome (``C`` + ids + size + bytes), after which the
    zygote reads the window's peak and records both (:func:`grader.grading.wire.read_meter`). Whatever the
    notebook writes here, it cannot shrink a window's measure: an outcome counts only if it arrived
    before its window closed, each case opens once, one window at a time; anything off-protocol ends the
    meter for the job (the cases not yet recorded then count as not measured)."""

    def __init__(self, sock: socket.socket, job: Path, main: Path | None, out: int):
        from . import wire

        self.wire, self.sock, self.main, self.out = wire, sock, main, out
        self.max_payload = wire.MAX_CASE_BYTES + (1 << 20)  # one case's outcome, its frame and its seal
        self.sock.setblocking(False)
        spec = json.loads((job / "plan.json").read_text())
        self.folders = [[Path(c["cases"]) for c in cell.get("checks", [])] for cell in spec["cells"]]
        self.buffer, self.opened, self.window, self.open_ids = bytearray(), set(), None, None
        self.written, self.closed = 0, False

    def fileno(self) -> int:
        return self.sock.fileno()

    def on_readable(self) -> None:
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            return self.stop()
        self.buffer += data
        if len(self.buffer) > self.max_payload + 64:
            return self.stop()
        ids_size = self.wire.CASE_IDS.size
        while self.buffer and not self.closed:
            kind = self.buffer[:1]
            if kind == b"O" and len(self.buffer) >= 1 + ids_size:
                ids = self.wire.CASE_IDS.unpack(bytes(self.buffer[1:1 + ids_size]))
                del self.buffer[:1 + ids_size]
                self._open(ids)
            elif kind == b"C" and len(self.buffer) >= 5 + ids_size:
                ids = self.wire.CASE_IDS.unpack(bytes(self.buffer[1:1 + ids_size]))
                (size,) = struct.unpack(">I", self.buffer[1 + ids_size:5 + ids_size])
                if size > self.max_payload:
                    return self.stop()
                if len(self.buffer) < 5 + ids_size + size:
                    return
                payload = bytes(self.buffer[5 + ids_size:5 + ids_size + size])
                del self.buffer[:5 + ids_size + size]
                self._close(ids, payload)
            elif kind in (b"O", b"C"):
                return  # the rest of the message is on its way
            else:
                return self.stop()

    def _folder(self, ids: tuple[int, int, int]) -> Path | None:
        cell, check, case = ids
        if cell < len(self.folders) and check < len(self.folders[cell]):
            folder = self.folders[cell][check] / self.wire.METERED / str(case)
            if (folder / "data.json").is_file():
                return folder
        return None

    def _reply(self, data: bytes, fds: list[int] = ()) -> None:
        try:
            socket.send_fds(self.sock, [data], list(fds)) if fds else self.sock.send(data)
        except OSError:  # full (the process does not read its replies) or gone
            self.stop()

    def _open(self, ids: tuple[int, int, int]) -> None:
        folder = self._folder(ids)
        if folder is None or ids in self.opened or self.window is not None:
            return self._reply(b"N")
        self.opened.add(ids)
        if self.main is not None:
            try:
                self.window = _Window(self.main, len(self.opened))
            except OSError:
                return self._reply(b"N")  # not measured: the case counts as such
        self.open_ids = ids
        names = sorted(p.name for p in folder.iterdir() if p.is_file() and not p.is_symlink())
        fds = [os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC) for name in names]
        try:
            self._reply(b"F" + json.dumps(names).encode(), fds)
        finally:
            for fd in fds:
                os.close(fd)

    def _close(self, ids: tuple[int, int, int], payload: bytes) -> None:
        if ids != self.open_ids:
            return self.stop()
        peak = self._end()
        record = (self.wire.CASE_IDS.pack(*ids) + self.wire.METER_RECORD.pack(peak, self.main is not None, len(payload))
                  + payload)
        if self.written + len(record) <= self.wire.MAX_STREAM_BYTES:
            os.write(self.out, record)
            self.written += len(record)
        self._reply(b"K")

    def _end(self) -> int:
        peak, window = -1, self.window
        self.window, self.open_ids = None, None
        if window is not None:
            try:
                peak = window.close()
            except OSError:
                peak = -1
        return peak

    def stop(self) -> None:
        """End the meter (the job's end, or a notebook off the protocol); an open window closes unrecorded."""
        if not self.closed:
            self.closed = True
            self._end()
            self.sock.close()
            os.close(self.out)

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


def _high(fd: int) -> int:
    """``fd`` moved to a number of 10 or more (close-on-exec), the old one closed."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def _load_plan(job: Path, cache: dict):
    from . import harness

    spec = json.loads((job / "plan.json").read_text())
    plan = []
    for cell in spec["cells"]:
        planned = []
        for check in cell.get("checks", []):
            planned.append(harness.PlannedCheck(check["target"], list(check["banned"]), cache[check["cases"]]))
        plan.append(harness.PlannedCell(cell["kind"], cell["source"], cell.get("grade_id", ""), planned))
    return plan


def _notebook(job: Path, limits: Limits, uid: int, hide: list[Path], full: bool, cache: dict,
              results: int, ready: int, weak_work: str | None, sealer, meter: int = -1) -> None:
    """The notebook's process (PID 1 of the new namespaces when ``full``): wall in, say so on ``ready``
    (then closed), then run the plan."""
    plan = _load_plan(job, cache)
    cache.clear()
    ready, results, meter = (_high(fd) if fd >= 0 else fd for fd in (ready, results, meter))  # out of 3 and 4's way
    for fd, target in ((results, RESULTS_FD), (meter, METER_FD)):
        if fd >= 0:
            os.dup2(fd, target)
            os.close(fd)
    os.set_inheritable(RESULTS_FD, True)  # a subprocess of the student's may write results too: harmless
    if full:
        _enter_root(limits, uid, hide)
        work = "/tmp/work"
    else:
        work = weak_work
    kept = {0, 1, 2, RESULTS_FD, ready} | ({METER_FD} if meter >= 0 else set())
    _close_fds(kept)
    _limit(limits)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        # the uid change made the process undumpable, which hands its /proc files to root: the memory
        # meter could no longer reset its own peak (/proc/self/clear_refs) and memory-bounded cases would
        # fail for everyone. Dumpable again, they are the job's uid's, which only this job runs as; ptrace
        # stays denied by the filter below and core files by RLIMIT_CORE = 0.
        _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")
    if seccomp.supported():
        try:
            seccomp.install()  # no new namespaces, no ptrace, no kernel interfaces (grader.grading.seccomp)
        except OSError:
            if full:
                raise  # fail closed: full isolation includes the filter
    os.chdir(work)
    os.umask(0o077)
    sys.argv[:] = ["ipykernel_launcher.py"]
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "LANG": "C.UTF-8",
                       "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1"})
    keep = _python_dirs()
    sys.path[:] = [p for p in sys.path if p and _inside(Path(p).resolve(), keep)]
    _close_fds(kept)  # asserted again just before student code: nothing was opened since
    import torch

    torch.set_num_threads(max(1, limits.threads))
    from . import harness

    audit.install()  # for the rest of this process: no code can remove it (grader/grading/audit.py)
    os.write(ready, READY)  # the walls are up: from here on, how this process ends is the notebook's doing
    os.close(ready)
    harness.run(plan, RESULTS_FD, sealer, METER_FD if meter >= 0 else None)


def _leader(job: Path, limits: Limits, uid: int, hide: list[Path], full: bool, cache: dict, results: int,
            report_fd: int, ready: int, cgroups: list[Path], weak_work: str | None = None, key: bytes = b"",
            meter: int = -1) -> None:
    """The forked child: join the job's cgroups, enter the namespaces, then fork the notebook's process
    and wait for it."""
    Cgroups.join(cgroups)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    os.setsid()
    if full:
        _check(_libc.unshare(NAMESPACES), "unshare")
    child = os.fork()
    if child == 0:
        os.close(report_fd)
        from . import wire

        sealer = wire.Sealer(key)  # the key lives on in this object only, in the grader's code's memory
        key = None
        try:
            _notebook(job, limits, uid, hide, full, cache, results, ready, weak_work, sealer, meter)
            code = 0
        except BaseException:  # noqa: BLE001 -- the harness itself failed; the exit code says so
            code = 70
            try:
                import traceback

                os.write(RESULTS_FD, sealer.seal(wire.frame({"t": "crash", "error": traceback.format_exc()[-8000:]})))
            except BaseException:  # noqa: BLE001
                pass
        os._exit(code)
    os.close(results)
    os.close(ready)  # the notebook's process holds the only copy: its end is the pipe's end
    if meter >= 0:
        os.close(meter)
    cache.clear()
    os.write(report_fd, f"{child}\n".encode())
    os.close(report_fd)
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(min(os.waitstatus_to_exitcode(status), 127))


#: Signals a notebook cannot send to its own process in the sandbox (PID 1 of its namespace ignores them
#: from inside unless it handles them): when one ended it, it came from outside (an operator, the
#: machine's OOM killer) unless the job's own memory or CPU limit explains it.
OUTSIDE_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _killed_from_outside(code: int, oom_kills: int, cpu_seconds: float, limits: Limits) -> bool:
    """Whether a notebook's process that the sandbox confirmed set up was ended from outside; only asked
    under full isolation with the seccomp filter (see the module's docstring)."""
    if code <= 128 or code - 128 not in OUTSIDE_SIGNALS:
        return False
    if code - 128 == signal.SIGKILL and (oom_kills > 0 or cpu_seconds >= limits.cpu - 1):
        return False  # the job's own cgroup memory limit, or its CPU-time rlimit: the notebook's doing
    return True


def _describe(code: int) -> str:
    if code == 0:
        return ""
    if code == 70:
        return ("the grading harness stopped inside the sandbox after the notebook's code had started "
                "(did the notebook reach into it?)")
    if code > 128:
        sig = code - 128
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGXCPU:
            return "the notebook used up its CPU time limit"
        if sig == signal.SIGKILL:
            return "the notebook's process was killed (out of memory?)"
        return f"the notebook's process crashed ({name})"
    return f"the notebook's process exited with code {code} (os._exit or a crash)"


def _confirmed(ready: int) -> bool:
    """Whether the notebook's process said the sandbox was set up (:data:`READY` on the ready pipe, whose
    read end is closed here). Read once the job is over: the byte waits in the pipe until then."""
    os.set_blocking(ready, False)
    try:
        return os.read(ready, len(READY)) == READY
    except BlockingIOError:  # a writer still open and nothing written: not confirmed
        return False
    finally:
        os.close(ready)


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


class _Stream:
    """Moves the results pipe into the job's file, in the kernel (``splice``), up to the cap."""

    def __init__(self, pipe: int, out: int, cap: int):
        self.pipe, self.out, self.cap = pipe, out, cap
        self.written, self.over, self.eof = 0, False, False
        self.sink = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)

    def fileno(self) -> int:
        return self.pipe

    def pump(self, timeout: float) -> None:
        if self.eof:
            time.sleep(min(timeout, 0.02))
            return
        ready, _, _ = select.select([self.pipe], [], [], max(0.0, timeout))
        if ready:
            self.on_readable()

    def on_readable(self) -> None:
        room = self.cap - self.written
        moved = os.splice(self.pipe, self.out if room > 0 else self.sink, room if 0 < room < 1 << 20 else 1 << 20)
        if moved == 0:
            self.eof = True
        elif room > 0:
            self.written += moved
        else:
            self.over = True

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.eof and time.monotonic() < end:
            self.pump(end - time.monotonic())


    def close(self) -> None:
        for fd in (self.pipe, self.out, self.sink):
            os.close(fd)


def _pump(stream: _Stream, meter: _Meter, timeout: float) -> None:
    """Wait up to ``timeout`` for the results pipe or the meter socket, and serve what is ready."""
    waiting = [x for x, live in ((stream, not stream.eof), (meter, not meter.closed)) if live]
    if not waiting:
        time.sleep(min(timeout, 0.02))
        return
    ready, _, _ = select.select(waiting, [], [], max(0.0, timeout))
    for x in ready:
        x.on_readable()


def _serve_one(request: dict, uid: int, hide: list[Path], full: bool, isolation: str, cache: dict,
               cgroups: Cgroups | None = None) -> dict:
    from . import wire

    job = Path(request["job"])
    limits = Limits(**request["limits"])
    key = bytes.fromhex(request["key"])
    if len(key) != wire.KEY_BYTES:
        raise ValueError("a job needs its key for the results' seals")
    start = time.monotonic()
    for folder in request.get("cases", []):
        if folder not in cache:
            cache[folder] = wire.read(Path(folder))
    groups = cgroups.create(limits) if cgroups else []
    weak_work = None
    if not full:  # no private /tmp: a fresh folder of the host's, removed afterwards
        weak_work = tempfile.mkdtemp(prefix="grader-work-")
        if os.geteuid() == 0:
            os.chown(weak_work, uid, uid)
    read_end, write_end = os.pipe()
    report_r, report_w = os.pipe()
    ready_r, ready_w = os.pipe()
    meter_mine, meter_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    leader = os.fork()
    if leader == 0:
        try:
            os.close(read_end)
            os.close(report_r)
            os.close(ready_r)
            meter_mine.close()
            _leader(job, limits, uid, hide, full, cache, write_end, report_w, ready_w, groups, weak_work, key,
                    meter_theirs.detach())
        finally:
            os._exit(71)
    os.close(write_end)
    os.close(report_w)
    os.close(ready_w)
    meter_theirs.close()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    out = os.open(job / "results.stream", flags, 0o600)
    stream = _Stream(read_end, out, wire.MAX_STREAM_BYTES)
    meter = _Meter(meter_mine, job, Cgroups.memory_main(groups), os.open(job / wire.METER_FILE, flags, 0o600))
    inner = None
    with os.fdopen(report_r) as report:
        line = report.readline()
        if line.strip().isdigit():
            inner = int(line)
    deadline = start + limits.wall
    status = "finished"
    leader_killed, cpu_seconds, peak_rss = False, 0.0, -1
    while True:
        done, wait_status, usage = os.wait4(leader, os.WNOHANG)
        if done:
            cpu_seconds = usage.ru_utime + usage.ru_stime  # the leader's and the notebook's (it waited for it)
            peak_rss = usage.ru_maxrss * 1024  # the largest of them, the notebook's (KiB on Linux)
            code = os.waitstatus_to_exitcode(wait_status)
            if code < 0:  # the leader itself killed by a signal (from outside: nothing inside can reach it)
                code, leader_killed = 128 - code, True
                if inner:
                    try:
                        os.kill(inner, signal.SIGKILL)  # do not leave its notebook running
                    except ProcessLookupError:
                        pass
            if not full:
                _sweep(uid)  # with a PID namespace, the end of its first process ended the rest
            stream.drain(2.0)
            for _ in range(1000):  # what the meter had been sent before the end
                if meter.closed:
                    break
                meter.on_readable()
            break
        left = deadline - time.monotonic()
        if left <= 0:
            for pid in (inner, leader):
                if pid:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            os.waitpid(leader, 0)
            if not full:
                _sweep(uid)
            stream.drain(2.0)  # what the notebook sent before it was stopped counts
            status, code = "timeout", -1
            break
        _pump(stream, meter, min(left, 0.05))
    stream.close()
    meter.stop()
    confirmed = _confirmed(ready_r)
    oom_kills = Cgroups.oom_kills(groups)
    Cgroups.close(groups)
    if weak_work is not None:
        shutil.rmtree(weak_work, ignore_errors=True)
    seconds = time.monotonic() - start
    outside = False
    guarded = full and seccomp.supported()  # a SIGKILL of the notebook's process can only come from outside
    if not confirmed:  # no student code ran: however it ended, the sandbox's setup failed (or never finished)
        ended = (f"signal {signal.Signals(code - 128).name}" if code - 128 in signal.Signals._value2member_map_
                 else f"code {code}")
        detail = "the sandbox could not be set up" + (f" within the time limit ({limits.wall:.0f} s)"
                                                      if status == "timeout" else f" (its process ended with {ended})")
        status, outside = "died", True
    elif status == "timeout":
        detail = f"the notebook ran longer than {limits.wall:.0f} s and was stopped"
    else:
        detail = _describe(code)
        if code == 128 + signal.SIGKILL and oom_kills:
            detail = "the notebook went over its memory limit and was killed"
        elif leader_killed or (guarded and _killed_from_outside(code, oom_kills, cpu_seconds, limits)):
            name = signal.Signals(code - 128).name
            detail = (f"the notebook's process was killed from outside its sandbox ({name}; not its own memory "
                      "or CPU limit: the machine's OOM killer or an operator?)")
            outside = True
        status = "finished" if code == 0 else "died"
    return {"status": status, "detail": detail, "seconds": seconds, "isolation": isolation,
            "results_over": stream.over, "outside": outside, "peak_rss": peak_rss}


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
    from . import harness, wire  # noqa: F401

    harness.warm()

    isolation = probe()
    full = isolation.startswith("full")
    cgroups, how = Cgroups.detect()
    isolation += f"; one cgroup per job ({how})" if cgroups else f"; no cgroup per job ({how}): jobs share CPU"
    cache: dict = {}
    out = sys.stdout
    out.write(json.dumps({"uid": uid, "isolation": isolation}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = _serve_one(json.loads(line), uid, hide, full, isolation, cache, cgroups)
        except Exception as exc:  # noqa: BLE001 -- report, keep serving
            reply = {"status": "died", "detail": f"the sandbox failed: {type(exc).__name__}: {exc}",
                     "seconds": 0.0, "isolation": isolation, "outside": True}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    # the worker closed our stdin: every job is over and its cgroups removed, nothing is left to tidy, so
    # skip the interpreter's teardown of torch, pandas, IPython... (seconds, while the worker waits)
    os._exit(0)


if __name__ == "__main__":
    serve(int(sys.argv[1]), [Path(p).resolve() for p in sys.argv[2:]])
