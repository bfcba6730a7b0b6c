"""Declarative checks: the language of every hidden test.

A hidden test block holds nothing but an import from this module and calls with literal arguments::

    ### BEGIN HIDDEN TESTS
    from grader.checks import check_close
    check_close("softmax", reference="solutions.qkv:softmax",
                cases="solutions.cases.qkv:softmax_cases", seed=1, atol=1e-6, rtol=1e-5,
                banned=["torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax"])
    ### END HIDDEN TESTS

A check names the student's object (looked up in the notebook's namespace), a case generator and a
reference by import path, and passes only literals (seeds, tolerances, sizes). Because of that, the
grader can read every check of a cell statically (:func:`parse_checks`) without running student code,
and every check runs in three phases that can live in different processes:

1. :func:`prepare` (grader side): generate the cases from the seed; for modules, build the reference
   module and take its ``state_dict`` so the student's module gets the very same weights.
2. :func:`evaluate` (student side, later inside a sandbox): call the student's object on fresh copies of
   the inputs and return *plain data* only (:func:`to_plain`): exact tensors become numpy arrays, other
   objects are refused, so a lying ``__eq__`` or ``__torch_function__`` never reaches a comparison.
3. :func:`judge` (grader side): compare with the reference (or run a property judge), check that the
   inputs were not modified and that no banned function was called; raise :class:`CheckFailed`.

In a plain kernel (source notebook, ``nbgrader autograde``) ``check_*`` runs the three phases in place
and raises on failure, which is what nbgrader scores.

Case generators have the signature ``gen(seed: int, **params) -> list[Case]``; property judges
``judge(cases: list[Case], outputs: list) -> None`` and raise ``AssertionError`` with a message.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import importlib
import itertools
import math
import sys
import types
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

__all__ = [
    "Array",
    "Case",
    "Check",
    "CheckFailed",
    "failing_cases",
    "NotDeclarative",
    "Outcome",
    "check_close",
    "check_module",
    "check_property",
    "evaluate",
    "judge",
    "parse_checks",
    "prepare",
    "resolve",
    "run_local",
    "to_plain",
]

#: Largest number of elements a single returned array may have (bounded output format: at float64 it
#: fits the results stream's per-case bound, ``grader.grading.wire.MAX_CASE_BYTES``).
MAX_ELEMENTS = 2_000_000
#: Largest returned integer (bits), string (characters) and tuple/list/dict (items): beyond them a
#: value is refused as the student's error, before it could overflow a comparison or the results stream.
MAX_INT_BITS = 64
MAX_STR = 100_000
MAX_ITEMS = 100_000


class CheckFailed(AssertionError):
    """A check found a wrong answer. The message is written for the student; ``case`` is the label of the
    case it failed on (empty when the failure is not one case's) and ``kind`` what went wrong there:
    ``banned``, ``memory``, ``raises`` (should have raised), ``error`` (raised), ``inputs`` (modified them),
    ``wrong`` (a result not the reference's), ``property`` (a property judge refused it), ``count``."""

    def __init__(self, message: str, case: str = "", kind: str = "wrong"):
        super().__init__(message)
        self.case, self.kind = case, kind


class NotDeclarative(ValueError):
    """A hidden-test block contains something other than literal check calls."""


@dataclass
class Case:
    """One input to the student's object.

    ``args``/``kwargs`` go to the call; when ``init`` is not None the target is an ``nn.Module`` class,
    built as ``target(*init, **init_kwargs)``, given ``state`` with ``load_state_dict(strict=True)`` when
    ``state`` is not None, put in eval mode, then called with ``args``/``kwargs``. When ``raises`` names
    an exception class (``"ValueError"``), the call must raise it (or a subclass) instead of returning.

    ``method`` calls an attribute of the target instead of the target itself (``"apply"`` for a
    ``torch.autograd.Function``; a module's ``"named_parameters"``, whose generator is read into a list).
    ``grad_output`` turns the case into a gradient case: every floating
    tensor argument gets ``requires_grad``, the (first) output is back-propagated with ``grad_output``,
    and the case's result is ``(output, [grad of each floating tensor argument, in order])``.
    ``max_numel`` bounds memory: no tensor that an operator creates during the call may have more
    elements, and Python-side allocations (numpy, lists) may not peak above ``8 * max_numel`` bytes plus
    a small allowance -- so "materialise the whole (T_q, T_k) matrix" fails however it is disguised.
    ``max_live`` (with ``max_numel``) also bounds the elements alive at once in tensors created during
    the call, which catches many small blocks kept together (a list of every block's scores).
    ``again`` makes the case two calls of one target (the same function, the same module instance, the same
    ``autograd.Function``): first with ``args``, then with ``again`` (``()``: fresh copies of ``args``), the
    same ``kwargs`` both times, and the case's result is ``[first, second]``. Without ``grad_output`` the
    first result is copied and then overwritten in place (every element of the storage of every tensor in
    it: floats NaN, bools negated, integers plus one) before the second call, so a result kept and handed
    out again (``lru_cache``, a table kept on the module by shape) shows in the second. With
    ``grad_output`` both calls are made before any backward pass, then each output is back-propagated in
    turn (the same ``grad_output``, so ``again`` keeps the shapes): state kept outside ``ctx`` shows, and
    each half is ``(output, [grads])`` as in a one-call gradient case.
    ``module_dtype`` (module cases) converts the module after its weights are loaded,
    ``module.to(torch.<module_dtype>)``: a module built in another dtype than the default.
    ``fresh`` (a forward case) makes the result that is judged the one read after the call's inputs were
    overwritten in place (as :func:`_spoil` does; they are put back before anything else reads them): a result
    that is, or views, an input (``present = (k_new, v_new)``) then shows it. Results cross to the grader as
    plain data, so a shared storage can only be seen here, in the call.
    ``requires_grad`` (a forward case) hands the floating tensor arguments over requiring grad, as the outputs
    of a model do (attention weights read from a forward pass): ``.numpy()`` on them, or writing into them,
    then raises; no backward pass is made.
    """

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    label: str = ""
    init: tuple | None = None
    init_kwargs: dict = field(default_factory=dict)
    state: dict | None = None
    raises: str | None = None
    method: str | None = None
    grad_output: Any = None
    max_numel: int | None = None
    max_live: int | None = None
    again: tuple | None = None
    module_dtype: str | None = None
    fresh: bool = False
    requires_grad: bool = False



def metered(case: Case) -> bool:
    """Whether a case bounds memory: the grader's sandbox then gives its inputs only inside a window whose
    memory the kernel measures (:mod:`grader.grading.sandbox`), never with the rest of the plan."""
    return case.max_numel is not None


def stub(case: Case) -> Case:
    """A metered case without its inputs (what the sandbox's plan holds): its label, bounds and kind."""
    return dataclasses.replace(case, args=(), kwargs={}, init=None, init_kwargs={}, state=None, grad_output=None,
                               again=None)

#: Python-side allocation allowance (bytes) on top of ``8 * max_numel`` for memory-bounded cases.
PYTHON_ALLOWANCE = 256 * 1024
#: Growth of the whole process's peak resident memory allowed during a memory-bounded call, on top of
#: ``8 * max(max_live, 2 * max_numel)`` bytes: lazily loaded code and allocator slack (measured up to 14 MB for
#: a correct chunked attention after a long test session). It counts what the
#: per-operator meter cannot see: tensors made on other threads, numpy, an anonymous ``mmap``.
RSS_ALLOWANCE = 64 * 1024 * 1024
#: The same allowance when the kernel measured the case (the grader's sandbox: the memory charged to the
#: job's processes from the moment the case's inputs were handed over until its outcome was, in a cgroup
#: of its own; :mod:`grader.grading.sandbox`). Measured for the reference answers of every chapter: at most
#: 8.1 MiB above ``8 * max(max_live, 2 * max_numel)`` (a chunked attention of 255 chunks, allocator slack
#: and the meters' own tracing); a correct student's FlashAttention backward in a fresh clone's grading
#: batch: 17.1 MiB above it (16 MiB failed it). The memory cases that matter make the forbidden matrix 64 MiB
#: or more, so 32 MiB still tells them apart.
KERNEL_RSS_ALLOWANCE = 32 * 1024 * 1024


@dataclass(frozen=True)
class Check:
    """A declarative check, as read from a hidden-test cell."""

    kind: str  # "close" | "module" | "property"
    target: str
    cases: str
    reference: str | None = None
    judge: str | None = None
    seed: int = 0
    atol: float = 1e-5
    rtol: float = 1e-5
    banned: tuple[str, ...] = ()
    params: tuple[tuple[str, Any], ...] = ()

    def describe(self) -> str:
        return f"{self.kind} check of `{self.target}`"


@dataclass(frozen=True)
class Array:
    """Plain-data form of a returned array: where it came from, its dtype name and its values."""

    kind: str  # "torch" | "numpy" | "meta" (a tensor on the meta device: ``value`` is its shape)
    dtype: str
    value: np.ndarray


@dataclass
class Outcome:
    """What evaluating one case produced, as plain data."""

    output: Any = None
    inputs_after: Any = None
    error: str | None = None
    error_types: tuple[str, ...] = ()  # the raised exception's class and base-class names
    banned_calls: tuple[str, ...] = ()
    largest_numel: int = 0  # largest tensor an operator created during the call (memory cases only)
    largest_op: str = ""
    python_peak: int = 0  # peak Python-side allocation in bytes (memory cases only)
    peak_live: int = 0  # peak elements alive at once in tensors created during the call (memory cases)
    rss_growth: int = -1  # growth of the process's peak resident memory during the call, bytes (-1: unknown)
    rss_kernel: bool = False  # rss_growth is the kernel's figure for the case's window (set by the grader)


# ---------------------------------------------------------------------------------------------------
# import paths


def resolve(path: str) -> Any:
    """Import ``"package.module:attr.sub"`` (or a dotted ``"torch.Tensor.softmax"``) and return it."""
    if ":" in path:
        module_name, _, attr = path.partition(":")
        parts = attr.split(".")
    else:
        names = path.split(".")
        for cut in range(len(names) - 1, 0, -1):
            try:
                importlib.import_module(".".join(names[:cut]))
            except ImportError:
                continue
            module_name, parts = ".".join(names[:cut]), names[cut:]
            break
        else:
            raise ImportError(f"cannot resolve {path!r}")
    obj: Any = importlib.import_module(module_name)
    for part in parts:
        obj = getattr(obj, part)
    return obj


# ---------------------------------------------------------------------------------------------------
# plain data


#: The tensor methods that read a result or an input for the verdict, taken from torch's C base class:
#: that class is immutable, so a cell that patches ``torch.Tensor.detach`` (or ``.cpu``, ``.numpy``, a
#: property...) changes what its own code calls, not what the grader reads (the attack: an in-place
#: softmax whose patched ``detach`` shows a clean copy of the input it overwrote). The copy is made with
#: torch-function and dispatch modes off (taken here too), so a mode left pushed by a cell cannot answer
#: for ``detach`` either.
_TB = torch._C.TensorBase
_DISABLE_MODES = _disable_current_modes


def to_plain(x: Any, _depth: int = 0) -> Any:
    """Convert a returned value to plain data, refusing anything that could lie to a comparison.

    Accepted: exact ``torch.Tensor`` / ``nn.Parameter`` and exact ``np.ndarray`` (numeric or bool),
    Python scalars and numpy floats (as Python numbers), numpy integers (kept: a 0-d numpy array of their dtype),
    ``None``, ``str``, tuples/lists (become lists) and dicts with str keys.
    Raises ``TypeError`` with a message for the student otherwise.
    """
    if _depth > 8:
        raise TypeError("returned a structure nested too deeply")
    t = type(x)
    if t is torch.Tensor or t is torch.nn.Parameter:
        if _TB.numel(x) > MAX_ELEMENTS:
            raise TypeError(f"returned a tensor with {_TB.numel(x)} elements (limit {MAX_ELEMENTS})")
        layout = _TB.layout.__get__(x)
        if layout != torch.strided or _TB.is_quantized.__get__(x):
            raise TypeError(f"returned a tensor with unsupported layout {layout}")
        dtype = str(_TB.dtype.__get__(x)).removeprefix("torch.")
        if _TB.device.__get__(x).type == "meta":  # no values: its shape stands for it (kind "meta")
            return Array("meta", dtype, np.asarray(tuple(_TB.size(x)), dtype=np.int64))
        with torch._C.DisableTorchFunction(), _DISABLE_MODES():  # modes a cell left pushed do not see this
            base = _TB.cpu(_TB.detach(x))
            if _TB.dtype.__get__(base) in (torch.bfloat16, torch.float16):
                base = _TB.float(base)
            if _TB.is_complex(base):
                base = _TB.resolve_conj(base)
            return Array("torch", dtype, np.ndarray.copy(_TB.numpy(_TB.resolve_neg(base))))
    if t is np.ndarray:
        if x.dtype.kind not in "biufc":
            raise TypeError(f"returned a numpy array of dtype {x.dtype}")
        if x.size > MAX_ELEMENTS:
            raise TypeError(f"returned an array with {x.size} elements (limit {MAX_ELEMENTS})")
        return Array("numpy", str(x.dtype), np.ndarray.copy(x))
    if t is bool or t is np.bool_:
        return bool(x)
    if t is int:
        value = int(x)
        if value.bit_length() > MAX_INT_BITS:
            raise TypeError(f"returned an integer of {value.bit_length()} bits (limit {MAX_INT_BITS})")
        return value
    if t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        # kept a numpy integer (a 0-d array of its dtype): where the reference returns a Python int, one that
        # wraps at 2^63 is a wrong answer, whatever its value here (compare)
        return Array("numpy", str(np.dtype(t)), np.asarray(x))
    if t is float or t in (np.float16, np.float32, np.float64):
        return float(x)
    if x is None:
        return x
    if t is str:
        if len(x) > MAX_STR:
            raise TypeError(f"returned a string of {len(x)} characters (limit {MAX_STR})")
        return str.__str__(x)
    if t is tuple or t is list or t is dict:
        if len(x) > MAX_ITEMS:
            raise TypeError(f"returned a {t.__name__} of {len(x)} items (limit {MAX_ITEMS})")
    if t is tuple or t is list:
        return [to_plain(v, _depth + 1) for v in x]
    if t is dict:
        if not all(type(k) is str and len(k) <= 200 for k in x):
            raise TypeError("returned a dict whose keys are not all (short) strings")
        return {str.__str__(k): to_plain(v, _depth + 1) for k, v in x.items()}
    raise TypeError(f"returned an object of type {t.__module__}.{t.__qualname__}, "
                    "expected tensors, numbers or tuples of them")


def from_plain(x: Any) -> Any:
    """Rebuild tensors from plain data (for property judges)."""
    if isinstance(x, Array):
        if x.kind == "torch":
            return torch.from_numpy(x.value.copy())
        if x.kind == "meta":
            return torch.empty(tuple(x.value.tolist()), dtype=getattr(torch, x.dtype), device="meta")
        if _numpy_integer(x):
            return x.value[()]  # a numpy integer, as it was returned
        return x.value.copy()
    if isinstance(x, list):
        return tuple(from_plain(v) for v in x)
    if isinstance(x, dict):
        return {k: from_plain(v) for k, v in x.items()}
    return x


def storage_extent(x: torch.Tensor) -> int:
    """Elements of storage a tensor's view spans from its offset (0 when it is empty)."""
    if x.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(x.shape, x.stride()))


def clone_layout(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x`` with the very same sizes and strides -- a transposed view stays transposed, a
    stride-2 view keeps stride 2, an expanded tensor keeps its stride 0 -- in storage of its own, so
    a case's layout reaches the student's code as the case made it (``Tensor.clone`` makes every
    non-dense tensor contiguous)."""
    x = x.detach()
    if x.is_contiguous():
        return x.clone(memory_format=torch.contiguous_format)
    span = torch.as_strided(x, (storage_extent(x),), (1,), x.storage_offset()).clone()
    return torch.empty(0, dtype=x.dtype, device=x.device).set_(span.untyped_storage(), 0, x.size(), x.stride())


def _clone(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return clone_layout(x)
    if isinstance(x, np.ndarray):
        return x.copy()
    if isinstance(x, tuple):
        return tuple(_clone(v) for v in x)
    if isinstance(x, list):
        return [_clone(v) for v in x]
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return copy.deepcopy(x)


# ---------------------------------------------------------------------------------------------------
# phase 1: prepare (grader side)


def prepare(check: Check) -> list[Case]:
    """Generate the check's cases; give module cases the reference module's weights."""
    gen = resolve(check.cases)
    cases = list(gen(seed=check.seed, **dict(check.params)))
    if not cases:
        raise ValueError(f"case generator {check.cases} produced no cases")
    if check.kind == "module":
        ref_cls = resolve(check.reference)
        for i, case in enumerate(cases):
            if case.init is None:
                raise ValueError(f"{check.cases}: module case {i} has no init")
            if case.state is None:
                torch.manual_seed(check.seed + i)
                ref = ref_cls(*case.init, **case.init_kwargs)
                case.state = {k: v.detach().clone() for k, v in ref.state_dict().items()}
    return cases


# ---------------------------------------------------------------------------------------------------
# phase 2: evaluate (student side)


class _BannedCallRecorder(TorchFunctionMode):
    """Records calls to banned torch functions (``torch.softmax``, ``torch.Tensor.softmax``, ...)."""

    def __init__(self, banned: dict[Any, str], seen: list[str]):
        super().__init__()
        self.banned, self.seen = banned, seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = self.banned.get(func)
        if name is not None and name not in self.seen:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


class _BannedOpRecorder(TorchDispatchMode):
    """Records banned ATen operators (``aten._softmax``, ``aten._scaled_dot_product*``), whatever
    Python path reached them. A trailing ``*`` matches every operator with that prefix."""

    def __init__(self, patterns: list[str], seen: list[str]):
        super().__init__()
        self.patterns, self.seen = patterns, seen
        self._hits: dict[Any, tuple[str, ...]] = {}  # operator -> the patterns it matches (thousands of calls)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        hits = self._hits.get(func)
        if hits is None:
            name = "aten." + func.overloadpacket.__name__
            hits = self._hits[func] = tuple(p for p in self.patterns
                                            if (name.startswith(p[:-1]) if p.endswith("*") else name == p))
        for pattern in hits:
            if pattern not in self.seen:
                self.seen.append(pattern)
        return func(*args, **(kwargs or {}))


#: Banning a family's head bans the family: ``exp(log_softmax(x))`` is a softmax, whatever its name, and so
#: are the masked, sparse and nested kernels, and fused attention (identity keys and values make it one).
#: Pure-Python decompositions (``torch._refs.softmax``) reach no kernel of their own: they are private
#: names, which the reading outside the sandbox flags (:mod:`grader.grading.tamper`).
FAMILIES: dict[str, tuple[str, ...]] = {
    "torch.softmax": ("torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax",
                      "torch.special.softmax", "torch.log_softmax", "torch.Tensor.log_softmax",
                      "torch.nn.functional.log_softmax", "torch.special.log_softmax", "torch.sparse.softmax",
                      "torch.sparse.log_softmax", "torch.nn.functional.scaled_dot_product_attention",
                      "torch.nn.functional.multi_head_attention_forward", "aten._softmax", "aten._log_softmax",
                      "aten._safe_softmax", "aten._masked_softmax", "aten._sparse_softmax", "aten._sparse_log_softmax",
                      "aten._nested_tensor_softmax_with_shape", "aten._scaled_dot_product*",
                      "aten._native_multi_head_attention", "aten._transformer_encoder_layer_fwd"),
    "torch.nn.functional.scaled_dot_product_attention": (
        "torch.nn.functional.scaled_dot_product_attention", "aten._scaled_dot_product*"),
}


def banned_family(names: Iterable[str]) -> list[str]:
    """``names`` with every family whose head is among them (in order, without repeats)."""
    out: list[str] = []
    for name in names:
        for member in FAMILIES.get(name, (name,)):
            if member not in out:
                out.append(member)
        if name not in out:
            out.append(name)
    return out


class _GlobalOpBan:
    """Records banned ATen operators on *every* thread: while a case that bans them is evaluated, a
    Python kernel is registered at the ``ADInplaceOrView`` key of each banned operator, below autograd
    (gradients are untouched), that notes the call and redispatches to the real kernel; the
    registration is removed afterwards, so the rest of the process runs the operators as before. A
    ``TorchDispatchMode`` only sees the calling thread; this sees a banned softmax run on another thread
    too. ``torch.inference_mode`` (or a guard excluding that key) skips it, so the CPU kernel of each
    banned operator is replaced too, for the window only, by one that notes the call and refuses it: the
    backend kernel is reached on every thread under every mode. (Code that re-registers the kernel or patches
    this module is in-process like the recorders: the grader reads submissions for such tampering
    outside the sandbox, :mod:`grader.grading.tamper`.)"""

    names: dict[str, list[str]] = {}  # pattern -> operator names

    @classmethod
    def _operators(cls, pattern: str) -> list[str]:
        if pattern not in cls.names:
            if pattern.endswith("*"):
                prefix = "aten::" + pattern[len("aten."):-1]
                cls.names[pattern] = sorted(n[len("aten::"):] for n in torch._C._dispatch_get_all_op_names()
                                            if n.startswith(prefix) and "." not in n)
            else:
                cls.names[pattern] = [pattern[len("aten."):]]
        return cls.names[pattern]

    @staticmethod
    def _kernel(op, pattern: str, seen: list[str]):
        after = torch._C._after_ADInplaceOrView_keyset

        def kernel(keyset, *args, **kwargs):
            if pattern not in seen:
                seen.append(pattern)
            return op.redispatch(keyset & after, *args, **kwargs)

        return kernel

    @staticmethod
    def _refusal(pattern: str, seen: list[str]):
        def kernel(*args, **kwargs):
            if pattern not in seen:
                seen.append(pattern)
            raise RuntimeError(f"{pattern} must not be called in this exercise")

        return kernel

    @classmethod
    @contextlib.contextmanager
    def window(cls, patterns: list[str], seen: list[str]):
        import warnings

        library = torch.library.Library("aten", "IMPL")  # noqa: TOR901 -- destroyed below
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "overriding a previously registered kernel": on purpose
                for pattern in patterns:
                    for name in cls._operators(pattern):
                        packet = getattr(torch.ops.aten, name, None)
                        for overload in packet.overloads() if packet is not None else []:
                            try:
                                library.impl(name if overload == "default" else f"{name}.{overload}",
                                             cls._kernel(getattr(packet, overload), pattern, seen),
                                             "ADInplaceOrView", with_keyset=True)
                            except Exception:  # noqa: BLE001 -- takes no kernel there: the mode still sees it
                                pass
                            try:  # the backend kernel itself: no mode, guard or thread skips it
                                library.impl(name if overload == "default" else f"{name}.{overload}",
                                             cls._refusal(pattern, seen), "CPU")
                            except Exception:  # noqa: BLE001 -- an operator with no CPU slot
                                pass
            yield
        finally:
            library._destroy()


@contextlib.contextmanager
def _recording_banned(names: Iterable[str], seen: list[str]):
    names = banned_family(names)
    ops = [n for n in names if n.startswith("aten.")]
    functions = {resolve(n): n for n in names if not n.startswith("aten.")}
    with contextlib.ExitStack() as stack:
        if ops:
            stack.enter_context(_GlobalOpBan.window(ops, seen))
        if functions:
            stack.enter_context(_BannedCallRecorder(functions, seen))
        if ops:
            stack.enter_context(_BannedOpRecorder(ops, seen))
        yield


def _tensors(tree: Any, found: list | None = None) -> list[torch.Tensor]:
    """The tensors in an operator's arguments or results: what ``torch.utils._pytree.tree_leaves`` finds
    there (an ATen operator takes and returns tensors, scalars, and tuples, lists and dicts of them), in a
    few isinstance tests instead of pytree's general walk (a third of a metered case's time)."""
    found = [] if found is None else found
    if isinstance(tree, torch.Tensor):
        found.append(tree)
    elif isinstance(tree, (tuple, list)):
        for item in tree:
            _tensors(item, found)
    elif isinstance(tree, dict):
        for item in tree.values():
            _tensors(item, found)
    return found


class MemoryMeter(TorchDispatchMode):
    """Measures the storages that operators write inside it: the largest one (elements, and which
    operator wrote it) and the peak of the elements alive at once in storages made during the call.

    Every storage an operator returns counts, whoever made it, except the case's own inputs (``inputs``:
    their storages at the size they came with): a new tensor, and also a buffer made before the call and
    written into (``matmul(out=buf)``, an in-place op on it) or grown (``resize_``). A view or an in-place
    result of a storage already counted adds nothing, unless the storage grew. A ``weakref.finalize`` on
    each storage takes its elements off the live total when it is freed, so keeping every block's scores
    in a list is seen as well as one big matrix.
    """

    def __init__(self, inputs: Iterable[torch.Tensor] = ()):
        super().__init__()
        self.largest, self.largest_op = 0, ""
        self.live, self.peak_live = 0, 0
        # storage id -> (bytes, elements) counted for it; the inputs' storages by their bytes (a storage seen
        # through another dtype, ``view(torch.uint8)``, is the same memory)
        self._counted: dict[int, tuple[int, int]] = {}
        self._inputs = {id(t.untyped_storage()): t.untyped_storage().nbytes() for t in inputs
                        if t.layout == torch.strided}

    def _free(self, key: int) -> None:
        self.live -= self._counted.pop(key, (0, 0))[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in _tensors(out):
            if t.layout != torch.strided:
                continue
            storage = t.untyped_storage()
            key, nbytes = id(storage), storage.nbytes()
            counted = self._counted.get(key)
            before = counted[0] if counted else self._inputs.get(key)
            if before is not None and nbytes <= before:
                continue  # a view or an in-place result of what is counted (or an input at its size)
            numel = nbytes // max(t.element_size(), 1)
            if numel > self.largest:
                self.largest, self.largest_op = numel, "aten." + func.overloadpacket.__name__
            if counted is None:
                weakref.finalize(storage, self._free, key)
            self.live += numel - (counted[1] if counted else 0)
            self._counted[key] = (nbytes, numel)
            self.peak_live = max(self.peak_live, self.live)
        return out


_WARMED = False


def _warm_dispatch() -> None:
    """The first operator run under any dispatch mode imports torch._dynamo (hundreds of modules); do it
    before measuring, so that no submission is charged for it."""
    global _WARMED
    if not _WARMED:
        with MemoryMeter():
            (torch.zeros(2) + 1).sum()
        _WARMED = True


def _status_bytes(field: str) -> int:
    """A memory figure of this process from /proc/self/status (``VmRSS``, ``VmHWM``), bytes; -1 if unreadable."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return -1


