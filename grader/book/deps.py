"""The chapter dependency map: ``book/_dependencies.yml`` says which chapters each chapter builds on;
staging draws it as ``dependency-map.svg`` (the book's front page shows it) and checks it."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import nbformat
import yaml

from ..cells import title
from ..course import Course, GraderError

DEPENDENCIES = "_dependencies.yml"
MAP_SVG = "dependency-map.svg"


class BadDependencies(GraderError):
    pass


def chapter_title(notebook: Path) -> str:
    return title(nbformat.read(notebook, as_version=4), notebook.stem)


def load(course: Course) -> dict[str, list[str]]:
    """Every chapter id mapped to its prerequisites, validated: known ids, earlier chapters only."""
    path = course.book / DEPENDENCIES
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise BadDependencies(f"{path}: {exc}") from None
    order = {ch.id: i for i, ch in enumerate(course.chapters())}
    if set(raw) != set(order):
        raise BadDependencies(f"{path}: chapters missing {sorted(set(order) - set(raw))}, "
                              f"unknown {sorted(set(raw) - set(order))}")
    for ch, reqs in raw.items():
        for req in reqs or []:
            if req not in order or order[req] >= order[ch]:
                raise BadDependencies(f"{path}: {ch} cannot build on {req!r} (not an earlier chapter)")
    return {ch: list(raw[ch] or []) for ch in sorted(raw, key=order.get)}


def levels(deps: dict[str, list[str]]) -> dict[str, int]:
    """Longest path from a chapter without prerequisites: the column the map draws it in."""
    level: dict[str, int] = {}
    for ch, reqs in deps.items():  # chapters come in order and only build on earlier ones
        level[ch] = 1 + max((level[r] for r in reqs), default=-1)
    return level


def ancestors(deps: dict[str, list[str]]) -> dict[str, set[str]]:
    """Every chapter each chapter builds on, directly or not."""
    found: dict[str, set[str]] = {}
    for ch, reqs in deps.items():  # chapters come in order and only build on earlier ones
        found[ch] = set(reqs).union(*(found[r] for r in reqs))
    return found


def reduced(deps: dict[str, list[str]]) -> dict[str, list[str]]:
    """The same map without the edges implied by others (5 builds on 4, which builds on 2: no 2 -> 5)."""
    above = ancestors(deps)
    return {ch: [r for r in reqs if not any(r in above[o] for o in reqs if o != r)]
            for ch, reqs in deps.items()}


def _crossings(deps: dict[str, list[str]], pos: dict[str, tuple[float, float]]) -> int:
    def ccw(a, b, c):
        return (c[1] - a[1]) * (b[0] - a[0]) - (b[1] - a[1]) * (c[0] - a[0])

    edges = [(pos[r], pos[c]) for c, reqs in deps.items() for r in reqs]
    count = 0
    for i, (a, b) in enumerate(edges):
        for c, d in edges[i + 1:]:
            if len({a, b, c, d}) == 4 and ccw(a, c, d) * ccw(b, c, d) < 0 and ccw(a, b, c) * ccw(a, b, d) < 0:
                count += 1
    return count


def _layout(deps, columns, dx, dy) -> dict[str, tuple[float, float]]:
    """Columns by level; within each column the order (of all orders, the map is small) with the
    fewest crossing arrows, chapter order breaking ties."""
    def place(orders):
        return {ch: (col * dx, -(row - (len(members) - 1) / 2) * dy)
                for col, members in zip(sorted(columns), orders) for row, ch in enumerate(members)}

    choices = itertools.product(*(itertools.permutations(columns[c]) for c in sorted(columns)))
    best = min(choices, key=lambda orders: _crossings(deps, place(orders)))
    return place(best)


def draw(course: Course, deps: dict[str, list[str]]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    chapters = {ch.id: ch for ch in course.chapters()}
    deps = reduced(deps)
    level = levels(deps)
    columns: dict[int, list[str]] = {}
    for ch in deps:
        columns.setdefault(level[ch], []).append(ch)
    width, height = 2.9, 1.15
    pos = _layout(deps, columns, width + 0.9, height + 0.6)
    fig, ax = plt.subplots(figsize=(2.1 * len(columns) + 1, 1.25 * max(map(len, columns.values())) + 1))
    # Okabe-Ito blue for the boxes: readable with every common colour-vision deficiency, dark text on it
    for ch, (x, y) in pos.items():
        ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height,
                                    boxstyle="round,pad=0.05", fc="#cfe5f5", ec="#0072B2", lw=1.4))
        title = chapter_title(chapters[ch].notebook)
        words, lines = title.split(), [""]
        for w in words:
            lines[-1:] = [lines[-1] + " " + w] if len(lines[-1] + w) < 17 else [lines[-1], w]
        ax.text(x, y, f"{chapters[ch].number}. " + "\n".join(s.strip() for s in lines).strip(),
                ha="center", va="center", fontsize=12.5)
    for ch, reqs in deps.items():
        for req in reqs:
            (x0, y0), (x1, y1) = pos[req], pos[ch]
            ax.add_patch(FancyArrowPatch((x0 + width / 2 + 0.05, y0), (x1 - width / 2 - 0.05, y1),
                                         arrowstyle="-|>", mutation_scale=12, color="#333333", lw=1.1,
                                         connectionstyle="arc3,rad=0.0"))
    xs, ys = zip(*pos.values())
    ax.set_xlim(min(xs) - width / 2 - 0.2, max(xs) + width / 2 + 0.2)
    ax.set_ylim(min(ys) - height / 2 - 0.2, max(ys) + height / 2 + 0.2)
    ax.set_axis_off()
    fig.tight_layout()
    out = io.BytesIO()
    plt.rcParams["svg.hashsalt"] = "dependency-map"  # the same map gives the same bytes
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    return out.getvalue()


def describe(course: Course, deps: dict[str, list[str]]) -> str:
    """The map in words (its alt text)."""
    chapters = {ch.id: ch for ch in course.chapters()}
    parts = []
    for ch, reqs in deps.items():
        n = chapters[ch].number
        parts.append(f"chapter {n} starts the course" if not reqs else
                     f"chapter {n} builds on " + " and ".join(str(chapters[r].number) for r in reqs))
    return "Chapter dependency map: " + "; ".join(parts) + "."


def dependency_map(course: Course) -> dict[str, bytes]:
    """The staged files of the map: the SVG and ``dependency-map.md``, the figure that the front page
    includes, with the map in words as its alt text."""
    deps = load(course)
    figure = (f"```{{figure}} {MAP_SVG}\n:name: fig-dependency-map\n:alt: {describe(course, deps)}\n"
              ":width: 100%\n\nHow the chapters build on each other: an arrow from one chapter to another "
              "means that the second uses what the first builds (arrows implied by others are left out).\n```\n")
    return {MAP_SVG: draw(course, deps), "dependency-map.md": figure.encode()}
