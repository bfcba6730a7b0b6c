"""Reading a submission, outside the sandbox, for code that reaches into the grader or the interpreter.

The ban recorders and memory meters run in the student's process (:mod:`grader.checks`); code there can
patch them (``sys.modules['grader.checks']``), walk the heap (``gc``), rewrite a function's code, or write
memory (``ctypes``). No attention exercise needs any of that, so the grader reads every cell the student
wrote (solution cells and added cells; locked cells are restored from the release anyway) *before* running
it, and a submission that uses one of these means is graded as usual but **flagged** with the reason, for the
instructor to look at: the points it earned through the in-process recorders are not evidence.

``import sys`` alone is not flagged (``sys.argv``, ``sys.exit`` are ordinary); its registry of modules,
frames and tracing are. The list names capabilities, not tricks: importing a module of introspection or
foreign memory, naming the builtins that run or look up code by string, or an attribute that exposes frames,
code objects, globals or the registry of loaded modules. Obfuscation needs one of them to start from (``__import__``, ``getattr`` on
``__builtins__``, ``importlib``, ``eval``), so it is flagged too. Unparseable code is left to the notebook
run, which reports it.
"""

from __future__ import annotations

import ast
import threading

import nbformat

#: Modules whose import gives access to the interpreter's or the grader's internals (prefixes match
#: submodules: ``torch._C._dispatch``).
MODULES = ("ctypes", "gc", "inspect", "importlib", "builtins", "sys.modules", "sys._getframe", "sys.settrace",
           "sys.setprofile", "sys._current_frames", "mmap", "marshal", "pickle", "dill",
           "multiprocessing", "subprocess", "signal", "resource", "_thread", "faulthandler", "tracemalloc",
           "grader", "solutions", "torch._C", "torch.library", "torch.overrides", "torch.utils._python_dispatch",
           "torch.utils.cpp_extension", "torch._dynamo", "torch._ops", "numpy.ctypeslib", "cffi")
#: Builtins that run, compile or look up code and names by string.
NAMES = ("__import__", "eval", "exec", "compile", "globals", "vars", "locals", "breakpoint", "__builtins__",
         "__loader__", "__spec__")
#: Attributes that expose frames, code, globals, the module registry or raw memory.
ATTRIBUTES = ("modules", "_getframe", "settrace", "setprofile", "_current_frames", "__code__", "__globals__",
              "__closure__", "__subclasses__", "__bases__",
              "__mro__", "__base__", "f_globals", "f_locals", "f_back", "f_builtins", "gi_frame", "cr_frame",
              "tb_frame", "cell_contents", "ctypes", "ctypeslib", "_C", "library", "_python_dispatch",
              "cpp_extension", "load_inline", "__reduce__", "__reduce_ex__", "__setstate__",
              "_start_new_thread", "_start_joinable_thread", "start_new_thread")

_PARSE = threading.Lock()  # the AST machinery is not safe to drive from two threads at once


def _module_hit(name: str) -> str | None:
    for m in MODULES:
        if name == m or name.startswith(m + "."):
            return f"imports {name}"
    return None


def scan_source(source: str) -> list[str]:
    """What one cell's code reaches for (empty when nothing), in order of appearance, without repeats."""
    try:
        with _PARSE:
            tree = ast.parse(source)
            nodes = list(ast.walk(tree))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found: list[str] = []
    for node in nodes:
        hit = None
        if isinstance(node, ast.Import):
            hit = next((h for a in node.names if (h := _module_hit(a.name))), None)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            hit = _module_hit(base) or next((h for a in node.names if (h := _module_hit(f"{base}.{a.name}"))), None)
        elif isinstance(node, ast.Name) and node.id in NAMES:
            hit = f"uses {node.id}"
        elif isinstance(node, ast.Attribute) and node.attr in ATTRIBUTES:
            hit = f"uses .{node.attr}"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "delattr") and len(node.args) >= 2):
            name = node.args[1]
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                hit = f"uses {node.func.id} with a computed name"
            elif name.value in ATTRIBUTES or name.value in NAMES:
                hit = f"uses {node.func.id}(..., {name.value!r})"
        if hit and hit not in found:
            found.append(hit)
    return found


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


def course_cells(source_nb: nbformat.NotebookNode) -> set[str]:
    """The code the course itself gives every student: the source notebook's code cells other than
    solution cells (setup cells, launchers), which a submission may keep unchanged."""
    return {_text(c.get("source", "")).strip() for c in source_nb.get("cells", [])
            if c.get("cell_type") == "code" and not (c.get("metadata", {}).get("nbgrader") or {}).get("solution")}


def student_cells(nb: nbformat.NotebookNode, known: set[str] = frozenset()) -> list[tuple[int, str]]:
    """``(index, source)`` of the code cells a student wrote: solution cells and cells without nbgrader
    metadata (locked and test cells are restored from the release before the run), less cells that are
    the course's own code unchanged (``known``, from :func:`course_cells`)."""
    out = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader")
        if not isinstance(meta, dict) or meta.get("solution") is True or not meta.get("locked"):
            source = _text(cell.get("source", ""))
            if source.strip() not in known:
                out.append((i, source))
    return out


def scan(nb: nbformat.NotebookNode, known: set[str] = frozenset()) -> list[str]:
    """One line per cell that reaches for the grader's or the interpreter's internals, e.g.
    ``cell 4: imports sys, uses .modules``."""
    lines = []
    for i, source in student_cells(nb, known):
        hits = scan_source(source)
        if hits:
            lines.append(f"cell {i}: {', '.join(hits[:4])}{' ...' if len(hits) > 4 else ''}")
    return lines


def reason(nb: nbformat.NotebookNode, known: set[str] = frozenset()) -> str:
    """The flag's reason, or "" when the submission reaches for nothing."""
    lines = scan(nb, known)
    if not lines:
        return ""
    return ("reaches into the grader's or the interpreter's internals, so its in-process checks (bans, memory) "
            "are not evidence: " + "; ".join(lines[:3]) + (" ..." if len(lines) > 3 else ""))
