"""The cache of prepared chapters (grader/grading/prepared.py): a second run with nothing changed reads the
chapter instead of preparing it and grades exactly as the first; everything that can change a prepared
chapter changes its key; an entry that is corrupt, partial or not this chapter's is never used but rebuilt;
and a run whose preparation fails still fails as a whole, its early-started workers stopped."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nbformat
import numpy as np
import psutil
import pytest
import torch
from nbgrader.api import Gradebook

from grader import checks
from grader.course import Course
from grader.dev import samples
from grader.grading import autograde as ag
from grader.grading import prepared, runs, verdict

COURSE = Course.here()
CH = COURSE.chapter("qkv")


def _source() -> tuple[bytes, nbformat.NotebookNode]:
    raw = CH.notebook.read_bytes()
    return raw, nbformat.reads(raw.decode(), as_version=4)


@pytest.fixture
def cache(tmp_path) -> Course:
    """A course whose build folder (and so whose cache) is a fresh temporary one; the chapters are the real ones."""
    return Course(tmp_path / "course")


def _kit(course: Course, folder: Path, shared: prepared.Sources | None = None):
    raw, nb = _source()
    return prepared.chapter_kit(course, CH, folder, raw, nb, shared or prepared.sources(COURSE))


def _entries(course: Course) -> list[Path]:
    return sorted(p for p in prepared.cache_root(course).iterdir() if not p.name.startswith("."))


def _same(a, b) -> bool:
    if isinstance(a, checks.Array):
        return (isinstance(b, checks.Array) and (a.kind, a.dtype, a.value.dtype, a.value.shape)
                == (b.kind, b.dtype, b.value.dtype, b.value.shape) and np.array_equal(a.value, b.value, equal_nan=True))
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return isinstance(b, float) and b != b
    return type(a) is type(b) and a == b


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_cached_kit_is_the_freshly_prepared_one_and_the_second_read_prepares_nothing(cache, tmp_path, monkeypatch):
    fresh = verdict.prepare_chapter(CH, tmp_path / "fresh", _source()[1])
    first, hit = _kit(cache, tmp_path / "ws1")
    assert not hit and len(_entries(cache)) == 1
    (entry,) = _entries(cache)
    stamp = {p: p.stat().st_mtime_ns for p in entry.rglob("*")}

    def no(*_a, **_k):
        raise AssertionError("prepare_chapter ran although the cache holds the chapter")

    monkeypatch.setattr(verdict, "prepare_chapter", no)
    second, hit = _kit(cache, tmp_path / "ws2")
    assert hit and _entries(cache) == [entry] and {p: p.stat().st_mtime_ns for p in entry.rglob("*")} == stamp
    # the same tests, checks, inputs, reference outputs, and the same case files for the sandbox
    for kit in (first, second):
        assert list(kit.tests) == list(fresh.tests) and kit.solution_ids == fresh.solution_ids
        assert _files(tmp_path / "fresh") == _files(kit.tests[next(iter(kit.tests))].checks[0].folder.parents[1])
        for grade_id, test in fresh.tests.items():
            mine = kit.tests[grade_id]
            assert (mine.points, mine.visible, mine.metadata) == (test.points, test.visible, test.metadata)
            assert [p.check for p in mine.checks] == [p.check for p in test.checks]
            for p, q in zip(test.checks, mine.checks):
                assert (p.expected is None) == (q.expected is None)
                assert p.expected is None or _same(p.expected, q.expected)
                assert len(p.cases) == len(q.cases)
                for a, b in zip(p.cases, q.cases):
                    assert _same(checks._inputs_plain(a.args, a.kwargs), checks._inputs_plain(b.args, b.kwargs))
                    assert (a.label, a.raises, a.method, a.max_numel, a.max_live) == \
                           (b.label, b.raises, b.method, b.max_numel, b.max_live)
    # the sandbox reads the workspace's copy, never the cache
    assert all(tmp_path / "ws2" in p.folder.parents for t in second.tests.values() for p in t.checks)


def test_the_judge_decides_the_same_on_a_cached_kit(cache, tmp_path):
    """The reference passes every check of both kits, and a wrong answer fails both with the same message."""
    import solutions.qkv as reference

    fresh = verdict.prepare_chapter(CH, tmp_path / "fresh", _source()[1])
    _kit(cache, tmp_path / "ws1")
    cached, hit = _kit(cache, tmp_path / "ws2")
    assert hit
    judged = 0
    for grade_id, test in fresh.tests.items():
        for p, q in zip(test.checks, cached.tests[grade_id].checks):
            if p.check.kind == "property" or not hasattr(reference, p.check.target):
                continue
            right = getattr(reference, p.check.target)
            for c in (p, q):
                checks.judge(c.check, c.cases, checks.evaluate(right, c.cases), c.expected)
            if p.check.kind == "close":
                def wrong(*args, _right=right, **kwargs):
                    out = _right(*args, **kwargs)
                    return tuple(o * 1.5 for o in out) if isinstance(out, tuple) else out * 1.5

                messages = []
                for c in (p, q):
                    with pytest.raises(checks.CheckFailed) as failed:
                        checks.judge(c.check, c.cases, checks.evaluate(wrong, c.cases), c.expected)
                    messages.append(str(failed.value))
                assert messages[0] == messages[1]
            judged += 1
    assert judged >= 3


def test_the_key_changes_with_the_notebook_the_solutions_the_grader_and_the_versions(tmp_path, monkeypatch):
    solutions = tmp_path / "solutions"
    shutil.copytree(COURSE.root / "solutions", solutions, ignore=shutil.ignore_patterns("__pycache__"))
    raw, _ = _source()

    def key(notebook: bytes = raw) -> str:
        return prepared.key(prepared.sources(COURSE, solutions), CH, notebook)

    base = key()
    assert key() == base  # stable
    assert key(raw.replace(b"check_close", b"check_close ", 1)) != base  # the notebook's bytes
    for name in ("cases/qkv.py", "qkv.py", "cases/families.py", "_common.py"):  # references, case generators, helpers
        path = solutions / name
        text = path.read_bytes()
        path.write_bytes(text + b"\n# changed\n")
        assert key() != base, name
        path.write_bytes(text)
        assert key() == base
    (solutions / "cases" / "new_helper.py").write_text("X = 1\n")  # a new module of the package
    assert key() != base
    (solutions / "cases" / "new_helper.py").unlink()
    (solutions / "__pycache__").mkdir()
    (solutions / "__pycache__" / "qkv.cpython-311.pyc").write_bytes(b"compiled")  # bytecode is not source
    assert key() == base
    monkeypatch.setattr(prepared, "GRADER", tmp_path / "grader")  # the grader's own modules
    shutil.copytree(COURSE.root / "grader", tmp_path / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    assert key() == base
    with open(tmp_path / "grader" / "checks.py", "a") as fh:
        fh.write("\n# changed\n")
    assert key() != base
    monkeypatch.undo()
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert key() != base
    monkeypatch.undo()
    monkeypatch.setattr(np, "__version__", "0.0.0")
    assert key() != base


def test_an_edited_notebook_gets_a_new_entry_and_the_old_one_goes(cache, tmp_path):
    raw, nb = _source()
    shared = prepared.sources(COURSE)
    prepared.chapter_kit(cache, CH, tmp_path / "a", raw, nb, shared)
    (old,) = _entries(cache)
    _, hit = prepared.chapter_kit(cache, CH, tmp_path / "b", raw + b"\n", nb, shared)
    assert not hit
    (new,) = _entries(cache)
    assert new != old and not old.exists()


@pytest.mark.parametrize("damage", ["flip a case byte", "truncate a reference output", "drop the manifest",
                                    "extra file", "another key's manifest", "a link"])
def test_a_corrupt_entry_is_ignored_and_rebuilt(cache, tmp_path, damage):
    good, _ = _kit(cache, tmp_path / "a")
    want = _files(tmp_path / "a")  # before the damage: the workspace's files are hard links of the entry's
    (entry,) = _entries(cache)
    npys = sorted(entry.glob("cases/*/*/*.npy"))
    if damage == "flip a case byte":
        data = bytearray(npys[0].read_bytes())
        data[-1] ^= 0xFF
        npys[0].write_bytes(bytes(data))
    elif damage == "truncate a reference output":
        target = sorted(entry.glob("expected/*/*/*.npy"))[0]
        target.write_bytes(target.read_bytes()[:-8])
    elif damage == "drop the manifest":
        (entry / "manifest.json").unlink()
    elif damage == "extra file":
        (npys[0].parent / "99.npy").write_bytes(npys[0].read_bytes())
    elif damage == "another key's manifest":
        manifest = json.loads((entry / "manifest.json").read_text())
        manifest["key"] = "0" * 24
        (entry / "manifest.json").write_text(json.dumps(manifest))
    else:
        npys[0].unlink()
        npys[0].symlink_to(npys[1])
    rebuilt, hit = _kit(cache, tmp_path / "b")
    assert not hit
    assert _files(tmp_path / "b") == want
    assert [[p.check for p in t.checks] for t in rebuilt.tests.values()] == \
           [[p.check for p in t.checks] for t in good.tests.values()]
    _, hit = _kit(cache, tmp_path / "c")
    assert hit, "the rebuilt entry is read by the next run"


def test_half_written_entries_of_a_killed_run_are_never_read(cache, tmp_path):
    shared = prepared.sources(COURSE)
    root = prepared.cache_root(cache)
    root.mkdir(parents=True)
    partial = root / f".tmp-{CH.id}-killed"  # what a run killed while writing leaves: never the entry's name
    (partial / "cases").mkdir(parents=True)
    _, hit = _kit(cache, tmp_path / "a", shared)
    assert not hit and partial.exists()  # left alone (it could be another run's, still writing)
    os.utime(partial, (0, 0))  # an hour old: a killed run's
    raw, nb = _source()
    prepared.chapter_kit(cache, CH, tmp_path / "b", raw + b" ", nb, shared)
    assert not partial.exists()


def test_a_process_older_than_its_sources_reads_but_never_stores(cache, tmp_path, monkeypatch):
    """Where a keyed file changed after this process started, its imported modules may be older than the
    key says: it prepares for itself and writes no entry."""
    shared = prepared.sources(COURSE)
    stale = prepared.Sources(shared.digest, newest=prepared._started() + 60)
    assert shared.storable and not stale.storable
    _, hit = _kit(cache, tmp_path / "a", stale)
    assert not hit and _entries(cache) == []
    _kit(cache, tmp_path / "b", shared)
    _, hit = _kit(cache, tmp_path / "c", stale)
    assert hit


def test_the_cache_is_private_to_the_grader(cache, tmp_path):
    _kit(cache, tmp_path / "a")
    root = prepared.cache_root(cache)
    assert root.stat().st_mode & 0o777 == 0o700  # no sandbox uid can read a reference output here
    assert COURSE.root in prepared.cache_root(COURSE).parents  # and it is under the course, which every sandbox hides


def _grades(ws) -> dict:
    with Gradebook(ws.db_url) as gb:
        return {(s.student.id, g.name): g.score for s in gb.find_assignment(CH.id).submissions
                for nb in s.notebooks for g in nb.grades}


def test_a_second_run_reads_every_chapter_from_the_cache_and_grades_the_same(tmp_path, monkeypatch):
    released = samples.released(COURSE, CH)
    variants = samples.student_code(COURSE, CH)
    correct = {ex: v["correct"] for ex, v in variants.items()}
    ex, wrong = next((ex, name) for ex, vs in sorted(variants.items()) for name in sorted(vs)
                     if not samples.is_correct(name))
    samples.hand_in(tmp_path / "in", "correct", CH, samples.fill(released, correct))
    samples.hand_in(tmp_path / "in", "stub", CH, released)
    samples.hand_in(tmp_path / "in", "wrong", CH, samples.fill(released, {**correct, ex: variants[ex][wrong]}))
    monkeypatch.setattr(prepared, "cache_root", lambda course: tmp_path / "cache")
    lines = []
    first = ag.autograde(COURSE, tmp_path / "in", workspace=COURSE.workspace(tmp_path / "w1"), log=lines.append,
                         progress=False)
    assert "1 chapter(s) ready to grade (0 from the cache" in "\n".join(lines)

    def no(*_a, **_k):
        raise AssertionError("prepare_chapter ran although the cache holds the chapter")

    monkeypatch.setattr(verdict, "prepare_chapter", no)
    lines.clear()
    second = ag.autograde(COURSE, tmp_path / "in", workspace=COURSE.workspace(tmp_path / "w2"), log=lines.append,
                          progress=False)
    assert "1 chapter(s) ready to grade (1 from the cache" in "\n".join(lines)
    assert sorted((r.student, r.status) for r in first) == sorted((r.student, r.status) for r in second)
    one, two = _grades(COURSE.workspace(tmp_path / "w1")), _grades(COURSE.workspace(tmp_path / "w2"))
    assert one == two and len(one) >= 6
    full = sum(samples.exercise_points(released).values())
    totals = {s: sum(v for (who, _), v in one.items() if who == s) for s in ("correct", "stub", "wrong")}
    assert totals["correct"] == full and totals["stub"] == 0 and 0 < totals["wrong"] < full


def test_a_chapter_that_cannot_be_prepared_stops_the_run_and_its_workers(tmp_path, monkeypatch):
    samples.hand_in(tmp_path / "in", "s1", CH, samples.released(COURSE, CH))

    def broken(*_a, **_k):
        raise RuntimeError("a broken case generator")

    monkeypatch.setattr(prepared, "chapter_kit", broken)
    ws = COURSE.workspace(tmp_path / "w")
    # Processes this test process already had (a multiprocessing helper, a pool an earlier module left for its
    # own teardown) are not this run's: only what the run started must be gone.
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RuntimeError, match="a broken case generator"):
        ag.autograde(COURSE, tmp_path / "in", workspace=ws, jobs=2, log=lambda *_: None, progress=False)

    def survivors() -> list[psutil.Process]:
        out = []
        for p in psutil.Process().children(recursive=True):
            try:
                if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        for p in psutil.process_iter(["cmdline"]):
            if str(ws.folder) in " ".join(p.info["cmdline"] or []) and p not in out:
                out.append(p)
        return out

    left = survivors()
    if left:  # a killed process can take a moment to be reaped; it must go without anyone's help
        psutil.wait_procs(left, timeout=5)
        left = [p for p in survivors() if p.is_running()]
    assert not left, "a worker or a zygote outlived the failed run: " + "; ".join(
        f"{p.pid} {' '.join(p.cmdline())[:200]}" for p in left if p.is_running())
    assert runs.load(ws.db_url) == {}  # nothing graded, nothing recorded
