"""The advisor's time model against the kit's own H200 measurements: the GPT sizes of
benchmarks/speed/throughput.py, one H200, the layout those runs used (one GPU, their micro and
global batch, no recompute, no distributed optimizer), planned with Execution.KIT_LOCAL (the kit's
local backend) as the measured runs executed: their weight gradients accumulated by the GEMM
(runtime/layers/wgrad_accumulation.py) or, in runs recorded before it, added into main_grad after it.

Measured step times come from the recorded result files (never typed in here): the median step of
the kit's job and of the bare Megatron loop on the same calls, each file with its command and date.

    python -m benchmarks.advisor.h200_check [--write docs/results/advisor_h200.md]

What it shows: where the step is GPU-bound (the 1.4B and the 7B-wide GPT) the model's terms add up
to the measured time within a few percent; where it is host-bound (the 125M GPT: the device waits
for Python between kernels) the prediction is far below the measurement, since no term models the
host. The advisor ranks cluster-sized layouts, which are GPU-bound."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.speed.throughput import SIZES, model_of
from helpers.advisor.advise import advise
from helpers.advisor.execution import KIT_LOCAL

ROOT = Path(__file__).resolve().parents[2]
# (result file, date, weight gradients accumulated by the GEMM): each size's newest measurement of the
# kit and the bare loop
MEASURED = {
    "gpt-1.4b": ("benchmarks/speed/throughput_results_2026-12-04_paired_1.4b.json", "2026-12-04", True),
    "gpt-125m": ("benchmarks/speed/throughput_results_2026-12-04_paired_125m.json", "2026-12-04", True),
    "gpt-7b-l6": ("benchmarks/speed/throughput_results.json", "2026-12-01", False),  # the one run measuring it
}


def measured(size: str) -> dict:
    """{"kit": s, "bare": s}: the median step times the size's result file recorded (a file of several
    runs: the run that measured this size with SDPA attention)."""
    data = json.loads((ROOT / MEASURED[size][0]).read_text())
    if "results" in data:  # one invocation's results.json (with --repeats: the medians over the pairs)
        return {who: data["results"][f"{who}/{size}/sdpa"]["step_time_s"] for who in ("kit", "bare")}
    if "runs" not in data:
        return {who: data[f"{who}/{size}"]["step_time_s"] for who in ("kit", "bare")}
    [results] = [r["results"] for r in data["runs"].values() if f"kit/{size}/sdpa" in r["results"]]
    return {who: results[f"{who}/{size}/sdpa"]["step_time_s"] for who in ("kit", "bare")}


def predicted(size: str):
    """The advisor's row for the measured layout: 1 GPU, the size's micro batch, nothing recomputed."""
    _, _, seq, micro_batch, global_batch = SIZES[size]
    execution = KIT_LOCAL.with_(grad_accumulation_fused=MEASURED[size][2])
    advice = advise(model_of(size), 1, "h200", 1, seq_len=seq, global_batch=global_batch, execution=execution,
                    backend="local", max_micro_batch=micro_batch)
    return next(r for r in advice.rows if r.layout.micro_batch == micro_batch and not r.training.dist_opt
                and r.training.recompute == "none")


def rows() -> list[dict]:
    out = []
    for size in MEASURED:
        row, times = predicted(size), measured(size)
        out.append({"size": size, "date": MEASURED[size][1], "file": MEASURED[size][0],
                    "predicted_s": row.step.step_s, "kit_s": times["kit"], "bare_s": times["bare"],
                    "terms_s": {k: v for k, v in row.step.terms.items() if v}})
    return out


def markdown(table: list[dict], command: str) -> str:
    lines = ["# The layout advisor against the kit's H200 measurements", "",
             "The advisor (`helpers/advisor/`) predicts a step from named terms; docs/results/advisor.md checks it "
             "against vTrain's published A100 clusters. This page checks the same model on one H200 against the "
             "kit's own step times (`benchmarks/speed/throughput.py`, the files named below): one GPU, the runs' "
             "micro and global batch, sequence 2048, no recompute, `Execution.KIT_LOCAL` with the weight gradients "
             "accumulated as each run did (last column).", "",
             f"**Command** (CPU, a few seconds): `{command}`  ",
             f"**Date** {time.strftime('%Y-%m-%d')} (the measurements: the dates in the table).", "",
             "| GPT | measured | predicted s | kit s | error vs kit | bare loop s | error vs bare | terms (s) | file "
             "| weight gradients |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        terms = ", ".join(f"{k} {v:.3f}" for k, v in r["terms_s"].items())
        lines.append(f"| {r['size']} | {r['date']} | {r['predicted_s']:.3f} | {r['kit_s']:.3f} | "
                     f"{r['predicted_s'] / r['kit_s'] - 1:+.1%} | {r['bare_s']:.3f} | "
                     f"{r['predicted_s'] / r['bare_s'] - 1:+.1%} | {terms} | `{r['file']}` | "
                     f"{'accumulated by the GEMM' if MEASURED[r['size']][2] else 'added after the GEMM'} |")
    lines += ["", "Where the GPU is busy (1.4B, and the 7B-wide GPT's six layers) the terms add up to the measured "
              "step within a few percent. The 125M GPT is host-bound on an H200: its kernels are short and the "
              "device waits for Python between them (the bare loop, which launches the same kernels, waits as "
              "long), and no term of the advisor models the host; a cluster-sized layout, the advisor's use, is "
              "GPU-bound. Not listed: the MoE size of throughput.py, whose 8 experts run one after another on the "
              "local backend (Megatron's SequentialMLP, no grouped GEMM): 1.03 s measured (docs/results/throughput.md) "
              "against 0.17 s predicted, a loop no term models.", ""]
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", type=Path, help="write the markdown page here")
    args = p.parse_args(argv)
    table = rows()
    for r in table:
        print(f"{r['size']:10s} predicted {r['predicted_s']:.3f} s  kit {r['kit_s']:.3f} s "
              f"({r['predicted_s'] / r['kit_s'] - 1:+.1%})  bare {r['bare_s']:.3f} s "
              f"({r['predicted_s'] / r['bare_s'] - 1:+.1%})")
    if args.write:
        command = "python -m benchmarks.advisor.h200_check --write " + str(args.write)
        args.write.write_text(markdown(table, command))


if __name__ == "__main__":
    main()