def _reset_peak_rss() -> int:
    """Reset the kernel's peak-resident-memory mark of this process (``/proc/self/clear_refs``: 5) and
    return the resident memory now, bytes; -1 where the process cannot reset it (no such file, or not its
    own: then :func:`judge` fails the case, a bound nobody measured is not met). The mark covers every
    thread and every mapping."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return -1
    return _status_bytes("VmRSS")


class ThreadRefused(RuntimeError):
    """A memory-bounded case started a thread: the per-operator meter sees the calling thread only."""


@contextlib.contextmanager
def _no_new_threads():
    """While a memory-bounded case runs, starting a thread raises :class:`ThreadRefused` (the meter of
    operator outputs sees one thread; no exercise needs more). ``threading`` starts every thread, and
    ``concurrent.futures`` every pool, through its module-level ``_start_new_thread``; patching it back
    from student code needs a name the tamper reading flags."""
    import threading

    names = [n for n in ("_start_new_thread", "_start_joinable_thread") if hasattr(threading, n)]
    saved = {n: getattr(threading, n) for n in names}

    def refuse(*args, **kwargs):
        raise ThreadRefused("a memory-bounded case may not start threads: compute on the calling thread")

    for n in names:
        setattr(threading, n, refuse)
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(threading, n, f)


@contextlib.contextmanager
def _measuring_memory(enabled: bool, outcome: Outcome, inputs: Any = ()):
    """Meter the block when ``enabled``; ``inputs`` are the case's arguments (their tensors are not the call's)."""
    if not enabled:
        yield
        return
    import tracemalloc

    _warm_dispatch()
    rss_base = _reset_peak_rss()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    meter = MemoryMeter(_tensors(inputs))
    try:
        with meter, _no_new_threads():
            yield
    finally:
        outcome.python_peak = max(0, tracemalloc.get_traced_memory()[1] - base)
        if started:
            tracemalloc.stop()
        outcome.largest_numel, outcome.largest_op = meter.largest, meter.largest_op
        outcome.peak_live = meter.peak_live
        if rss_base >= 0:
            peak = _status_bytes("VmHWM")
            outcome.rss_growth = max(0, peak - rss_base) if peak >= 0 else -1


def _inputs_plain(args: tuple, kwargs: dict) -> Any:
    """The inputs as plain data, to see whether a call modified them. Random generators are left out:
    drawing from one is its purpose; dtypes and devices are named."""

    def strip(x: Any) -> Any:
        if isinstance(x, torch.Generator):
            return None
        if isinstance(x, (torch.dtype, torch.device)):
            return str(x)
        if isinstance(x, (tuple, list)):
            return [strip(v) for v in x]
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()}
        return x

    return to_plain([strip(list(args)), strip(kwargs)])


def _case_inputs_plain(case: Case) -> Any:
    """:func:`_inputs_plain` of a case's own inputs, kept on the case: a grading worker judges every
    submission of a chapter against the same cases (a chapter's thousand cases took a tenth of a second
    each time). Made again if ``args`` or ``kwargs`` was replaced; nothing modifies them in place (every call
    gets a copy)."""
    key = (id(case.args), id(case.kwargs))
    kept = case.__dict__.get("_inputs_plain_kept")
    if kept is None or kept[0] != key:
        kept = (key, _inputs_plain(case.args, case.kwargs))
        case.__dict__["_inputs_plain_kept"] = kept
    return kept[1]


def _float_tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    found = []
    for x in [*args, *kwargs.values()]:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            found.append(x)
    return found


def _call(obj: Any, case: Case, args: tuple, kwargs: dict) -> Any:
    fn = _target(obj, case)
    if case.requires_grad and case.grad_output is None:
        _requiring_grad(args, kwargs)
    if case.again is None:
        if case.grad_output is None and case.fresh:
            return _unaliased(_finish(fn(*args, **kwargs)), (args, kwargs))
        if case.grad_output is None:
            return _finish(fn(*args, **kwargs))
        leaves = _requiring_grad(args, kwargs)
        result = _finish(fn(*args, **kwargs))
        _backprop(result, case.grad_output)
        return result, [t.grad for t in leaves]
    args2, kwargs2 = _clone(case.again if case.again else case.args), _clone(case.kwargs)
    if case.grad_output is None:
        first = _finish(fn(*args, **kwargs))
        kept = _clone_result(first)
        _spoil(first)
        return [kept, _finish(fn(*args2, **kwargs2))]
    leaves1 = _requiring_grad(args, kwargs)
    first = _finish(fn(*args, **kwargs))
    leaves2 = _requiring_grad(args2, kwargs2)
    second = _finish(fn(*args2, **kwargs2))  # both applied before either backward pass
    _backprop(first, case.grad_output)
    _backprop(second, case.grad_output)
    return [[first, [t.grad for t in leaves1]], [second, [t.grad for t in leaves2]]]


def _requiring_grad(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    leaves = _float_tensors(args, kwargs)
    for t in leaves:
        t.requires_grad_(True)
    return leaves


def _backprop(result: Any, grad_output: Any) -> None:
    first = result[0] if isinstance(result, (tuple, list)) and result else result
    if type(first) is not torch.Tensor:
        raise TypeError(f"returned {type(first).__name__}, expected a tensor to back-propagate through")
    if first.grad_fn is None:
        raise TypeError("its output is not connected to the inputs by autograd (no grad_fn), "
                        "so no gradient can flow back")
    # The autograd engine directly: Tensor.backward / torch.autograd.backward would be seen by the banned-call
    # recorder as the student's calls (and a TorchFunctionMode is popped while it handles one, so calls made
    # inside the student's own backward would go unrecorded).
    torch.autograd.Variable._execution_engine.run_backward(
        (first,), (_clone(grad_output),), False, False, (), allow_unreachable=True, accumulate_grad=True)


def _clone_result(x: Any, _depth: int = 0) -> Any:
    """A copy of a returned structure's tensors (same layouts), kept before :func:`_spoil` overwrites them;
    anything else is kept as it is (:func:`to_plain` judges it later)."""
    if _depth > 8:
        return x
    if type(x) is torch.Tensor or type(x) is torch.nn.Parameter:
        with torch.no_grad():
            return clone_layout(x)
    if type(x) is tuple or type(x) is list:
        return [_clone_result(v, _depth + 1) for v in x]
    if type(x) is dict:
        return {k: _clone_result(v, _depth + 1) for k, v in x.items()}
    return x


def _unaliased(result: Any, inputs: Any) -> Any:
    """A copy of ``result`` read while every input tensor's storage is overwritten (then restored): where the
    result shares memory with an input, the copy holds the overwritten values."""
    storages: dict[int, Any] = {}
    for t in _tensors(inputs):
        if _TB.layout.__get__(t) == torch.strided and _TB.device.__get__(t).type != "meta":
            storages.setdefault(id(_TB.untyped_storage(t)), t)
    saved = [(t, _TB.untyped_storage(t).clone()) for t in storages.values()]
    try:
        _spoil(list(storages.values()))
        return _clone_result(result)
    finally:
        with torch._C.DisableTorchFunction(), _DISABLE_MODES(), torch.no_grad():
            for t, copy_ in saved:
                _TB.untyped_storage(t).copy_(copy_)


def _spoil(x: Any, _depth: int = 0) -> None:
    """Overwrite, in place, every element of the storage of every tensor in a returned structure (floats with
    NaN, bools negated, integers plus one): what the caller may do with a result it owns. A result kept and
    returned again by a later call is then wrong there."""
    if _depth > 8:
        return
    if type(x) is torch.Tensor or type(x) is torch.nn.Parameter:
        if _TB.layout.__get__(x) != torch.strided or _TB.device.__get__(x).type == "meta":
            return
        with torch._C.DisableTorchFunction(), _DISABLE_MODES(), torch.no_grad():
            t = _TB.detach(x)
            storage = _TB.untyped_storage(t)
            flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(
                storage, 0, (storage.nbytes() // max(t.element_size(), 1),), (1,))
            if flat.is_floating_point() or flat.is_complex():
                flat.fill_(float("nan"))
            elif flat.dtype == torch.bool:
                flat.logical_not_()
            else:
                flat.add_(1)
    elif type(x) is tuple or type(x) is list:
        for v in x:
            _spoil(v, _depth + 1)
    elif type(x) is dict:
        for v in x.values():
            _spoil(v, _depth + 1)


def _target(obj: Any, case: Case) -> Any:
    """What a case calls: ``obj`` (or its ``method``), or a module built from ``obj`` (given the case's
    weights, in eval mode) or its ``method``."""
    if case.init is None:
        return getattr(obj, case.method) if case.method else obj
    module = obj(*_clone(case.init), **_clone(case.init_kwargs))
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"{type(module).__name__} is not a torch.nn.Module")
    if case.state is not None:
        try:
            module.load_state_dict(_clone(case.state), strict=True)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()
            raise TypeError("its parameters do not match the expected names and shapes: "
                            + " ".join(line.strip() for line in first[:3])) from None
    if case.module_dtype is not None:
        dtype = getattr(torch, case.module_dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown module_dtype {case.module_dtype!r}")
        module = module.to(dtype)
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"{type(module).__name__} is not a torch.nn.Module")
    module.eval()
    return getattr(module, case.method) if case.method else module


def _finish(result: Any) -> Any:
    if isinstance(result, types.GeneratorType):  # e.g. method="named_parameters": read it (bounded) into a list
        result = list(itertools.islice(result, MAX_ITEMS + 1))
    return result


def evaluate(obj: Any, cases: list[Case], banned: Iterable[str] = ()) -> list[Outcome]:
    """Run the student's object on a fresh copy of every case and return plain outcomes."""
    outcomes = []
    for case in cases:
        args, kwargs = _clone(case.args), _clone(case.kwargs)
        outcome, seen = Outcome(), []
        try:
            with _recording_banned(banned, seen), _measuring_memory(metered(case), outcome, (args, kwargs)):
                result = _call(obj, case, args, kwargs)
            outcome.output = to_plain(result)
        except BaseException as exc:  # noqa: BLE001 -- the student's error (SystemExit too) is the case's verdict
            outcome.output = None
            outcome.error = f"{_name(type(exc))}: {_message(exc)}"
            outcome.error_types = tuple(_name(cls) for cls in type(exc).__mro__)
        outcome.banned_calls = tuple(seen)
        try:
            outcome.inputs_after = _inputs_plain(args, kwargs)
        except BaseException:  # noqa: BLE001 -- unreadable inputs count as modified
            outcome.inputs_after = None
        outcomes.append(outcome)
    return outcomes


