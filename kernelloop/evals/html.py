"""report.html: the bench report as one self-contained page, made from report.md itself.

Only the markdown report.py writes is understood (headings, paragraphs, lists, pipe tables,
images), so the page says exactly what report.md says; the plots are embedded as base64 PNGs,
so the file can be mailed or opened anywhere without its plots/ directory. Only the images the
caller names are embedded: report.md holds candidates' text (their verdicts' reasons), so a
line that reads like an image there is never taken as a file to read.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping
from pathlib import Path

_IMAGE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<src>[^)]+)\)$")
# Inline: a backslash escape (safe_text.md_cell writes them), a `code span`, or plain text.
_INLINE = re.compile(r"\\(?P<escaped>[!-/:-@\[-`{-~])|`(?P<code>[^`]+)`|(?P<text>[^\\`]+|.)")
_STYLE = ("body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222}"
          "table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #ccc;padding:.25rem .5rem;"
          "text-align:left}th{background:#f4f4f4}img{max-width:100%}code{background:#f4f4f4}")


def _cells(line: str) -> list[str]:
    """A table row's cells, split on its unescaped pipes (escapes stay, for _inline)."""
    cells, cell, escaped = [], "", False
    for char in line.strip():
        if char == "|" and not escaped:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += char
        escaped = char == "\\" and not escaped
    cells.append(cell.strip())
    return cells[1:-1] if len(cells) > 1 else cells  # the row's own leading and trailing pipes


def _inline(text: str) -> str:
    """The inline forms report.md uses: backslash escapes and `code`; everything else is text."""
    out = []
    for match in _INLINE.finditer(text):
        if match["code"] is not None:
            out.append(f"<code>{html.escape(match['code'])}</code>")
        else:
            out.append(html.escape(match["escaped"] if match["escaped"] is not None else match["text"]))
    return "".join(out)


def _image(alt: str, src: str, images: Mapping[str, Path]) -> str:
    if src not in images:  # not a plot this report made: shown as the text it is
        return f"<p>{_inline(f'![{alt}]({src})')}</p>"
    data = base64.b64encode(images[src].read_bytes()).decode("ascii")
    return f'<p><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"></p>'


def markdown_to_html(markdown: str, images: Mapping[str, Path]) -> str:
    """The page for report.md's text; `images` maps each plot's name in report.md (its path
    relative to the report) to its file, which is embedded. No other file is read."""
    body: list[str] = []
    lines = markdown.splitlines()
    title = next((line.lstrip("# ").strip() for line in lines if line.startswith("# ")), "kernelloop report")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{_inline(line[level:].strip())}</h{level}>")
            i += 1
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            head, data = _cells(rows[0]), [_cells(r) for r in rows[2:]]  # rows[1] is the |---| rule
            body.append("<table><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr></thead><tbody>"
                        + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in data)
                        + "</tbody></table>")
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            body.append("<ul>" + "".join(items) + "</ul>")
        elif match := _IMAGE.match(line.strip()):
            body.append(_image(match["alt"], match["src"], images))
            i += 1
        else:
            paragraph = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "|", "- ", "![")):
                paragraph.append(lines[i].strip())
                i += 1
            body.append(f"<p>{_inline(' '.join(paragraph))}</p>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_STYLE}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")
