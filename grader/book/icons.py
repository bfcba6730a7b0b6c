"""The theme's icons as a small stylesheet instead of Font Awesome's 1.5 MB script.

pydata-sphinx-theme ships Font Awesome as ``fontawesome.js``, which holds every icon of the free set and
replaces each ``<i class="fa-solid fa-bars">`` by an inline SVG; the book's pages use about twenty of them,
and the script alone was a third of a chapter page's weight and delayed DOMContentLoaded by its download.
Here the icons the themes can emit (every ``fa-*`` name in their templates, scripts and Python) are
taken from that same script and written as CSS masks painted in ``currentColor``: the same shapes, in a
few kilobytes, with no script.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

# name:[width,height,[aliases],"unicode","path"] inside a pack that ends with d("fas",p) (or "fab")
_ICON = re.compile(r'(?:"([a-z0-9-]+)"|\b([a-z][a-z0-9]*)):\[(\d+),(\d+),\[([^\]]*)\],"[0-9a-f]+","([^"]+)"\]')
_PACK_END = {"solid": 'd("fas",p)', "regular": 'd("far",p)', "brands": 'd("fab",p)'}
_USED = re.compile(r"\bfa-([a-z0-9][a-z0-9-]*)")
# Font Awesome's own class names that are not icons
_NOT_ICONS = {"solid", "regular", "brands", "lg", "xs", "sm", "xl", "fw", "spin", "pulse", "2x", "3x", "rotate-90"}


class IconsMissing(Exception):
    pass


def _packs(script: str) -> dict[str, dict[str, tuple[int, int, str]]]:
    packs = {}
    for style, end in _PACK_END.items():
        stop = script.find(end)
        if stop < 0:
            continue
        start = script.rfind("var p={", 0, stop)
        icons = {}
        for m in _ICON.finditer(script, start, stop):
            shape = (int(m.group(3)), int(m.group(4)), m.group(6))
            for alias in re.findall(r'"([a-z0-9-]+)"', m.group(5)):  # Font Awesome 5's names
                icons.setdefault(alias, shape)
            icons[m.group(1) or m.group(2)] = shape
        packs[style] = icons
    return packs


def used_icons(sources: list[Path]) -> set[str]:
    names: set[str] = set()
    for root in sources:
        files = [root] if root.is_file() else [p for p in root.rglob("*")
                                                if p.suffix in (".html", ".py", ".js") and ".map" not in p.name]
        for f in files:
            if f.name == "fontawesome.js":
                continue
            names |= set(_USED.findall(f.read_text(errors="replace")))
    return names - _NOT_ICONS


def icon_css(script: Path, names: set[str]) -> str:
    """CSS drawing each named icon (solid first, then brands, then regular) as a mask of currentColor."""
    packs = _packs(script.read_text())
    if not packs.get("solid"):
        raise IconsMissing(f"no solid icon pack found in {script}")
    rules = [
        "/* Font Awesome Free icons (CC BY 4.0, https://fontawesome.com/license/free), drawn as CSS masks */",
        ":where(.fa, .fas, .far, .fab, .fa-solid, .fa-regular, .fa-brands) {display: inline-block; height: 1em;"
        " width: 1em; vertical-align: -0.125em; background-color: currentColor;"
        " -webkit-mask: var(--fa-icon) center / contain no-repeat; mask: var(--fa-icon) center / contain no-repeat;}",
        ".fa-lg {font-size: 1.25em; line-height: 0.05em; vertical-align: -0.2em;}",
        ".fa-fw {width: 1.25em;}",
    ]
    for name in sorted(names):
        found = next((packs[s][name] for s in ("solid", "brands", "regular") if name in packs.get(s, {})), None)
        if found is None:
            continue  # a class the templates mention that no pack draws (a modifier, a theme's own)
        width, height, path = found
        svg = f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}"><path d="{path}"/></svg>'
        rules.append(f'.fa-{name} {{--fa-icon: url("data:image/svg+xml,{quote(svg)}");'
                     f" width: {width / height:.4g}em;}}")
    return "\n".join(rules) + "\n"


_SOLID_SRC = re.compile(r'src:url\((\.\./vendor/fontawesome/webfonts/)fa-solid-900\.woff2\) format\("woff2"\),'
                        r'url\(\.\./vendor/fontawesome/webfonts/fa-solid-900\.ttf\) format\("truetype"\)')


def subset_icon_font(static: Path) -> None:
    """The themes' stylesheets draw a few glyphs of Font Awesome's solid font (admonition icons, external
    links, breadcrumbs): serve those glyphs only, a few kilobytes instead of the font's 156 KB."""
    import logging

    from fontTools import subset

    logging.getLogger("fontTools").setLevel(logging.WARNING)  # it logs every table it prunes at INFO
    sheet = static / "styles" / "pydata-sphinx-theme.css"
    ttf = static / "vendor" / "fontawesome" / "webfonts" / "fa-solid-900.ttf"
    if not (sheet.is_file() and ttf.is_file()):
        return
    css = sheet.read_text()
    if not _SOLID_SRC.search(css):
        return  # subset already, or a theme version that loads its font otherwise
    glyphs = {ord(c) for f in static.rglob("*.css") for c in f.read_text(errors="replace")
              if 0xE000 <= ord(c) <= 0xF8FF}  # Font Awesome's code points are in Unicode's private use area
    options = subset.Options()
    options.flavor = "woff"
    font = subset.load_font(str(ttf), options)
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=sorted(glyphs))
    subsetter.subset(font)
    out = ttf.with_name("fa-solid-900-subset.woff")
    subset.save_font(font, str(out), options)
    sheet.write_text(_SOLID_SRC.sub(lambda m: f'src:url({m.group(1)}{out.name}) format("woff")', css))
    for full in (ttf, ttf.with_suffix(".woff2")):  # nothing refers to the whole font any more
        full.unlink(missing_ok=True)