def _name(cls: type) -> str:
    name = type.__dict__["__name__"].__get__(cls)  # not a metaclass's property
    return str.__str__(name)[:200] if isinstance(name, str) else "?"


def _message(exc: BaseException, limit: int = 500) -> str:
    """``str(exc)`` bounded; an exception whose ``__str__`` misbehaves gets a placeholder."""
    try:
        text = str(exc)
        return str.__str__(text)[:limit] if isinstance(text, str) else "(no message)"
    except BaseException:  # noqa: BLE001
        return "(its message could not be read)"


# ---------------------------------------------------------------------------------------------------
# phase 3: judge (grader side)


def _where(label: str, path: str) -> str:
    where = f"case '{label}'" if label else "a case"
    return f"{where}{', ' + path if path else ''}"


def compare(expected: Any, got: Any, atol: float, rtol: float, path: str = "") -> str | None:
    """Return None when ``got`` matches ``expected`` within tolerances, else a short reason."""
    name = path or "the result"
    if isinstance(expected, Array) and (expected.kind == "meta" or (isinstance(got, Array) and got.kind == "meta")):
        if not isinstance(got, Array) or got.kind != expected.kind:
            if expected.kind == "meta":
                got_kind = "one on the CPU" if isinstance(got, Array) and got.kind == "torch" else _kind(got)
                return (f"{name} should be a tensor on the device it was asked for (this case passes "
                        f"device='meta'), got {got_kind}: make it on `device`, not on the default device")
            return f"{name} should be a tensor with values, got a tensor on the meta device"
        if got.value.tolist() != expected.value.tolist():
            return f"{name} has shape {tuple(got.value.tolist())}, expected {tuple(expected.value.tolist())}"
        if got.dtype != expected.dtype:
            return f"{name} has dtype {got.dtype}, expected {expected.dtype}"
        return None
    if _numpy_integer(expected) and type(got) is int:
        value = expected.value[()]  # the reference returned a numpy integer: a Python int of its value is right too
        return None if got == int(value) else f"{name} is {got!r}, expected {int(value)!r}"
    if isinstance(expected, Array):
        if not isinstance(got, Array):
            return f"{name} should be a {'tensor' if expected.kind == 'torch' else 'numpy array'}, got {_kind(got)}"
        if got.kind != expected.kind:
            return f"{name} should be a {'torch tensor' if expected.kind == 'torch' else 'numpy array'}"
        if got.value.shape != expected.value.shape:
            return f"{name} has shape {tuple(got.value.shape)}, expected {tuple(expected.value.shape)}"
        if got.dtype != expected.dtype:
            return f"{name} has dtype {got.dtype}, expected {expected.dtype}"
        e, g = expected.value, got.value
        if e.dtype.kind in "biu":
            if not np.array_equal(e, g):
                bad = np.argwhere(e != g)
                return f"{name} differs at {len(bad)} position(s), first at index {tuple(bad[0].tolist())}"
            return None
        if np.isnan(g).any() and not np.isnan(e).any():
            return f"{name} contains NaN"
        if not np.isfinite(g).all() and np.isfinite(e).all():
            return f"{name} contains inf"
        ok = np.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
        if not ok.all():
            err = np.abs(g.astype(np.float64) - e.astype(np.float64))
            err = np.where(ok, 0.0, np.nan_to_num(err, nan=np.inf))
            idx = np.unravel_index(int(np.argmax(err)), err.shape)
            return (f"{name} is off by up to {float(err[idx]):.3g} (at index {tuple(int(i) for i in idx)}); "
                    f"tolerance atol={atol:g}, rtol={rtol:g}")
        return None
    if isinstance(expected, list):
        if not isinstance(got, list):
            return f"{name} should be a tuple of {len(expected)} values, got {_kind(got)}"
        if len(got) != len(expected):
            return f"{name} should have {len(expected)} values, got {len(got)}"
        for i, (e, g) in enumerate(zip(expected, got)):
            reason = compare(e, g, atol, rtol, f"{path}[{i}]" if path else f"output[{i}]")
            if reason:
                return reason
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"{name} should be a dict with keys {sorted(expected)}"
        for k in expected:
            reason = compare(expected[k], got[k], atol, rtol, f"{path}[{k!r}]")
            if reason:
                return reason
        return None
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        same = type(got) is type(expected) and got == expected
        return None if same else f"{name} is {got!r}, expected {expected!r}"
    if isinstance(expected, int):
        if _numpy_integer(got):
            return (f"{name} is a numpy {got.dtype} ({got.value[()]}), expected a Python int {expected!r}: numpy "
                    "integers wrap around past their range, Python ints do not")
        return None if (type(got) is int and got == expected) else f"{name} is {got!r}, expected {expected!r}"
    if isinstance(expected, float):
        if type(got) not in (int, float) or isinstance(got, bool):
            return f"{name} should be a number, got {_kind(got)}"
        if math.isnan(got) and not math.isnan(expected):
            return f"{name} is NaN"
        if not math.isclose(got, expected, rel_tol=rtol, abs_tol=atol):
            return f"{name} is {got:.6g}, off by {abs(got - expected):.3g}; tolerance atol={atol:g}, rtol={rtol:g}"
        return None
    raise TypeError(f"cannot compare reference value of type {type(expected).__name__}")


