"""`python -m helpers.lessons run NOTEBOOK [--out FILE] [-p NAME VALUE ...] [--device cpu]`: one lesson
top to bottom, headless (runner.py); the last line printed is the executed copy. A value is read as
the Python literal a learner would type into the parameters cell (parameters.py):

    python -m helpers.lessons run notebooks/02_memory.ipynb -p llama_dp8_fits "[False, True]" --device cpu

Exit status: 0 when every cell ran, papermill's when a cell failed (its error is in the executed copy),
2 when nothing could start (no papermill, no such notebook or parameter)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from helpers.errors import KitError
from helpers.lessons import parameters, runner


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m helpers.lessons", description="Run the kit's lessons headless.")
    commands = p.add_subparsers(dest="command", required=True, metavar="run")
    run = commands.add_parser("run", help="run one lesson top to bottom and write its executed copy",
                              description="Run one lesson top to bottom in its own papermill process.")
    run.add_argument("notebook", type=Path, help="the lesson, e.g. notebooks/00_quickstart.ipynb")
    run.add_argument("--out", type=Path, help="the executed copy (default: runs/lessons/NOTEBOOK)")
    run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="set a name of the lesson's parameters cell; VALUE is a Python literal "
                          "(8, 19.3, True, None, \"[False, True]\") or plain text")
    run.add_argument("--device", help="the lesson's `device` parameter: cpu, cuda or auto (default: the lesson's)")
    run.add_argument("--cell-timeout", type=int, default=runner.CELL_TIMEOUT_S, metavar="SECONDS",
                     help=f"a cell running longer fails the lesson (default: {runner.CELL_TIMEOUT_S})")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    given = {}
    for name, text in args.parameter:
        if name in given:
            print(f"error: -p {name} given twice: give each parameter once", file=sys.stderr)
            return 2
        given[name] = parameters.value(text)
    out = args.out or runner.default_out(args.notebook)
    try:
        result = runner.run_lesson(args.notebook, out, given, args.device, args.cell_timeout)
    except KitError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if result.returncode != 0:
        print(f"error: {args.notebook.name} stopped at a failing cell (above); its executed copy, with the "
              f"error in it: {out}", file=sys.stderr)
        return result.returncode
    print(out)
    return 0
