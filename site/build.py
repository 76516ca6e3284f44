"""The lessons as a static web site, readable before anything is installed or run: every lesson as
`make test` executed it (tests/.executed/*.ipynb, written by tests/notebooks/test_notebooks.py), with its
pictures, in learning order, behind a table of contents.

    python site/build.py [--executed tests/.executed] [--out site/html]

nbconvert's HTMLExporter renders each notebook with JupyterLab's own styles (site/page.html.j2 adds the
navigation and leaves out every script fetched from elsewhere: the pages work offline). Before
rendering, what a reader should not see is taken out: the cell papermill injected (it holds the
exercises' answers), the outputs of the cells that check an exercise, and widget outputs, which need a
live kernel. Lesson 10, a panel of widgets, shows the screenshots in docs/layout_lab/ instead.
`site.json` lists each page with the number of pictures it must show (site/check.mjs checks them)."""
from __future__ import annotations

import argparse
import copy
import html
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
WIDGET = "application/vnd.jupyter.widget-view+json"
EXERCISE_CHECK = re.compile(r"\bexercises\.check_\w+\(")
LAYOUT_LAB_SHOTS = [("1_opened.png", "The panel as it opens: a valid layout, its rank grids and memory plan."),
                    ("2_tp3_violations.png", "TP changed to 3: named violations, each with a fix; Run is disabled."),
                    ("3_ran.png", "TP back to 2 and Run pressed: a real 4-process job and its loss curve.")]


def title_of(nb: dict) -> str:
    first = "".join(next(c for c in nb["cells"] if c["cell_type"] == "markdown")["source"])
    return first.splitlines()[0].lstrip("# ").strip()


def markdown_cell(text: str) -> dict:
    return {"cell_type": "markdown", "id": "site-note", "metadata": {}, "source": text}


def for_readers(nb: dict, images_dir: Path, lesson: str) -> dict:
    """A copy of an executed notebook as a reader should see it (see the module docstring)."""
    nb = copy.deepcopy(nb)
    cells = []
    for cell in nb["cells"]:
        if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            continue
        if cell["cell_type"] == "code":
            if EXERCISE_CHECK.search("".join(cell["source"])):
                cell["outputs"] = [{"output_type": "stream", "name": "stdout",
                                    "text": "(your answer is checked here when you run the lesson)\n"}]
            kept = [o for o in cell.get("outputs", []) if WIDGET not in o.get("data", {})]
            if len(kept) < len(cell.get("outputs", [])) and not any("image/png" in o.get("data", {}) for o in kept):
                kept.append({"output_type": "stream", "name": "stdout",
                             "text": "(an interactive widget: run the lesson in JupyterLab to use it)\n"})
            cell["outputs"] = kept
        cells.append(cell)
    if lesson.startswith("10_"):
        shots = []
        for name, caption in LAYOUT_LAB_SHOTS:
            shutil.copyfile(ROOT / "docs" / "layout_lab" / name, images_dir / name)
            shots.append(f"![{caption}](images/{name})\n\n*{caption}*\n")
        cells.insert(1, markdown_cell("**The panel as it looks in JupyterLab** (screenshots; in the lesson it "
                                      "is live):\n\n" + "\n".join(shots)))
    nb["cells"] = cells
    nb["metadata"].pop("widgets", None)
    return nb


def pictures(nb: dict) -> int:
    """Pictures a rendered page must show: PNG outputs and markdown images."""
    outputs = sum("image/png" in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []))
    inline = sum(len(re.findall(r"!\[[^\]]*\]\([^)]+\)", "".join(c["source"])))
                 for c in nb["cells"] if c["cell_type"] == "markdown")
    return outputs + inline


def minutes(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def index_page(lessons: list[dict], css: str) -> str:
    rows = "\n".join(
        f'<tr><td><a href="{html.escape(p["page"])}">{html.escape(p["title"])}</a></td>'
        f'<td>{html.escape(p["assumes"])}</td><td class="t">{p["time"]}</td><td class="t">{p["pictures"]}</td></tr>'
        for p in lessons)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Megatron distributed-training kit: the lessons</title><style>{css}</style></head>
<body><main class="toc">
<h1>Megatron distributed-training kit: the lessons</h1>
<p>{len(lessons)} lessons, in learning order, each as the test suite ran it on a 2-core CPU machine: real
<code>torchrun</code> jobs on Megatron-Core, with their pictures and every assertion they make. To run them
yourself: <code>make lab</code> in the repository (its README says what a machine needs).</p>
<table><thead><tr><th>lesson</th><th>assumes</th><th>run time</th><th>pictures</th></tr></thead>
<tbody>
{rows}
</tbody></table>
</main></body></html>
"""


def build(executed: Path, out: Path) -> list[dict]:
    import nbformat
    from nbconvert import HTMLExporter

    notebooks = sorted(executed.glob("[0-9][0-9]_*.ipynb"))
    if not notebooks:
        sys.exit(f"no executed lessons in {executed}: run `make test` (or `pytest tests/notebooks`) first; "
                 "it writes them there")
    missing = sorted({p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")} - {p.name for p in notebooks})
    if missing:
        sys.exit(f"{executed} lacks {', '.join(missing)}: run `make test` (or `pytest tests/notebooks`) first")
    if out.exists():
        shutil.rmtree(out)
    (out / "images").mkdir(parents=True)
    exporter = HTMLExporter(template_name="lab", extra_template_paths=[str(HERE)], template_file="page.html.j2")
    pages = []
    for path in notebooks:
        nb = json.loads(path.read_text())
        first = "".join(next(c for c in nb["cells"] if c["cell_type"] == "markdown")["source"])
        assumes = re.search(r"\*\*Assumes:\*\*\s*(.+?)(?:\n\n|$)", first, flags=re.S)
        pages.append({"source": path, "page": path.stem + ".html", "title": title_of(nb),
                      "assumes": " ".join(assumes.group(1).split()) if assumes else "",
                      "time": minutes(nb["metadata"].get("papermill", {}).get("duration"))})
    for i, page in enumerate(pages):
        nb = for_readers(json.loads(page.pop("source").read_text()), out / "images", page["page"])
        page["pictures"] = pictures(nb)
        nav = {"index": "index.html",
               "prev": pages[i - 1] if i else None, "next": pages[i + 1] if i + 1 < len(pages) else None}
        body, _ = exporter.from_notebook_node(nbformat.reads(json.dumps(nb), as_version=4),
                                              resources={"metadata": {"name": page["title"]}, "site_nav": nav})
        (out / page["page"]).write_text(body)
    css = (HERE / "index.css").read_text()
    (out / "index.html").write_text(index_page(pages, css))
    (out / "site.json").write_text(json.dumps({"index.html": {"pictures": 0, "links": len(pages)},
                                              **{p["page"]: {"pictures": p["pictures"]} for p in pages}}, indent=1))
    return pages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--executed", type=Path, default=ROOT / "tests" / ".executed")
    ap.add_argument("--out", type=Path, default=HERE / "html")
    args = ap.parse_args()
    pages = build(args.executed, args.out)
    print(f"{len(pages)} lessons, {sum(p['pictures'] for p in pages)} pictures -> {args.out / 'index.html'}")


if __name__ == "__main__":
    main()
