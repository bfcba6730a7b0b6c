"""Issue 27, classes 6 and 7 and the output flood of class 9, through `grader autograde`: no name, size or
bytes of a submission stops the batch, and nothing a notebook does can produce the grader's own ``error``
status (no score, a retry, exit code 3), which is reserved for the grader's faults.

One batch grades a correct control student beside the attacks: a student folder whose name is not UTF-8
(with a notebook, and empty), a notebook that calls ``os._exit(71)`` (the leader's old "sandbox could not be
set up" code), one that lowers its own CPU limit and spins (once read as "killed from outside"), lone
surrogates in a markdown cell and in printed output and an error message (once unwritable), a notebook
nested 100000 lists deep (once the grader's own error), and 3000 cells of printed output (once a notebook
of over 50 MiB on the host). A second, small class is graded in two shards that share one gradebook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.course import Course
from grader.dev import redteam, samples
from grader.grading.report import collect

# the sample submissions are made from the student release: made once per test run (conftest)
pytestmark = pytest.mark.usefixtures("release")

COURSE = Course.here()
CHAPTER = COURSE.chapter("qkv")
TIMEOUT = 60  # seconds per notebook; no case here should come near it
BAD_NAME = b"ri-bad-name-\xff\xfe"  # not UTF-8
BAD_EMPTY = b"ri-bad-empty-\xff"
FLOOD_CELLS = 3000
MAX_NOTEBOOK_BYTES = 4 << 20  # the autograded notebook of the flood stays below this on the host


def _shown(raw: bytes) -> str:
    """How a folder name that is not UTF-8 is shown in the records: its bytes, escaped."""
    return raw.decode("utf-8", "backslashreplace")


def _autograde(inbox: Path, workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", "autograde", str(inbox), "--workdir", str(workdir),
                           "--timeout", str(TIMEOUT), *extra], cwd=COURSE.root, capture_output=True, text=True,
                          errors="backslashreplace", timeout=900)


def _bad_folder(inbox: Path, raw: bytes, nb: nbformat.NotebookNode | None) -> None:
    folder = os.fsencode(inbox) + b"/" + raw + b"/" + CHAPTER.id.encode()
    os.makedirs(folder if nb is not None else os.path.dirname(folder))
    if nb is not None:
        with open(folder + b"/" + CHAPTER.notebook.name.encode(), "w") as fh:
            fh.write(nbformat.writes(nb))


def _class(inbox: Path) -> dict:
    """Lay out the class; return what the cases need to be judged by (points, the correct notebook)."""
    released = samples.released(COURSE, CHAPTER)
    variants = samples.student_code(COURSE, CHAPTER)
    points = samples.exercise_points(released)
    correct = {ex: v["correct"] for ex, v in variants.items()}
    good = samples.fill(released, correct)
    order = list(points)
    first, last = order[0], order[-1]

    def raw(nb) -> bytes:  # ASCII JSON: a lone surrogate travels as its \u escape, as a student's file would
        return json.dumps(nb, ensure_ascii=True, indent=1).encode()

    samples.hand_in(inbox, "ri-control", CHAPTER, good)
    _bad_folder(inbox, BAD_NAME, good)
    _bad_folder(inbox, BAD_EMPTY, None)
    samples.hand_in(inbox, "ri-exit-71", CHAPTER, samples.fill(
        released, {**correct, first: correct[first] + "\nimport os\nos._exit(71)\n"}))
    spin = ("\nimport resource, time\n"
            "_cpu = int(time.process_time()) + 1\n"
            "try:\n    resource.setrlimit(resource.RLIMIT_CPU, (_cpu, _cpu))\nexcept (OSError, ValueError):\n"
            "    pass\n"
            "_start = time.process_time()\n"
            "while time.process_time() - _start < 3:\n    pass\n")
    samples.hand_in(inbox, "ri-cpu-rlimit", CHAPTER, samples.fill(released, {**correct, last: correct[last] + spin}))
    marked = redteam._append(good, "")
    marked.cells[-1] = nbformat.v4.new_markdown_cell("a lone surrogate: \ud800 and \udcff")
    samples.hand_in(inbox, "ri-surrogate-markdown", CHAPTER, raw=raw(marked))
    printed = redteam._insert_after_setup(good, "print('\\ud800 printed')\n")
    printed = redteam._append(printed, "raise ValueError('\\udcff in a message')\n")
    samples.hand_in(inbox, "ri-surrogate-output", CHAPTER, raw=raw(printed))
    nested = json.loads(nbformat.writes(good))
    nested["metadata"]["deep"] = "@deep@"
    deep = json.dumps(nested).replace('"@deep@"', "[" * 100_000 + "]" * 100_000)
    samples.hand_in(inbox, "ri-deep-json", CHAPTER, raw=deep.encode())
    flood = nbformat.from_dict(json.loads(nbformat.writes(good)))
    at = 1 + next(i for i, c in enumerate(flood.cells) if c.cell_type == "code")  # after the setup cell
    flood.cells[at:at] = [nbformat.v4.new_code_cell("print('spam ' * 5000)") for _ in range(FLOOD_CELLS)]
    samples.hand_in(inbox, "ri-output-flood", CHAPTER, flood)
    return {"points": points, "full": sum(points.values()), "last": last}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    inbox = tmp_path_factory.mktemp("intake")
    ws = COURSE.workspace(tmp_path_factory.mktemp("intake-work"))
    info = _class(inbox)
    result = _autograde(inbox, ws.folder, "--jobs", "2")
    rows = {r.student: r for r in collect(ws)} if ws.db_url and result.returncode in (0, 3) else {}
    return info, rows, ws, result


def _row(graded, student):
    _, rows, _, result = graded
    assert student in rows, f"{student}: no record (exit {result.returncode})\n" + (result.stdout
                                                                                       + result.stderr)[-3000:]
    return rows[student]


def test_the_batch_survives_every_case_and_the_exit_code_is_not_theirs(graded):
    _, rows, _, result = graded
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    errors = {s: r.reason for s, r in rows.items() if r.status == "error"}
    assert not errors, errors


def test_the_control_beside_the_attacks_keeps_full_marks(graded):
    info, *_ = graded
    control = _row(graded, "ri-control")
    assert (control.status, control.score) == ("graded", info["full"]), control


def test_a_folder_name_that_is_not_utf8_is_recorded_escaped_and_failed_at_intake(graded):
    for raw in (BAD_NAME, BAD_EMPTY):
        row = _row(graded, _shown(raw))
        assert row.status == "failed" and "UTF-8" in row.reason, row
        assert "\\xff" in row.reason, row  # the name as it is on disk, escaped


def test_the_notebooks_own_exit_code_71_is_its_own_doing(graded):
    row = _row(graded, "ri-exit-71")
    assert row.status == "flagged" and row.score == 0, row
    assert "code 71" in row.reason and "could not be set up" not in row.reason, row


def test_lowering_its_own_cpu_limit_is_never_a_kill_from_outside(graded):
    info, *_ = graded
    row = _row(graded, "ri-cpu-rlimit")
    assert row.status == "flagged" and "killed from outside" not in row.reason, row  # flagged: imports resource
    assert row.score + row.held >= info["full"] - info["points"][info["last"]], row  # judged, held for review


def test_lone_surrogates_are_replaced_and_the_notebook_is_graded(graded):
    info, _, ws, _ = graded
    for student in ("ri-surrogate-markdown", "ri-surrogate-output"):
        row = _row(graded, student)
        assert (row.status, row.score) == ("graded", info["full"]), row
        written = (ws.path("autograded", student, CHAPTER.id) / CHAPTER.notebook.name).read_text()
        assert "\ufffd" in written, student
    assert "surrogate" in _row(graded, "ri-surrogate-markdown").reason


def test_a_deeply_nested_notebook_is_rejected_at_intake(graded):
    row = _row(graded, "ri-deep-json")
    assert row.status == "failed" and "nested" in row.reason, row


def test_an_output_flood_is_cut_before_it_reaches_the_host_and_costs_no_point(graded):
    info, _, ws, _ = graded
    row = _row(graded, "ri-output-flood")
    assert (row.status, row.score) == ("graded", info["full"]), row
    path = ws.path("autograded", "ri-output-flood", CHAPTER.id) / CHAPTER.notebook.name
    assert path.stat().st_size < MAX_NOTEBOOK_BYTES, path.stat().st_size
    assert "output not kept" in path.read_text()


def test_two_shards_of_a_class_with_a_bad_name_both_finish(tmp_path):
    inbox, work = tmp_path / "in", tmp_path / "work"
    released = samples.released(COURSE, CHAPTER)
    correct = {ex: v["correct"] for ex, v in samples.student_code(COURSE, CHAPTER).items()}
    good = samples.fill(released, correct)
    samples.hand_in(inbox, "ri-shard-control", CHAPTER, good)
    _bad_folder(inbox, BAD_NAME, good)
    _bad_folder(inbox, BAD_EMPTY, None)
    for shard in ("1/2", "2/2"):
        result = _autograde(inbox, work, "--jobs", "1", "--shard", shard)
        assert result.returncode == 0, f"shard {shard}\n" + (result.stdout + result.stderr)[-3000:]
    rows = {r.student: r for r in collect(COURSE.workspace(work))}
    full = sum(samples.exercise_points(released).values())
    assert (rows["ri-shard-control"].status, rows["ri-shard-control"].score) == ("graded", full)
    for raw in (BAD_NAME, BAD_EMPTY):
        assert rows[_shown(raw)].status == "failed", rows[_shown(raw)]
