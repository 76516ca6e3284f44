"""The advisor's time model against measurements no one here made: vTrain's published iteration
times (Bang et al., MICRO 2024; the file ground_truth_multi.csv of the GitHub repository VIA-Research/vTrain):
109 runs of GPT models (3.6B, 18.4B, 39.1B, 175B) on 64-512 A100 GPUs, 8 per node, with
Megatron-DeepSpeed, activation recompute on. Read from $KIT_DATA_DIR/vtrain/ (the suite reads
WikiText the same way).

Per row: the predicted and measured iteration time and the error. Per (model, GPU count) group:
Spearman's rank correlation of predicted and measured times, and whether the measured fastest
layout is among the three predicted fastest. The cluster is what vTrain's configuration files
give (A100, 8 per node, 800 Gb/s of network per node: 12.5 GB/s per GPU; they name no memory size,
the 40 GB part's datasheet is taken) and the software is Execution.MEGATRON_DEEPSPEED
(helpers/advisor/execution.py).

    python -m benchmarks.advisor.vtrain_check [--fit] [--write docs/results/advisor.md]

`--fit` fits the A100's two achieved fractions (helpers/perf/gpus.py: gemm_fraction,
elementwise_fraction) on all rows, and again leaving each model out in turn, and prints both; the
profile keeps the all-rows fit. `--write` writes docs/results/advisor.md, with a short section on the
advisor's single-GPU choices against one H200 (benchmarks/advisor/h200_choices.py, from its recorded
measurements)."""
from __future__ import annotations

import argparse
import csv
import itertools
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
# scipy comes with pyproject.toml's test extra: only this benchmark (and its unit test) uses it
from scipy import stats

from helpers.advisor.execution import MEGATRON_DEEPSPEED
from helpers.advisor.time import step
from helpers.job import paths
from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.memory.plan import plan_memory
from helpers.memory.training import Training
from helpers.perf import calibration, gpus

GPUS_PER_NODE = 8
# vTrain's validation configuration files (one JSON per row): "inter_node_bandwidth": 800 (Gb/s per node),
# "node_size": 8, "gpu_name": "A100"
CLUSTER = gpus.PROFILES["a100-40gb"].with_(
    inter_node_gb_per_s=800 / 8 / 8,
    source=gpus.PROFILES["a100-40gb"].source + " Network as vTrain's configuration gives it: 800 Gb/s per node "
                                                "of 8 GPUs (12.5 GB/s per GPU).")
VOCAB = 50257  # GPT-2's tokenizer, which Megatron-DeepSpeed's GPT examples use
SEQ = 2048


def data_path() -> Path | None:
    return paths.data_file("vtrain", "ground_truth_multi.csv")


@dataclass(frozen=True)
class Row:
    params_b: float
    gpus: int
    global_batch: int
    micro_batch: int
    hidden: int
    heads: int
    layers: int
    seq_len: int
    tp: int
    dp: int
    pp: int
    measured_s: float

    @property
    def group(self) -> str:
        return f"{self.params_b:g}B on {self.gpus} GPUs"


def load(path: Path) -> list[Row]:
    with open(path, encoding="utf-8-sig") as f:  # the file starts with a byte-order mark
        return [Row(float(r["Parameters (billion)"]), int(r["# GPUs"]), int(r["global batch"]), int(r["micro batch"]),
                    int(r["hidden size"]), int(r["attention heads"]), int(r["# layers"]), int(r["sequence length"]),
                    int(r["tensor parallelism"]), int(r["data parallelism"]), int(r["pipeline parallelism"]),
                    float(r["iteration time (ms)"]) / 1e3) for r in csv.DictReader(f)]


