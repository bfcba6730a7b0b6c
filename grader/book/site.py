"""Build the HTML site from a staged book with Jupyter Book 1 (execution off, strict), then make the
chapter downloads serve the released student notebooks.

The configuration is the repository's ``_config.yml`` plus what only a build knows: the vendored MathJax
(so that maths renders offline), nitpicky strictness, the course's stylesheet and script
(``book/_static/``), the theme's icons as CSS (:mod:`.icons`), the footer (licence, repository, build
date), and the launch buttons when a student repository is given (``grader book --student-repo URL``):
Binder, Colab and JupyterHub then open the chapter's *student* notebook in that repository, laid out like
``_build/release/``. Without one the book has no launch buttons (no placeholder links). After Sphinx,
:mod:`.polish` finishes each page for phones, tablets and high-DPI screens.
"""

from __future__ import annotations

import datetime
import hashlib
import html
import json
import multiprocessing
import shutil
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..course import Chapter, Course, GraderError
from .icons import icon_css, used_icons
from .polish import polish_site
from .vendor import MATHJAX_CONFIG, MATHJAX_ENTRY, fetch_mathjax, mathjax_static

LICENCE = ("MIT licence", "https://opensource.org/license/mit")


class BuildFailed(GraderError):
    pass


@dataclass(frozen=True)
class Launch:
    """Where the student notebooks are published, for the launch buttons."""

    repo_url: str                # https://github.com/ORG/REPO holding _build/release/'s layout
    branch: str = "main"
    jupyterhub_url: str = ""     # https://hub.example.edu (nbgitpuller must be installed there)
    binderhub_url: str = "https://mybinder.org"
    colab_url: str = "https://colab.research.google.com"

    def __post_init__(self):
        if not self.repo_url.startswith(("https://", "http://")):
            raise GraderError(f"--student-repo must be a URL such as https://github.com/ORG/REPO, "
                              f"not {self.repo_url!r}")


def _project() -> dict[str, str]:
    """The distribution's licence and one-line description (pyproject.toml, as installed)."""
    from importlib import metadata

    try:
        meta = metadata.metadata("self-attention-course")
    except metadata.PackageNotFoundError:
        return {}
    return {"license": meta.get("License") or "", "description": meta.get("Summary") or ""}


def _build_stamp(course: Course) -> str:
    """Today's date, and the commit when the course is a git checkout."""
    stamp = datetime.date.today().isoformat()
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=course.root, capture_output=True,
                                text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"{stamp} (commit {commit})" if commit else stamp


def footer(course: Course, repository: str | None, language: str | None = None) -> str:
    """The footer's line: licence, repository (when the book has a public one) and build date."""
    from .locales import LANGUAGES

    words = LANGUAGES[language].words if language else {}
    licence = _project().get("license") or "MIT"
    name, url = LICENCE if licence == "MIT" else (f"{licence} licence", "")
    if words:
        name = f"{licence} {words['licence']}"
    parts = [f'<a href="{url}">{name}</a>' if url else name]
    if repository:
        parts.append(f'{words.get("source", "source")}: '
                     f'<a href="{html.escape(repository)}">{html.escape(repository.split("://", 1)[-1])}</a>')
    parts.append(f"{words.get('built', 'built')} {_build_stamp(course)}")
    return '<p class="course-footer">' + " · ".join(parts) + "</p>"


def _theme_static(course: Course) -> Path:
    """Generated static files: the theme's icons as CSS."""
    import pydata_sphinx_theme
    import sphinx_book_theme

    folder = course.build / "site-static"
    folder.mkdir(parents=True, exist_ok=True)
    pst = Path(pydata_sphinx_theme.__file__).parent
    sbt = Path(sphinx_book_theme.__file__).parent
    names = used_icons([pst / "theme", pst / "__init__.py", sbt])
    css = icon_css(pst / "theme" / "pydata_sphinx_theme" / "static" / "scripts" / "fontawesome.js", names)
    target = folder / "icons.css"
    if not target.exists() or target.read_text() != css:
        target.write_text(css)
    return folder


def _sync_static(course: Course, target: Path) -> None:
    """Copy the book's static files that the site lacks or holds in an older version: an incremental Sphinx
    build that reads no page copies none, so an edited ``book/_static/course.css`` stayed stale in the site."""
    source = course.book / "_static"
    for path in source.rglob("*") if source.is_dir() else []:
        copy = target / "_static" / path.relative_to(source)
        if path.is_file() and (not copy.is_file() or copy.read_bytes() != path.read_bytes()):
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)


