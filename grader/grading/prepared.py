"""Prepared chapters, cached on disk: a run, a shard or a test module reuses what an earlier one computed.

Preparing a chapter (:func:`grader.grading.verdict.prepare_chapter`: hidden checks parsed, every check's
cases generated, the reference outputs computed) takes from a fraction of a second to several seconds
per chapter. Its result is stored under ``_build/cache/grading/<chapter>-<key>/`` (the instructor's
build folder, root-only, hidden from every sandbox like the rest of the course) as plain data, never
pickle: the cases as :mod:`grader.grading.wire` folders (``cases/<grade_id>/<k>/``, what the sandbox is
given), the reference outputs likewise (``expected/<grade_id>/<k>/``, which never leave the grader), and a
``manifest.json`` listing every check and the SHA-256 of every file.

The key is a hash of everything that can change the result: the chapter's source notebook (its bytes),
every file of the ``solutions`` package (references and case generators), the grader modules that
prepare and encode (:data:`GRADER_SOURCES`), and the Python, torch and numpy versions, the machine, torch's
CPU kernels and its thread count. An entry is written in a temporary folder and renamed into place (a
killed run or two shards at once never leave half of one), other entries of the chapter are removed,
and an entry that does not match its manifest, or cannot be read, is ignored and rebuilt. A kit is always
made from what the entry holds, on a miss too (the entry just written is read back), so a cached kit
and a fresh one are the same data. The sandbox keeps reading its own copy of the cases in the workspace
(hard links where the file system allows), as before.

A process that may hold older code than the files say (a keyed file changed after it started, so an
imported module can be stale) prepares without storing: an entry is only ever written by code that
matches its key.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import numpy as np
import torch

from ..course import Chapter, Course
from ..plan import Kit
from . import verdict, wire

FORMAT = 2  # of an entry's layout; part of the key
#: The grader's modules that decide what a prepared chapter holds (relative to the ``grader`` package).
GRADER_SOURCES = ("checks.py", "cells.py", "plan.py", "grading/verdict.py", "grading/wire.py", "grading/prepared.py")
GRADER = Path(__file__).resolve().parents[1]
STALE_TEMP = 3600.0  # seconds after which a temporary folder of a killed run is removed


def cache_root(course: Course) -> Path:
    return course.build / "cache" / "grading"


@dataclass
class Sources:
    """What every chapter's key shares, hashed once per run."""

    digest: str
    newest: float  # the latest modification time among the keyed files

    @property
    def storable(self) -> bool:
        """Whether this process may write entries: no keyed file changed after it started (its imported
        modules are then those files)."""
        return self.newest < _started() - 2.0


def _started() -> float:
    import psutil

    return psutil.Process(os.getpid()).create_time()


def _solutions_folder(course: Course) -> Path:
    """The ``solutions`` package preparation imports (this process's, as :func:`grader.checks.resolve`
    finds it), else the course's."""
    import importlib.util

    spec = importlib.util.find_spec("solutions")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return course.root / "solutions"


