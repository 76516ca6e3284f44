"""Papermill runs every notebook in notebooks/ with its own (CI-sized) parameters; a notebook whose
cell raises (every claim is an assert) fails the suite. New notebooks are picked up automatically.

Each notebook runs in its own papermill process (papermill_run.py: papermill's command line with a
fix for messages its client can miss under load), so no client state is shared between lessons."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXECUTED = ROOT / "tests" / ".executed"
RUNNER = Path(__file__).with_name("papermill_run.py")
CELL_TIMEOUT_S = 900  # no cell of a CPU-sized lesson takes minutes; a hang fails instead of blocking CI
# The exercises' right answers, passed as parameters (no notebook holds them; helpers/views/exercises.py).
ANSWERS = {
    "01_memory": {"llama_dp8_fits": [False, True]},
    "02_data_parallel": {"dp_wire_formula": "(n - 1) / n * (grad + grad // 4 * elem)"},
    "03_tensor_parallel": {"tp_all_reduces": 3 * (4 * 4 + 2)},
    "04_sequence_parallel": {"sp_all_gathers": 6 * 4 + 1 + 2},
    "05_pipeline_parallel": {"vpp_isends": 4 * 3 + 4 * (3 - 1), "pp_bubble": 3 / 15},  # (p-1)/(m+p-1)
    "06_context_parallel": {"kv_gather_bytes": 64 * 2 * (4 // 2) * 16 * 4},  # seq x mb x groups/TP x dim x fp32
    "07_expert_parallel": {"fewer_bytes_dispatcher": "alltoall"},
    "08_process_groups_5d": {"ep_group_tp4": [0, 1, 2, 3]},
    "10_checkpoints": {"checkpoint_bytes": 12 * 263_296},  # weights + Adam's two moments, fp32
}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_notebook_runs_and_asserts(notebook):
    EXECUTED.mkdir(exist_ok=True)
    out = subprocess.run(
        [sys.executable, str(RUNNER), str(notebook), str(EXECUTED / notebook.name), "--cwd",
         str(notebook.parent), "-k", "python3", "-p", "device", "cpu", "--execution-timeout", str(CELL_TIMEOUT_S),
         "--no-progress-bar", *(["-y", yaml.safe_dump(ANSWERS[notebook.stem])] if notebook.stem in ANSWERS else [])],
        capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, f"{notebook.name} failed (executed copy: {EXECUTED / notebook.name}):\n" \
                                f"{out.stderr[-4000:]}"


def test_every_notebook_has_a_parameters_cell():
    import nbformat
    for nb_path in NOTEBOOKS:
        nb = nbformat.read(nb_path, as_version=4)
        tags = [c.metadata.get("tags", []) for c in nb.cells if c.cell_type == "code"]
        assert any("parameters" in t for t in tags), f"{nb_path.name} has no papermill parameters cell"