def _numpy_integer(x: Any) -> bool:
    """A numpy integer as :func:`to_plain` keeps it: a 0-d numpy array of an integer dtype."""
    return isinstance(x, Array) and x.kind == "numpy" and x.value.ndim == 0 and x.value.dtype.kind in "iu"


def _kind(x: Any) -> str:
    if isinstance(x, Array):
        return {"torch": "a tensor", "meta": "a tensor on the meta device"}.get(x.kind, "a numpy array")
    if isinstance(x, list):
        return f"a tuple of {len(x)} values"
    return f"a {type(x).__name__}"


def _reference_outputs(check: Check, cases: list[Case]) -> list[Any]:
    ref = resolve(check.reference)
    outs = []
    for case in cases:
        outs.append(to_plain(_call(ref, case, _clone(case.args), _clone(case.kwargs))))
    return outs


def reference_outputs(check: Check, cases: list[Case]) -> list[Any] | None:
    """The reference's plain outputs for the returning cases (None for property checks); computed once
    per chapter by the grader and passed to :func:`judge` for every submission."""
    if check.kind not in ("close", "module"):
        return None
    with torch.random.fork_rng(devices=[]):
        return _reference_outputs(check, [c for c in cases if c.raises is None])


def judge(check: Check, cases: list[Case], outcomes: list[Outcome], expected: list[Any] | None = None) -> None:
    """Decide a check from plain outcomes; raise :class:`CheckFailed` with the first problem found.

    ``expected`` are the reference outputs from :func:`reference_outputs` (computed here when None)."""
    if len(outcomes) != len(cases):
        raise CheckFailed(f"{check.describe()}: expected {len(cases)} results, got {len(outcomes)}", kind="count")
    for case, outcome in zip(cases, outcomes):
        if outcome.banned_calls:
            raise CheckFailed(f"`{check.target}` must not call {', '.join(outcome.banned_calls)} "
                              "in this exercise: implement it yourself", case.label, "banned")
        if case.max_numel is not None and outcome.error is None:
            if outcome.largest_numel > case.max_numel:
                raise CheckFailed(f"`{check.target}` created a tensor of {outcome.largest_numel:,} elements "
                                  f"({outcome.largest_op}) on {_where(case.label, '')}; the limit is "
                                  f"{case.max_numel:,}: work in blocks and never build the whole matrix",
                                  case.label, "memory")
            if outcome.python_peak > 8 * case.max_numel + PYTHON_ALLOWANCE:
                raise CheckFailed(f"`{check.target}` allocated {outcome.python_peak:,} bytes outside torch "
                                  f"on {_where(case.label, '')}; the limit is "
                                  f"{8 * case.max_numel + PYTHON_ALLOWANCE:,}: work in blocks", case.label, "memory")
            allowed = 8 * max(case.max_live or 0, 2 * case.max_numel) + (
                KERNEL_RSS_ALLOWANCE if outcome.rss_kernel else RSS_ALLOWANCE)
            if outcome.rss_growth < 0:  # fail closed: a bound nobody could measure is not met
                raise CheckFailed(f"`{check.target}` could not have its memory measured on "
                                  f"{_where(case.label, '')} (no peak-resident-memory reading here), so this "
                                  "memory-bounded case is not passed: the instructor should grade it again on "
                                  "a Linux machine with /proc/self/clear_refs", case.label, "memory")
            if outcome.rss_growth > allowed:
                raise CheckFailed(f"`{check.target}` grew the {'job' if outcome.rss_kernel else 'process'}'s memory "
                                  f"by {outcome.rss_growth:,} bytes "
                                  f"on {_where(case.label, '')}; the limit is {allowed:,} (tensors made on other "
                                  "threads, numpy arrays and mapped memory count too): work in blocks",
                                  case.label, "memory")
        if case.max_live is not None and case.max_numel is not None and outcome.error is None:
            if outcome.peak_live > case.max_live:
                raise CheckFailed(f"`{check.target}` kept {outcome.peak_live:,} elements of new tensors alive at "
                                  f"once on {_where(case.label, '')}; the limit is {case.max_live:,}: free each "
                                  "block's scores before the next one (do not keep them all)", case.label, "memory")
        if case.raises is not None:
            if case.raises not in outcome.error_types:
                got = outcome.error or "it returned normally"
                raise CheckFailed(f"`{check.target}` should raise {case.raises} on {_where(case.label, '')} "
                                  f"({got})", case.label, "raises")
            continue
        if outcome.error is not None:
            raise CheckFailed(f"`{check.target}` raised on {_where(case.label, '')}: {outcome.error}",
                              case.label, "error")
        if compare(_case_inputs_plain(case), outcome.inputs_after, 0.0, 0.0, "input") is not None:
            raise CheckFailed(f"`{check.target}` modified its inputs on {_where(case.label, '')}: "
                              "functions must return new tensors and leave their arguments unchanged",
                              case.label, "inputs")
    returned = [(c, o) for c, o in zip(cases, outcomes) if c.raises is None]
    if check.kind in ("close", "module"):
        if expected is None:
            expected = _reference_outputs(check, [c for c, _ in returned])
        for (case, outcome), exp in zip(returned, expected):
            reason = compare(exp, outcome.output, check.atol, check.rtol)
            if reason:
                raise CheckFailed(f"`{check.target}` is wrong on {_where(case.label, '')}: {reason}",
                                  case.label, "wrong")
    elif check.kind == "property":
        judge_fn = resolve(check.judge)
        try:
            judge_fn([c for c, _ in returned], [from_plain(o.output) for _, o in returned])
        except AssertionError as exc:
            raise CheckFailed(f"`{check.target}`: {exc}", kind="property") from None
        except Exception as exc:  # a malformed output (wrong shape, wrong type) can break a judge
            raise CheckFailed(f"`{check.target}` returned something the check could not use: "
                              f"{type(exc).__name__}: {exc}", kind="property") from None
    else:
        raise ValueError(f"unknown check kind {check.kind!r}")


