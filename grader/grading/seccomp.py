"""A seccomp filter for the notebook's process: the system calls a notebook never needs and an escape would.

Installed by the sandbox (:func:`grader.grading.sandbox._notebook`) after ``no_new_privs`` and before any
student code, it is inherited by every thread and process the notebook starts and no code can remove it (the
kernel offers no call to lift a filter). A denied call fails with ``EPERM``, as an unprivileged one would:

* **new namespaces** — ``unshare``, ``setns``, and ``clone`` with any namespace flag. A user namespace would
  make the notebook root of a namespace of its own (mounts, and the kernel attack surface that opens); the
  other kinds have no use in a notebook. ``clone3``, whose flags sit in memory a filter cannot read, answers
  ``ENOSYS``, on which the C library falls back to ``clone`` (threads and processes keep working);
* **other processes' memory and the kernel's interfaces** — ``ptrace``, ``process_vm_readv``/``writev``,
  ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*`` (whose operations a filter does not see),
  keyrings, module and kexec loading, file-handle opens, and the mount family (``mount``, ``umount2``,
  ``pivot_root``, ``chroot``, the new mount API);
* **its own CPU-time limits** — ``setrlimit`` and ``prlimit64`` (with a new value) of ``RLIMIT_CPU`` or
  ``RLIMIT_RTTIME``. The sandbox sets them; a notebook that lowered them would be killed by the kernel with
  the SIGKILL that otherwise only the outside (an operator, the machine's OOM killer) can send to the
  namespace's first process, and the grader would take its own end for the machine's fault. Reading a
  limit (``prlimit64`` without a new value, as ``getrlimit`` does) and every other limit stay allowed.

A filter for another architecture's calls, or the x32 ABI on x86-64, kills the process: its numbers are not
the ones checked. :func:`supported` says whether this machine's architecture has a table here (x86-64 and
AArch64); elsewhere the sandbox runs without the filter and says so in its isolation line.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
NR_OFFSET, ARCH_OFFSET, ARG0_OFFSET = 0, 4, 16
ARG_SIZE = 8  # each argument is 64 bits; on these little-endian machines its low word comes first
RLIMIT_CPU, RLIMIT_RTTIME = 0, 15

LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K, JGE_K, JSET_K = 0x15, 0x35, 0x45  # BPF_JMP | BPF_JEQ/JGE/JSET | BPF_K
RET_K = 0x06  # BPF_RET | BPF_K

RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000

CLONE_NEWTIME = 0x00000080
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACE_FLAGS = (CLONE_NEWTIME | CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER
                   | CLONE_NEWPID | CLONE_NEWNET)

DENIED = ("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "ptrace", "process_vm_readv",
          "process_vm_writev", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
          "io_uring_register", "keyctl", "add_key", "request_key", "kexec_load", "init_module", "finit_module",
          "delete_module", "open_by_handle_at", "name_to_handle_at", "open_tree", "move_mount", "fsopen",
          "fsconfig", "fsmount", "fspick", "mount_setattr")

#: The calls' numbers per architecture (from the kernel's syscall tables), and its AUDIT_ARCH value.
TABLES = {
    "x86_64": (0xC000003E, {
        "clone": 56, "clone3": 435, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166,
        "pivot_root": 155, "chroot": 161, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "keyctl": 250, "add_key": 248, "request_key": 249, "kexec_load": 246,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "setrlimit": 160, "prlimit64": 302}),
    "aarch64": (0xC00000B7, {
        "clone": 220, "clone3": 435, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39,
        "pivot_root": 41, "chroot": 51, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "keyctl": 219, "add_key": 217, "request_key": 218, "kexec_load": 104,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "setrlimit": 164, "prlimit64": 261}),
}
X32_SYSCALL_BIT = 0x40000000


def supported(machine: str | None = None) -> bool:
    return (machine or platform.machine()) in TABLES


def program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter as BPF instructions ``(code, jt, jf, k)``."""
    arch, numbers = TABLES[machine or platform.machine()]
    # the returns sit at the end; a check jumps to one by its label
    body: list[tuple[int, object, object, int]] = [
        (LD_W_ABS, 0, 0, ARCH_OFFSET),
        (JEQ_K, 0, "kill", arch),
        (LD_W_ABS, 0, 0, NR_OFFSET),
    ]
    if arch == TABLES["x86_64"][0]:
        body.append((JGE_K, "kill", 0, X32_SYSCALL_BIT))
    for name in DENIED:
        body.append((JEQ_K, "deny", 0, numbers[name]))
    body.append((JEQ_K, "enosys", 0, numbers["clone3"]))
    body.append((JEQ_K, "clone", 0, numbers["clone"]))
    body.append((JEQ_K, "setrlimit", 0, numbers["setrlimit"]))
    body.append((JEQ_K, "prlimit", 0, numbers["prlimit64"]))
    body.append((RET_K, 0, 0, RET_ALLOW))
    labels = {}

    def arg(n: int, high: bool = False) -> int:
        return ARG0_OFFSET + ARG_SIZE * n + (4 if high else 0)

    tail = [("clone", [(LD_W_ABS, 0, 0, ARG0_OFFSET), (JSET_K, "deny", 0, NAMESPACE_FLAGS),
                       (RET_K, 0, 0, RET_ALLOW)]),
            # setrlimit(resource, new): a CPU-time resource is denied
            ("setrlimit", [(LD_W_ABS, 0, 0, arg(0)), (JEQ_K, "deny", 0, RLIMIT_CPU), (JEQ_K, "deny", 0, RLIMIT_RTTIME),
                           (RET_K, 0, 0, RET_ALLOW)]),
            # prlimit64(pid, resource, new, old): a CPU-time resource with a new value (not NULL) is denied
            ("prlimit", [(LD_W_ABS, 0, 0, arg(1)), (JEQ_K, "new_limit", 0, RLIMIT_CPU),
                         (JEQ_K, "new_limit", 0, RLIMIT_RTTIME), (RET_K, 0, 0, RET_ALLOW)]),
            ("new_limit", [(LD_W_ABS, 0, 0, arg(2)), (JEQ_K, 0, "deny", 0), (LD_W_ABS, 0, 0, arg(2, high=True)),
                           (JEQ_K, 0, "deny", 0), (RET_K, 0, 0, RET_ALLOW)]),
            ("deny", [(RET_K, 0, 0, RET_ERRNO | errno.EPERM)]),
            ("enosys", [(RET_K, 0, 0, RET_ERRNO | errno.ENOSYS)]),
            ("kill", [(RET_K, 0, 0, RET_KILL_PROCESS)])]
    for label, block in tail:
        labels[label] = len(body)
        body.extend(block)
    out = []
    for i, (code, jt, jf, k) in enumerate(body):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        assert 0 <= jt < 256 and 0 <= jf < 256, "a jump too far for BPF"
        out.append((code, jt, jf, k))
    return out


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> None:
    """Install the filter on the calling thread (and all it starts from now on). Needs ``no_new_privs`` (or
    CAP_SYS_ADMIN). Raises OSError when the kernel refuses: the caller decides whether to go on."""
    code = program()
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in code)
    buf = ctypes.create_string_buffer(raw, len(raw))
    prog = _SockFprog(len(code), ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp filter refused: {errno.errorcode.get(err, err)}")
