"""Build the HTML site from a staged book with Jupyter Book 1 (execution off, strict), then make the
chapter downloads serve the released student notebooks.

The configuration is the repository's ``_config.yml`` plus what only a build knows: the vendored MathJax
(so that maths renders offline), nitpicky strictness, and the launch buttons when a student repository
is given (``grader book --student-repo URL``): Binder, Colab and JupyterHub then open the chapter's
*student* notebook in that repository, laid out like ``_build/release/``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..course import Chapter, Course, GraderError
from .vendor import MATHJAX_ENTRY, fetch_mathjax, mathjax_static


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


def site_config(course: Course, staged: Path, *, launch: Launch | None = None, log=print) -> Path:
    """Write the configuration this build uses and return its path."""
    config = yaml.safe_load((course.root / "_config.yml").read_text())
    sphinx = config.setdefault("sphinx", {}).setdefault("config", {})
    sphinx["nitpicky"] = True
    # the theme's light/dark switch starts from a known mode (an unset one logs a console error)
    sphinx.setdefault("html_context", {})["default_mode"] = "light"
    if fetch_mathjax(course.root, log=log):
        sphinx["html_static_path"] = [str(mathjax_static(course.root))]
        sphinx["mathjax_path"] = MATHJAX_ENTRY
    if launch is not None:
        config["repository"] = {"url": launch.repo_url, "branch": launch.branch, "path_to_book": ""}
        config["launch_buttons"] = {"notebook_interface": "jupyterlab",
                                    "binderhub_url": launch.binderhub_url, "colab_url": launch.colab_url,
                                    "jupyterhub_url": launch.jupyterhub_url}
    path = course.build / f"{staged.name}-config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return path


def build_site(course: Course, staged: Path, out_html: Path, *, strict: bool = True,
               fresh: bool = False, launch: Launch | None = None, log=print) -> Path:
    from jupyter_book.config import get_final_config
    from jupyter_book.sphinx import build_sphinx

    if fresh and out_html.exists():
        shutil.rmtree(out_html)
    config = site_config(course, staged, launch=launch, log=log)
    overrides = {"external_toc_path": str(staged / "_toc.yml"), "latex_individualpages": False}
    # Thebe (live code in the page) is not used, and sphinx-thebe declares its script constants twice
    # on Sphinx 7.4, a JavaScript error on every page: leave the extension out.
    extensions = get_final_config(user_yaml=config, cli_config={"latex_individualpages": False},
                                  sourcedir=staged)[0]["extensions"]
    overrides["extensions"] = [e for e in extensions if e != "sphinx_thebe"]
    result = build_sphinx(
        str(staged),
        str(out_html),
        noconfig=True,
        path_config=str(config),
        confoverrides=overrides,
        builder="html",
        warningiserror=strict,
        keep_going=True,
        freshenv=fresh,
        quiet=True,
    )
    if result != 0:
        raise BuildFailed(f"jupyter-book build of {staged} failed ({result}); see the warnings above")
    return out_html


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
