"""Plain data across the sandbox boundary: JSON plus ``.npy`` arrays, never pickle.

The grader sends a sandbox the inputs of every check (tensors, numbers, dtypes, random generators) and
reads back what the student's functions returned. Both directions use one format: a JSON document in
which an array is a reference ``{"$array": n, ...}`` to ``n.npy`` beside it, written and read with
``allow_pickle=False``. Reading validates everything against limits (file sizes, number of arrays,
elements, nesting, dtypes), because the files coming back were written by a process that ran student
code; a malformed or oversized answer becomes an error, never an object the grader trusts.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..checks import Array, Case, Outcome

MAX_JSON_BYTES = 8 * 1024 * 1024
MAX_ARRAYS = 4096
MAX_TOTAL_ELEMENTS = 64_000_000
MAX_DEPTH = 12
NUMERIC_KINDS = "biufc"

_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)}


class WireError(ValueError):
    """Data read back from a sandbox is malformed or over a limit."""


def _open_at(dir_fd: int, name: str):
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600, dir_fd=dir_fd)
    return os.fdopen(fd, "wb")


class _Writer:
    """Writes into a directory given as a file descriptor (inside a sandbox, the results folder's path
    may not be visible at all: the descriptor was opened before the sandbox closed)."""

    def __init__(self, dir_fd: int):
        self.dir_fd, self.count = dir_fd, 0

    def array(self, value: np.ndarray) -> int:
        n = self.count
        self.count += 1
        with _open_at(self.dir_fd, f"{n}.npy") as fh:
            np.save(fh, np.ascontiguousarray(value).reshape(value.shape), allow_pickle=False)  # keeps 0-d
        return n

    def encode(self, x: Any) -> Any:
        if isinstance(x, Array):
            return {"$array": self.array(x.value), "kind": x.kind, "dtype": x.dtype}
        if type(x) is torch.Tensor or type(x) is torch.nn.Parameter:
            t = x.detach().cpu()
            dtype = str(t.dtype).removeprefix("torch.")
            value = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
            return {"$tensor": self.array(value), "dtype": dtype}
        if type(x) is np.ndarray:
            return {"$ndarray": self.array(x)}
        if isinstance(x, torch.dtype):
            return {"$dtype": str(x).removeprefix("torch.")}
        if isinstance(x, torch.Generator):
            return {"$generator": self.array(x.get_state().numpy())}
        if isinstance(x, float):
            return x if math.isfinite(x) else {"$float": repr(x)}
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, (np.integer, np.floating, np.bool_)):
            return self.encode(x.item())
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


def write_at(dir_fd: int, obj: Any) -> None:
    """Write ``obj`` as ``data.json`` plus arrays into the directory open as ``dir_fd``."""
    doc = _Writer(dir_fd).encode(obj)
    with _open_at(dir_fd, "data.json") as fh:
        fh.write(json.dumps(doc, allow_nan=False).encode())


def write(folder: Path, obj: Any) -> None:
    """Write ``obj`` as ``folder/data.json`` plus arrays."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_at(fd, obj)
    finally:
        os.close(fd)


class _Reader:
    def __init__(self, folder: Path):
        self.folder, self.elements, self.loaded = folder, 0, set()

    def array(self, ref: Any) -> np.ndarray:
        if type(ref) is not int or not 0 <= ref < MAX_ARRAYS or ref in self.loaded:
            raise WireError(f"bad array reference {ref!r}")
        self.loaded.add(ref)
        path = self.folder / f"{ref}.npy"
        if not path.is_file() or path.is_symlink():
            raise WireError(f"array {ref} is missing")
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            try:  # the header only, so that the bounds are checked before any data is read
                header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                          else np.lib.format.read_array_header_2_0)
                shape, _, dtype = header(fh)
            except ValueError as exc:
                raise WireError(f"array {ref} has a bad header ({exc})") from None
            if dtype.kind not in NUMERIC_KINDS or dtype.hasobject:
                raise WireError(f"array {ref} has dtype {dtype}")
            n = math.prod(shape)
            self.elements += n
            if self.elements > MAX_TOTAL_ELEMENTS:
                raise WireError("the results hold too many numbers")
            expected = n * dtype.itemsize
            fh.seek(0, 2)
            if fh.tell() - expected < 0:
                raise WireError(f"array {ref} is truncated")
        return np.load(path, allow_pickle=False)

    def decode(self, x: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise WireError("results nested too deeply")
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, list):
            return [self.decode(v, depth + 1) for v in x]
        if not isinstance(x, dict) or len(x) == 0:
            raise WireError(f"unexpected value {str(x)[:80]}")
        key = next(iter(x))
        if key == "$array":
            kind, dtype = x.get("kind"), x.get("dtype")
            if kind not in ("torch", "numpy") or not isinstance(dtype, str) or len(dtype) > 32:
                raise WireError("bad array description")
            return Array(kind, dtype, self.array(x["$array"]))
        if key == "$tensor":
            dtype = _DTYPES.get(x.get("dtype"))
            if dtype is None:
                raise WireError(f"unknown tensor dtype {x.get('dtype')!r}")
            return torch.from_numpy(self.array(x["$tensor"]).copy()).to(dtype)
        if key == "$ndarray":
            return self.array(x["$ndarray"]).copy()
        if key == "$dtype":
            if x["$dtype"] not in _DTYPES:
                raise WireError(f"unknown dtype {x['$dtype']!r}")
            return _DTYPES[x["$dtype"]]
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
        for cls in (Case, Outcome):
            if key == "$" + cls.__name__:
                fields = x[key]
                names = {f.name for f in dataclasses.fields(cls)}
                if not isinstance(fields, dict) or not set(fields) <= names:
                    raise WireError(f"bad {cls.__name__}")
                values = {k: self.decode(v, depth + 1) for k, v in fields.items()}
                return cls(**values)
        raise WireError(f"unknown tag {key[:40]!r}")


def _list(x: Any) -> list:
    if not isinstance(x, list):
        raise WireError("expected a list")
    return x


def read(folder: Path) -> Any:
    """Read what :func:`write` wrote, validating it; raises :class:`WireError`."""
    path = folder / "data.json"
    if not path.is_file() or path.is_symlink():
        raise WireError("no results were written")
    if path.stat().st_size > MAX_JSON_BYTES:
        raise WireError("the results file is too large")
    try:
        doc = json.loads(path.read_text(), parse_constant=lambda c: (_ for _ in ()).throw(WireError(c)))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise WireError(f"the results file is not valid JSON ({exc})") from None
    return _Reader(folder).decode(doc)


def outcome_from_wire(x: Any) -> Outcome:
    """Validate a decoded outcome's field types (the sandbox could have written anything)."""
    if not isinstance(x, Outcome):
        raise WireError("expected an outcome")
    if x.error is not None and not isinstance(x.error, str):
        raise WireError("bad error field")
    x.error_types = tuple(str(v) for v in _seq(x.error_types))
    x.banned_calls = tuple(str(v) for v in _seq(x.banned_calls))
    for name in ("largest_numel", "python_peak", "peak_live"):
        if type(getattr(x, name)) is not int:
            raise WireError(f"bad {name}")
    if not isinstance(x.largest_op, str):
        raise WireError("bad largest_op")
    return x


def _seq(v: Any) -> list:
    if isinstance(v, (list, tuple)):
        return list(v)
    raise WireError("expected a sequence")
