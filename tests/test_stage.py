"""Staging steps: a failing cell is named precisely, the student view strips what it must and refuses
leftovers, and the execution cache is keyed on what can change a chapter's outputs."""

from __future__ import annotations

import shutil
import threading

import nbformat
import pytest

from grader.book.stage import cache_key, mark_exercises, with_current_text
from grader.book.view import LeakError, student_view
from grader.course import Course
from grader.execute import ExecutionFailed, execute, execute_many

COURSE = Course.here()


def notebook(*cells):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = list(cells)
    return nb


def solution_cell(source, grade_id="f"):
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": {
        "grade": False, "solution": True, "locked": False, "grade_id": grade_id, "schema_version": 3}})


def test_a_failing_cell_is_named_with_its_notebook_index_and_error(tmp_path):
    nb = notebook(nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("y = x / 0"))
    with pytest.raises(ExecutionFailed) as info:
        execute(nb, tmp_path, label="book/ch99_demo/demo.ipynb")
    message = str(info.value)
    assert "book/ch99_demo/demo.ipynb" in message and "cell 1" in message
    assert "ZeroDivisionError" in message and "y = x / 0" in message


def test_notebooks_execute_side_by_side_and_a_failure_names_its_own(tmp_path):
    """Stale chapters execute two kernels at a time (one per core); each result is the notebook's own,
    and a failing one is named as it is alone."""
    a = notebook(nbformat.v4.new_code_cell("import time; time.sleep(1); x = 'a'"), nbformat.v4.new_code_cell("x"))
    b = notebook(nbformat.v4.new_code_cell("import time; time.sleep(1); x = 'b'"), nbformat.v4.new_code_cell("x"))
    finished = []
    out = execute_many([(a, tmp_path, "a"), (b, tmp_path, "b")], parallel=2,
                       done=lambda i, nb, s: finished.append(i))
    assert [nb.cells[1].outputs[0]["data"]["text/plain"] for nb in out] == ["'a'", "'b'"]
    assert sorted(finished) == [0, 1] and a.cells[1].outputs == [], "the sources are not modified"
    bad = notebook(nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("y = x / 0"))
    with pytest.raises(ExecutionFailed, match=r"book/ch99_bad/bad.ipynb: cell 1 .*ZeroDivisionError"):
        execute_many([(a, tmp_path, "a"), (bad, tmp_path, "book/ch99_bad/bad.ipynb")], parallel=2)


def test_a_cached_execution_takes_the_current_prose():
    md, code = nbformat.v4.new_markdown_cell("old text"), nbformat.v4.new_code_cell("1 + 1")
    executed = notebook(md, code)
    executed.cells[1].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)]
    executed.cells[1].execution_count = 1
    source = notebook(nbformat.v4.new_markdown_cell("new text"), nbformat.v4.new_code_cell("1 + 1"))
    merged = with_current_text(executed, source)
    assert merged.cells[0].source == "new text" and merged.cells[1].outputs == executed.cells[1].outputs
    assert source.cells[1].outputs == [], "the source is not modified"


def test_the_published_page_of_an_unchanged_chapter_is_the_same_bytes_every_time():
    """Sphinx re-reads a page whose staged file changed: the notes the stage adds after each exercise
    carry ids derived from the stub's, not random ones, so that an unchanged chapter stages the same bytes
    and a rebuild reads nothing again (random ids made every chapter re-read in both languages)."""
    def staged():
        nb = notebook(nbformat.v4.new_markdown_cell("intro"), solution_cell("def f():\n    return 1"),
                      solution_cell("def g():\n    return 2", grade_id="g"))
        for i, cell in enumerate(nb.cells):
            cell.id = f"cell-{i}"
        return nbformat.writes(mark_exercises(nb))

    first = staged()
    assert first == staged()
    ids = [c.id for c in nbformat.reads(first, as_version=4).cells]
    assert len(ids) == 5 and len(set(ids)) == 5, ids


def test_student_view_replaces_solutions_drops_hidden_tests_and_keeps_outputs():
    test = nbformat.v4.new_code_cell(
        "assert f() == 1\n### BEGIN HIDDEN TESTS\nassert f() != 2\n### END HIDDEN TESTS",
        metadata={"nbgrader": {"grade": True, "solution": False, "locked": True, "points": 1,
                               "grade_id": "test_f", "schema_version": 3}})
    demo = nbformat.v4.new_code_cell("f()")
    demo.outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "1"}, execution_count=1)]
    sol = solution_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION")
    sol.outputs = [nbformat.v4.new_output("stream", name="stdout", text="secret debug print")]
    view = student_view(notebook(sol, test, demo), label="t")
    assert "raise NotImplementedError()" in view.cells[0].source and "return 1" not in view.cells[0].source
    assert view.cells[0].outputs == []
    assert "f() != 2" not in view.cells[1].source and "assert f() == 1" in view.cells[1].source
    assert view.cells[2].outputs, "demo outputs (the figures) must be kept"


