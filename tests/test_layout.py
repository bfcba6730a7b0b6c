"""The grader's layout is its architecture: one subpackage per job around a few shared modules.

* ``grader.book`` (building the site), ``grader.grading`` (judging submissions) and ``grader.student``
  (``grader validate``) import nothing of one another; they meet only in the shared top-level modules;
* the shared modules import no subpackage (``grader.cli``, the command that dispatches to them all, is the
  one exception); ``grader.dev`` (developers' tools) may import anything, and nothing imports it;
* no import cycle, counting imports inside functions too;
* ``solutions`` holds the references and their case generators only: no benchmarks or GPU scripts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "grader"
JOBS = ("book", "grading", "student", "dev")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, unresolved: list[str] | None = None) -> set[str]:
    """The ``grader`` modules that module ``name`` imports, anywhere in it (functions included); relative or
    ``grader.`` imports that name no module of the package are added to ``unresolved``."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            candidates = [module] + [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        known = {c for c in candidates if c in MODULES}
        if unresolved is not None and not known and (getattr(node, "level", 0) or candidates[0].startswith("grader")):
            unresolved.append(f"{name}: {candidates[0]}")
        found |= known - {name}
    return found


def job(name: str) -> str | None:
    """The subpackage a module belongs to, or None for a shared module."""
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in JOBS) else None


GRAPH = {name: imports(name) for name in MODULES}


def test_every_import_of_the_package_names_a_module_of_it():
    unresolved: list[str] = []
    for name in MODULES:
        imports(name, unresolved)
    assert not unresolved, unresolved


def test_every_job_has_its_subpackage_with_a_docstring():
    for name in ("grader", *(f"grader.{j}" for j in JOBS)):
        doc = ast.get_docstring(ast.parse(MODULES[name].read_text()))
        assert doc and len(doc) > 40, f"{name} needs a docstring saying what it is for"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_follow_the_layout(name):
    mine = job(name)
    for target in GRAPH[name]:
        theirs = job(target)
        if theirs is None or theirs == mine or mine == "dev":
            continue
        if mine is None and name == "grader.cli":
            assert theirs != "dev", f"{name} imports {target}: the command does not dispatch to developer tools"
            continue
        raise AssertionError(f"{name} imports {target}: {mine or 'a shared module'} must not import "
                             f"grader.{theirs} (share through the top-level modules instead)")


def test_no_import_cycles():
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(GRAPH[name]):
            if target.startswith(name + "."):  # a package importing its own submodule is no cycle
                continue
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target] if target in path else [name, target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(MODULES):
        if name not in state:
            visit(name, [name])


def test_solutions_hold_only_references_and_cases():
    files = {p.relative_to(ROOT / "solutions").as_posix() for p in (ROOT / "solutions").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    assert not any("bench" in f or f.endswith(".sh") for f in files), files
    chapters = {p.stem for p in (ROOT / "book").glob("ch*/*.ipynb")}
    extra = {f for f in files if f.endswith(".py") and "/" not in f} - {f"{c}.py" for c in chapters} \
        - {"__init__.py", "_common.py", "flash_triton.py"}
    assert not extra, f"solutions/ keeps only the chapters' references (and their helpers): {extra}"
