"""Table: a list of dicts that shows itself as a table in Jupyter and as text (no pandas)."""
from __future__ import annotations


class Table(list):
    """A list of dicts that shows itself as a table in Jupyter (no pandas needed)."""

    def columns(self) -> list:
        """Every key of every row, in order of first appearance (rows may differ, e.g. rank counts)."""
        return list(dict.fromkeys(k for row in self for k in row))

    def _repr_html_(self) -> str:
        if not self:
            return "<i>(no rows)</i>"
        cols = self.columns()
        head = "".join(f"<th>{c}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c, ''))}</td>" for c in cols) + "</tr>" for r in self)
        return f"<table><tr>{head}</tr>{body}</table>"

    def __repr__(self) -> str:
        if not self:
            return "(no rows)"
        cols = self.columns()
        cells = [[str(c) for c in cols]] + [[_fmt(r.get(c, "")) for c in cols] for r in self]
        widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
        return "\n".join("  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)
