"""Run the lesson notebooks' code on GPUs with their GPU parameters, where papermill is not
installed: every code cell of each notebook is executed in order in one namespace (the parameters
cell first, then the overrides below, as papermill would inject them), figures go to PNG files, and
every `assert` in the notebook applies. Writes <out>/<notebook>.log (printed output) and
<out>/results.json (per notebook: passed or the error, wall time, every job's losses).

    python -m benchmarks.notebooks.lessons --out DIR [--notebooks 03_data_parallel,06_pipeline_parallel]
"""
import argparse
import contextlib
import io
import json
import time
import traceback
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the Agg backend)

from helpers.job.paths import REPO_ROOT  # noqa: E402

# GPU parameters: 2 GPUs, so the largest group is 2; bf16 (the notebooks use 1e-2 relative then).
GPU_PARAMETERS = {
    "03_data_parallel": dict(device="cuda", dp_sizes=[2], iters=4, seq_len=128),
    "04_tensor_parallel": dict(device="cuda", tp_sizes=[2], iters=4, seq_len=128),
    "05_sequence_parallel": dict(device="cuda", tp_sizes=[2], iters=4, seq_len=128),
    "06_pipeline_parallel": dict(device="cuda", pp_sizes=[2], iters=4, seq_len=128),
}


def run_notebook(name: str, out: Path, overrides: dict) -> dict:
    cells = json.loads((REPO_ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"]
    code = [("".join(c["source"]), "parameters" in c.get("metadata", {}).get("tags", []))
            for c in cells if c["cell_type"] == "code"]
    ns = {"__name__": "__main__"}
    log = io.StringIO()
    t0 = time.time()
    result = {"parameters": overrides}
    try:
        with contextlib.redirect_stdout(log):
            for i, (src, is_params) in enumerate(code):
                exec(compile(src, f"{name}[cell {i}]", "exec"), ns)
                if is_params:
                    ns.update(overrides)
                for n in plt.get_fignums():
                    plt.figure(n).savefig(out / "figures" / f"{name}-cell{i}-{n}.png", dpi=80)
                plt.close("all")
        result["passed"] = True
    except Exception:
        result["passed"] = False
        result["error"] = traceback.format_exc()[-3000:]
    result["wall_s"] = round(time.time() - t0, 1)
    runs = ns.get("runs", {})
    result["jobs"] = {k: {"losses": r.losses, "world_size": r.spec.world_size, "precision": r.spec.precision,
                          "device": r.ranks.get(0, {}).get("device_name")} for k, r in runs.items()}
    (out / f"{name}.log").write_text(log.getvalue() + "\n" + result.get("error", ""))
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--notebooks", default=",".join(GPU_PARAMETERS))
    args = ap.parse_args()
    (args.out / "figures").mkdir(parents=True, exist_ok=True)
    import os
    os.chdir(REPO_ROOT / "notebooks")  # as papermill runs them
    results = {}
    for name in args.notebooks.split(","):
        results[name] = run_notebook(name, args.out, GPU_PARAMETERS[name])
        print(f"{name}: {'passed' if results[name]['passed'] else 'FAILED'} in {results[name]['wall_s']} s",
              flush=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=2))
    import shutil  # the figures travel back as one file
    shutil.make_archive(str(args.out / "figures"), "tar", args.out / "figures")
    shutil.rmtree(args.out / "figures")
    for name, r in results.items():
        for job, j in r["jobs"].items():
            print(f"  {name} | {job} | {j['world_size']} GPU(s) | losses {[round(x, 4) for x in j['losses']]}")
        if not r["passed"]:
            print(r["error"])


if __name__ == "__main__":
    main()