def site_config(course: Course, staged: Path, *, launch: Launch | None = None, log=print,
                language: str | None = None) -> Path:
    """Write the configuration this build uses and return its path."""
    from jupyter_book.config import get_final_config

    from .locales import LANGUAGES

    config = yaml.safe_load((course.root / "_config.yml").read_text())
    if language:
        config["title"] = LANGUAGES[language].title
    if launch is not None:
        config["repository"] = {"url": launch.repo_url, "branch": launch.branch, "path_to_book": ""}
        config["launch_buttons"] = {"notebook_interface": "jupyterlab",
                                    "binderhub_url": launch.binderhub_url, "colab_url": launch.colab_url,
                                    "jupyterhub_url": launch.jupyterhub_url}
    repository = (config.get("repository") or {}).get("url")
    sphinx = config.setdefault("sphinx", {}).setdefault("config", {})
    sphinx["nitpicky"] = True
    # the page follows the reader's OS colour scheme (the theme's switch still overrides it)
    sphinx.setdefault("html_context", {})["default_mode"] = "auto"
    static = [str(course.book / "_static"), str(_theme_static(course))]
    if fetch_mathjax(course.root, log=log):
        static.append(str(mathjax_static(course.root)))
        sphinx["mathjax_path"] = MATHJAX_ENTRY
        sphinx["mathjax3_config"] = MATHJAX_CONFIG
    sphinx["html_static_path"] = static
    sphinx["html_css_files"] = ["icons.css", "course.css"]
    sphinx["html_js_files"] = [("course.js", {"defer": "defer"})]
    sphinx["html_favicon"] = str(course.book / "_static" / "favicon.svg")
    # Jupyter Book computes the theme's options from _config.yml; extend them rather than replace them:
    # no header bar (the theme renders one, hidden, whose copies of the sidebar buttons are the ones its
    # script binds, so that the visible buttons did nothing), and the footer.
    theme = get_final_config(user_yaml=config, cli_config={"latex_individualpages": False},
                             sourcedir=staged)[0].get("html_theme_options", {})
    theme.update({"navbar_start": [], "navbar_center": [], "navbar_end": [], "navbar_persistent": [],
                  "extra_footer": footer(course, repository, language)})
    if language:
        theme["search_bar_text"] = LANGUAGES[language].search
        # the themes' strings in the language's wording (.i18n_glue): a change of that wording is a change of
        # this build's configuration, so that Sphinx writes every page again, not only those whose text changed
        wording = json.dumps(LANGUAGES[language].interface or {}, sort_keys=True, ensure_ascii=False)
        sphinx["html_context"]["interface"] = hashlib.sha256(wording.encode()).hexdigest()[:16]
    sphinx["html_theme_options"] = theme
    path = course.build / f"{staged.name}{'-' + language if language else ''}-config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return path


def build_site(course: Course, staged: Path, out_html: Path, *, strict: bool = True,
               fresh: bool = False, launch: Launch | None = None, language: str | None = None,
               log=print) -> Path:
    """Build the English site into ``out_html``, or with ``language`` (``zh_CN``) that language's site
    into ``out_html/<folder>/`` from the same staged book and the compiled catalogs. ``fresh`` re-reads
    every page (a new Sphinx environment); :func:`build_sites` also empties the folder first."""
    from jupyter_book.sphinx import build_sphinx

    from . import locales

    lang = locales.LANGUAGES[language] if language else None
    target = out_html / lang.folder if lang else out_html
    config_path = site_config(course, staged, launch=launch, log=log, language=language)
    # Thebe (live code in the page) is not used, and sphinx-thebe declares its script constants twice
    # on Sphinx 7.4, a JavaScript error on every page: the overrides leave the extension out.
    overrides = locales._sphinx_overrides(staged, yaml.safe_load(config_path.read_text()))
    if lang:
        overrides["extensions"] = [*overrides["extensions"], "grader.book.i18n_glue"]
        overrides.update({"language": lang.code, "locale_dirs": [str(locales.compile_catalogs(course, lang.code))],
                          "html_search_options": {"dict": str(locales.search_dictionary(course))},
                          # myst-nb's toggles of hidden code cells ("Show code cell source"): the book hides
                          # inputs only
                          "nb_code_prompt_show": lang.words["show code"],
                          "nb_code_prompt_hide": lang.words["hide code"],
                          # sphinx-togglebutton's hint on a folded answer (its script writes it into the page)
                          "togglebutton_hint": lang.words["click to show"],
                          "togglebutton_hint_hide": lang.words["click to hide"]})
    result = build_sphinx(
        str(staged),
        str(target),
        noconfig=True,
        path_config=str(config_path),
        confoverrides=overrides,
        builder="html",
        warningiserror=strict,
        keep_going=True,
        freshenv=fresh,
        quiet=True,
        doctreedir=str(out_html.parent / (f".doctrees-{lang.code}" if lang else ".doctrees")),
    )
    if result != 0:
        raise BuildFailed(f"jupyter-book build of {staged} failed ({result}); see the warnings above")
    _sync_static(course, target)
    book = yaml.safe_load((course.root / "_config.yml").read_text()).get("title", "")
    landing = yaml.safe_load((staged / "_toc.yml").read_text())["root"]
    others = [x for x in locales.LANGUAGES.values() if x is not lang]
    if lang:
        polish_site(target, book=lang.title, description=lang.description, landing=f"{landing}.html",
                    language=lang, alts=locales.alt_translations(course, lang.code),
                    captions=locales.toc_captions(course, lang.code, staged))
    else:
        polish_site(target, book=book, description=_project().get("description") or book,
                    landing=f"{landing}.html", skip={x.folder for x in others}, translations=others)
    return target