def model_of(row: Row) -> ModelPreset:
    """Megatron's GPT as Megatron-DeepSpeed's examples build it: FFN 4h, LayerNorm, GeLU, biases,
    the vocabulary padded to a multiple of 128 x TP."""
    pad = 128 * row.tp
    return ModelPreset(f"gpt-{row.params_b:g}b", num_layers=row.layers, hidden_size=row.hidden,
                       num_attention_heads=row.heads, ffn_hidden_size=4 * row.hidden,
                       vocab_size=-(-VOCAB // pad) * pad, add_bias_linear=True, max_seq_len=row.seq_len,
                       source="vTrain's ground_truth_multi.csv")


def layout_of(row: Row) -> Layout:
    return Layout(tp=row.tp, pp=row.pp, nproc=row.gpus, micro_batch=row.micro_batch, global_batch=row.global_batch,
                  seq_len=row.seq_len, gpus_per_node=GPUS_PER_NODE)


def predict(row: Row, gpu: gpus.GpuProfile = CLUSTER) -> step.StepTime:
    return step.predict(model_of(row), layout_of(row), Training(recompute="full"), gpu, GPUS_PER_NODE,
                        MEGATRON_DEEPSPEED)


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (ties share their mean rank)."""
    return float(stats.spearmanr(a, b).statistic)


def summarise(rows: list[Row], predicted: list[float]) -> dict:
    """Median |error| over the rows; per (model, GPU count) group Spearman's rank correlation, whether
    the measured fastest layout is among the predicted three fastest, and the group's median |error|."""
    errors = [p / r.measured_s - 1 for r, p in zip(rows, predicted)]
    groups = {}
    for r, p in zip(rows, predicted):
        groups.setdefault(r.group, []).append((r, p))
    summary = {}
    for g, items in groups.items():
        pred, meas = [p for _, p in items], [r.measured_s for r, _ in items]
        best = min(range(len(items)), key=lambda i: meas[i])
        summary[g] = {"rows": len(items), "spearman": spearman(pred, meas),
                      "predicted_rank_of_best": sorted(pred).index(pred[best]) + 1,
                      "median_abs_error": statistics.median(abs(p / m - 1) for p, m in zip(pred, meas))}
        summary[g]["best_in_top3"] = summary[g]["predicted_rank_of_best"] <= 3
    return {"errors": errors, "median_abs_error": statistics.median(abs(e) for e in errors), "groups": summary}


def evaluate(rows: list[Row], gpu: gpus.GpuProfile = CLUSTER) -> dict:
    predicted = [predict(r, gpu).step_s for r in rows]
    return {"predicted": predicted, **summarise(rows, predicted)}


# The grid the two A100 fractions are fitted on (helpers/perf/gpus.py: gemm_fraction, elementwise_fraction)
GEMM_GRID = [round(0.70 + 0.01 * i, 2) for i in range(26)]  # 0.70 .. 0.95
ELEMENTWISE_GRID = [round(0.40 + 0.025 * i, 3) for i in range(23)]  # 0.40 .. 0.95


def predictions_on_grid(rows: list[Row]) -> dict[tuple[float, float], list[float]]:
    return {(g, e): [predict(r, CLUSTER.with_(gemm_fraction=g, elementwise_fraction=e)).step_s for r in rows]
            for g, e in itertools.product(GEMM_GRID, ELEMENTWISE_GRID)}


def fit(rows: list[Row], grid: dict, keep: list[int]) -> tuple[float, float]:
    """The grid point with the smallest median |error| over the rows numbered `keep`."""
    def cost(point):
        return statistics.median(abs(grid[point][i] / rows[i].measured_s - 1) for i in keep)
    return min(grid, key=cost)


def leave_one_model_out(rows: list[Row], grid: dict) -> list[dict]:
    """Fit on every model but one, then score the one left out with those constants."""
    out = []
    for model in sorted({r.params_b for r in rows}):
        train = [i for i, r in enumerate(rows) if r.params_b != model]
        test = [i for i, r in enumerate(rows) if r.params_b == model]
        point = fit(rows, grid, train)
        held = summarise([rows[i] for i in test], [grid[point][i] for i in test])
        out.append({"held_out": f"{model:g}B", "gemm_fraction": point[0], "elementwise_fraction": point[1],
                    "median_abs_error": held["median_abs_error"], "group": next(iter(held["groups"].values()))})
    return out


def markdown(rows: list[Row], result: dict, logo: list[dict] | None, fitted: tuple[float, float] | None,
             command: str, h200: list[str] | None = None) -> str:
    """The page; `h200`: the lines of its section on one H200 (h200_choices.summary()), if any."""
    gpu, latency = CLUSTER, calibration.HOP_LATENCY_S
    lines = ["# The layout advisor's time model against vTrain's measurements", "",
             "`helpers/advisor/` predicts a layout's step time from small named terms (helpers/advisor/time/). "
             "This page checks it against iteration times no one here measured: vTrain's public ground truth "
             "(Bang et al., MICRO 2024; the GitHub repository VIA-Research/vTrain's `ground_truth_multi.csv`, "
             "copied to "
             "`$KIT_DATA_DIR/vtrain/`), 109 runs of GPT models of 3.6B to 175B parameters on 64 to 512 A100 GPUs, "
             "8 per node, measured with Megatron-DeepSpeed with activation recompute on.", "",
             f"**Command** (CPU, about ten seconds; `--fit` adds the fit below, about a minute): `{command}`  ",
             f"**Date** {time.strftime('%Y-%m-%d')}. The GEMM size classes: `python -m benchmarks.advisor.gemm_sizes "
             "--out DIR` on one H200 (2026-12-03, 25 s; `benchmarks/advisor/gemm_sizes_results.json`). The same "
             "model on one H200 against the kit's own step times: docs/results/advisor_h200.md.", ""]
    if h200:
        lines += ["## On one H200", "", *h200, ""]
    lines += ["## What the model is given", "",
              f"- GPU: {gpu.name}, {gpu.peak_bf16_tflops:g} TFLOP/s dense fp16, HBM {gpu.hbm_gb_per_s:g} GB/s, NVLink "
              f"{gpu.intra_node_gb_per_s:g} GB/s per direction (datasheet); network {gpu.inter_node_gb_per_s:g} GB/s "
              "per GPU (vTrain's configuration files: 800 Gb/s per node of 8 GPUs). Those files name the GPU "
              "\"A100\" only; the 40 GB part's HBM bandwidth is taken (the 80 GB part's is 31% higher, which the "
              "fitted elementwise fraction below would absorb).",
              "- Software (`Execution.MEGATRON_DEEPSPEED`): fp16, the attention's scores materialised with softmax "
              "and dropout, full activation recompute, gradients all-reduced in fp16 after the backward (no "
              "overlap), the column-parallel input-gradient all-reduce under the weight-gradient GEMM, each micro "
              "batch's weight gradients added into the parameters' fp16 `.grad` by a kernel of their own (every micro "
              "batch but the first; no fused accumulation into an fp32 buffer).",
              "- Models: GPT with FFN 4h, GeLU, LayerNorm, GPT-2's vocabulary (50257, padded to 128 x TP); "
              "sequence 2048; the rows' TP, PP, DP, micro and global batch.", "",
              "## Constants and how many were fitted on this data", "",
              "| constant | value | where it comes from |", "|---|---|---|",
              f"| GEMM size classes (6 fractions) | `helpers/perf/gemm.py` SIZE_CLASSES | measured on this kit's H200 "
              "(`benchmarks/advisor/gemm_sizes.py`) |",
              "| elementwise and copy rates, flash attention | H200 fractions | measured on this kit's H200 "
              "(`helpers/perf/rates.py`) |",
              f"| collective efficiency | {calibration.COLLECTIVE_EFFICIENCY} | assumed (typical NCCL), not fitted |",
              f"| collective latency: per call, per ring hop inside / between nodes | "
              f"{calibration.RING_BASE_LATENCY_S * 1e6:g}, {latency['intra'] * 1e6:g}/{latency['inter'] * 1e6:g} us "
              "| NCCL's own cost model (ring, Simple protocol), not fitted |",
              f"| **A100 large-GEMM fraction of peak** | **{gpu.gemm_fraction}** | **fitted on these rows** "
              "(the H200's measured fraction, 0.756, predicts the rows 14% slow on median) |",
              f"| **A100 elementwise fraction of HBM bandwidth** | **{gpu.elementwise_fraction}** | **fitted on these "
              "rows** (the H200's, 0.449) |", "",
              "Two constants were fitted on this development set, both describing the A100 (the one GPU whose "
              "achieved rates the kit cannot measure); everything else is measured on the H200, read from a "
              "datasheet, or assumed. The fit minimises the median |error| on a grid (GEMM fraction 0.70-0.95 "
              "step 0.01, elementwise 0.40-0.95 step 0.025). They mostly scale every layout of a group alike: "
              "across that grid each group's rank correlation moves by up to about 0.2.", ""]
    if fitted:
        lines += [f"Fit on all 109 rows: GEMM fraction {fitted[0]}, elementwise fraction {fitted[1]}.", ""]
    lines += ["## Summary", "", f"Median |error| over all 109 rows: **{result['median_abs_error'] * 100:.1f}%** "
              "(aim: <= 15%).", "",
              "| model on GPUs | rows | Spearman | measured best: predicted rank | in predicted top 3 "
              "| median |error| |",
              "|---|---|---|---|---|---|"]
    for g, s in result["groups"].items():
        lines.append(f"| {g} | {s['rows']} | {s['spearman']:.2f} | {s['predicted_rank_of_best']} | "
                     f"{'yes' if s['best_in_top3'] else 'no'} | {s['median_abs_error'] * 100:.1f}% |")
    if logo:
        lines += ["", "### Leave one model out", "",
                  "The two constants fitted on the other three models, then the held-out model scored with them:", "",
                  "| held out | fitted GEMM / elementwise | median |error| | Spearman "
                  "| measured best: predicted rank |",
                  "|---|---|---|---|---|"]
        for f in logo:
            lines.append(f"| {f['held_out']} | {f['gemm_fraction']} / {f['elementwise_fraction']} | "
                         f"{f['median_abs_error'] * 100:.1f}% | {f['group']['spearman']:.2f} | "
                         f"{f['group']['predicted_rank_of_best']} |")
    lines += ["", "## Where it misses", ""] + misses(rows, result)
    lines += ["", "## Every row", "",
              "| model | GPUs | TP | PP | DP | micro batch | microbatches | measured s | predicted s | error |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r, p, e in zip(rows, result["predicted"], result["errors"]):
        lines.append(f"| {r.params_b:g}B | {r.gpus} | {r.tp} | {r.pp} | {r.dp} | {r.micro_batch} | "
                     f"{r.global_batch // (r.dp * r.micro_batch)} | {r.measured_s:.2f} | {p:.2f} | {e * 100:+.1f}% |")
    return "\n".join(lines) + "\n"


def misses(rows: list[Row], result: dict) -> list[str]:
    """The page's account of what the model gets wrong, from the numbers."""
    pred, errors = result["predicted"], result["errors"]
    worst = sorted(range(len(rows)), key=lambda i: -abs(errors[i]))[:8]
    out = ["The largest errors:", "", "| model | TP | PP | DP | micro batch | measured s | predicted s | error |",
           "|---|---|---|---|---|---|---|---|"]
    out += [f"| {rows[i].params_b:g}B | {rows[i].tp} | {rows[i].pp} | {rows[i].dp} | {rows[i].micro_batch} | "
            f"{rows[i].measured_s:.2f} | {pred[i]:.2f} | {errors[i] * 100:+.1f}% |" for i in worst]
    mb2 = sorted(-errors[i] * 100 for i, r in enumerate(rows) if r.params_b == 3.6 and r.tp in (4, 8)
                 and r.micro_batch == 2)
    small = f"{mb2[0]:.0f}-{mb2[-1]:.0f}%"
    tp8 = {r.micro_batch: r.measured_s for r in rows if r.params_b == 3.6 and r.tp == 8}
    big = tp8[64] / tp8[32]
    tp2 = [i for i, r in enumerate(rows) if r.params_b == 39.1 and r.tp == 2]
    others = [i for i, r in enumerate(rows) if r.params_b == 39.1 and r.tp != 2]
    out += ["", f"- The {len(tp2)} TP=2 runs of the 39.1B model are {min(-errors[i] for i in tp2) * 100:.0f}-"
            f"{max(-errors[i] for i in tp2) * 100:.0f}% slower than predicted, while its TP=4 and TP=8 runs of the "
            "same "
            "per-GPU work (the same GEMMs per GPU, TP collectives inside a node, similar pipeline and DP bytes) "
            "land within a few percent, and the 175B model's TP=2 runs are predicted well: nothing in the model "
            "singles them out. They cost the group most of its rank correlation (Spearman without them: "
            f"{spearman([pred[i] for i in others], [rows[i].measured_s for i in others]):.2f}, a diagnostic only).",
            f"- The 3.6B model at micro batch 2 with TP 4 and 8 is {small} slower than predicted, and TP 8 at micro "
            f"batch 64 takes {big:.1f}x its time at micro batch 32: the first looks like the host launching kernels "
            "slower than the GPU runs them, the second like memory pressure; the model has neither.",
            *contradictions(rows, pred), ""]
    for g, s in result["groups"].items():
        if s["best_in_top3"]:
            continue
        idx = [i for i, r in enumerate(rows) if r.group == g]
        by_meas = sorted(idx, key=lambda i: rows[i].measured_s)[:3]
        by_pred = sorted(idx, key=lambda i: pred[i])[:3]
        def name(i):
            r = rows[i]
            return (f"TP{r.tp} PP{r.pp} DP{r.dp} mb{r.micro_batch} ({r.measured_s:.2f} s measured, "
                    f"{pred[i]:.2f} predicted)")
        out.append(f"- {g}: the measured fastest three are {'; '.join(name(i) for i in by_meas)}; the predicted "
                   f"fastest three are {'; '.join(name(i) for i in by_pred)}. The measured best is "
                   f"{(rows[by_meas[0]].measured_s / rows[by_pred[0]].measured_s - 1) * -100:.1f}% faster than the "
                   "predicted best, as measured.")
    return out


def find(rows: list[Row], params_b: float, tp: int, pp: int, micro_batch: int) -> int:
    """The index of the row of that model, TP, PP and micro batch."""
    key = (params_b, tp, pp, micro_batch)
    return next(i for i, r in enumerate(rows) if (r.params_b, r.tp, r.pp, r.micro_batch) == key)


def tp_factor_ceiling(rows: list[Row], pred: list[float], group: str) -> tuple[float, dict[int, float]]:
    """The best Spearman a group could reach if each TP degree but 8 had a free multiplier on its predicted
    times (0.80 to 1.60, step 0.05), and those multipliers: a diagnostic bound, not a model."""
    idx = [i for i, r in enumerate(rows) if r.group == group]
    tps = sorted({rows[i].tp for i in idx} - {8})
    factors = np.array(list(itertools.product(np.arange(0.80, 1.601, 0.05), repeat=len(tps))))  # [combos, tps]
    column = np.array([tps.index(rows[i].tp) if rows[i].tp != 8 else -1 for i in idx])
    per_row = np.where(column >= 0, factors[:, np.maximum(column, 0)], 1.0)  # [combos, rows]
    scaled = per_row * np.array([pred[i] for i in idx])
    measured = np.broadcast_to(stats.rankdata([rows[i].measured_s for i in idx]), scaled.shape)
    rho = stats.pearsonr(stats.rankdata(scaled, axis=1), measured, axis=1).statistic  # Spearman per combination
    best = int(np.argmax(rho))
    return float(rho[best]), {tp: round(float(f), 2) for tp, f in zip(tps, factors[best])}


def contradictions(rows: list[Row], pred: list[float]) -> list[str]:
    """Rows of one model that the layout cannot tell apart, yet measured far apart, and how high a rank
    correlation a free per-TP multiplier could buy: why the 18.4B and 39.1B groups rank as they do."""
    # fp16 (bf16's bytes) with the optimizer sharded over DP (ZeRO-1): without it the 3.6B TP1 rows would
    # need ~55 GiB of the A100's 40
    zero1 = Training(precision="bf16", recompute="full", attention="megatron_local", grad_reduce_in_fp32=False,
                     dist_opt=True, allocator_overhead=0.0)

    def row(i):
        r = rows[i]
        return (f"TP{r.tp} PP{r.pp} DP{r.dp} mb{r.micro_batch} {r.measured_s:.2f} s "
                f"({(pred[i] / r.measured_s - 1) * 100:+.0f}%)")

    def planned(i):
        return f"{plan_memory(model_of(rows[i]), layout_of(rows[i]), zero1).peak_bytes / 2**30:.0f} GiB"

    big = [abs(pred[i] / r.measured_s - 1) for i, r in enumerate(rows) if r.params_b == 175 and r.tp in (2, 4)]
    tp1, tp2 = find(rows, 39.1, 1, 16, 3), find(rows, 39.1, 2, 16, 3)
    same = [find(rows, 39.1, tp, pp, 2) for tp, pp in ((2, 8), (4, 4), (8, 2))]
    tp4, tp8 = find(rows, 39.1, 4, 16, 12), find(rows, 39.1, 8, 16, 24)
    out = ["- **Rows that contradict each other.** Runs of the 39.1B model whose per-GPU work the layout "
           "fixes, measured far apart (measured s, and the prediction's error):",
           f"  - {row(tp1)} against {row(tp2)}: the TP2 run has half the pipeline bubble, the same "
           f"data-parallel bytes leaving each node and less memory (planned peak under ZeRO-1: {planned(tp2)} "
           f"against {planned(tp1)}); it adds one 2-GPU all-reduce over NVLink. So memory pressure does not "
           "explain its time either.",
           f"  - The same parameters per GPU at DP32, micro batch 2, 24 micro batches: {'; '.join(row(i) for i in same)}.",
           f"  - {row(tp4)} against {row(tp8)}: the same GEMMs per GPU and the same 16 micro batches; the TP4 "
           "run has fewer activations per GPU and less TP traffic.",
           f"  The 175B model's TP2 and TP4 runs are predicted within {max(big) * 100:.1f}%. A cost the layout "
           "determines cannot separate such runs."]
    for g in ("18.4B on 256 GPUs", "39.1B on 512 GPUs"):
        rho, factors = tp_factor_ceiling(rows, pred, g)
        named = ", ".join(f"TP{tp} x{f:g}" for tp, f in factors.items())
        out.append(f"- **{g}: a ceiling.** A free multiplier on the predicted time of each TP degree but 8 "
                   f"(0.8 to 1.6, fitted to this group's ranks) reaches Spearman {rho:.2f} ({named}). The 175B "
                   "group needs no such factor for TP2 or TP4, so no one cost per TP degree serves both groups.")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=None, help="default: $KIT_DATA_DIR/vtrain/ground_truth_multi.csv")
    ap.add_argument("--fit", action="store_true", help="fit the two A100 constants, and again leaving each model out")
    ap.add_argument("--write", type=Path, default=None, help="write the results page (docs/results/advisor.md)")
    args = ap.parse_args(argv)
    path = args.csv or data_path()
    if path is None:
        sys.exit("vTrain's data not found: set KIT_DATA_DIR to the shared data folder (it holds vtrain/)")
    rows = load(path)
    result = evaluate(rows)
    logo = fitted = None
    if args.fit:
        grid = predictions_on_grid(rows)
        fitted = fit(rows, grid, list(range(len(rows))))
        logo = leave_one_model_out(rows, grid)
    print(f"median |error| {result['median_abs_error']:.3f}")
    for g, s in result["groups"].items():
        print(f"{g}: Spearman {s['spearman']:.2f}, measured best at predicted rank {s['predicted_rank_of_best']}, "
              f"median |error| {s['median_abs_error']:.3f}")
    if fitted:
        print(f"fitted on all rows: gemm_fraction {fitted[0]}, elementwise_fraction {fitted[1]}")
        for f in logo:
            print(f"held out {f['held_out']}: fitted {f['gemm_fraction']}/{f['elementwise_fraction']}, median |error| "
                  f"{f['median_abs_error']:.3f}, Spearman {f['group']['spearman']:.2f}, "
                  f"best at rank {f['group']['predicted_rank_of_best']}")
    if args.write:
        command = f"python -m benchmarks.advisor.vtrain_check{' --fit' if args.fit else ''} --write {args.write}"
        from benchmarks.advisor import h200_choices
        args.write.write_text(markdown(rows, result, logo, fitted, command, h200_choices.summary()))
        print("wrote", args.write)


if __name__ == "__main__":
    main()