def failing_cases(check: Check, cases: list[Case], outcomes: list[Outcome],
                  expected: list[Any] | None = None) -> list[tuple[str, str]]:
    """Every case ``check`` fails, as ``(label, kind)``, judged one case at a time: the verdict stops at the
    first problem, the instructor's item analysis wants them all. A property judge that can only judge the
    cases together gives one ``("", "property")``. ``expected`` as for :func:`judge` (needed for a
    ``close`` or ``module`` check: without it nothing is judged again and ``[]`` comes back)."""
    if len(outcomes) != len(cases) or (check.kind in ("close", "module") and expected is None):
        return []
    queue = list(expected or [])
    found = []
    for case, outcome in zip(cases, outcomes):
        mine = [queue.pop(0)] if check.kind in ("close", "module") and case.raises is None and queue else []
        try:
            judge(check, [case], [outcome], mine if check.kind in ("close", "module") else None)
        except CheckFailed as exc:
            found.append((exc.case or case.label, exc.kind))
        except Exception:  # noqa: BLE001,S112 -- a judge that wants every case at once: judged together below
            continue
    if not found and check.kind == "property":
        try:
            judge(check, cases, outcomes, expected)
        except CheckFailed as exc:
            found.append((exc.case, exc.kind))
    return found


# ---------------------------------------------------------------------------------------------------
# in-kernel entry points


