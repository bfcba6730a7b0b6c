"""Plain data across the sandbox boundary: JSON plus ``.npy`` arrays, never pickle.

The grader sends a sandbox the inputs of every check (tensors, numbers, dtypes, random generators) as a
folder (``data.json`` plus ``n.npy`` files, written and read only by trusted processes), and gets back what
the student's functions returned as a *stream of frames* over a pipe: the sandbox never writes a file the
grader reads. Both use one encoding: a JSON document in which an array is a reference ``{"$array": n,
...}`` to the ``n``-th ``.npy`` blob, written and read with ``allow_pickle=False``.

A frame is a 4-byte big-endian length, a JSON header (``{"t": "cell" | "done" | "crash", ...,
"blobs": [sizes]}``), the blobs it lists, and a *seal*: HMAC-SHA256, under a key drawn for the job by the
grader, of the frame's number in the stream and its bytes (:class:`Sealer`). The key reaches the notebook's
process only in the memory of the grader's own code there (never a file, a variable of the notebook or
the environment), so code in a notebook that writes to the pipe -- a ``dup`` of descriptor 3, the pipe
pointed elsewhere and relayed -- cannot make a frame the reader accepts, nor edit, reorder or repeat
genuine ones (holding them back only loses their points): the first frame whose seal does not match ends
the reading, and what came before counts. The zygote copies the pipe into a file only it can write,
stopping at :data:`MAX_STREAM_BYTES`; :func:`read_stream` validates everything against limits (frame and
blob sizes, number of arrays, elements, nesting, dtypes, integer sizes), because the bytes were produced by
a process that ran student code: a malformed or oversized answer becomes an error for that cell, never an
object the grader trusts. The bounds agree from end to end: :func:`grader.checks.to_plain` refuses an
array over ``checks.MAX_ELEMENTS`` (at most :data:`MAX_CASE_BYTES` as float64), the harness refuses a
case's outcome over :data:`MAX_CASE_BYTES` and a cell's over :data:`MAX_CELL_BYTES` (the case becomes an
error outcome, the rest of the cell still counts), and the reader accepts a frame up to
:data:`MAX_CELL_BYTES` plus its JSON header.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import io
import json
import math
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..checks import MAX_ELEMENTS, MAX_INT_BITS, Array, Case, Outcome, metered, storage_extent, stub

MAX_JSON_BYTES = 8 * 1024 * 1024  # one JSON document (the cases' data.json, a frame's header)
MAX_ARRAYS = 4096  # arrays in one document
MAX_TOTAL_ELEMENTS = 64_000_000  # elements in one document
MAX_DEPTH = 12
MAX_CASE_BYTES = 24 * 1024 * 1024  # one case's outcome, arrays included (the harness refuses more)
MAX_CELL_BYTES = 64 * 1024 * 1024  # one test cell's frame, arrays included
MAX_STREAM_BYTES = 128 * 1024 * 1024  # everything one notebook sends back (the zygote stops there)
MAX_OUTPUT_CHARS = 1_000_000  # printed output of one notebook, all cells together (the harness keeps no more,
#                               and the autograded notebook shows no more, whatever the harness sent)
NUMERIC_KINDS = "biufc"
FRAME_HEADER = struct.Struct(">I")
_NPY_VERSIONS = ((1, 0), (2, 0), (3, 0))  # the .npy format versions numpy reads

assert 8 * MAX_ELEMENTS <= MAX_CASE_BYTES <= MAX_CELL_BYTES <= MAX_STREAM_BYTES

_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)}


#: Every dtype torch names, for ``torch.dtype`` arguments (chapter 8's counts take float8, complex, bool, ...);
#: tensors themselves travel only in :data:`_DTYPES`.
_ALL_DTYPES = {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}


class WireError(ValueError):
    """Data read back from a sandbox is malformed or over a limit."""


def _npy(value: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(value).reshape(value.shape), allow_pickle=False)  # keeps 0-d
    return buf.getvalue()


class Writer:
    """Encodes plain data into a JSON document and a list of ``.npy`` blobs."""

    def __init__(self):
        self.blobs: list[bytes] = []

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.blobs)

    def array(self, value: np.ndarray) -> int:
        self.blobs.append(_npy(value))
        return len(self.blobs) - 1

    def encode(self, x: Any) -> Any:
        if isinstance(x, Array):
            return {"$array": self.array(x.value), "kind": x.kind, "dtype": x.dtype}
        if (type(x) is torch.Tensor or type(x) is torch.nn.Parameter) and x.device.type == "meta":
            return {"$meta": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}  # no values to send
        if type(x) is torch.Tensor or type(x) is torch.nn.Parameter:
            t = x.detach().cpu()
            dtype = str(t.dtype).removeprefix("torch.")
            layout = None
            if not t.is_contiguous():  # the storage it spans, and how the view reads it
                layout = {"size": list(t.shape), "stride": list(t.stride())}
                t = torch.as_strided(t, (storage_extent(t),), (1,), t.storage_offset())
            value = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
            doc = {"$tensor": self.array(value), "dtype": dtype}
            if layout is not None:
                doc["layout"] = layout
            return doc
        if type(x) is np.ndarray:
            return {"$ndarray": self.array(x)}
        if isinstance(x, torch.dtype):
            return {"$dtype": str(x).removeprefix("torch.")}
        if isinstance(x, torch.device):
            return {"$device": str(x)}
        if isinstance(x, torch.Generator):
            return {"$generator": self.array(x.get_state().numpy())}
        if isinstance(x, (np.integer, np.floating, np.bool_)):  # before float: np.float64 is a float too
            return {"$npscalar": self.array(np.asarray(x))}  # kept a numpy scalar of its dtype, not a Python number
        if isinstance(x, float):
            return x if math.isfinite(x) else {"$float": repr(x)}
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, tuple):
            return {"$tuple": [self.encode(v) for v in x]}
        if isinstance(x, list):
            return [self.encode(v) for v in x]
        if isinstance(x, dict):
            if not all(isinstance(k, str) for k in x):
                raise TypeError("dict keys must be strings")
            return {"$dict": {k: self.encode(v) for k, v in x.items()}}
        if isinstance(x, (Case, Outcome)):
            return {"$" + type(x).__name__: {f.name: self.encode(getattr(x, f.name))
                                             for f in dataclasses.fields(x)}}
        raise TypeError(f"cannot send a {type(x).__name__} across the sandbox boundary")


def write(folder: Path, obj: Any) -> None:
    """Write ``obj`` as ``folder/data.json`` plus ``n.npy`` arrays (grader to sandbox: the cases)."""
    folder.mkdir(parents=True, exist_ok=True)
    writer = Writer()
    doc = writer.encode(obj)
    for n, blob in enumerate(writer.blobs):
        (folder / f"{n}.npy").write_bytes(blob)
    (folder / "data.json").write_bytes(json.dumps(doc, allow_nan=False).encode())


def _strided(flat: torch.Tensor, layout: Any) -> torch.Tensor:
    """The view ``layout`` (sizes and strides) describes over the 1-D storage ``flat``, checked to stay inside it."""
    if not isinstance(layout, dict) or set(layout) != {"size", "stride"}:
        raise WireError("bad tensor layout")
    size, stride = layout["size"], layout["stride"]
    if (not isinstance(size, list) or not isinstance(stride, list) or len(size) != len(stride) or len(size) > 16
            or not all(type(v) is int and 0 <= v < 2**40 for v in size + stride)):
        raise WireError("bad tensor layout")
    n = 1
    for v in size:
        n *= v
    span = 1 + sum((a - 1) * b for a, b in zip(size, stride)) if n else 0
    if flat.dim() != 1 or n > MAX_TOTAL_ELEMENTS or span > len(flat):
        raise WireError("a tensor layout that reads outside its storage")
    return torch.empty(0, dtype=flat.dtype).set_(flat.untyped_storage(), 0, size, stride)


def _int(x: int) -> int:
    if x.bit_length() > MAX_INT_BITS:
        raise WireError(f"an integer of {x.bit_length()} bits (limit {MAX_INT_BITS})")
    return x


class _Reader:
    """Decodes a document; ``blob(n)`` returns the bytes of array ``n``."""

    def __init__(self, blob):
        self.blob, self.elements, self.loaded = blob, 0, set()

    def array(self, ref: Any) -> np.ndarray:
        if type(ref) is not int or not 0 <= ref < MAX_ARRAYS or ref in self.loaded:
            raise WireError(f"bad array reference {ref!r}")
        self.loaded.add(ref)
        data = self.blob(ref)
        if data is None:
            raise WireError(f"array {ref} is missing")
        fh = io.BytesIO(data)
        try:
            version = np.lib.format.read_magic(fh)
            # the header only, so that the bounds are checked before any data is read
            header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                      else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = header(fh)
        except (ValueError, TypeError, SyntaxError) as exc:
            raise WireError(f"array {ref} has a bad header ({str(exc)[:200]})") from None
        if dtype.kind not in NUMERIC_KINDS or dtype.hasobject or dtype.fields is not None or dtype.subdtype:
            raise WireError(f"array {ref} has dtype {dtype}")
        if version not in _NPY_VERSIONS or any(d < 0 for d in shape):
            raise WireError(f"array {ref} has a bad header (version {version}, shape {str(shape)[:100]})")
        n = math.prod(shape)
        self.elements += n
        if self.elements > MAX_TOTAL_ELEMENTS:
            raise WireError("the results hold too many numbers")
        if len(data) - fh.tell() < n * dtype.itemsize:
            raise WireError(f"array {ref} is truncated")
        # the data straight after the header just parsed, as np.load would read it (a fresh, writable,
        # aligned array; a Fortran-ordered one transposed back), without parsing the header a second time
        try:
            flat = np.frombuffer(data, dtype=dtype, count=n, offset=fh.tell()).copy()
            return flat.reshape(shape[::-1]).transpose() if fortran else flat.reshape(shape)
        except (ValueError, TypeError, MemoryError) as exc:
            raise WireError(f"array {ref} cannot be read ({str(exc)[:200]})") from None

    def decode(self, x: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise WireError("results nested too deeply")
        if x is None or isinstance(x, (bool, float, str)):
            return x
        if isinstance(x, int):
            return _int(x)
        if isinstance(x, list):
            return [self.decode(v, depth + 1) for v in x]
        if not isinstance(x, dict) or len(x) == 0:
            raise WireError(f"unexpected value {str(x)[:80]}")
        key = next(iter(x))
        if key == "$array":
            kind, dtype = x.get("kind"), x.get("dtype")
            if kind not in ("torch", "numpy", "meta") or not isinstance(dtype, str) or len(dtype) > 32:
                raise WireError("bad array description")
            value = self.array(x["$array"])
            if kind == "meta" and (value.ndim != 1 or value.dtype != np.int64 or len(value) > 16):
                raise WireError("bad meta tensor description")
            return Array(kind, dtype, value)
        if key == "$tensor":
            dtype = _DTYPES.get(x.get("dtype")) if isinstance(x.get("dtype"), str) else None
            if dtype is None:
                raise WireError(f"unknown tensor dtype {str(x.get('dtype'))[:40]!r}")
            t = torch.from_numpy(self.array(x["$tensor"]).copy()).to(dtype)
            if "layout" in x:
                t = _strided(t, x["layout"])
            return t
        if key == "$meta":
            dtype = _DTYPES.get(x.get("dtype")) if isinstance(x.get("dtype"), str) else None
            size = x["$meta"]
            if (dtype is None or not isinstance(size, list) or len(size) > 16
                    or not all(type(v) is int and 0 <= v < 2**40 for v in size)):
                raise WireError("bad meta tensor")
            return torch.empty(size, dtype=dtype, device="meta")
        if key == "$ndarray":
            return self.array(x["$ndarray"]).copy()
        if key == "$npscalar":
            value = self.array(x["$npscalar"])
            if value.ndim != 0 or value.dtype.kind not in "biuf":
                raise WireError("bad numpy scalar")
            return value[()]
        if key == "$dtype":
            if not isinstance(x["$dtype"], str) or x["$dtype"] not in _ALL_DTYPES:
                raise WireError(f"unknown dtype {str(x['$dtype'])[:40]!r}")
            return _ALL_DTYPES[x["$dtype"]]
        if key == "$device":
            if not isinstance(x["$device"], str) or not re.fullmatch(r"(cpu|meta|cuda(:\d{1,2})?)", x["$device"]):
                raise WireError(f"bad device {str(x['$device'])[:40]!r}")
            return torch.device(x["$device"])
        if key == "$generator":
            g = torch.Generator()
            g.set_state(torch.from_numpy(self.array(x["$generator"]).astype(np.uint8)))
            return g
        if key == "$float":
            if x["$float"] not in ("nan", "inf", "-inf"):
                raise WireError("bad float")
            return float(x["$float"])
        if key == "$tuple":
            return tuple(self.decode(v, depth + 1) for v in _list(x["$tuple"]))
        if key == "$dict":
            inner = x["$dict"]
            if not isinstance(inner, dict):
                raise WireError("bad dict")
            return {str(k): self.decode(v, depth + 1) for k, v in inner.items()}
        known = _RECORDS.get(key)
        if known is not None:
            cls, names = known
            fields = x[key]
            if not isinstance(fields, dict) or not names.issuperset(fields):
                raise WireError(f"bad {cls.__name__}")
            return cls(**{k: self.decode(v, depth + 1) for k, v in fields.items()})
        raise WireError(f"unknown tag {key[:40]!r}")


#: The dataclasses a document may hold, by tag, with their field names (looked up once, not per record)
_RECORDS = {"$" + cls.__name__: (cls, frozenset(f.name for f in dataclasses.fields(cls))) for cls in (Case, Outcome)}


def _list(x: Any) -> list:
    if not isinstance(x, list):
        raise WireError("expected a list")
    return x


def _loads(data: bytes) -> Any:
    if len(data) > MAX_JSON_BYTES:
        raise WireError("the results document is too large")
    try:
        return json.loads(data.decode("utf-8"), parse_constant=lambda c: (_ for _ in ()).throw(WireError(c)))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, ValueError) as exc:
        if isinstance(exc, WireError):
            raise
        raise WireError(f"the results document is not valid JSON ({str(exc)[:200]})") from None


def decode(doc: Any, blobs: list[bytes]) -> Any:
    """Decode a document whose arrays are ``blobs`` (validating it); raises :class:`WireError`."""
    return _Reader(lambda n: blobs[n] if n < len(blobs) else None).decode(doc)


def read(folder: Path) -> Any:
    """Read what :func:`write` wrote (the grader's own cases), validating it; raises :class:`WireError`."""
    path = folder / "data.json"
    if not path.is_file() or path.is_symlink():
        raise WireError("no results were written")
    if path.stat().st_size > MAX_JSON_BYTES:
        raise WireError("the results file is too large")
    doc = _loads(path.read_bytes())

    def blob(n: int) -> bytes | None:
        p = folder / f"{n}.npy"
        return p.read_bytes() if p.is_file() and not p.is_symlink() else None

    return _Reader(blob).decode(doc)


def decode_files(files: dict[str, bytes]) -> Any:
    """Decode what :func:`write` wrote, given as ``{file name: bytes}`` (the files the zygote hands a
    sandbox by descriptor), validating it; raises :class:`WireError`."""
    if "data.json" not in files:
        raise WireError("no data.json")
    return _Reader(lambda n: files.get(f"{n}.npy")).decode(_loads(files["data.json"]))

#: A check's folder of cases holds its metered cases (:func:`grader.checks.metered`) as stubs; each one's
#: whole case, inputs included, is in ``METERED/<i>/``, which the sandbox's notebook process never reads:
#: the zygote hands it the files' descriptors only when the case's measured window is open.
METERED = "metered"


def write_cases(folder: Path, cases: list[Case]) -> None:
    """Write a check's cases (grader side): the list with every metered case as its stub, and each metered
    case whole in a folder of its own."""
    write(folder, [stub(c) if metered(c) else c for c in cases])
    for i, case in enumerate(cases):
        if metered(case):
            write(folder / METERED / str(i), case)


def read_cases(folder: Path) -> list[Case]:
    """Read what :func:`write_cases` wrote, whole (the grader's copy: the judge needs every input)."""
    cases = read(folder)
    if not isinstance(cases, list) or not all(isinstance(c, Case) for c in cases):
        raise WireError("a case folder does not hold a list of cases")
    return [read(folder / METERED / str(i)) if metered(c) else c for i, c in enumerate(cases)]

# ---------------------------------------------------------------------------------------------------
# the results stream (sandbox to grader)


SEAL_BYTES = 32  # HMAC-SHA256
KEY_BYTES = 32


def _seal(key: bytes, number: int, data: bytes) -> bytes:
    return hmac.new(key, struct.pack(">Q", number) + data, hashlib.sha256).digest()


class Sealer:
    """Seals the frames of one job's stream in the order they are sent (see the module's docstring)."""

    __slots__ = ("_key", "_sent")

    def __init__(self, key: bytes):
        self._key, self._sent = bytes(key), 0

    def seal(self, data: bytes) -> bytes:
        tag = _seal(self._key, self._sent, data)
        self._sent += 1
        return data + tag

    def seal_case(self, ids: tuple[int, int, int], data: bytes) -> bytes:
        """Seal a metered case's outcome (the meter's channel): bound to the case, not to a place in the stream."""
        return data + _seal_case(self._key, ids, data)


def _seal_case(key: bytes, ids: tuple[int, int, int], data: bytes) -> bytes:
    # a prefix no stream frame's number can take (the stream's are 8-byte counters starting at 0)
    return hmac.new(key, b"metered\0" + CASE_IDS.pack(*ids) + data, hashlib.sha256).digest()


CASE_IDS = struct.Struct(">III")  # a metered case: (planned cell, check in the cell, case in the check)
METER_FILE = "meter.stream"  # beside results.stream: the metered cases, written by the zygote


def frame(header: dict, blobs: list[bytes] = ()) -> bytes:
    """One frame: length, JSON header (with the blobs' sizes), blobs."""
    header = {**header, "blobs": [len(b) for b in blobs]}
    data = json.dumps(header, allow_nan=False).encode()
    return FRAME_HEADER.pack(len(data)) + data + b"".join(blobs)


@dataclass
class CellResult:
    """What the sandbox sent for one planned cell (all of it student-controlled, validated for shape)."""

    ok: bool
    output: str
    error: str
    outcomes: Any = None  # the undecoded document of a test cell's outcomes (None: none sent)
    blobs: list[bytes] = field(default_factory=list)

    def decoded(self) -> Any:
        if self.outcomes is None:
            raise WireError("no results were sent for this test")
        return decode(self.outcomes, self.blobs)


@dataclass
class Metered:
    """A metered case as the zygote recorded it: the outcome the notebook's process sent when it ended the
    case's window (untrusted, judged like any other) and the window's peak memory, read by the zygote from
    the kernel (trusted); ``peak`` is -1 where the window could not be measured, and ``kernel`` False where
    no cgroup was available (the notebook's own reading is then all there is)."""

    outcome: Outcome
    peak: int
    kernel: bool


@dataclass
class Results:
    cells: dict[int, CellResult] = field(default_factory=dict)
    done: bool = False
    metered: dict[tuple[int, int, int], Metered] = field(default_factory=dict)
    problem: str = ""  # why reading stopped early ("" when the stream was read to its end)
    crash: str = ""  # the harness's own failure, as it reported it


def _text(x: Any, limit: int) -> str:
    return x[:limit] if isinstance(x, str) else ""


def _read_frame(fh: io.BufferedIOBase) -> tuple[bytes, dict, list[bytes]] | None:
    """The next frame of ``fh`` (its bytes, its header, its blobs), validated against the limits; None at the
    end; raises :class:`WireError` on a malformed, cut or oversized frame."""
    head = fh.read(FRAME_HEADER.size)
    if not head:
        return None
    if len(head) < FRAME_HEADER.size:
        raise WireError("a frame is cut short")
    (size,) = FRAME_HEADER.unpack(head)
    if size > MAX_JSON_BYTES:
        raise WireError("a frame's header is too large")
    data = fh.read(size)
    header = _loads(data)
    if not isinstance(header, dict):
        raise WireError("a frame's header is not an object")
    sizes = header.get("blobs", [])
    if (not isinstance(sizes, list) or len(sizes) > MAX_ARRAYS
            or not all(type(s) is int and s >= 0 for s in sizes) or sum(sizes) > MAX_CELL_BYTES):
        raise WireError("a frame's arrays are malformed or over the limit")
    blobs = [fh.read(s) for s in sizes]
    if any(len(b) != s for b, s in zip(blobs, sizes)):
        raise WireError("a frame is cut short")
    return head + data + b"".join(blobs), header, blobs


def read_stream(path: Path, n_cells: int, key: bytes) -> Results:
    """Read the results stream the zygote saved at ``path`` (a file only trusted processes wrote), sealed
    under ``key``.

    Frames are read in order until the end, a malformed frame, one over a limit, or one whose seal does
    not match (a frame the grader's code did not send, or not in its place); what was read before counts.
    A cell index outside the plan, a second frame for the same cell, or any frame after ``done`` ends the
    reading."""
    results = Results(metered=read_meter(path.with_name(METER_FILE), key))
    number = 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        results.problem = "no results were sent"
        return results
    with os.fdopen(fd, "rb") as fh:
        while True:
            try:
                got = _read_frame(fh)
                if got is None:
                    return results
                raw, header, blobs = got
                tag = fh.read(SEAL_BYTES)
                if not hmac.compare_digest(tag, _seal(key, number, raw)):
                    raise WireError(f"frame {number} was not sent by the grader's code (its seal does not match)")
                number += 1
                if results.done:  # someone wrote on after the grader's code said it was done
                    results.done = False
                    raise WireError("a frame after the end")
                kind = header.get("t")
                if kind == "done":
                    results.done = True
                elif kind == "crash":
                    results.crash = _text(header.get("error"), 8000)
                elif kind == "cell":
                    index = header.get("index")
                    if type(index) is not int or not 0 <= index < n_cells:
                        raise WireError(f"a frame for a cell that is not in the plan ({str(index)[:20]})")
                    if index in results.cells:
                        raise WireError(f"a second frame for cell {index}")
                    results.cells[index] = CellResult(header.get("ok") is True, _text(header.get("output"), 20_000),
                                                      _text(header.get("error"), 2000), header.get("outcomes"),
                                                      blobs)
                else:
                    raise WireError("a frame of unknown type")
            except WireError as exc:
                results.problem = f"the results stream is malformed ({exc})"
                return results


#: After a record's CASE_IDS: the window's peak, whether the kernel measured it, the payload's size.
METER_RECORD = struct.Struct(">qBI")


def read_meter(path: Path, key: bytes) -> dict[tuple[int, int, int], Metered]:
    """The metered cases the zygote recorded at ``path`` (a file only it wrote: ``CASE_IDS`` +
    :data:`METER_RECORD` + the payload, per case). A payload is a frame whose header holds one outcome,
    sealed for its case (:meth:`Sealer.seal_case`); one whose seal does not match, or that does not read
    as an outcome, is left out: that case then counts as not measured."""
    found: dict[tuple[int, int, int], Metered] = {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return found
    with os.fdopen(fd, "rb") as fh:
        while True:
            head = fh.read(CASE_IDS.size + METER_RECORD.size)
            if len(head) < CASE_IDS.size + METER_RECORD.size:
                return found
            ids = CASE_IDS.unpack(head[:CASE_IDS.size])
            peak, kernel, size = METER_RECORD.unpack(head[CASE_IDS.size:])
            payload = fh.read(size)
            if len(payload) != size or size < SEAL_BYTES:
                return found
            data, tag = payload[:-SEAL_BYTES], payload[-SEAL_BYTES:]
            if not hmac.compare_digest(tag, _seal_case(key, ids, data)):
                continue
            try:
                stream = io.BytesIO(data)
                got = _read_frame(stream)
                if got is None or stream.read(1):
                    raise WireError("not one frame")
                _, header, blobs = got
                outcome = outcome_from_wire(decode(header.get("outcome"), blobs))
            except (WireError, ValueError, TypeError, struct.error):
                continue
            found[ids] = Metered(outcome, peak, bool(kernel))

def outcome_from_wire(x: Any) -> Outcome:
    """Validate a decoded outcome's field types (the sandbox could have written anything)."""
    if not isinstance(x, Outcome):
        raise WireError("expected an outcome")
    if x.error is not None and not isinstance(x.error, str):
        raise WireError("bad error field")
    x.error_types = tuple(str(v)[:200] for v in _seq(x.error_types))
    x.banned_calls = tuple(str(v)[:200] for v in _seq(x.banned_calls))
    for name in ("largest_numel", "python_peak", "peak_live", "rss_growth"):
        if type(getattr(x, name)) is not int:
            raise WireError(f"bad {name}")
    if not isinstance(x.largest_op, str):
        raise WireError("bad largest_op")
    x.rss_kernel = False  # only the grader says so, from the meter's record
    return x


def _seq(v: Any) -> list:
    if isinstance(v, (list, tuple)) and len(v) <= 1000:
        return list(v)
    raise WireError("expected a sequence")
