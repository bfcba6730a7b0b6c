"""Fixtures shared by test files, and how the suite is spread over the cores.

``site`` is the book as ``make book`` publishes it (``_build/site/html``): no ``--student-repo``, hence no
launch buttons and no placeholder links. ``launch_site`` is the same book built with launch buttons that
point at a (fictitious) public student repository, into ``_build/launch-site/html`` (never published),
so that the tests can check that Binder, Colab and JupyterHub would open the student notebook.
``release`` is the student release (``grader release``, into ``_build/release``), which the grading tests'
sample submissions are made from.

``make test`` runs the suite in two processes (pytest-xdist, ``-n 2``, scheduled by
:func:`pytest_xdist_make_scheduler`). Each test module is one unit of work that one process runs whole (its
module fixtures, a grading batch for instance, are made once), except that the modules which read the built
site (:data:`SITE_MODULES`) form a single unit: one process builds the site and runs them all while the
other runs the rest. The units start slowest first (:data:`SLOW_FIRST`), so that neither process is left
with a long one at the end. What both processes need (the release, the site) is made once per test run, by
whichever comes first, under a file lock (:func:`once_per_run`): the other waits and reuses it. Run alone
(plain ``pytest``), nothing changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from grader.course import Course

COURSE = Course.here()
SITE = COURSE.build / "site" / "html"
LAUNCH_SITE = COURSE.build / "launch-site" / "html"
STUDENT_REPO = "https://github.com/example-course/self-attention-student"
JUPYTERHUB = "https://hub.example.edu"
# one id for the whole run: pytest-xdist gives its workers the same one; a run without it makes its own
RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex
SITE_MODULES = ("test_book", "test_browser", "test_locales")
# the longest units first (measured with `make bench-tests`); the others follow in collection order
SLOW_FIRST = ("site", "test_grading", "test_redteam", "test_scale", "test_tamper", "test_validate", "test_load",
              "test_student_code", "test_flash_triton", "test_bench", "test_redteam_intake")


@contextlib.contextmanager
def _locked(name: str):
    COURSE.build.mkdir(parents=True, exist_ok=True)
    with open(COURSE.build / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def once_per_run(name: str, make) -> None:
    """Call ``make()`` once in this test run, in whichever process asks first; the others wait for it to
    finish and then reuse what it made. A ``make`` that fails is tried again by the next one that asks."""
    marker = COURSE.build / f".{name}.done"
    with _locked(name):
        if marker.exists() and marker.read_text() == RUN_ID:
            return
        marker.unlink(missing_ok=True)
        make()
        marker.write_text(RUN_ID)


def grader_command(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "grader", *args], cwd=COURSE.root,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


@pytest.fixture(scope="session")
def release() -> Path:
    once_per_run("release", lambda: grader_command("release", timeout=900))
    return COURSE.build / "release"


@pytest.fixture(scope="session")
def site(release):
    once_per_run("site", lambda: grader_command("book"))
    assert (SITE / "index.html").is_file()
    return SITE


@pytest.fixture(scope="session")
def launch_site(site):
    once_per_run("launch-site", lambda: grader_command(
        "book", "--student-repo", STUDENT_REPO, "--jupyterhub", JUPYTERHUB, "--out", str(LAUNCH_SITE),
        "--english-only"))
    assert (LAUNCH_SITE / "index.html").is_file()
    return LAUNCH_SITE


def _unit(path: str) -> str:
    """The unit of work a test belongs to: its module, or ``site`` for the modules that read the site."""
    module = Path(path.split("::", 1)[0]).stem
    return "site" if module in SITE_MODULES else module


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(_unit(item.nodeid), len(rank)))  # stable: collection order within a unit


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scope scheduling with :func:`_unit` as the scope: a unit runs whole in one process, in
    the order of the collection (slowest first). (Its ``xdist_group`` marks rename node ids, which pytest 9.2
    no longer lets a plugin do; a scheduler of our own does not depend on that.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return ByUnit(config, log)
