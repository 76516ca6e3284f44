"""A lesson's parameters: the names its `parameters` cell assigns (papermill replaces that cell's values
with the ones passed), and a value as the command line gives it, read as the Python literal a learner
would type into that cell."""
from __future__ import annotations

import ast
import json
from pathlib import Path

PLAIN = (bool, int, float, str, type(None))  # what papermill writes back into the cell unchanged


def names(notebook: Path) -> list[str] | None:
    """The names the first cell tagged `parameters` assigns, in order; None when the notebook has no such cell
    (papermill then puts the values in a cell of its own at the top)."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    cell = next((c for c in cells if c["cell_type"] == "code" and "parameters" in c["metadata"].get("tags", [])),
                None)
    if cell is None:
        return None
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    found = []
    for node in ast.parse(source).body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        found += [t.id for t in targets if isinstance(t, ast.Name) and t.id not in found]
    return found


def value(text: str):
    """`8` -> 8, `19.3` -> 19.3, `[False, True]` -> [False, True], `None` -> None, `'A'` or `A` -> "A": a
    number, True/False/None, quoted text, or a list or dict of those; anything else is the text itself."""
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return parsed if _plain(parsed) else text


def _plain(v) -> bool:
    if isinstance(v, list):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain(x) for k, x in v.items())
    return isinstance(v, PLAIN)
