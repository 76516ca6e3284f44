"""Run chosen code cells of a lesson notebook on a GPU machine without papermill: the parameters
cell, then overrides (as papermill injects them), then every cell whose source contains one of the
given markers, in notebook order, in one namespace; their asserts apply. For cells that need only
one GPU (e.g. notebook 13's out-of-memory case) when the whole notebook needs more.

    python -m benchmarks.notebooks.cells notebooks/13_failure_modes.ipynb --set device=cuda \\
        --cells "from helpers import launch" "Out of memory" --out DIR
"""
import argparse
import contextlib
import io
import json
import time
import traceback
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("notebook", type=Path)
    p.add_argument("--set", nargs="*", default=[], help="NAME=VALUE overrides after the parameters cell")
    p.add_argument("--cells", nargs="+", required=True, help="run the code cells containing these texts")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    nb = json.loads(a.notebook.read_text())
    code = [("".join(c["source"]), c["metadata"].get("tags", [])) for c in nb["cells"] if c["cell_type"] == "code"]
    chosen = [src for src, tags in code if "parameters" in tags]
    chosen.append("\n".join(f"{k} = {v!r}" for k, v in (s.split("=", 1) for s in a.set)))
    chosen += [src for src, tags in code if "parameters" not in tags and any(m in src for m in a.cells)]
    import os
    os.chdir(a.notebook.resolve().parent)
    ns, log, result = {}, io.StringIO(), {"notebook": a.notebook.name, "cells": len(chosen) - 1}
    t0 = time.time()
    with contextlib.redirect_stdout(log):
        try:
            for src in chosen:
                exec(compile(src, a.notebook.name, "exec"), ns)
            result["status"] = "passed"
        except BaseException:
            result["status"] = "failed"
            result["error"] = traceback.format_exc()
    result["wall_s"] = round(time.time() - t0, 1)
    (a.out / f"{a.notebook.stem}.log").write_text(log.getvalue())
    (a.out / f"{a.notebook.stem}.json").write_text(json.dumps(result, indent=2))
    print(log.getvalue()[-3000:], json.dumps(result, indent=2), sep="\n")


if __name__ == "__main__":
    main()
