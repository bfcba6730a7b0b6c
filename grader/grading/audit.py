"""An audit hook in the notebook's process that refuses, at run time, what tampering with the in-process
recorders needs (issue 27: bans "installed before any student code runs and irremovable by it").

Python lets code add audit hooks (:func:`sys.addaudithook`) but never remove one, and every hook sees the
interpreter's audit events before the operation happens; raising stops it. The sandbox installs this hook
after its walls are up and before the first cell runs (:func:`install`), so it holds for every cell. It
refuses:

* from anywhere: foreign memory (every ``ctypes`` event: loading a library, taking an address, reading
  memory at one), the heap's object lists (``gc.get_objects``, ``get_referrers``, ``get_referents``),
  tracers and profilers (``sys.settrace``, ``sys.setprofile``: they see every frame's locals), other
  threads' frames (``sys._current_frames``), and opening a process's memory (``/proc/<pid>/mem``);
* from a notebook cell's own code (a frame compiled from a cell): a frame (``sys._getframe``), the
  restricted attributes (``__code__``, ``f_code``, ``gi_frame``, ``tb_frame``), ``exec``/``compile``, code
  objects made by hand (``code.__new__``) and a function's code replaced (``f.__code__ = ...``).

Python 3.11 raises no event when a class's attribute is set (``torch.Tensor.detach = ...``): what a result
or an input *is* is read with torch's own C methods captured before any cell runs instead
(:mod:`grader.checks`).

The grader's own code, torch's and the standard library's (``typing``, ``collections`` take frames) go on
as before: the hook looks at the frame the event comes from. It is the run-time half of the reading that
holds points for review (:mod:`grader.grading.tamper`): what the reading lets through, this refuses when
it happens, and a refusal is an error the cell shows, which costs only what that cell computes.
"""

from __future__ import annotations

import os
import sys

#: events refused wherever they come from (prefixes end with a dot)
ANYWHERE = ("ctypes.", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace",
            "sys.setprofile", "sys._current_frames")
#: events refused when a notebook cell's own code raises them
FROM_CELLS = ("sys._getframe", "object.__getattr__", "exec", "compile", "code.__new__")
CELL_FILES = "<ipython-input-"  # how the harness's shell names the code it compiles from a cell


class Refused(RuntimeError):
    """What a refused operation raises in the notebook."""


def _is_mem(path) -> bool:
    try:
        name = os.fsdecode(path) if isinstance(path, (str, bytes)) else None
    except (TypeError, ValueError):
        return False
    if name is None:
        return False
    real = os.path.realpath(name)
    return real.startswith("/proc/") and real.rstrip("/").endswith("/mem")


def _make_hook():
    import _thread

    local = _thread._local()
    getframe = sys._getframe

    def hook(event: str, args: tuple) -> None:
        if getattr(local, "busy", False):
            return
        if not (event.startswith(ANYWHERE) or event in FROM_CELLS or event == "open"
                or event == "object.__setattr__"):
            return
        local.busy = True
        try:
            if event.startswith(ANYWHERE):
                raise Refused(f"the grader's sandbox refuses {event} (no exercise needs it)")
            if event == "open":
                if args and _is_mem(args[0]):
                    raise Refused("the grader's sandbox refuses opening a process's memory")
                return
            frame = getframe(1)
            if not frame.f_code.co_filename.startswith(CELL_FILES):
                return
            if event in FROM_CELLS or (event == "object.__setattr__" and len(args) > 1 and args[1] == "__code__"):
                raise Refused(f"the grader's sandbox refuses {event} from a notebook cell (no exercise needs it)")
        finally:
            local.busy = False

    return hook


def install() -> None:
    """Add the hook for the rest of this process's life (no code can remove it)."""
    sys.addaudithook(_make_hook())
