"""report.html: the bench report as one self-contained page, made from report.md itself.

report.md is rendered by markdown-it-py (CommonMark plus pipe tables; it comes with Rich), so the
page says exactly what report.md says. Raw HTML in the markdown is shown as text, never passed
through: report.md holds candidates' text (their verdicts' reasons). The plots are embedded as
base64 PNGs, so the file can be mailed or opened anywhere without its plots/ directory; only the
images the caller names are embedded, so a line that reads like an image in a candidate's text is
never taken as a file to read.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

_STYLE = ("body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222}"
          "table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #ccc;padding:.25rem .5rem;"
          "text-align:left}th{background:#f4f4f4}img{max-width:100%}code{background:#f4f4f4}")


def _renderer(images: Mapping[str, Path]) -> MarkdownIt:
    # No links: report.md writes none, and a candidate's text must not become one (only plots are images).
    md = MarkdownIt("commonmark", {"html": False}).enable("table").disable(["link", "autolink"])

    def image(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        src, alt = str(token.attrGet("src") or ""), token.content
        if src not in images:  # not a plot this report made: shown as the text it is
            return html.escape(f"![{alt}]({src})")
        data = base64.b64encode(images[src].read_bytes()).decode("ascii")
        return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'

    md.add_render_rule("image", image)
    return md


def markdown_to_html(markdown: str, images: Mapping[str, Path]) -> str:
    """The page for report.md's text; `images` maps each plot's name in report.md (its path
    relative to the report) to its file, which is embedded. No other file is read."""
    title = next((line.lstrip("# ").strip() for line in markdown.splitlines() if line.startswith("# ")),
                 "kernelloop report")
    body = _renderer(images).render(markdown)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_STYLE}</style></head>\n<body>\n" + body + "</body></html>\n")
