"""The instructor's view (``grader report --html``): static pages of what the class got wrong, built from the
gradebook and viewable offline.

``<workspace>/report/index.html`` is the course overview: per chapter the submissions by status, the
scores' distribution, the points held for review; the pass rate of every exercise; the failures most
students share across the course; the submissions that need a person (grader errors, failed and stopped
notebooks, flagged and held work); the time and memory outliers. ``<workspace>/report/<chapter>.html`` is
one chapter: the scores' and every exercise's distribution, per exercise its pass rate and its **failures
grouped** (the same failing hidden cases and kind are one line, named by the clauses of the statement they
exercise, from the contract table, with the students who share it and the most common message), the hidden
cases that fail most often, the flagged submissions to review (each flagged cell beside the released cell
it replaced, and the reason), and every student's row, linked to their feedback page.

Every number on the pages is computed here from the gradebook's tables (nbgrader's scores, ``grader_runs``,
``grader_holds``, ``grader_verdicts``); :func:`summary` returns them for the tests. Everything a student
wrote (names, messages, cells) is escaped: the pages run no script.
"""

from __future__ import annotations

import html
import json
import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..cells import exercises, nbgrader_meta
from ..course import Chapter, Course, Workspace
from . import holds, items, runs
from .report import Row, collect

STOPPED_WORDS = ("ran longer than", "was stopped", "memory limit", "killed", "died", "ended its own process",
                 "crashed")


@dataclass
class ExerciseStats:
    name: str
    points: float
    scores: list[float] = field(default_factory=list)  # per graded submission: the exercise's judged score
    passed: int = 0

    @property
    def pass_rate(self) -> float:
        return self.passed / len(self.scores) if self.scores else 0.0

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores) if self.scores else 0.0


@dataclass
class ChapterStats:
    chapter: Chapter
    title: str
    max_score: float
    rows: list[Row]
    exercises: dict[str, ExerciseStats]
    groups: list[items.Group]
    cases: list[tuple[str, str, list[str], int]]  # (exercise, case label, clauses, students)
    review: list[dict]  # flagged submissions to review
    counts: dict[str, int]

    @property
    def graded(self) -> list[Row]:
        return [r for r in self.rows if r.status in ("graded", "flagged")]

    @property
    def scores(self) -> list[float]:
        return [r.score for r in self.graded]


