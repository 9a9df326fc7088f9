"""``report.html``: the report's tables and plots on one self-contained page.

The PNGs are embedded as base64 data URIs and the style is inline, so the page can be mailed or
copied off a cluster alone; it loads nothing from anywhere else.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from atoll.views.summary import Summary, Table, cell, counts_line

if TYPE_CHECKING:
    from atoll.views.plots import Plot

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1250px; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; } .text { text-align: left; }
figure { margin: 1em 0 2em; } img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { color: #555; font-size: 0.9em; } .note { color: #8a5a00; }
"""


def page(summary: Summary, plots: Sequence[Plot], skipped: Sequence[str],
         exports: Sequence[Path]) -> str:
    """The whole page as text."""
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
             f"<title>Atoll report: {escape(summary.run_dir)}</title>\n"
             f"<style>{STYLE}</style>\n</head>\n<body>\n"
             f"<h1>Atoll report: {escape(summary.run_dir)}</h1>\n"
             f"<p>{escape(summary.about)}</p>\n<p>{escape(counts_line(summary))}</p>\n"]
    parts += [f"<p class=\"note\">{escape(note)}</p>\n" for note in summary.notes]
    parts.append("<h2>Evaluations by status</h2>\n")
    parts.append(table(Table(["status", "evaluations"],
                             [[name, n] for name, n in summary.counts.items()])))
    if summary.reasons:
        parts.append("<h2>Most common failure reasons</h2>\n")
        parts.append(table(Table(["evaluations", "reason"],
                                 [[n, text] for text, n in summary.reasons])))
    parts.append(f"<h2>Best {len(summary.top.rows)} of {summary.ok} ok</h2>\n")
    parts.append(table(summary.top) if summary.top.rows else
                 "<p>None yet: no individual finished with a finite loss.</p>\n")
    if exports:
        names = ", ".join(f"<code>{escape(p.name)}</code>" for p in exports)
        parts.append(f"<p>Exported beside this page: {names}.</p>\n")
    parts.append("<h2>Plots</h2>\n" if plots or skipped else "")
    parts += [figure(p) for p in plots]
    parts += [f"<p class=\"note\">Skipped: {escape(note)}</p>\n" for note in skipped]
    parts.append("</body>\n</html>\n")
    return "".join(parts)


def table(data: Table) -> str:
    """Numbers right-aligned, text left-aligned, each header over its column's alignment."""
    first = data.rows[0] if data.rows else [0] * len(data.columns)
    head = "".join(f"<th class=\"text\">{escape(c)}</th>" if isinstance(v, str) else
                   f"<th>{escape(c)}</th>" for c, v in zip(data.columns, first, strict=True))
    rows = []
    for row in data.rows:
        cells = "".join(
            f"<td class=\"text\">{escape(cell(v))}</td>" if isinstance(v, str) else
            f"<td>{escape(cell(v))}</td>" for v in row)
        rows.append(f"<tr>{cells}</tr>")
    return f"<table>\n<tr>{head}</tr>\n" + "\n".join(rows) + "\n</table>\n"


def figure(plot: Plot) -> str:
    data = base64.b64encode(plot.path.read_bytes()).decode("ascii")
    return (f"<figure>\n<img src=\"data:image/png;base64,{data}\" alt=\"{escape(plot.title)}\">"
            f"\n<figcaption><b>{escape(plot.title)}</b>: {escape(plot.caption)} "
            f"(<code>{escape(plot.path.name)}</code>)</figcaption>\n</figure>\n")
