"""nbgrader configuration: plain `nbgrader ...` commands work from the repository root.

The course's source notebooks are nbgrader assignments under book/ (book/ch02_qkv/qkv.ipynb is
assignment ch02_qkv, notebook qkv); everything nbgrader generates lives under _build/.
"""

import os

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearHiddenTests,
    ClearMarkScheme,
    ClearOutput,
    ClearSolutions,
    ComputeChecksums,
    Execute,
    GetGrades,
    IgnorePattern,
    IncludeHeaderFooter,
    InstantiateTests,
    LimitOutput,
    LockCells,
    SaveAutoGrades,
    SaveCells,
)

from grader.grading.feedback import FeedbackHTML, HideHiddenTests
from grader.grading.scoring import SkipDemoCells, StderrIsNotAnError
from grader.release import RemoveClaimCells

c = get_config()  # noqa: F821 -- provided by traitlets when nbgrader loads this file

root = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(root, "_build"), exist_ok=True)

c.CourseDirectory.root = root
c.CourseDirectory.course_id = "self-attention"
c.CourseDirectory.source_directory = "book"
c.CourseDirectory.release_directory = "_build/release"
c.CourseDirectory.submitted_directory = "_build/submitted"
c.CourseDirectory.autograded_directory = "_build/autograded"
c.CourseDirectory.feedback_directory = "_build/feedback"
c.CourseDirectory.solution_directory = "_build/solution"
c.CourseDirectory.source_with_tests_directory = "_build/source_with_tests"
# SQLite by default; pass --CourseDirectory.db_url=postgresql://... (or `grader ... --db URL`) to share one.
# The timeout lets parallel graders wait for each other's writes instead of failing on a locked file.
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(root, "_build", "gradebook.db") + "?timeout=60"
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "data/recorded"]

# Per-cell limit while autograding; `grader autograde` adds a whole-notebook limit on top.
c.Execute.timeout = 120
c.Execute.extra_arguments = ["--HistoryManager.hist_file=:memory:", "--IPKernelApp.log_level=ERROR"]
# Cells tagged `demo` are not run while grading; a test cell fails by raising, not because the
# student's code printed a warning (grader/grading/scoring.py).
c.Autograde.autograde_preprocessors = [
    SkipDemoCells, Execute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, StderrIsNotAnError, SaveAutoGrades,
    AssignLatePenalties, CheckCellMetadata,
]
# Feedback shows scores and error messages, never the hidden tests (see grader/grading/feedback.py).
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
# nbconvert's HTML exporter without its BeautifulSoup re-parse of every page (a third of the time)
c.GenerateFeedback.exporter_class = FeedbackHTML
# The release is nbgrader's own, with the book's claim cells (grader/release.py) left out first.
c.GenerateAssignment.preprocessors = [
    RemoveClaimCells, IncludeHeaderFooter, InstantiateTests, LockCells, ClearSolutions, ClearOutput, CheckCellMetadata,
    ComputeChecksums, SaveCells, ClearHiddenTests, ClearMarkScheme, ComputeChecksums, CheckCellMetadata,
]
