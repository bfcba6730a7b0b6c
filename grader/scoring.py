"""nbgrader preprocessor for autograding: a test cell fails by raising, not by writing to stderr.

nbgrader scores a test cell zero when it has *any* stderr output, so a correct answer that emits a
``UserWarning`` (or a library's deprecation notice) would lose its points. This step, placed just before
``SaveAutoGrades``, turns stderr text in graded code cells into stdout text, so the warning still shows
in the feedback while only an error output decides the grade. ``nbgrader_config.py`` installs it, so
plain ``nbgrader autograde`` scores the same way.
"""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from .cells import nbgrader_meta


class StderrIsNotAnError(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and nbgrader_meta(cell).get("grade"):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream" and out.get("name") == "stderr":
                    out["name"] = "stdout"
        return cell, resources
