"""One lesson, top to bottom, in a papermill process of its own (papermill_cli.py): the command line
(`python -m helpers.lessons run`), the notebook tests and their executed copies, which `make site`
renders, all run a lesson through `run_lesson`. Its own process per lesson: no kernel client state is
shared between lessons, and the caller's jupyter_client is left as it is.

The kernel is Jupyter's `python3`, its working directory the notebook's folder, the kit first on its
PYTHONPATH (the kernel imports the same kit as the caller, as torchrun's workers do), warnings off in it
(an executed copy shows what the lesson says), and each cell has CELL_TIMEOUT_S: no cell of a CPU-sized
lesson takes minutes, so a hang fails instead of blocking."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from helpers.errors import KitError
from helpers.job import paths
from helpers.lessons import parameters as lesson_parameters

CELL_TIMEOUT_S = 900
INSTALL = "pip install -e '.[lessons]'"  # the `lessons` extra of pyproject.toml: papermill


def papermill_missing() -> str | None:
    """The one-line error when papermill is not installed in this Python; None when it is."""
    if importlib.util.find_spec("papermill") is None:
        return f"papermill is not installed, and running a lesson headless needs it: {INSTALL} (in the repository)"
    return None


def papermill_command(notebook: Path, out: Path, parameters: dict | None = None, device: str | None = None,
                      cell_timeout_s: int = CELL_TIMEOUT_S) -> list[str]:
    """The child's command line: papermill's arguments, `parameters` as one YAML document, `device` as a
    parameter of its own when given (otherwise the lesson's default stands)."""
    import yaml  # papermill's own dependency: present wherever the command can run

    notebook = Path(notebook)
    return [sys.executable, "-m", "helpers.lessons.papermill_cli", str(notebook), str(out),
            "--cwd", str(notebook.resolve().parent), "-k", "python3",
            *(["-p", "device", device] if device else []),
            "--execution-timeout", str(cell_timeout_s), "--no-progress-bar",
            *(["-y", yaml.safe_dump(parameters)] if parameters else [])]


def check(notebook: Path, parameters: dict | None, device: str | None) -> None:
    """Refuse, before any process starts, a notebook that is not there and a parameter its parameters cell
    does not have (papermill would only warn, and the lesson would run on its own value)."""
    notebook = Path(notebook)
    if notebook.suffix != ".ipynb" or not notebook.is_file():
        raise KitError(f"no notebook at {notebook}: give a lesson's .ipynb file, e.g. notebooks/00_quickstart.ipynb")
    if device and "device" in (parameters or {}):
        raise KitError("device is given twice, as a parameter and as the device: give it once")
    given = [*(parameters or {}), *(["device"] if device else [])]
    if not given:
        return
    known = lesson_parameters.names(notebook)
    if known is None:
        raise KitError(f"{notebook.name} has no cell tagged `parameters`, so {', '.join(given)} cannot be set: "
                       "run it without -p/--device, or tag its cell of settings `parameters`")
    unknown = [name for name in given if name not in known]
    if unknown:
        raise KitError(f"{notebook.name}'s parameters cell has no {', '.join(unknown)}: "
                       f"its parameters are {', '.join(known)}")


def default_out(notebook: Path) -> Path:
    """Where an executed copy goes when no --out is given: runs/lessons/, beside the lesson's jobs."""
    return paths.runs_dir() / "lessons" / Path(notebook).name


def run_lesson(notebook: Path, out: Path, parameters: dict | None = None, device: str | None = None,
               cell_timeout_s: int = CELL_TIMEOUT_S, capture: bool = False) -> subprocess.CompletedProcess:
    """Run `notebook` with `parameters` (and `device`) in its own papermill process; the executed copy,
    with any failing cell's error in it, is written to `out`. `capture`: keep the process's output
    (`.stdout`, `.stderr`) instead of letting it through. A failing cell is the process's return code,
    not an exception; a missing papermill, notebook or parameter raises KitError before anything runs."""
    missing = papermill_missing()
    if missing:
        raise KitError(missing)
    check(notebook, parameters, device)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    kit_first = os.pathsep.join([str(paths.REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(papermill_command(notebook, out, parameters, device, cell_timeout_s),
                          capture_output=capture, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": kit_first})