def _title(ch: Chapter) -> str:
    nb = nbformat.read(ch.notebook, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ch.id


def _stopped(row: Row) -> bool:
    return row.status == "flagged" and any(w in row.reason for w in STOPPED_WORDS)


def _released_cells(course: Course, ch: Chapter) -> dict[str, str]:
    path = course.build / "release" / ch.id / ch.notebook.name
    if not path.is_file():
        return {}
    nb = nbformat.read(path, as_version=4)
    return {nbgrader_meta(c)["grade_id"]: c.source for c in nb.cells if nbgrader_meta(c).get("grade_id")}


def _submitted_grade_id(ws: Workspace, ch: Chapter, student: str, index: int) -> str:
    path = ws.path("submitted", student, ch.id) / ch.notebook.name
    try:
        nb = nbformat.read(path, as_version=4)
        return str(nbgrader_meta(nb.cells[index]).get("grade_id", "")) if 0 <= index < len(nb.cells) else ""
    except Exception:  # noqa: BLE001 -- a notebook that cannot be read again: the cell stands alone
        return ""


def summary(course: Course, ws: Workspace) -> list[ChapterStats]:
    """Everything the pages show, per chapter that has a submission, from the gradebook."""
    rows = collect(ws)
    verdicts = items.load(ws.db_url)
    held = holds.load(ws.db_url)
    by_chapter = {ch.id: ch for ch in course.chapters()}
    out = []
    for cid in sorted({r.chapter for r in rows if r.chapter in by_chapter}, key=lambda c: by_chapter[c].number):
        ch = by_chapter[cid]
        mine = [r for r in rows if r.chapter == cid]
        counted = {(r.student, r.chapter) for r in mine if r.status in ("graded", "flagged")}
        its = [it for it in verdicts if it.chapter == cid and (it.student, it.chapter) in counted]
        source = nbformat.read(ch.notebook, as_version=4)
        stats = {ex.name: ExerciseStats(ex.name, ex.points) for ex in exercises(source)}
        per: dict[tuple[str, str], list[items.Item]] = {}
        for it in its:
            per.setdefault((it.student, it.exercise), []).append(it)
        for (_, exercise), parts in per.items():
            if exercise not in stats:
                continue
            got = sum(p.score for p in parts)
            stats[exercise].scores.append(got)
            stats[exercise].passed += all(p.passed for p in parts)
        table = items.contract(ch.slug)
        grouped = items.groups(its, {ch.slug: table}, {cid: ch.slug})
        counts = items.case_counts(its)
        cases = sorted(((ex, label, items.clauses(table, ex, label, ""), n)
                        for (_, ex, label), n in counts.items()), key=lambda c: (-c[3], c[0], c[1]))
        released = _released_cells(course, ch)
        review = []
        for r in mine:
            hold_rows = [h for h in held if h.chapter == cid and h.student == r.student]
            if r.status != "flagged" and not hold_rows:
                continue
            cells = []
            for index, text, hits in (hold_rows[0].cells if hold_rows else []):
                grade_id = _submitted_grade_id(ws, ch, r.student, index)
                cells.append({"index": index, "source": text, "hits": hits, "grade_id": grade_id,
                              "released": released.get(grade_id)})
            review.append({"student": r.student, "reason": r.reason, "stopped": _stopped(r), "cells": cells,
                           "held": sum(h.points for h in hold_rows if h.decision == holds.PENDING),
                           "decisions": sorted({h.decision for h in hold_rows}),
                           "tests": [h.grade_id for h in hold_rows]})
        status = Counter(r.status for r in mine)
        out.append(ChapterStats(ch, _title(ch), max((r.max_score for r in mine), default=0.0), mine, stats,
                                grouped, cases, review,
                                {"submissions": len(mine), "graded": status["graded"], "flagged": status["flagged"],
                                 "failed": status["failed"], "error": status["error"],
                                 "held": sum(1 for r in mine if r.held), "stopped": sum(map(_stopped, mine))}))
    return out


def outliers(values: dict[tuple[str, str], float], k: float = 3.0) -> list[tuple[tuple[str, str], float]]:
    """The values above the median by more than ``k`` median absolute deviations (at least 1 % of the
    median), largest first: a robust rule a few slow notebooks cannot shift."""
    known = [v for v in values.values() if v >= 0]
    if len(known) < 4:
        return []
    med = statistics.median(known)
    mad = statistics.median(abs(v - med) for v in known) or 0.01 * med
    return sorted(((key, v) for key, v in values.items() if v > med + k * mad), key=lambda kv: -kv[1])


# ---------------------------------------------------------------------------------------------------
# the pages


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _fmt(x: float) -> str:
    return f"{x:g}"


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


CSS = """
:root { color-scheme: light dark; --fg: #1d232b; --bg: #ffffff; --muted: #59636e; --line: #d0d7de;
  --card: #f6f8fa; --bad: #b3261e; --warn: #8a5300; --good: #1a7f37; --link: #0b5cad; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --bg: #0d1117; --muted: #9aa4ae; --line: #30363d;
  --card: #161b22; --bad: #ff7b72; --warn: #e3b341; --good: #56d364; --link: #6cb6ff; } img.plot { background: #fff; } }
* { box-sizing: border-box; }
body { font: 16px/1.5 system-ui, -apple-system, "Segoe UI", "Noto Sans", "Noto Sans CJK SC", sans-serif;
  color: var(--fg); background: var(--bg); margin: 0 auto; padding: 0 16px 48px; max-width: 1200px; }
a { color: var(--link); } h1 { font-size: 1.6rem; } h2 { font-size: 1.3rem; margin-top: 2rem; }
h3 { font-size: 1.1rem; } .muted { color: var(--muted); }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 8px 0; font-size: 0.92rem; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: var(--card); } td.n, th.n { text-align: right; white-space: nowrap; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 0.85rem; }
pre { background: var(--card); border: 1px solid var(--line); padding: 8px; overflow-x: auto; white-space: pre;
  margin: 4px 0; max-height: 24em; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; } .pair > div { min-width: 0; }
@media (max-width: 700px) { .pair { grid-template-columns: 1fr; } }
img.plot { max-width: 100%; height: auto; display: block; margin: 8px 0; }
.bad { color: var(--bad); } .warn { color: var(--warn); } .good { color: var(--good); }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; margin: 8px 0; }
nav { display: flex; flex-wrap: wrap; gap: 4px 12px; padding: 8px 0; } nav a { white-space: nowrap; }
.wrap { overflow-wrap: anywhere; }
"""


def _page(title: str, body: str, nav: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{_e(title)}</title><style>{CSS}</style></head>\n<body><nav>{nav}</nav>\n{body}\n'
            f'<p class="muted">Made by <code>grader report --html</code> from the gradebook on '
            f'{_e(time.strftime("%Y-%m-%d %H:%M"))}.</p></body></html>\n')


def _table(head: list[str], body: list[list[str]], numeric: set[int] = frozenset()) -> str:
    """A table of already-escaped cells."""
    th = "".join(f'<th{" class=n" if i in numeric else ""}>{h}</th>' for i, h in enumerate(head))
    trs = "".join("<tr>" + "".join(f'<td{" class=n" if i in numeric else ""}>{c}</td>' for i, c in enumerate(row))
                  + "</tr>" for row in body)
    return f'<div class="scroll"><table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table></div>'


def _feedback_link(ws: Workspace, out: Path, ch: Chapter, student: str) -> str:
    page = ws.path("feedback", student, ch.id) / f"{ch.notebook.stem}.html"
    if page.is_file():
        return f'<a href="{_e(os.path.relpath(page, out))}">{_e(student)}</a>'
    return _e(student)


def _memory(b: int) -> str:
    return "-" if b is None or b < 0 else f"{b / 2**20:.0f} MiB"


def _plots(stats: list[ChapterStats], figures: Path) -> dict[str, str]:
    """The figures as PNG files; their names by key."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    figures.mkdir(parents=True, exist_ok=True)
    made = {}
    sns.set_theme(style="whitegrid", context="notebook")

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(figures / f"{name}.png", dpi=110)
        plt.close(fig)
        made[name] = f"figures/{name}.png"

    if stats:
        fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(stats) + 2), 3.6))
        data = [[100 * s / c.max_score for s in c.scores] if c.max_score else [] for c in stats]
        labels = [f"ch{c.chapter.number:02d}" for c in stats]
        ax.boxplot([d or [0] for d in data], showfliers=False)
        for i, d in enumerate(data, start=1):
            jitter = [i + 0.25 * ((k * 0.618) % 1 - 0.5) for k in range(len(d))]
            ax.scatter(jitter, d, s=9, alpha=0.5, color="#0b5cad")
        ax.set_xticks(range(1, len(labels) + 1), labels)
        ax.set_ylabel("score (% of the chapter's points)")
        ax.set_ylim(-3, 103)
        ax.set_title("Scores per chapter (graded and flagged submissions)")
        save(fig, "scores")
        names = [(c, ex) for c in stats for ex in c.exercises.values()]
        fig, ax = plt.subplots(figsize=(7.5, max(2.5, 0.22 * len(names) + 1)))
        ax.barh(range(len(names)), [100 * ex.pass_rate for _, ex in names],
                color=["#1a7f37" if ex.pass_rate >= 0.8 else "#8a5300" if ex.pass_rate >= 0.5 else "#b3261e"
                       for _, ex in names])
        ax.set_yticks(range(len(names)), [f"ch{c.chapter.number:02d} {ex.name}" for c, ex in names], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, 100)
        ax.set_xlabel("submissions with full marks on the exercise (%)")
        ax.set_title("Pass rate of every exercise")
        save(fig, "pass-rates")
    for c in stats:
        if not c.exercises:
            continue
        n = len(c.exercises)
        fig, axes = plt.subplots(1, 2, figsize=(9, max(2.8, 0.35 * n + 1.2)), gridspec_kw={"width_ratios": [1, 1.4]})
        axes[0].hist(c.scores or [0], bins=min(20, max(5, int(c.max_score) + 1)), range=(0, c.max_score or 1),
                     color="#0b5cad")
        axes[0].set_xlabel(f"score (of {_fmt(c.max_score)})")
        axes[0].set_ylabel("submissions")
        axes[0].set_title("Chapter scores")
        exs = list(c.exercises.values())
        data = [[100 * s / ex.points for s in ex.scores] if ex.points else [] for ex in exs]
        axes[1].boxplot([d or [0] for d in data], vert=False, showfliers=False)
        for i, d in enumerate(data, start=1):
            axes[1].scatter(d, [i + 0.25 * ((k * 0.618) % 1 - 0.5) for k in range(len(d))], s=9, alpha=0.5,
                            color="#0b5cad")
        axes[1].set_yticks(range(1, n + 1), [f"{ex.name} ({_pct(ex.pass_rate)})" for ex in exs], fontsize=8)
        axes[1].invert_yaxis()
        axes[1].set_xlim(-3, 103)
        axes[1].set_xlabel("score (% of the exercise's points)")
        axes[1].set_title("Exercises (pass rate)")
        save(fig, c.chapter.id)
    return made


def _groups_table(groups: list[items.Group], ws: Workspace, out: Path, chapters: dict[str, Chapter],
                  limit: int | None = None, show_chapter: bool = False) -> str:
    body = []
    for g in groups[:limit]:
        ch = chapters[g.chapter]
        who = ", ".join(_feedback_link(ws, out, ch, s) for s in g.students[:12])
        if len(g.students) > 12:
            who += f", … ({len(g.students) - 12} more)"
        clause = "<br>".join(_e(c) for c in g.clauses) or (
            '<span class="muted">(nothing of it works)</span>' if g.every or g.kind == "not attempted" else
            '<span class="muted">(no clause names this case)</span>')
        shown = g.shown_cases
        cases = "<br>".join(f"<code>{_e(c)}</code>" for c in shown[:6]) or '<span class="muted">-</span>'
        if len(shown) > 6:
            cases += f"<br>… {len(shown) - 6} more"
        row = [str(len(g.students)), f"<code>{_e(g.exercise)}</code>", _e(g.kind), clause, cases,
               f'<span class="wrap">{_e(g.message[:400])}</span>', who]
        if show_chapter:
            row.insert(1, f'<a href="{_e(ch.id)}.html">{_e(ch.id)}</a>')
        body.append(row)
    head = ["students", "exercise", "kind", "clauses of the statement", "failing hidden cases", "most common message",
            "who"]
    if show_chapter:
        head.insert(1, "chapter")
    return _table(head, body, {0}) if body else '<p class="muted">No failures.</p>'


def _review_html(c: ChapterStats, ws: Workspace, out: Path) -> str:
    if not c.review:
        return '<p class="muted">Nothing flagged in this chapter.</p>'
    parts = []
    for r in c.review:
        link = _feedback_link(ws, out, c.chapter, r["student"])
        held = f' <span class="warn">{_fmt(r["held"])} point(s) held</span>' if r["held"] else ""
        decided = [d for d in r["decisions"] if d != holds.PENDING]
        decided_s = f' <span class="muted">(decided: {_e(", ".join(decided))})</span>' if decided else ""
        what = "stopped" if r["stopped"] else "flagged"
        body = [f'<div class="card" id="review-{_e(r["student"])}"><h3>{link}: {what}{held}{decided_s}</h3>'
                f'<p class="wrap">{_e(r["reason"])}</p>']
        if r["tests"]:
            body.append(f'<p>Held tests: {", ".join(f"<code>{_e(t)}</code>" for t in r["tests"])}. Decide with '
                        f'<code>grader review --release {_e(r["student"])} {_e(c.chapter.id)}</code> or '
                        f'<code>--keep</code>.</p>')
        for cell in r["cells"]:
            hits = ", ".join(_e(h) for h in cell["hits"])
            where = f'cell {cell["index"]}' + (f' (<code>{_e(cell["grade_id"])}</code>)' if cell["grade_id"] else "")
            released = (f'<pre>{_e(cell["released"])}</pre>' if cell["released"] is not None else
                        '<p class="muted">No released cell: the student added this one.</p>')
            body.append(f'<p>{where}: {hits}</p><div class="pair"><div><strong>Submitted</strong>'
                        f'<pre>{_e(cell["source"])}</pre></div><div><strong>Released</strong>{released}</div></div>')
        body.append("</div>")
        parts.append("".join(body))
    return "\n".join(parts)


def build(course: Course, ws: Workspace, out: Path | None = None) -> Path:
    """Write the pages; return the overview's path."""
    out = (out or ws.path("report")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    stats = summary(course, ws)
    recorded = runs.load(ws.db_url)
    figures = _plots(stats, out / "figures")
    chapters = {c.chapter.id: c.chapter for c in stats}
    nav = '<a href="index.html">Overview</a>' + "".join(
        f'<a href="{_e(c.chapter.id)}.html">ch{c.chapter.number:02d}</a>' for c in stats)
    students = sorted({r.student for c in stats for r in c.rows})
    # the overview
    body = [f"<h1>What the class got wrong</h1><p>{len(students)} student(s), "
            f"{sum(c.counts['submissions'] for c in stats)} submission(s) in {len(stats)} chapter(s).</p>"]
    head = ["chapter", "submissions", "graded", "flagged", "stopped", "failed", "grader errors", "held",
            "mean score", "median", "full marks"]
    rows = []
    for c in stats:
        scores = c.scores
        full = sum(1 for s in scores if c.max_score and s >= c.max_score)
        rows.append([f'<a href="{_e(c.chapter.id)}.html">{_e(c.chapter.id)}</a> <span class="muted">{_e(c.title)}'
                     f"</span>", str(c.counts["submissions"]), str(c.counts["graded"]), str(c.counts["flagged"]),
                     str(c.counts["stopped"]), str(c.counts["failed"]), str(c.counts["error"]), str(c.counts["held"]),
                     f"{statistics.fmean(scores):.1f} / {_fmt(c.max_score)}" if scores else "-",
                     f"{statistics.median(scores):g}" if scores else "-",
                     f"{full} ({_pct(full / len(scores))})" if scores else "-"])
    body.append(_table(head, rows, set(range(1, len(head)))))
    for key, alt in (("scores", "Box plot of the score, in per cent of the chapter's points, per chapter"),
                     ("pass-rates", "Bar chart of each exercise's pass rate")):
        if key in figures:
            body.append(f'<a href="{figures[key]}"><img class="plot" src="{figures[key]}" alt="{_e(alt)}" '
                        f'loading="lazy"></a>')
    body.append("<h2>Mistakes most students share</h2><p class=muted>Exercises left as released (not attempted) "
                "are counted on the chapters' pages, not here.</p>")
    every = sorted((g for c in stats for g in c.groups if g.kind != "not attempted"), key=lambda g: -len(g.students))
    body.append(_groups_table(every, ws, out, chapters, limit=15, show_chapter=True))
    body.append("<h2>Needs a person</h2>")
    attention = []
    for c in stats:
        for r in c.rows:
            if r.status in ("error", "failed") or _stopped(r) or r.held or any(v["student"] == r.student
                                                                                for v in c.review):
                kind = ("grader error" if r.status == "error" else "failed" if r.status == "failed" else
                        "stopped" if _stopped(r) else "held" if r.held else "flagged")
                anchor = f'{_e(c.chapter.id)}.html#review-{_e(r.student)}' if kind in ("stopped", "held", "flagged") \
                    else f"{_e(c.chapter.id)}.html#students"
                attention.append([_e(kind), f'<a href="{anchor}">{_e(r.student)}</a>', _e(c.chapter.id),
                                  _fmt(r.held) if r.held else "", f'<span class="wrap">{_e(r.reason[:300])}</span>'])
    order = {"grader error": 0, "held": 1, "stopped": 2, "flagged": 3, "failed": 4}
    attention.sort(key=lambda row: (order.get(html.unescape(row[0]), 9), row[2], row[1]))
    body.append(_table(["what", "student", "chapter", "held points", "reason"], attention, {3}) if attention
                else '<p class="muted">Nothing.</p>')
    body.append("<h2>Time and memory outliers</h2><p class=muted>Notebooks above the median by more than three "
                "median absolute deviations, per chapter: a time or memory problem worth a look before it is a "
                "limit.</p>")
    out_rows = []
    for c in stats:
        keys = [(r.student, c.chapter.id) for r in c.graded]
        for what, values in (("time", {k: recorded[k].seconds for k in keys if k in recorded}),
                             ("memory", {k: float(recorded[k].peak_memory) for k in keys if k in recorded})):
            med = statistics.median([v for v in values.values() if v >= 0] or [0])
            for (student, cid), v in outliers(values)[:5]:
                shown = (f"{v:.1f} s (median {med:.1f} s)" if what == "time"
                         else f"{_memory(int(v))} (median {_memory(int(med))})")
                out_rows.append([_e(what), _feedback_link(ws, out, c.chapter, student), _e(cid), shown])
    body.append(_table(["what", "student", "chapter", "value"], out_rows) if out_rows
                else '<p class="muted">None.</p>')
    (out / "index.html").write_text(_page("Grading report", "\n".join(body), nav), encoding="utf-8")
    # one page per chapter
    for c in stats:
        page = [f"<h1>{_e(c.chapter.id)}: {_e(c.title)}</h1>",
                f"<p>{c.counts['submissions']} submission(s): {c.counts['graded']} graded, {c.counts['flagged']} "
                f"flagged ({c.counts['stopped']} stopped), {c.counts['failed']} failed, {c.counts['error']} grader "
                f"error(s); {c.counts['held']} with points held for review. Maximum {_fmt(c.max_score)} points.</p>"]
        if c.chapter.id in figures:
            page.append(f'<a href="{figures[c.chapter.id]}"><img class="plot" src="{figures[c.chapter.id]}" '
                        f'alt="Histogram of the chapter scores and box plots of every exercise\'s score" '
                        f'loading="lazy"></a>')
        page.append("<h2>Exercises</h2>")
        page.append(_table(["exercise", "points", "graded", "full marks", "pass rate", "mean"],
                           [[f'<a href="#ex-{_e(ex.name)}"><code>{_e(ex.name)}</code></a>', _fmt(ex.points),
                             str(len(ex.scores)), str(ex.passed), _pct(ex.pass_rate), f"{ex.mean:.2f}"]
                            for ex in c.exercises.values()], {1, 2, 3, 4, 5}))
        for ex in c.exercises.values():
            mine = [g for g in c.groups if g.exercise == ex.name]
            skipped = sum(len(g.students) for g in mine if g.kind == "not attempted")
            mistakes = [g for g in mine if g.kind != "not attempted"]
            page.append(f'<h3 id="ex-{_e(ex.name)}"><code>{_e(ex.name)}</code>: {_pct(ex.pass_rate)} full marks, '
                        f'{len(mistakes)} distinct failure(s), {skipped} not attempted</h3>')
            page.append(_groups_table(mine, ws, out, chapters))
        page.append("<h2>Hidden cases that fail most often</h2>")
        page.append(_table(["students", "exercise", "case", "clauses of the statement"],
                           [[str(n), f"<code>{_e(ex)}</code>", f"<code>{_e(label)}</code>",
                             "<br>".join(_e(x) for x in clauses) or '<span class="muted">-</span>']
                            for ex, label, clauses, n in c.cases[:25]], {0}) if c.cases
                    else '<p class="muted">None.</p>')
        page.append("<h2>Flagged submissions to review</h2>")
        page.append(_review_html(c, ws, out))
        page.append('<h2 id="students">Every submission</h2>')
        srows = []
        for r in c.rows:
            run = recorded.get((r.student, c.chapter.id))
            srows.append([_feedback_link(ws, out, c.chapter, r.student),
                          "-" if r.status == "error" else _fmt(r.score), _fmt(r.held) if r.held else "", _e(r.status),
                          f"{run.seconds:.1f} s" if run else "-", _memory(run.peak_memory) if run else "-",
                          f'<span class="wrap">{_e(r.reason[:200])}</span>'])
        page.append(_table(["student", "score", "held", "status", "time", "peak memory", "reason"], srows,
                           {1, 2, 4, 5}))
        (out / f"{c.chapter.id}.html").write_text(_page(f"{c.chapter.id}: grading report", "\n".join(page), nav),
                                                  encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(_summary_json(stats), indent=1), encoding="utf-8")
    return out / "index.html"


def _summary_json(stats: list[ChapterStats]) -> dict:
    """The pages' numbers as data (for scripts and the tests)."""
    return {c.chapter.id: {
        "counts": c.counts, "max_score": c.max_score, "scores": {r.student: r.score for r in c.graded},
        "exercises": {ex.name: {"points": ex.points, "graded": len(ex.scores), "passed": ex.passed}
                      for ex in c.exercises.values()},
        "groups": [{"exercise": g.exercise, "kind": g.kind, "cases": list(g.cases), "clauses": g.clauses,
                    "every": g.every, "students": g.students} for g in c.groups],
        "review": [r["student"] for r in c.review]} for c in stats}
