"""Papermill runs every notebook in notebooks/ with its own (CI-sized) parameters; a notebook whose
cell raises (every claim is an assert) fails the suite. New notebooks are picked up automatically."""
import os
from pathlib import Path

import papermill
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXECUTED = ROOT / "tests" / ".executed"
CELL_TIMEOUT_S = 900  # no cell of a CPU-sized lesson takes minutes; a hang fails instead of blocking CI


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_notebook_runs_and_asserts(notebook):
    EXECUTED.mkdir(exist_ok=True)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    papermill.execute_notebook(
        str(notebook), str(EXECUTED / notebook.name), cwd=str(notebook.parent),
        kernel_name="python3", progress_bar=False, parameters={"device": "cpu"},
        execution_timeout=CELL_TIMEOUT_S,
    )


def test_every_notebook_has_a_parameters_cell():
    import nbformat
    for nb_path in NOTEBOOKS:
        nb = nbformat.read(nb_path, as_version=4)
        tags = [c.metadata.get("tags", []) for c in nb.cells if c.cell_type == "code"]
        assert any("parameters" in t for t in tags), f"{nb_path.name} has no papermill parameters cell"
