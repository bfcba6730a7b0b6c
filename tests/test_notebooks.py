"""Every chapter notebook follows the course's rules: stored without outputs, paired with its solutions
module, one graded test cell per exercise, 10 points, and hidden tests written as declarative checks."""

from __future__ import annotations

import ast
import importlib
import json

import nbformat
import pytest

from grader.cells import exercises, hidden_blocks, nbgrader_meta, solution_regions, split_hidden
from grader.checks import parse_checks, resolve, run_local
from grader.course import Course

from .design import EXERCISES

COURSE = Course.here()
CHAPTERS = COURSE.chapters()
IDS = [ch.id for ch in CHAPTERS]


def read(ch):
    return nbformat.read(ch.notebook, as_version=4)


def test_there_are_chapters():
    assert CHAPTERS, "no chapter folders found under book/"


@pytest.mark.parametrize("path", sorted(COURSE.book.rglob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_are_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"cell {i} has outputs"
            assert cell["execution_count"] is None, f"cell {i} has an execution count"


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_chapter_is_paired_with_its_solutions_module(ch):
    importlib.import_module(ch.solutions_module)
    for ex in exercises(read(ch)):
        regions = solution_regions(ex.solution.source)
        assert regions, f"{ex.name}: no ### BEGIN SOLUTION region"
        assert any(ch.solutions_module in r for r in regions), \
            f"{ex.name}: the solution region should delegate to {ch.solutions_module}"


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_every_exercise_has_graded_tests_worth_ten_points_in_all(ch):
    nb = read(ch)
    found = exercises(nb)
    assert found, "no exercises"
    for ex in found:
        assert ex.tests, f"{ex.name}: no graded test cell test_{ex.name}"
        assert ex.points > 0, f"{ex.name}: its test cells carry no points"
        for cell in ex.tests:
            assert nbgrader_meta(cell).get("locked"), f"{nbgrader_meta(cell)['grade_id']} is not locked"
    assert sum(ex.points for ex in found) == 10
    graded = [nbgrader_meta(c)["grade_id"] for c in nb.cells if nbgrader_meta(c).get("grade")]
    owned = [nbgrader_meta(c)["grade_id"] for ex in found for c in ex.tests]
    assert sorted(graded) == sorted(owned), "a graded cell belongs to no exercise"
    ids = [nbgrader_meta(c)["grade_id"] for c in nb.cells if nbgrader_meta(c)]
    assert len(ids) == len(set(ids)), "duplicate grade_id"


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_exercises_are_the_designed_ones_each_with_a_hidden_block(ch):
    nb = read(ch)
    assert [ex.name for ex in exercises(nb)] == EXERCISES[ch.id], "the exercises of DESIGN.md's chapter table"
    assert sorted(hidden_blocks(nb)) == sorted(f"test_{name}" for name in EXERCISES[ch.id])


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_hidden_tests_are_declarative_checks_of_their_exercise(ch):
    for ex in exercises(read(ch)):
        for cell in ex.tests:
            checks = parse_checks(split_hidden(cell.source)[1])
            assert checks, f"{nbgrader_meta(cell)['grade_id']}: no hidden checks"
            for check in checks:
                assert check.target == ex.name or _probe_of(split_hidden(cell.source)[0], check.target, ex.name), \
                    f"{check.target}: a check names its exercise, or a probe class its test cell defines around it"
                for path in (check.reference, check.cases, check.judge):
                    if path is not None:
                        assert callable(resolve(path)), path
                for name in check.banned:
                    if not name.startswith("aten."):
                        resolve(name)


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_visible_tests_use_only_what_students_have(ch):
    for ex in exercises(read(ch)):
        for cell in ex.tests:
            visible, _ = split_hidden(cell.source)
            for node in ast.walk(ast.parse(visible)):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                    for name in names:
                        assert name.split(".")[0] not in {"solutions", "grader"}, \
                            f"{nbgrader_meta(cell)['grade_id']} imports {name}"


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_reference_passes_every_hidden_check(ch):
    module = importlib.import_module(ch.solutions_module)
    for ex in exercises(read(ch)):
        for cell in ex.tests:
            for check in parse_checks(split_hidden(cell.source)[1]):
                # a probe (a class of the test cell that runs the exercise on a toy) is its reference's twin
                run_local(check, getattr(module, ex.name) if check.target == ex.name else resolve(check.reference))


def _probe_of(visible: str, target: str, exercise: str) -> bool:
    """Whether the visible part of a test cell defines class ``target`` and that class calls ``exercise``: a
    probe lives in the test cell, which grading restores from the course's copy, so the student cannot edit it."""
    for node in ast.parse(visible).body:
        if isinstance(node, ast.ClassDef) and node.name == target:
            return any(isinstance(n, ast.Name) and n.id == exercise for n in ast.walk(node))
    return False


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell binds, names it reads) -- read as IPython runs it; enough to see what a cell needs."""
    from IPython.core.inputtransformer2 import TransformerManager

    tree = ast.parse(TransformerManager().transform_cell(source))
    binds, reads = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            (reads if isinstance(n.ctx, ast.Load) else binds).add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            binds.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            binds |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.arg):
            binds.add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            binds.add(n.name)
    return binds, reads


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_no_cell_that_grading_runs_needs_a_demo_cell(ch):
    """Grading skips the cells tagged ``demo`` or ``claim`` (figures, timings, measurements), so a cell it
    runs may not read a name that only such a cell binds: it would fail in every student's graded run."""
    import builtins

    from grader.cells import is_demo

    bound = set(dir(builtins)) | {"get_ipython", "display"}
    only_in_demos: dict[str, str] = {}
    for i, cell in enumerate(read(ch).cells):
        if cell.cell_type != "code":
            continue
        binds, reads = _names(cell.source)
        if is_demo(cell):
            for name in binds - bound:
                only_in_demos.setdefault(name, cell.get("id", str(i)))
            continue
        needed = {name: only_in_demos[name] for name in reads - binds - bound if name in only_in_demos}
        assert not needed, f"cell {cell.get('id', i)} reads names bound only in demo cells: {needed}"
        bound |= binds


def _module_uses(module) -> dict[str, set[str]]:
    """For each function and class defined at the top of ``module``: the module-level names its body reads,
    through the module's own helpers (transitively)."""
    import inspect

    tree = ast.parse(inspect.getsource(module))
    direct: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            direct[node.name] = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - {node.name}
    closed: dict[str, set[str]] = {}
    for name in direct:
        seen, todo = set(), [name]
        while todo:
            for used in direct.get(todo.pop(), set()) & set(direct):
                if used not in seen and used != name:
                    seen.add(used)
                    todo.append(used)
        closed[name] = seen
    return closed


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_no_reference_uses_a_later_exercise(ch):
    """A notebook run top to bottom defines the exercises in order, so an exercise's answer (the reference its
    solution cell delegates to, and its private helpers) may use an earlier exercise but never a later one."""
    module = importlib.import_module(ch.solutions_module)
    uses = _module_uses(module)
    order = [ex.name for ex in exercises(read(ch))]
    bad = {name: sorted(uses.get(name, set()) & set(order[i + 1:])) for i, name in enumerate(order)}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}
