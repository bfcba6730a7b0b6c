"""Fixtures shared by test files: the published site, built once per test session.

``site`` is the book as ``make book`` publishes it (``_build/site/html``): no ``--student-repo``, hence no
launch buttons and no placeholder links. ``launch_site`` is the same book built with launch buttons that
point at a (fictitious) public student repository, into ``_build/launch-site/html`` (never published),
so that the tests can check that Binder, Colab and JupyterHub would open the student notebook.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from grader.course import Course

COURSE = Course.here()
SITE = COURSE.build / "site" / "html"
LAUNCH_SITE = COURSE.build / "launch-site" / "html"
STUDENT_REPO = "https://github.com/example-course/self-attention-student"
JUPYTERHUB = "https://hub.example.edu"


def _build(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "grader", "book", *args], cwd=COURSE.root,
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]


@pytest.fixture(scope="session")
def site():
    _build()
    assert (SITE / "index.html").is_file()
    return SITE


@pytest.fixture(scope="session")
def launch_site(site):
    _build("--student-repo", STUDENT_REPO, "--jupyterhub", JUPYTERHUB, "--out", str(LAUNCH_SITE), "--english-only")
    assert (LAUNCH_SITE / "index.html").is_file()
    return LAUNCH_SITE
