"""``grader``: build the published book, release student notebooks, autograde, report.

    grader book [CHAPTER ...] [--instructor] [--fresh] [--out DIR] [--english-only]
                [--student-repo URL [--branch B] [--jupyterhub URL]]
    grader locales [--check]
    grader release [CHAPTER ...] [--force]
    grader autograde SUBMITTED_DIR [--chapter CH ...] [--student S ...] [--exercise NAME] [--jobs N]
                     [--shard I/N|auto] [--timeout S] [--memory GB] [--dry-run] [--db URL] [--workdir DIR]
    grader report [--csv PATH] [--no-feedback] [--html [DIR]] [--db URL] [--workdir DIR]
    grader review [--release STUDENT CHAPTER | --keep STUDENT CHAPTER] [--all] [--db URL] [--workdir DIR]
    grader export --lms canvas|moodle [--to PATH] [--id-field id|email|lms_user_id] [--name CH=COLUMN ...]
                  [--missing TEXT] [--db URL] [--workdir DIR]
    grader validate PATH.ipynb [--timeout S] [--student]

Chapters are named by id (ch02_qkv), slug (qkv) or number (2). Mistakes in the arguments are reported
in one line, without a traceback. Exit codes: 0 done, 1 the command failed, 2 a usage mistake, 3 (autograde)
some submissions hit a grader error (status ``error``: retried once, not the students' fault; grade them
again). ``validate`` also works without the course repository (student mode,
``python -m grader validate`` in the released student repository, which carries this package).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .course import Course, GraderError, UsageError


def _shown(path: Path, root: Path) -> Path:
    return path.relative_to(root) if path.is_relative_to(root) else path


def _book(course: Course, args: argparse.Namespace) -> int:
    from .book.site import Launch, build_sites, publish_downloads
    from .book.stage import stage
    from .release import release_if_stale

    chapters = course.select(args.chapters)
    kind = "instructor" if args.instructor else "student"
    launch = None
    if args.student_repo:
        if args.instructor:
            raise UsageError("--student-repo is for the published book, not the instructor preview")
        launch = Launch(args.student_repo, branch=args.branch, jupyterhub_url=args.jupyterhub or "")
    start = time.perf_counter()
    print(f"Staging the {kind} book ({len(chapters)} chapter(s))")
    staged = stage(course, chapters, course.build / ("stage-instructor" if args.instructor else "stage"),
                   instructor=args.instructor)
    html = course.build / ("instructor" if args.instructor else "site") / "html"
    if args.out:
        html = Path(args.out).resolve()
    languages = []
    if not args.instructor and not args.english_only:
        from .book.locales import LANGUAGES

        languages = list(LANGUAGES)
    print(f"Building the site into {_shown(html, course.root)}"
          + "".join(f", the {code} site into {_shown(html / LANGUAGES[code].folder, course.root)}"
                    for code in languages))
    sites = build_sites(course, staged, html, languages, strict=not args.lenient, fresh=args.fresh, launch=launch)
    if not args.instructor:
        release_if_stale(course, chapters)
        for site in sites:
            publish_downloads(course, chapters, site)
        print("Chapter downloads serve the released student notebooks")
    print(f"Done in {time.perf_counter() - start:.0f} s. Open {_shown(html / 'index.html', course.root)}")
    if args.instructor:
        print("This is the staff preview, with solutions and hidden tests: never publish it.")
    return 0


def _locales(course: Course, args: argparse.Namespace) -> int:
    from .book import locales
    from .book.site import extract_messages
    from .book.stage import stage

    print("Staging the book to extract its messages")
    staged = stage(course, course.chapters(), course.build / "stage", instructor=False)
    pot = extract_messages(course, staged)
    failed = 0
    for code in locales.LANGUAGES:
        if args.check:
            problems = locales.check(course, pot, code)
            for line in problems:
                print(f"  {code}/{line}")
            print(f"{code}: {len(problems)} problem(s)" + (" (all translated, none fuzzy)" if not problems else ""))
            failed += bool(problems)
        else:
            counts = locales.update(course, pot, code)
            print(f"{code}: {counts['messages']} messages in {_shown(locales.catalogs(course, code), course.root)}: "
                  f"{counts['new']} untranslated, {counts['fuzzy']} fuzzy, {counts['filled']} with nothing to "
                  f"translate filled in, {counts['removed pages']} removed page(s)")
    return 1 if failed else 0


def _release(course: Course, args: argparse.Namespace) -> int:
    from .release import release

    print("Releasing student notebooks (nbgrader generate_assignment)")
    release(course, course.select(args.chapters), workspace=course.workspace(args.workdir, args.db), force=args.force)
    return 0


def _autograde(course: Course, args: argparse.Namespace) -> int:
    from .grading.autograde import autograde
    from .grading.sandbox import Limits

    chapters = course.select(args.chapter) if args.chapter else None
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if args.timeout <= 0 or args.memory <= 0:
        raise UsageError("--timeout and --memory must be positive")
    shard = _shard(args.shard) if args.shard else None
    what = "Checking" if args.dry_run else "Autograding"
    print(f"{what} {args.submitted} with {args.jobs} job(s)" + (f", shard {shard[0]}/{shard[1]}" if shard else ""))
    limits = Limits(wall=args.timeout, cpu=int(args.timeout * 2) + 10, memory=int(args.memory * 2**30))
    results = autograde(course, Path(args.submitted), chapters=chapters,
                        workspace=course.workspace(args.workdir, args.db), jobs=args.jobs, timeout=args.timeout,
                        shard=shard, dry_run=args.dry_run, limits=limits, students=args.student,
                        exercise=args.exercise)
    if args.dry_run:
        return 0
    counts = {s: [r for r in results if r.status == s] for s in ("graded", "flagged", "failed", "error")}
    print(f"{len(results)} submission(s): {len(counts['graded'])} graded, {len(counts['flagged'])} flagged "
          f"(the notebook crashed or ran out of time: only the tests it reached count), "
          f"{len(counts['failed'])} failed (score 0), {len(counts['error'])} error (a grader problem, not the "
          f"student's: needs your attention).")
    for status in ("flagged", "failed", "error"):
        reasons: dict[str, int] = {}
        for r in counts[status]:
            key = r.reason.split(";")[0]
            reasons[key] = reasons.get(key, 0) + 1
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            print(f"  {status}: {n} x {reason}")
    print("Run `grader report` for the table and the feedback.")
    if counts["error"]:
        print(f"{len(counts['error'])} submission(s) hit a grader error twice and have no grade: run the same "
              "command again (re-grading is idempotent); if it persists, it is a bug of the grader.",
              file=sys.stderr)
        return 3
    return 0


SHARD_COUNT_ENV = "GRADER_SHARD_COUNT"


def shard_from_env(env=None) -> tuple[int, int]:
    """``--shard auto``: this machine's shard (1-based) and the count, from the variables a scheduler
    sets: a Slurm job array (``SLURM_ARRAY_TASK_ID`` minus ``SLURM_ARRAY_TASK_MIN``, over
    ``SLURM_ARRAY_TASK_STEP``, of ``SLURM_ARRAY_TASK_COUNT``) or a Kubernetes Indexed Job
    (``JOB_COMPLETION_INDEX``, 0-based, of ``GRADER_SHARD_COUNT``: the Job's ``completions``, which
    Kubernetes does not pass itself). ``GRADER_SHARD_COUNT``, when set, is the count in both cases."""
    env = os.environ if env is None else env

    def number(name: str) -> int:
        try:
            return int(env[name])
        except ValueError:
            raise UsageError(f"--shard auto: {name}={env[name]!r} is not a number") from None

    count = number(SHARD_COUNT_ENV) if env.get(SHARD_COUNT_ENV) else None
    if env.get("SLURM_ARRAY_TASK_ID"):
        step = number("SLURM_ARRAY_TASK_STEP") if env.get("SLURM_ARRAY_TASK_STEP") else 1
        first = number("SLURM_ARRAY_TASK_MIN") if env.get("SLURM_ARRAY_TASK_MIN") else 0
        offset = number("SLURM_ARRAY_TASK_ID") - first
        if offset % max(step, 1):
            raise UsageError("--shard auto: SLURM_ARRAY_TASK_ID is not on the array's step")
        index = offset // max(step, 1)
        if count is None:
            if not env.get("SLURM_ARRAY_TASK_COUNT"):
                raise UsageError("--shard auto: SLURM_ARRAY_TASK_COUNT is not set")
            count = number("SLURM_ARRAY_TASK_COUNT")
        where = "the Slurm array task"
    elif env.get("JOB_COMPLETION_INDEX"):
        index = number("JOB_COMPLETION_INDEX")
        if count is None:
            raise UsageError(f"--shard auto: JOB_COMPLETION_INDEX is set but not {SHARD_COUNT_ENV} (set it to the "
                             "Job's completions)")
        where = "the Kubernetes Job's completion index"
    else:
        raise UsageError("--shard auto: neither SLURM_ARRAY_TASK_ID (a Slurm job array) nor JOB_COMPLETION_INDEX "
                         "(a Kubernetes Indexed Job) is set")
    if not 0 <= index < count:
        raise UsageError(f"--shard auto: {where} ({index}, from 0) is not below the count {count} (an array with "
                         "gaps or an uneven step is not supported: use 0-(N-1))")
    return index + 1, count


def _shard(text: str) -> tuple[int, int]:
    if text in ("auto", "env"):
        return shard_from_env()
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard takes I/N, like 1/3 (got {text!r})") from None
    if not 1 <= index <= count:
        raise UsageError(f"--shard {text}: I must be between 1 and N")
    return index, count


def _report(course: Course, args: argparse.Namespace) -> int:
    from .grading.report import collect, feedback, needs_attention, table, write_csv

    ws = course.workspace(args.workdir, args.db)
    if args.db is None and not (ws.folder / "gradebook.db").exists():
        raise UsageError(f"no gradebook in {ws.folder}: run `grader autograde SUBMITTED_DIR` first")
    rows = collect(ws)
    print(table(rows))
    attention = needs_attention(rows)
    if attention:
        print(f"\n{len(attention)} submission(s) need your attention (status error: a grader problem, not the "
              "student's; no score): grade them again with `grader autograde`.")
    path = write_csv(rows, Path(args.csv) if args.csv else ws.folder / "grades.csv")
    print(f"\nCSV: {path}")
    if not args.no_feedback:
        problems = feedback(course, ws, rows)
        print(f"Feedback HTML: {ws.path('feedback')}/<student>/<chapter>/")
        for p in problems:
            print(f"warning: {p}", file=sys.stderr)
    if args.html is not None:
        from .grading import insights

        start = time.perf_counter()
        index = insights.build(course, ws, Path(args.html) if args.html else None)
        print(f"Report: {index} (and a page per chapter beside it), made in {time.perf_counter() - start:.1f} s")
    return 0


def _export(course: Course, args: argparse.Namespace) -> int:
    import json

    from .grading.lms import EXPORTERS
    from .nbgrader_run import nbgrader

    ws = course.workspace(args.workdir, args.db)
    if args.db is None and not (ws.folder / "gradebook.db").exists():
        raise UsageError(f"no gradebook in {ws.folder}: run `grader autograde SUBMITTED_DIR` first")
    names = {}
    for item in args.name:
        chapter, sep, column = item.partition("=")
        if not sep or not chapter or not column:
            raise UsageError(f"--name {item!r}: write CHAPTER=COLUMN, e.g. 'ch02_qkv=Chapter 2 (12345)'")
        names[course.chapter(chapter).id] = column
    to = Path(args.to).resolve() if args.to else ws.folder / f"{args.lms}-grades.csv"
    plugin = EXPORTERS[args.lms].rsplit(".", 1)[1]
    result = nbgrader(course, ["export", f"--exporter={EXPORTERS[args.lms]}", f"--to={to}",
                               f"--{plugin}.id_field={args.id_field}", f"--{plugin}.missing={args.missing}",
                               f"--{plugin}.names={json.dumps(names)}"], workspace=ws,
                      log_file=ws.path("logs") / f"export-{args.lms}.log")
    if not result.ok:
        raise GraderError(f"nbgrader export: {result.last_error()}")
    print(f"{args.lms.capitalize()} import file: {to}")
    return 0


def _review(course: Course, args: argparse.Namespace) -> int:
    from .grading import holds

    ws = course.workspace(args.workdir, args.db)
    if args.db is None and not (ws.folder / "gradebook.db").exists():
        raise UsageError(f"no gradebook in {ws.folder}: run `grader autograde SUBMITTED_DIR` first")
    decision = holds.RELEASED if args.release else holds.KEPT if args.keep else None
    if decision is not None:
        student, chapter = args.release or args.keep
        if not any(r.student == student and r.chapter == chapter for r in holds.load(ws.db_url)):
            raise UsageError(f"nothing of {student}/{chapter} is held for review (see `grader review --all`)")
        n = holds.decide(ws.db_url, student, chapter, decision)
        verb = "released: their judged points count" if decision == holds.RELEASED else "kept at 0"
        print(f"{student}/{chapter}: {n} held test(s) {verb}. Run `grader report` for the new totals and feedback.")
        return 0
    rows = holds.load(ws.db_url, pending_only=not args.all)
    if not rows:
        print("nothing is held for review" + ("" if args.all else " (decided ones: `grader review --all`)"))
        return 0
    by_submission: dict[tuple[str, str], list] = {}
    for r in rows:
        by_submission.setdefault((r.student, r.chapter), []).append(r)
    for (student, chapter), held in by_submission.items():
        points = sum(r.points for r in held)
        print(f"== {student}/{chapter}: {points:g} point(s) of {len(held)} test(s) held "
              f"[{', '.join(sorted({r.decision for r in held}))}]")
        print(f"   tests: {', '.join(r.grade_id for r in held)}")
        print(f"   why: {held[0].reason}")
        for index, source, hits in held[0].cells:
            print(f"   -- cell {index}: {', '.join(hits)}")
            lines = source.splitlines()
            for line in lines[:args.lines]:
                print(f"      | {line}")
            if len(lines) > args.lines:
                print(f"      | ... ({len(lines) - args.lines} more lines)")
        print(f"   decide: grader review --release {student} {chapter}   |   grader review --keep {student} {chapter}")
    return 0


def _validate(course: Course | None, args: argparse.Namespace) -> int:
    from .student.validate import validate

    if args.timeout < 1:
        raise UsageError("--timeout must be at least 1 second")
    return validate(course, Path(args.notebook), timeout=args.timeout)


def _course(args: argparse.Namespace) -> Course | None:
    """The course repository; for ``validate`` None (student mode) with --student or outside the repository."""
    if args.command != "validate":
        return Course.here()
    if args.student:
        return None
    try:
        return Course.here()
    except UsageError:  # a student's folder: the notebook alone is checked
        return None


WORKDIR_HELP = ("folder for nbgrader's submitted/, autograded/ and feedback/ folders and the default "
                "gradebook (default: _build)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="grader", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("book", help="stage the student view and build the published site")
    b.add_argument("chapters", nargs="*", metavar="CHAPTER")
    b.add_argument("--instructor", action="store_true", help="staff preview with solutions (never publish)")
    b.add_argument("--student-repo", metavar="URL",
                   help="public repository holding _build/release/'s layout: adds Binder/Colab launch buttons")
    b.add_argument("--branch", default="main", help="branch of --student-repo (default: main)")
    b.add_argument("--jupyterhub", metavar="URL", help="also a JupyterHub launch button (needs nbgitpuller)")
    b.add_argument("--out", metavar="DIR",
                   help="build the site into DIR (default: _build/site/html, or _build/instructor/html)")
    b.add_argument("--fresh", action="store_true", help="rebuild every page from scratch")
    b.add_argument("--lenient", action="store_true", help="do not treat Sphinx warnings as errors")
    b.add_argument("--english-only", action="store_true", help="leave out the translated sites (_build/site/html/zh)")
    b.set_defaults(func=_book)

    loc = sub.add_parser("locales", help="update the translation catalogs (book/locales) from the English text")
    loc.add_argument("--check", action="store_true",
                     help="change nothing; fail when a message is untranslated, fuzzy or out of date")
    loc.set_defaults(func=_locales)

    r = sub.add_parser("release", help="make the student notebooks with nbgrader")
    r.add_argument("chapters", nargs="*", metavar="CHAPTER")
    r.add_argument("--force", action="store_true",
                   help="release every chapter again, also those already released from their current source")
    r.add_argument("--db", help="gradebook SQLAlchemy URL (default: WORKDIR/gradebook.db)")
    r.add_argument("--workdir", help=WORKDIR_HELP)
    r.set_defaults(func=_release)

    a = sub.add_parser("autograde", help="grade submissions laid out as <student>/<chapter>/<notebook>.ipynb")
    a.add_argument("submitted", metavar="SUBMITTED_DIR")
    a.add_argument("--chapter", action="append", metavar="CHAPTER", help="only this chapter (repeatable)")
    a.add_argument("--student", action="append", metavar="STUDENT", help="only this student (repeatable)")
    a.add_argument("--exercise", metavar="NAME",
                   help="judge only this exercise's tests again (its name, or a test cell's grade id), e.g. after "
                        "fixing a hidden test; every other grade stays")
    a.add_argument("--db", help="gradebook SQLAlchemy URL (default: WORKDIR/gradebook.db)")
    a.add_argument("--workdir", help=WORKDIR_HELP)
    a.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    a.add_argument("--timeout", type=float, default=600,
                   help="wall-clock limit for one whole notebook, seconds (default 600)")
    a.add_argument("--memory", type=float, default=4,
                   help="memory a notebook may use beyond the interpreter's own, GiB (default 4)")
    a.add_argument("--shard", metavar="I/N",
                   help="grade only shard I of N (N machines, one shared --db); 'auto': I and N from a Slurm job "
                        "array or a Kubernetes Indexed Job (JOB_COMPLETION_INDEX with GRADER_SHARD_COUNT)")
    a.add_argument("--dry-run", action="store_true", help="check and list the submissions, grade nothing")
    a.set_defaults(func=_autograde)

    t = sub.add_parser("report", help="grade table, CSV and feedback HTML")
    t.add_argument("--db", help="gradebook SQLAlchemy URL (default: WORKDIR/gradebook.db)")
    t.add_argument("--workdir", help=WORKDIR_HELP)
    t.add_argument("--csv", help="where to write the CSV (default _build/grades.csv)")
    t.add_argument("--no-feedback", action="store_true", help="skip nbgrader's feedback HTML")
    t.add_argument("--html", nargs="?", const="", metavar="DIR",
                   help="also the instructor's pages: what the class got wrong, per chapter and exercise, and what "
                        "to review (default DIR: WORKDIR/report)")
    t.set_defaults(func=_report)

    rv = sub.add_parser("review", help="the points held for review: list them, release or keep them")
    rv.add_argument("--db", help="gradebook SQLAlchemy URL (default: WORKDIR/gradebook.db)")
    rv.add_argument("--workdir", help=WORKDIR_HELP)
    decide = rv.add_mutually_exclusive_group()
    decide.add_argument("--release", nargs=2, metavar=("STUDENT", "CHAPTER"),
                        help="the held tests of this submission count as judged")
    decide.add_argument("--keep", nargs=2, metavar=("STUDENT", "CHAPTER"),
                        help="the held tests of this submission stay at 0")
    rv.add_argument("--all", action="store_true", help="list decided holds too")
    rv.add_argument("--lines", type=int, default=12, help="lines of each flagged cell shown (default 12)")
    rv.set_defaults(func=_review)

    x = sub.add_parser("export", help="the grades as an LMS import file (nbgrader export with our exporters)")
    x.add_argument("--lms", choices=["canvas", "moodle"], required=True)
    x.add_argument("--to", metavar="PATH", help="the file to write (default WORKDIR/<lms>-grades.csv)")
    x.add_argument("--id-field", choices=["id", "email", "lms_user_id"], default="id",
                   help="the student field the LMS matches on (default id: nbgrader's student id)")
    x.add_argument("--name", action="append", metavar="CHAPTER=COLUMN", default=[],
                   help="the LMS's column name for a chapter, e.g. 'ch02_qkv=Chapter 2 (12345)' (repeatable)")
    x.add_argument("--missing", default="", help="what a missing or ungraded score is written as (default empty)")
    x.add_argument("--db", help="gradebook SQLAlchemy URL (default: WORKDIR/gradebook.db)")
    x.add_argument("--workdir", help=WORKDIR_HELP)
    x.set_defaults(func=_export)

    v = sub.add_parser("validate", help="a student's check: run a notebook and its visible tests, per exercise")
    v.add_argument("notebook", metavar="PATH.ipynb")
    v.add_argument("--timeout", type=int, default=60, help="time limit for each cell, seconds (default 60)")
    v.add_argument("--student", action="store_true",
                   help="check the notebook against its own test cells, as a student without the course "
                        "repository does (the default outside the repository)")
    v.set_defaults(func=_validate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(_course(args), args)
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("grader."):
            raise
        print(f"grader: error: `grader {args.command}` is not in this copy of the grader (the student kit "
              "carries only `validate`)", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"grader: error: {exc}", file=sys.stderr)
        return 2
    except GraderError as exc:
        print(f"grader: {args.command} failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