def _build_in_child(args: tuple, kwargs: dict) -> tuple[Path, float]:
    began = time.perf_counter()
    return build_site(*args, **kwargs), time.perf_counter() - began


def build_sites(course: Course, staged: Path, out_html: Path, languages: list[str], *, strict: bool = True,
                fresh: bool = False, launch: Launch | None = None, log=print) -> list[Path]:
    """The English site and the translated ones (``languages``), built side by side: each translation in a
    process of its own (forked: Sphinx keeps global state, so one build a process) while this process
    builds the English site, as many at once as there are cores. Returns the sites' folders."""
    from ..execute import parallel_kernels

    if fresh and out_html.exists():
        shutil.rmtree(out_html)
    _theme_static(course)  # shared by every build: written once, before they start
    fetch_mathjax(course.root, log=log)
    # imported before the fork, so that the children inherit it (jsonschema compiles ~40 grammars on
    # import: seconds of CPU, paid once instead of once a process)
    import jupyter_book.sphinx  # noqa: F401
    common = {"strict": strict, "fresh": fresh, "launch": launch, "log": log}
    sites: list[Path] = [out_html]
    workers = min(len(languages), parallel_kernels() - 1)
    pool = None
    if workers:
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    try:
        # a child prints its own progress (a log function need not survive pickling)
        child = {k: v for k, v in common.items() if k != "log"}
        futures = {code: pool.submit(_build_in_child, (course, staged, out_html), {**child, "language": code})
                   for code in languages[:workers]} if pool else {}
        began = time.perf_counter()
        build_site(course, staged, out_html, **common)
        log(f"  English site: {time.perf_counter() - began:.0f} s")
        for code in languages:
            if code in futures:
                site, seconds = futures[code].result()
            else:
                site, seconds = _build_in_child((course, staged, out_html), {**common, "language": code})
            log(f"  {code} site: {seconds:.0f} s" + (" (beside the English one)" if code in futures else ""))
            sites.append(site)
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    return sites


def extract_messages(course: Course, staged: Path, out: Path | None = None) -> Path:
    """The staged book's message templates (``.pot``, one per page, Sphinx's ``gettext`` builder with this
    build's configuration), the figures' alt texts added (:mod:`.locales`)."""
    from jupyter_book.sphinx import build_sphinx

    from . import locales

    out = out or course.build / "gettext"
    config_path = site_config(course, staged, log=lambda *a: None)
    overrides = {**locales._sphinx_overrides(staged, yaml.safe_load(config_path.read_text())),
                 "gettext_location": False, "gettext_uuid": False}
    result = build_sphinx(str(staged), str(out), noconfig=True, path_config=str(config_path),
                          confoverrides=overrides, builder="gettext", warningiserror=False, keep_going=True,
                          freshenv=True, quiet=True, doctreedir=str(course.build / "gettext-doctrees"))
    if result != 0:
        raise BuildFailed(f"extracting the book's messages failed ({result}); see the warnings above")
    locales.add_alt_texts(out, staged)
    return out


def publish_downloads(course: Course, chapters: list[Chapter], out_html: Path) -> list[Path]:
    """Replace each chapter's downloadable ``_sources/<chapter>/<slug>.ipynb`` (Jupyter Book's copy of the
    staged page, with the reference's outputs) by the released student notebook, byte for byte."""
    written = []
    for ch in chapters:
        released = course.build / "release" / ch.id / ch.notebook.name
        target = out_html / "_sources" / ch.id / ch.notebook.name
        if not released.is_file():
            raise BuildFailed(f"{released.relative_to(course.root)} is missing: run `grader release` first")
        if not target.is_file():
            raise BuildFailed(f"the site has no {target.relative_to(out_html)} to replace")
        shutil.copyfile(released, target)
        written.append(target)
    return written