def sources(course: Course, solutions: Path | None = None) -> Sources:
    """Hash what every chapter's key shares: versions, the grader's modules, the ``solutions`` package
    (``solutions``: its folder, by default the one this process imports)."""
    h = hashlib.sha256()
    newest = 0.0

    def add(label: str, data: bytes) -> None:
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)

    add("format", str(FORMAT).encode())
    add("versions", json.dumps([sys.version, platform.machine(), torch.__version__, np.__version__,
                                torch.backends.cpu.get_cpu_capability(), torch.get_num_threads()]).encode())
    solutions = solutions or _solutions_folder(course)
    files = [(f"grader/{name}", GRADER / name) for name in GRADER_SOURCES]
    files += [(f"solutions/{p.relative_to(solutions)}", p) for p in sorted(solutions.rglob("*"))
              if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")]
    for label, path in files:
        with open(path, "rb") as fh:
            newest = max(newest, os.fstat(fh.fileno()).st_mtime)
            add(label, fh.read())
    return Sources(h.hexdigest(), newest)


def key(shared: Sources, chapter: Chapter, raw: bytes) -> str:
    """The chapter's key: the shared sources and the source notebook's bytes ``raw``."""
    h = hashlib.sha256(shared.digest.encode())
    h.update(f"\0{chapter.id}\0{len(raw)}\0".encode())
    h.update(raw)
    return h.hexdigest()[:24]


# ---------------------------------------------------------------------------------------------------
# an entry


def _checks_of(kit: Kit) -> list[list]:
    return [[grade_id, k, p.check.target, p.check.cases, p.expected is not None]
            for grade_id, test in kit.tests.items() for k, p in enumerate(test.checks)]


def _files(folder: Path) -> dict[str, Path]:
    """Every file below ``folder`` (relative name -> path); a link, or anything but plain files and
    folders, makes the entry unusable."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            mode = path.lstat().st_mode
            if name in filenames and stat.S_ISREG(mode):
                found[str(path.relative_to(folder))] = path
            elif not (name in dirnames and stat.S_ISDIR(mode)):
                raise ValueError(f"{path} is not a plain file or folder")
    return found


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write(chapter: Chapter, nb: nbformat.NotebookNode, key_: str, folder: Path) -> None:
    """Prepare the chapter into ``folder`` (a fresh, private one): cases, reference outputs, manifest."""
    kit = verdict.prepare_chapter(chapter, folder / "cases", nb)
    for grade_id, test in kit.tests.items():
        for k, p in enumerate(test.checks):
            if p.expected is not None:
                wire.write(folder / "expected" / grade_id / str(k), p.expected)
    files = {name: _sha(path) for name, path in sorted(_files(folder).items())}
    manifest = {"format": FORMAT, "chapter": chapter.id, "key": key_, "checks": _checks_of(kit), "files": files}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))


def _read(chapter: Chapter, nb: nbformat.NotebookNode, key_: str, entry: Path, folder: Path) -> Kit:
    """The kit an entry holds, its cases copied to ``folder`` (the workspace's, which the sandbox reads);
    raises when the entry is not exactly what its manifest says."""
    manifest = json.loads((entry / "manifest.json").read_text())
    if (not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("chapter") != chapter.id
            or manifest.get("key") != key_):
        raise ValueError("the manifest is not this entry's")
    files = _files(entry)
    files.pop("manifest.json", None)
    listed = manifest.get("files")
    if not isinstance(listed, dict) or set(listed) != set(files):
        raise ValueError("the entry's files are not those of its manifest")
    for name, path in files.items():
        if _sha(path) != listed[name]:
            raise ValueError(f"{name} does not match its checksum")

    def prepared(grade_id: str, k: int, check) -> verdict.PreparedCheck:
        stored = Path(grade_id, str(k))
        cases = wire.read_cases(entry / "cases" / stored)
        expected = wire.read(entry / "expected" / stored) if (entry / "expected" / stored).is_dir() else None
        if not isinstance(cases, list) or (expected is not None and not isinstance(expected, list)):
            raise ValueError(f"bad stored check {stored}")
        return verdict.PreparedCheck(check, cases, folder / stored, expected)

    kit = verdict.build_kit(chapter, nb, prepared)
    if _checks_of(kit) != manifest.get("checks"):
        raise ValueError("the entry's checks are not the notebook's")
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(entry / "cases", folder, copy_function=_link)
    return kit


def _link(src: str, dst: str) -> None:
    """Hard-link a case file into the workspace (entries are never changed in place), or copy it."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _private(root: Path) -> bool:
    """Make ``root`` a folder only this user can enter; False when it is not one (a link, another owner)."""
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        try:
            root.mkdir(mode=0o700)
        except FileExistsError:
            pass
        st = root.lstat()
        if root.is_symlink() or not root.is_dir() or st.st_uid != os.geteuid():
            return False
        if st.st_mode & 0o077:
            os.chmod(root, 0o700)
        return True
    except OSError:
        return False


def _discard(path: Path) -> None:
    """Remove an entry (or a temporary folder): first renamed out of the way, so that no reader finds half."""
    trash = path.with_name(f".trash-{path.name}-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.rename(path, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _sweep(root: Path, chapter: Chapter, keep: Path) -> None:
    """Remove the chapter's other entries, and what killed runs left behind."""
    mine = re.compile(rf"{re.escape(chapter.id)}-[0-9a-f]{{24}}")
    now = time.time()
    for path in root.iterdir():
        if path == keep:
            continue
        if mine.fullmatch(path.name):
            _discard(path)
        elif path.name.startswith((".tmp-", ".trash-")):
            try:
                if now - path.lstat().st_mtime > STALE_TEMP:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                pass


def chapter_kit(course: Course, chapter: Chapter, folder: Path, raw: bytes, nb: nbformat.NotebookNode,
                shared: Sources) -> tuple[Kit, bool]:
    """The chapter's kit, with its cases in ``folder``; ``raw`` is the source notebook's bytes and ``nb``
    the notebook they hold. Returns ``(kit, True)`` when the cache had it. What preparing the chapter
    raises (a broken case generator) is raised here."""
    root = cache_root(course)
    key_ = key(shared, chapter, raw)
    entry = root / f"{chapter.id}-{key_}"
    usable = _private(root)
    if usable and entry.is_dir():
        try:
            return _read(chapter, nb, key_, entry, folder), True
        except Exception:  # noqa: BLE001 -- corrupt, partial or unreadable: never used, rebuilt below
            _discard(entry)
    base = root if usable else None
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{chapter.id}-", dir=base))
    try:
        _write(chapter, nb, key_, tmp)
        kit = _read(chapter, nb, key_, tmp, folder)  # what a later run will read, read now
        if usable and shared.storable:
            try:
                os.rename(tmp, entry)
            except OSError:
                pass  # another run stored the same entry first
            else:
                _sweep(root, chapter, keep=entry)
        return kit, False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
