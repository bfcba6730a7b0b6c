"""`grader validate PATH.ipynb`, the student's self-check, on chapter 4 (the quickest to run).

Course mode (inside the repository) runs three notebooks, once each: the released stubs, the `__correct`
student code (through the real console script), and a broken one (a wrong answer the visible tests catch,
an error inside the student's function, an error in the student's own cell, an edited and a deleted test
cell, another file name). Student mode (no repository: the notebook's own test cells) runs the released
stubs in a student repository made by `write_student_repo_files`, through its copy of the package alone,
the same broken notebook, and a one-exercise notebook that passes. Unusable input never starts a kernel.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import nbformat
import pytest
from nbgrader.preprocessors import ClearOutput, ComputeChecksums

from grader.book.view import student_view
from grader.cli import main
from grader.course import Course
from grader.dev import samples
from grader.release import STUDENT_README, STUDENT_REQUIREMENTS, RemoveClaimCells, student_kit, write_student_repo_files
from grader.student.validate import SETUP, STUDENT_MODE, VISIBLE_ONLY, Cell, Error, verdict

# the sample submissions are made from the student release: made once per test run (conftest)
pytestmark = pytest.mark.usefixtures("release")

COURSE = Course.here()
CH = COURSE.chapter("masks")
CODE = samples.student_code(COURSE, CH)
CORRECT = {ex: variants["correct"] for ex, variants in CODE.items()}
GRADER = Path(sys.executable).parent / "grader"


def released() -> nbformat.NotebookNode:
    """The student notebook as `grader release` makes it -- claim cells left out, nbgrader's own stripping
    and checksums -- in memory, so that nothing is written under _build/."""
    nb, _ = RemoveClaimCells().preprocess(nbformat.read(CH.notebook, as_version=4), {})
    nb = student_view(nb, label=CH.id)
    nb, _ = ClearOutput().preprocess(nb, {})
    nb, _ = ComputeChecksums().preprocess(nb, {})
    return nb


def validate(path: Path, *options: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["validate", str(path), *options])
    return code, out.getvalue(), err.getvalue()


def rows(out: str) -> dict[str, tuple[str, list[str]]]:
    """exercise -> (verdict, the detail lines under it), read from the printed table."""
    found: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in out.splitlines():
        m = re.match(r"^  (\w+) +(\d+|\?)  (.+)$", line)
        if m and m.group(1) in CODE:
            current = m.group(1)
            found[current] = (m.group(3), [])
        elif current and line.startswith("    ") and line.strip():
            found[current][1].append(line.strip())
        else:
            current = None
    return found


def cell(nb: nbformat.NotebookNode, grade_id: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    path = tmp_path_factory.mktemp("stubs") / CH.notebook.name
    nbformat.write(released(), path)
    return validate(path)


@pytest.fixture(scope="module")
def correct(tmp_path_factory):
    path = tmp_path_factory.mktemp("correct") / CH.notebook.name
    nbformat.write(samples.fill(released(), CORRECT), path)
    return subprocess.run([str(GRADER), "validate", str(path)], cwd=COURSE.root, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def broken_notebook(tmp_path_factory) -> Path:
    nb = samples.fill(released(), {
        **CORRECT,
        "masked_softmax": CODE["masked_softmax"]["polarity_inverted"],  # caught by an assert of the visible test
        "causal_attention": CODE["causal_attention"]["is_causal_and_mask"],  # torch raises inside it
        "attention_mask": CORRECT["attention_mask"] + "\nprint(not_defined_here)\n",  # its own cell raises
    })
    cell(nb, "test_causal_mask").source += '\nassert False, "my own edit"'  # grading runs the original
    nb.cells.remove(cell(nb, "test_padding_mask"))  # grading puts it back
    path = tmp_path_factory.mktemp("broken") / "masks (1).ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def broken(broken_notebook):
    return validate(broken_notebook)


def test_the_released_stubs_are_not_yet_implemented(stubs):
    code, out, err = stubs
    assert code == 1, out + err
    assert out.splitlines()[0] == "masks.ipynb — chapter 4: Masks"
    demo = sum(c.cell_type == "code" and "demo" in c.metadata.get("tags", [])
               for c in nbformat.read(CH.notebook, as_version=4).cells)
    assert demo and f"{demo} cell(s) tagged demo skipped (grading skips them too)" in out
    assert rows(out) == {ex: ("not yet implemented", []) for ex in CODE}
    assert "0 of 6 exercises pass their visible tests" in out
    assert "warning" not in out  # the release is untouched: no edited test cell, the right name


def test_correct_code_passes_through_the_console_script(correct):
    assert correct.returncode == 0, correct.stdout + correct.stderr
    assert rows(correct.stdout) == {ex: ("passed", []) for ex in CODE}
    lines = correct.stdout.strip().splitlines()
    assert lines[-2:] == ["6 of 6 exercises pass their visible tests", VISIBLE_ONLY]
    assert correct.stdout.count(VISIBLE_ONLY) == 1 and "warning" not in correct.stdout


def test_a_wrong_answer_fails_with_its_assertion_message_and_line(broken):
    code, out, err = broken
    assert code == 1, out + err
    table = rows(out)
    assert table["masked_softmax"] == ("failed", [
        "AssertionError: row 0 should be the softmax of [1, 2] over the two allowed keys and 0 at the masked "
        "one, got tensor([0., 0., 1.])",
        "in test_masked_softmax: assert torch.allclose(w_[0], torch.tensor([1 / (1 + e_), e_ / (1 + e_), 0.0])), \\",
    ])
    assert "3 of 6 exercises pass their visible tests" in out


def test_an_error_inside_the_students_code_names_the_test_and_the_line(broken):
    verdict_, detail = rows(broken[1])["causal_attention"]
    assert verdict_ == "failed"
    assert detail[0].startswith("RuntimeError: ") and detail[0].endswith(", raised while running test_causal_attention")
    assert "in test_causal_attention: out_ = causal_attention(q_, k_, v_)" in detail
    assert any(d.startswith("in your cell for causal_attention: return F.scaled_dot_product_attention(")
               for d in detail)


def test_an_error_in_the_exercises_own_cell_is_reported_against_it(broken):
    assert rows(broken[1])["attention_mask"] == ("failed", [
        "your cell for attention_mask raised NameError: name 'not_defined_here' is not defined",
        "in your cell for attention_mask: print(not_defined_here)",
    ])


def test_edited_deleted_and_renamed_are_warned_and_graded_as_grading_would(broken):
    code, out, err = broken
    table = rows(out)
    assert table["causal_mask"] == ("passed", [])  # the original test ran, not the edited one
    assert table["padding_mask"] == ("passed", [])  # put back and run
    assert out.splitlines()[0] == "masks (1).ipynb — chapter 4: Masks"
    warnings = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert "warning: test_causal_mask was edited: grading restores the original, so your edits don't count " \
           "(the original ran here)" in warnings
    assert "warning: test_padding_mask was deleted: grading puts the original back (it ran here too)" in warnings
    assert "warning: the notebook is named masks (1).ipynb: hand it in as masks.ipynb" in warnings


def test_a_setup_error_is_reported_against_the_exercise_and_a_stub_elsewhere_is_named():
    cells = [Cell(SETUP, None), Cell("your cell for f", "f"), Cell("test_f", "f"),
             Cell("your cell for g", "g"), Cell("test_g", "g")]
    sources = ["import torch\nimport seaborn", "def f(x):\n    return x", "assert f(1) == 1",
               "def g(x):\n    raise NotImplementedError()", "assert g(f(1)) == 1"]
    missing = Error("ModuleNotFoundError", "No module named 'seaborn'", [(0, 2)])
    assert verdict("f", cells, [missing, None, None, None, None], sources) == ("failed", [
        "the setup cell raised ModuleNotFoundError: No module named 'seaborn'", "in the setup cell: import seaborn"])
    stub = Error("NotImplementedError", "", [(4, 1), (3, 2)])
    assert verdict("g", cells, [None, None, None, None, stub], sources) == ("not yet implemented", [])
    stub_in_f = Error("NotImplementedError", "", [(2, 1), (1, 2)])
    assert verdict("f", cells, [None, None, stub_in_f, None, None], sources) == ("not yet implemented", [])
    assert verdict("g", cells, [None, None, None, None, Error("NotImplementedError", "", [(4, 1), (1, 2)])],
                   sources) == ("not yet implemented", ["(raised in your cell for f, which test_g uses)"])


def _unusable(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    whole = nbformat.writes(released())
    (tmp_path / "corrupt.ipynb").write_text(whole[: len(whole) // 2])
    (tmp_path / "utf16.ipynb").write_bytes(b"\xff\xfe" + whole.encode("utf-16-le"))
    (tmp_path / "hello.ipynb").write_text('{"hello": "world"}')
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hi')")]),
                   tmp_path / "mine.ipynb")
    (tmp_path / "folder").mkdir()
    return {
        "corrupt": (tmp_path / "corrupt.ipynb", "corrupt.ipynb is not valid JSON"),
        "utf16": (tmp_path / "utf16.ipynb", "utf16.ipynb is not UTF-8 text"),
        "not a notebook": (tmp_path / "hello.ipynb", "hello.ipynb is JSON but not a notebook"),
        "no course cells": (tmp_path / "mine.ipynb", "mine.ipynb has none of the course's exercise or test cells"),
        "a folder": (tmp_path / "folder", "is a folder"),
        "missing": (tmp_path / "nope.ipynb", "no such file"),
    }


@pytest.mark.parametrize("mode", ["course", "student"])
@pytest.mark.parametrize("case", ["corrupt", "utf16", "not a notebook", "no course cells", "a folder", "missing"])
def test_unusable_input_is_one_clear_line(tmp_path, case, mode):
    path, words = _unusable(tmp_path)[case]
    if mode == "student" and case == "no course cells":
        words = "mine.ipynb has no exercise cells (no nbgrader metadata on its cells"
    code, out, err = validate(path, *(["--student"] if mode == "student" else []))
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("grader: error: ") and words in err, err
    assert "Traceback" not in err


def test_unusable_input_through_the_console_script(tmp_path):
    path, words = _unusable(tmp_path)["corrupt"]
    result = subprocess.run([str(GRADER), "validate", str(path)], cwd=COURSE.root, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and words in result.stderr and "Traceback" not in result.stderr


def test_timeout_must_be_positive(tmp_path):
    code, out, err = validate(tmp_path / "x.ipynb", "--timeout", "0")
    assert code == 2 and "--timeout must be at least 1 second" in err


# ---------------------------------------------------------------------------------------------------
# student mode: no course repository, the notebook's own test cells

# `python -m grader` as a student runs it, with `solutions`, nbgrader and torch made unimportable in the
# validating process (the venv would otherwise provide them; the notebook's kernel is another process): the
# student kit copied into the student repository must be enough
AS_A_STUDENT = """
import importlib.abc, runpy, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("solutions", "nbgrader", "torch"):
            raise ModuleNotFoundError(f"No module named {name!r} (not in the student kit's process)")
