"""The HTML report's building blocks: a document's values with their place in it, numbers as text, and
sortable tables. Every number written carries `data-key` (its JSON pointer in the document), `data-value`
(the value itself, as JSON writes it) and `data-fmt` (how it is shown), so a reader (and the tests) can
check each one against `headroom report --html FILE --json`, and the tables sort by the value."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

# How a number is shown: times in the document are microseconds, shown as milliseconds.
FORMATS = {
    "ms": lambda v: f"{v / 1000:,.2f}",
    "ms3": lambda v: f"{v / 1000:,.3f}",
    "dms": lambda v: f"{v / 1000:+,.3f}",  # a change: signed
    "pct": lambda v: f"{100 * v:.1f}%",
    "dpct": lambda v: f"{100 * v:+.2f}%",
    "x": lambda v: f"{v:.3f}x",
    "factor": lambda v: f"{v:g}x",
    "int": lambda v: f"{int(round(v)):,}",
    "num": lambda v: f"{v:,.1f}",
}
MISSING = "–"


def number(v: Any, fmt: str) -> str:
    """`v` as the page shows it (`MISSING` for null or not finite)."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return MISSING
    return FORMATS[fmt](v)


def _pointer_part(k: Any) -> str:
    return str(k).replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class Node:
    """A value of the document and its JSON pointer (`key`): indexing a Node gives the child's Node."""

    value: Any
    path: tuple = ()

    def __getitem__(self, k: Any) -> Node:
        v = self.value
        child = v[k] if isinstance(v, list) else (v.get(k) if isinstance(v, dict) else None)
        return Node(child, self.path + (k,))

    def __iter__(self) -> Iterator[Node]:
        for i in range(len(self.value or [])):
            yield self[i]

    def __len__(self) -> int:
        return len(self.value or [])

    def has(self, k: str) -> bool:
        return isinstance(self.value, dict) and k in self.value

    @property
    def key(self) -> str:
        return "".join("/" + _pointer_part(k) for k in self.path)

    @property
    def raw(self) -> str:
        """The value as `data-value` holds it: JSON's text of the number, empty for null."""
        v = self.value
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return ""
        return repr(float(v)) if isinstance(v, float) else str(v)


def num(node: Node, fmt: str, tag: str = "span", cls: str = "") -> str:
    """A number of the document, marked with its place and value."""
    c = f' class="{cls}"' if cls else ""
    return f'<{tag}{c} data-key="{node.key}" data-value="{node.raw}" data-fmt="{fmt}">{number(node.value, fmt)}</{tag}>'


def text(node: Node, tag: str = "span", cls: str = "", width: int | None = None) -> str:
    """A text of the document (a name, a note; true and false as yes and no), marked with its place;
    `width`: shortened on screen, whole in the tooltip."""
    c = f' class="{cls}"' if cls else ""
    v = node.value
    s = "" if v is None else ("yes" if v else "no") if isinstance(v, bool) else str(v)
    shown = s
    if width and len(s) > width:
        from headroom.report.render import short_name

        shown = short_name(s, width)
    tip = f' title="{escape(s)}"' if shown != s else ""
    return f'<{tag}{c} data-key="{node.key}"{tip}>{escape(shown)}</{tag}>'


@dataclass(frozen=True)
class Column:
    """A table column: the row's key, its heading, and `fmt` (a FORMATS name, or "text"); `optional`
    columns are shown only when some row has the key (a column a newer document adds, e.g. a bound)."""

    key: str
    heading: str
    fmt: str = "text"
    optional: bool = False
    width: int | None = None


def table(rows: Node | Sequence[Node], columns: Sequence[Column], table_id: str, caption: str = "") -> str:
    """A sortable table of `rows` (a list of objects): a click on a heading sorts by that column."""
    cols = [c for c in columns if not c.optional or any(r.has(c.key) for r in rows)]
    head = "".join(
        f'<th data-col="{c.key}" class="{"num" if c.fmt != "text" else "text"}">{c.heading}</th>' for c in cols
    )
    body = []
    for r in rows:
        cells = []
        for c in cols:
            cell = r[c.key]
            if c.fmt == "text":
                cells.append(text(cell, "td", width=c.width))
            else:
                cells.append(num(cell, c.fmt, "td", "num"))
        body.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{caption}</caption>" if caption else ""
    return (
        f'<div class="scroll"><table class="sortable" id="{escape(table_id)}">{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def notes(items: Node, cls: str = "note") -> str:
    """A list of the document's notes or warnings (verbatim)."""
    if not len(items):
        return ""
    return f'<ul class="{cls}">' + "".join(text(i, "li") for i in items) + "</ul>"