def run_local(check: Check, obj: Any) -> None:
    """Run all three phases in this process (plain kernel, source notebook, tests).

    The notebook's global random stream is left as it was: seeding reference modules and building
    modules must not change what later cells draw.
    """
    with torch.random.fork_rng(devices=[]):
        cases = prepare(check)
        outcomes = evaluate(obj, cases, check.banned)
        judge(check, cases, outcomes)


def _lookup(target: str, namespace: dict) -> Any:
    if target not in namespace:
        raise CheckFailed(f"`{target}` is not defined: run the cell that defines it")
    return namespace[target]


def _make(kind: str, target: str, cases: str, reference: str | None, judge_path: str | None,
          seed: int, atol: float, rtol: float, banned: Iterable[str], params: dict) -> Check:
    return Check(kind=kind, target=target, cases=cases, reference=reference, judge=judge_path,
                 seed=int(seed), atol=float(atol), rtol=float(rtol), banned=tuple(banned),
                 params=tuple(sorted(params.items())))


def check_close(target: str, reference: str, cases: str, *, seed: int = 0, atol: float = 1e-5,
                rtol: float = 1e-5, banned: Iterable[str] = (), **params: Any) -> None:
    """The student's function equals the reference on every generated case, within tolerances."""
    check = _make("close", target, cases, reference, None, seed, atol, rtol, banned, params)
    run_local(check, _lookup(target, sys._getframe(1).f_globals))


