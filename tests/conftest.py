"""Fixtures shared by test files: the published site, built once per test session."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grader.course import Course

COURSE = Course.here()
SITE = COURSE.build / "site" / "html"
# The site is built with launch buttons pointing at a (fictitious) public student repository, so that the
# tests can check that Binder, Colab and JupyterHub would open the student notebook.
STUDENT_REPO = "https://github.com/example-course/self-attention-student"
JUPYTERHUB = "https://hub.example.edu"


@pytest.fixture(scope="session")
def site():
    result = subprocess.run([sys.executable, "-m", "grader", "book", "--student-repo", STUDENT_REPO,
                             "--jupyterhub", JUPYTERHUB], cwd=COURSE.root, capture_output=True, text=True,
                            timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert (SITE / "index.html").is_file()
    return SITE