def printed(text):
    cell = nbformat.v4.new_code_cell("print(text)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    return cell


@pytest.mark.parametrize("cell", [
    nbformat.v4.new_markdown_cell("Remember to write ### BEGIN SOLUTION in your cells"),  # unbalanced region
    printed("### BEGIN HIDDEN TESTS\ncheck_close(...)"),  # nbgrader never looks at outputs
    printed("### END SOLUTION"),
], ids=["unbalanced-region", "hidden-marker-in-output", "solution-marker-in-output"])
def test_student_view_refuses_what_it_cannot_strip(cell):
    with pytest.raises(LeakError, match="cannot strip|still contains"):
        student_view(notebook(cell), label="t")


@pytest.fixture
def course_copy(tmp_path) -> Course:
    for name in ("book", "solutions", "grader"):
        shutil.copytree(COURSE.root / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    return Course(tmp_path)


def test_cache_key_follows_the_chapter_its_modules_and_nothing_else(course_copy):
    ch = course_copy.chapters()[0]
    key = cache_key(course_copy, ch)
    assert len(key) == 20 and cache_key(course_copy, ch) == key, "the key must be deterministic"

    (course_copy.root / "solutions" / "zz_another_chapter.py").write_text("# another chapter's module\n")
    assert cache_key(course_copy, ch) == key, "another chapter's module must not invalidate this chapter"

    extra = ch.folder / "data.txt"
    extra.write_text("a data file the notebook reads")
    assert cache_key(course_copy, ch) != key
    extra.unlink()
    assert cache_key(course_copy, ch) == key

    nb = nbformat.read(ch.notebook, as_version=4)
    prose = next(c for c in nb.cells if c.cell_type == "markdown")
    prose.source += "\n\nA sentence added to the prose."
    nbformat.write(nb, ch.notebook)
    assert cache_key(course_copy, ch) == key, "the prose does not change the outputs: nothing to re-execute"
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.source += "\nx_added = 1"
    nbformat.write(nb, ch.notebook)
    assert cache_key(course_copy, ch) != key, "a code cell changed must re-execute the chapter"
    code.source = code.source.removesuffix("\nx_added = 1")
    nbformat.write(nb, ch.notebook)

    shared = course_copy.root / "solutions" / "_common.py"  # imported by chapter 1's module
    shared.write_text(shared.read_text() + "\n# changed\n")
    assert cache_key(course_copy, ch) != key, "a solutions module the chapter imports must invalidate it"
    key = cache_key(course_copy, ch)

    module = course_copy.root / "solutions" / f"{ch.slug}.py"
    module.write_text(module.read_text() + "\n# changed\n")
    assert cache_key(course_copy, ch) != key
    key = cache_key(course_copy, ch)

    judges = course_copy.root / "solutions" / "cases" / "_common.py"  # imported by chapter 1's case generators
    judges.write_text(judges.read_text() + "\n# changed\n")
    assert cache_key(course_copy, ch) != key, "a module the case generators import must invalidate the chapter"


def test_release_leaves_a_chapter_made_from_its_current_source_alone(tmp_path):
    """`grader release` (and `make book`) re-runs nbgrader only for a chapter whose source changed, whose
    student notebook is gone or changed, or whose gradebook no longer knows it; --force releases it anyway."""
    from grader.release import is_released, release

    root = tmp_path / "course"
    shutil.copytree(COURSE.book, root / "book", ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    shutil.copy(COURSE.root / "nbgrader_config.py", root)
    course = Course(root)
    ch = course.chapter("qkv")
    out = course.build / "release" / ch.id / ch.notebook.name
    assert not is_released(course, ch)
    release(course, [ch], log=lambda *_: None)
    assert is_released(course, ch)
    made = out.stat().st_mtime_ns
    said: list[str] = []
    assert release(course, [ch], log=said.append) == [out]
    assert out.stat().st_mtime_ns == made and "already released" in said[0], said

    nb = nbformat.read(ch.notebook, as_version=4)
    next(c for c in nb.cells if c.cell_type == "markdown").source += "\n\nAn edited sentence."
    nbformat.write(nb, ch.notebook)
    assert not is_released(course, ch), "the source changed"
    release(course, [ch], log=lambda *_: None)
    assert is_released(course, ch) and "An edited sentence." in out.read_text()

    (course.build / "gradebook.db").unlink()
    assert not is_released(course, ch), "a new gradebook must learn the chapter's cells"
    # one release at a time per build: a second one (another test process, `make book` beside `grader
    # release`) waits, and then asks again whether the chapter is released, instead of making it again
    from grader.release import _releasing
    with _releasing(course):
        second = threading.Thread(target=release, args=(course, [ch]), kwargs={"log": lambda *_: None})
        second.start()
        second.join(1.0)
        assert second.is_alive() and not is_released(course, ch), "a release ran while another held the build"
    second.join(120)
    assert is_released(course, ch)

    # a release (here forced) replaces each published file by a rename: a reader never finds it missing
    misses, stop = [], threading.Event()

    def read_on():
        while not stop.is_set():
            try:
                out.read_bytes()
            except FileNotFoundError:
                misses.append(1)

    reader = threading.Thread(target=read_on)
    reader.start()
    try:
        release(course, [ch], log=lambda *_: None, force=True)
    finally:
        stop.set()
        reader.join()
    assert not misses, f"the released notebook was missing {len(misses)} time(s) while it was released again"
    assert not list((course.build / "cache").glob("release-*")), "the release's staging folder was left behind"
