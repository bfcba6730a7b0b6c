"""Third-party browser assets the published book serves itself, so that it renders offline.

MathJax 3 is fetched once from the npm registry (``npm pack``, checked against a pinned SHA-256) into
``.vendor/`` beside ``.venv/`` and copied into the site's ``_static/mathjax/``. Only what the book uses is
kept: the loader (``startup.js``), TeX input with its extensions (loaded when a page needs one), CommonHTML
output with its fonts, and the assistive MathML that screen readers read; not the contextual menu, the
speech-rule maps of some twenty languages, the SVG output or the combined bundles. Without it (no
``npm``, no registry) the book still builds and loads MathJax from its CDN, and says so.

    python -m grader.book.vendor        # fetch now (``make setup`` does)
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

MATHJAX_VERSION = "3.2.2"
MATHJAX_SHA256 = "1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09"
MATHJAX_ENTRY = "mathjax/startup.js"  # relative to _static/, Sphinx's ``mathjax_path``
# The components the loader fetches (each loads its dependencies: core, the CHTML font data).
MATHJAX_CONFIG = {
    "loader": {"load": ["input/tex", "output/chtml", "a11y/assistive-mml"]},
    "options": {"processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"},
}
_KEEP = ("startup.js", "core.js", "input/tex.js", "input/tex/extensions/", "output/chtml.js",
         "output/chtml/fonts/tex.js", "output/chtml/fonts/woff-v2/", "a11y/assistive-mml.js")
_DROP = ("input/tex/extensions/all-packages.js",)


def mathjax_static(root: Path) -> Path:
    """The folder to add to Sphinx's ``html_static_path``: it holds ``mathjax/``."""
    return root / ".vendor" / f"mathjax-{MATHJAX_VERSION}"


def have_mathjax(root: Path) -> bool:
    return (mathjax_static(root) / MATHJAX_ENTRY).is_file()


def fetch_mathjax(root: Path, log=print) -> bool:
    """Fetch MathJax into ``.vendor/`` unless it is there. Returns whether it is there afterwards."""
    if have_mathjax(root):
        return True
    npm = shutil.which("npm")
    if npm is None:
        log("vendor: npm not found; the book will load MathJax from its CDN (install Node.js to serve it)")
        return False
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run([npm, "pack", f"mathjax@{MATHJAX_VERSION}", "--pack-destination", tmp],
                                capture_output=True, text=True, timeout=300)
        tarballs = list(Path(tmp).glob("mathjax-*.tgz"))
        if result.returncode != 0 or len(tarballs) != 1:
            log(f"vendor: npm pack mathjax@{MATHJAX_VERSION} failed: {result.stderr.strip()[-500:]}; "
                "the book will load MathJax from its CDN")
            return False
        digest = hashlib.sha256(tarballs[0].read_bytes()).hexdigest()
        if digest != MATHJAX_SHA256:
            log(f"vendor: mathjax@{MATHJAX_VERSION} has SHA-256 {digest}, expected {MATHJAX_SHA256}: not used")
            return False
        dest = mathjax_static(root)
        staging = dest.with_name(dest.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        with tarfile.open(tarballs[0]) as tar:
            for member in tar.getmembers():
                name = member.name.removeprefix("package/")
                inner = name.removeprefix("es5/")
                keep = name == "LICENSE" or (name.startswith("es5/") and inner.startswith(_KEEP)
                                             and not inner.startswith(_DROP))
                if not member.isfile() or not keep:
                    continue
                target = staging / "mathjax" / name.removeprefix("es5/")
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as src:
                    target.write_bytes(src.read())
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
    log(f"vendor: MathJax {MATHJAX_VERSION} in {dest.relative_to(root)}")
    return True


def main() -> int:
    from ..course import find_root

    return 0 if fetch_mathjax(find_root()) else 1


if __name__ == "__main__":
    sys.exit(main())
