"""nbgrader preprocessors for autograding.

``SkipDemoCells``: cells tagged ``demo`` (training runs, timing and memory measurements, figures) are
not run while grading. They define nothing that an exercise or a test needs (a rule of the chapters,
tested by grading the source notebook), so skipping them changes no score and keeps a graded notebook
to its imports, the student's code and the tests. Only ungraded cells are skipped: the step runs after
nbgrader has restored the locked cells from the gradebook, and a student who tags a test or solution
cell ``demo`` changes nothing.

``StderrIsNotAnError``: a test cell fails by raising, not by writing to stderr.

nbgrader scores a test cell zero when it has *any* stderr output, so a correct answer that emits a
``UserWarning`` (or a library's deprecation notice) would lose its points. This step, placed just before
``SaveAutoGrades``, turns stderr text in graded code cells into stdout text, so the warning still shows
in the feedback while only an error output decides the grade. ``nbgrader_config.py`` installs it, so
plain ``nbgrader autograde`` scores the same way.
"""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from ..cells import SKIPPED, is_demo, nbgrader_meta


class SkipDemoCells(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        if is_demo(cell):
            cell.source = SKIPPED
            cell.outputs = []
        return cell, resources


class StderrIsNotAnError(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and nbgrader_meta(cell).get("grade"):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream" and out.get("name") == "stderr":
                    out["name"] = "stdout"
        return cell, resources