sys.meta_path.insert(0, Absent())
try:
    runpy.run_module("grader", run_name="__main__", alter_sys=True)
finally:
    import grader
    print("grader from", grader.__file__, "solutions imported:", "solutions" in sys.modules, file=sys.stderr)
    print("grader modules:", " ".join(sorted(m for m in sys.modules if m.split(".")[0] == "grader")), file=sys.stderr)
"""


@pytest.fixture(scope="module")
def student_repo(tmp_path_factory) -> Path:
    """``_build/release/`` as `grader release` lays it out, outside the course: the student repository."""
    root = tmp_path_factory.mktemp("student")
    (root / "book").mkdir()
    shutil.copyfile(COURSE.hardware, root / "book" / COURSE.hardware.name)  # the course's cited hardware table
    write_student_repo_files(Course(root))
    repo = root / "_build" / "release"
    (repo / CH.id).mkdir()
    nbformat.write(released(), repo / CH.id / CH.notebook.name)
    return repo


@pytest.fixture(scope="module")
def student_stubs(student_repo):
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_ROOT", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-c", AS_A_STUDENT, "validate", f"{CH.id}/{CH.notebook.name}"],
                          cwd=student_repo, env=env, capture_output=True, text=True, timeout=300)


def test_release_ships_the_student_kit_and_says_how_to_validate(student_repo):
    copied = sorted(p.relative_to(student_repo) for p in (student_repo / "grader").rglob("*") if p.is_file())
    assert copied == student_kit()
    assert {"grader/student/validate.py", "grader/plan.py"} <= {str(p) for p in copied}
    for shipped in copied:  # the kit is validate's import closure: no sandbox, red team, book or checks
        assert shipped.parts[1] not in ("grading", "book", "dev") and shipped.name != "checks.py", shipped
        assert (student_repo / shipped).read_bytes() == (COURSE.root / shipped).read_bytes()
    assert (student_repo / "README.md").read_text() == STUDENT_README
    assert (student_repo / "hardware.csv").read_bytes() == COURSE.hardware.read_bytes()  # ../hardware.csv of the demos
    assert "python -m grader validate ch04_masks/masks.ipynb" in STUDENT_README
    requirements = (student_repo / "requirements.txt").read_text()
    assert requirements == STUDENT_REQUIREMENTS and {"nbclient", "nbformat"} <= set(requirements.splitlines())
    assert "nbgrader" not in requirements
    assert not (student_repo.parent.parent / "nbgrader_config.py").exists()  # not a course: student mode


def test_student_mode_runs_the_released_stubs_with_the_copied_package_alone(student_repo, student_stubs):
    out, err = student_stubs.stdout, student_stubs.stderr
    assert student_stubs.returncode == 1, out + err
    assert f"grader from {student_repo / 'grader' / '__init__.py'} solutions imported: False" in err
    loaded = next(line for line in err.splitlines() if line.startswith("grader modules: ")).split()[2:]
    kit = {".".join(p.with_suffix("").parts).removesuffix(".__init__") for p in student_kit()}
    assert set(loaded) <= kit, set(loaded) - kit  # it ran on the kit alone, without nbgrader or torch
    lines = out.splitlines()
    assert lines[0] == "masks.ipynb — chapter 4: Masks"  # the number from the folder, the title from the notebook
    assert lines[1].startswith(f"Running it as grading does: a fresh kernel in {student_repo / CH.id}, ")
    assert lines[2] == STUDENT_MODE
    assert rows(out) == {ex: ("not yet implemented", []) for ex in CODE}
    assert re.search(r"^  masked_softmax +2  not yet implemented$", out, re.M)  # points from the notebook
    assert lines[-2:] == ["0 of 6 exercises pass their visible tests", VISIBLE_ONLY]
    assert "warning" not in out


@pytest.fixture(scope="module")
def broken_as_a_student(broken_notebook):
    return validate(broken_notebook, "--student")


def test_student_mode_runs_the_edited_test_and_cannot_run_a_deleted_one(broken_as_a_student):
    code, out, err = broken_as_a_student
    assert code == 1, out + err
    assert out.splitlines()[0] == "masks (1).ipynb — Masks"  # no chapter folder, no chapter number
    table = rows(out)
    assert table["causal_mask"] == ("failed", [  # the edited test ran, as edited
        "AssertionError: my own edit", 'in test_causal_mask: assert False, "my own edit"'])
    assert table["padding_mask"] == ("test missing", [])
    assert re.search(r"^  padding_mask +\?  test missing$", out, re.M)
    assert table["masked_softmax"][0] == table["causal_attention"][0] == table["attention_mask"][0] == "failed"
    warnings = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: test_causal_mask was edited: grading restores the original, so this check ran your edited "
        "version; undo your edits",
        "warning: test_padding_mask is missing: grading puts the original back; this check could not run it",
    ]  # and no word on the file's name: student mode does not know it
    assert "1 of 6 exercises pass their visible tests" in out  # document_mask


def test_student_mode_passes_a_finished_notebook(tmp_path):
    solution = nbformat.v4.new_code_cell("def double(x):\n    return 2 * x", metadata={"nbgrader": {
        "grade": False, "grade_id": "double", "locked": False, "schema_version": 3, "solution": True}})
    test = nbformat.v4.new_code_cell("assert double(2) == 4", metadata={"nbgrader": {
        "grade": True, "grade_id": "test_double", "locked": True, "points": 2, "schema_version": 3,
        "solution": False}})
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Doubling\n\nText."), solution, test])
    nb, _ = ComputeChecksums().preprocess(nb, {})
    (tmp_path / "ch11_double").mkdir()
    nbformat.write(nb, tmp_path / "ch11_double" / "double.ipynb")
    code, out, err = validate(tmp_path / "ch11_double" / "double.ipynb", "--student")
    assert code == 0, out + err
    assert out.splitlines()[0] == "double.ipynb — chapter 11: Doubling"
    assert re.search(r"^  double +2  passed$", out, re.M) and "1 of 1 exercises pass their visible tests" in out
    assert "warning" not in out


def test_student_mode_refuses_damaged_metadata_in_one_line(tmp_path):
    nb = released()
    del cell(nb, "test_causal_mask").metadata.nbgrader["grade_id"]
    cell(nb, "causal_mask").metadata.nbgrader.pop("grade_id")
    nbformat.write(nb, tmp_path / "masks.ipynb")
    code, out, err = validate(tmp_path / "masks.ipynb", "--student")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "masks.ipynb has damaged nbgrader metadata" in err
