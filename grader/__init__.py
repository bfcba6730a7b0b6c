"""The course's tooling over nbgrader, one subpackage per job around a few shared modules.

* :mod:`grader.book` builds the published book: stage (execute, student view), site, vendor, deps.
* :mod:`grader.grading` judges submissions: intake, sandbox, harness, wire, verdict, gradebook, report.
* :mod:`grader.student` is what students get: ``grader validate``, their self-check (the student kit).
* :mod:`grader.dev` holds the developers' tools: benchmarks, GPU recording, red team, sample submissions.

Shared by them: :mod:`~grader.course` (where things are), :mod:`~grader.cells` (reading nbgrader cells),
:mod:`~grader.checks` (the declarative hidden-test language), :mod:`~grader.plan` (which cells run, in
what order), :mod:`~grader.submission` (reading a student's file), :mod:`~grader.execute` (running a
notebook), :mod:`~grader.release` with :mod:`~grader.nbgrader_run` (student notebooks through nbgrader),
and :mod:`~grader.cli`, the ``grader`` command that dispatches to them. ``tests/test_layout.py`` pins
the rule: no subpackage imports another (``dev`` excepted), the shared modules import none of them.
"""