def check_module(target: str, reference: str, cases: str, *, seed: int = 0, atol: float = 1e-5,
                 rtol: float = 1e-5, banned: Iterable[str] = (), **params: Any) -> None:
    """The student's ``nn.Module`` class, given the reference module's weights, computes the same."""
    check = _make("module", target, cases, reference, None, seed, atol, rtol, banned, params)
    run_local(check, _lookup(target, sys._getframe(1).f_globals))


def check_property(target: str, judge: str, cases: str, *, seed: int = 0,
                   banned: Iterable[str] = (), **params: Any) -> None:
    """The student's outputs on the generated cases satisfy a property decided by ``judge``."""
    check = _make("property", target, cases, None, judge, seed, 0.0, 0.0, banned, params)
    run_local(check, _lookup(target, sys._getframe(1).f_globals))


CHECK_FUNCTIONS: dict[str, Callable[..., None]] = {
    "check_close": check_close,
    "check_module": check_module,
    "check_property": check_property,
}

_KIND = {"check_close": "close", "check_module": "module", "check_property": "property"}


# ---------------------------------------------------------------------------------------------------
# static reading


def parse_checks(source: str) -> list[Check]:
    """Read the checks of a hidden-test block without running it.

    The block may contain only ``from grader.checks import ...`` and calls of ``check_*`` whose
    arguments are literals; anything else raises :class:`NotDeclarative`.
    """
    tree = ast.parse(source)
    checks = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "grader.checks":
            if any(alias.name not in CHECK_FUNCTIONS or alias.asname for alias in node.names):
                raise NotDeclarative(f"line {node.lineno}: only check functions may be imported")
            continue
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id in CHECK_FUNCTIONS):
            raise NotDeclarative(f"line {node.lineno}: a hidden test may only call check functions")
        call = node.value
        try:
            args = [ast.literal_eval(a) for a in call.args]
            kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
        except ValueError:
            raise NotDeclarative(f"line {node.lineno}: check arguments must be literals") from None
        if any(kw.arg is None for kw in call.keywords):
            raise NotDeclarative(f"line {node.lineno}: **kwargs are not allowed in a check")
        fname = call.func.id
        names = {"check_close": ["target", "reference", "cases"],
                 "check_module": ["target", "reference", "cases"],
                 "check_property": ["target", "judge", "cases"]}[fname]
        if len(args) > len(names):
            raise NotDeclarative(f"line {node.lineno}: too many positional arguments")
        kwargs.update(dict(zip(names, args)))
        missing = [n for n in names if n not in kwargs]
        if missing:
            raise NotDeclarative(f"line {node.lineno}: missing {', '.join(missing)}")
        known = {"target", "reference", "judge", "cases", "seed", "atol", "rtol", "banned"}
        params = {k: v for k, v in kwargs.items() if k not in known}
        checks.append(_make(_KIND[fname], kwargs["target"], kwargs["cases"], kwargs.get("reference"),
                            kwargs.get("judge"), kwargs.get("seed", 0), kwargs.get("atol", 1e-5),
                            kwargs.get("rtol", 1e-5), kwargs.get("banned", ()), params))
    return checks
