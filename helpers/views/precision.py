"""Lesson 15's tables and pictures: the number formats' range and spacing, and each scaling
recipe's round-trip error on given tensors (helpers/precision/ computes; this module only shows)."""
from __future__ import annotations

import math
import statistics

import matplotlib.pyplot as plt

from helpers.precision import formats, recipes
from helpers.views.table import Table

FORMATS = ("fp32", "bf16", "fp16", "e4m3", "e5m2")


def format_table() -> Table:
    rows = Table()
    for name in FORMATS:
        f = formats.get(name)
        rows.append({"format": name, "bits (sign, exponent, mantissa)": f"1, {f.exponent_bits}, {f.mantissa_bits}",
                     "max": f"{f.max:.4g}", "smallest normal": f"{f.smallest_normal:.3g}",
                     "smallest subnormal": f"{f.subnormal_step:.3g}",
                     "relative spacing 2^-M": f"{f.relative_spacing:.3g}",
                     "round-trip bound 2^-(M+1)": f"{f.rounding_bound:.3g}",
                     "normal range (powers of 2)": round(f.dynamic_range_bits, 1)})
    return rows


def plot_formats(fig=None):
    """Left: each format's range on a log2 axis (subnormals light, normals dark). Right: every
    positive e4m3 and e5m2 value and the gap to its neighbour, relative to the value: the same
    staircase in every power of two (2^-M), growing below the smallest normal."""
    fig = fig or plt.figure(figsize=(12, 4))
    left, right = fig.subplots(1, 2)
    for i, name in enumerate(FORMATS):
        f = formats.get(name)
        lo, mid, hi = math.log2(f.subnormal_step), math.log2(f.smallest_normal), math.log2(f.max)
        left.barh(i, mid - lo, left=lo, color="tab:blue", alpha=0.3)
        left.barh(i, hi - mid, left=mid, color="tab:blue")
        left.text(hi + 2, i, f"max {f.max:.3g}", va="center", fontsize=8)
    left.set_yticks(range(len(FORMATS)), FORMATS)
    left.set_xlabel("log2 of the magnitude (light: subnormals)")
    left.set_xlim(-160, 175)
    left.set_title("range")
    for name, color in (("e4m3", "tab:orange"), ("e5m2", "tab:green")):
        v = formats.representable(name)
        v = v[v > 0]
        gaps = (v[1:] - v[:-1]) / v[:-1]
        right.step(v[:-1].numpy(), gaps.numpy(), where="post", color=color, label=name)
        right.axvline(formats.get(name).smallest_normal, color=color, linestyle=":", linewidth=1)
    right.set_xscale("log", base=2)
    right.set_yscale("log", base=2)
    right.set_xlabel("value (dotted: smallest normal)")
    right.set_ylabel("gap to the next value / value")
    right.set_title("spacing of the 8-bit formats")
    right.legend()
    fig.tight_layout()
    return fig


def recipe_errors(tensors: dict, recipe_names=recipes.RECIPES) -> Table:
    """One row per (tensor, recipe): mean relative error, whole-tensor error, share flushed to
    zero, share saturated, and bound_ratio (<= 1: every element within the format's half step).
    Gradients (names containing 'grad') in e5m2, everything else in e4m3, as TE's hybrid format."""
    rows = Table()
    for name, t in tensors.items():
        fmt = "e5m2" if "grad" in name else "e4m3"
        for r in recipe_names:
            q = recipes.quantize(t, r, fmt)
            e = recipes.errors(t, q)
            rows.append({"tensor": name, "format": fmt, "recipe": r, "mean relative error": e["mean_relative"],
                         "||error|| / ||x||": e["norm_relative"], "flushed to zero": e["flushed_to_zero"],
                         "saturated": e["saturated"], "bound ratio": recipes.bound_ratio(t, q)})
    return rows


def plot_recipe_errors(rows: Table, ax=None):
    """Mean relative round-trip error per tensor, one bar per recipe (log scale)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 4))
    names = list(dict.fromkeys(r["tensor"] for r in rows))
    kinds = list(dict.fromkeys(r["recipe"] for r in rows))
    width = 0.8 / len(kinds)
    for j, kind in enumerate(kinds):
        vals = [next(r["mean relative error"] for r in rows if r["tensor"] == n and r["recipe"] == kind)
                for n in names]
        ax.bar([i + j * width for i in range(len(names))], vals, width, label=kind)
    for fmt, style in (("e4m3", "--"), ("e5m2", ":")):
        ax.axhline(formats.get(fmt).rounding_bound, color="grey", linestyle=style, linewidth=1,
                   label=f"{fmt} bound 2^-(M+1) (worst case of one normal value)")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names, rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("mean relative round-trip error")
    ax.legend(fontsize=8)
    ax.set_title("quantisation error per recipe")
    return ax


def gpu_runs(results: dict) -> dict:
    """The training runs of benchmarks/gpu_precision.py's results file (docs/precision_gpu_results.json)."""
    first = results["run1"]
    return {k: first[k] for k in ("bf16", "fp8_tensorwise", "fp8_rowwise") if "tokens_per_s" in first.get(k, {})}


def gpu_table(results: dict) -> Table:
    runs = gpu_runs(results)
    base = runs["bf16"]
    return Table({"run": k, "iterations": r["iters"], "tokens/s": r["tokens_per_s"],
                  "vs bf16": r["tokens_per_s"] / base["tokens_per_s"], "MFU (bf16 peak)": r["mfu_vs_bf16_peak"],
                  "peak allocated GiB": r["max_allocated_bytes"] / 2**30, "planned GiB": r["planned_bytes"] / 2**30,
                  "final loss (last 10)": r["final_loss_mean10"] if r["iters"] == base["iters"] else "",
                  "loss vs bf16": (r["final_loss_mean10"] / base["final_loss_mean10"] - 1)
                  if r["iters"] == base["iters"] else ""} for k, r in runs.items())


def gpu_run2_table(results: dict) -> Table:
    """Run 2's training rows (global batch 32, 10 iterations): the Triton quantiser and the per-step
    weight cache against bf16 (README, "Precision")."""
    rows = results["run2"]["training"]
    return Table({"run": k, "what": r["what"], "step s": r["step_time_s_median_from_4"],
                  "tokens/s": r["tokens_per_s"], "vs bf16": r["vs_bf16_call1"]} for k, r in rows.items())


def gpu_run3_table(results: dict) -> Table:
    """Run 3's training rows (global batch 32, micro batch 4/8/16, fresh machines per device call):
    each FP8 row against the bf16 row measured on the same machine (README, "Precision")."""
    return Table({"run": k, "micro batch": r["micro_batch"], "iterations": r["iters"], "call": r["call"],
                  "step s": r["step_time_s"], "tokens/s": r["tokens_per_s"],
                  # three decimals as text: 1.299 must not print as 1.3, the goal it missed
                  "vs bf16 (same machine)": f"{r['vs_bf16_same_machine']:.3f}x" if "vs_bf16_same_machine" in r else "",
                  "MFU (bf16 peak)": r["mfu_vs_bf16_peak"], "peak allocated GiB": r["max_allocated_bytes"] / 2**30,
                  "planned GiB": r["planned_bytes"] / 2**30} for k, r in results["run3"]["training"].items())


SPIKY_START = 9  # the loss spikes of the 200-iteration runs (constant lr, no warm-up) are over by then


def losses_200(results: dict, run: str = "run3") -> tuple[dict, str]:
    """A run's 200-iteration bf16 / FP8 delayed loss curves (same initial weights) and what they ran:
    run 3 on WikiText-2 at global batch 32 (memorised: ~60 passes), run 6 on Python's documentation
    at global batch 64 (8 passes; benchmarks/text_corpus.py), run 7 the same under a warm-up + cosine
    schedule with FP8 trained twice (its second run: how far FP8 lands from itself), run 8 the same
    schedule on one machine with FP8's output layer in FP8 too (JobSpec.fp8_output_layer)."""
    if run == "run3":
        return results["run3"]["losses_200"], "WikiText-2, global batch 32"
    if run == "run7":
        run7 = results["run7"]
        return ({"bf16": run7["bf16"]["losses"], "fp8_delayed": run7["fp8_delayed"]["losses"],
                 "fp8_delayed (again)": run7["fp8_delayed_repeat"]["losses"]},
                "Python docs, global batch 64, warm-up + cosine")
    if run == "run8":
        return ({name: results["run8"][key]["losses"] for key, name in RUN_JOBS["run8"].items()},
                "Python docs, global batch 64, warm-up + cosine, one GPU")
    pair = results["run6"]["call1_2_pydocs_200"]
    return {k: pair[k]["losses"] for k in ("bf16", "fp8_delayed")}, "Python docs, global batch 64"


def plot_gpu_losses_200(results: dict, run: str = "run3", ax=None):
    """A run's 200-iteration loss curves at micro batch 16 (bf16 and FP8 delayed), with their ratio."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4))
    curves, what = losses_200(results, run)
    iterations = range(1, len(curves["bf16"]) + 1)
    for name, losses in curves.items():
        ax.plot(iterations, losses, label=name, linewidth=1.2)
    later = max(max(losses[SPIKY_START:]) for losses in curves.values())
    earliest = max(max(losses[:SPIKY_START]) for losses in curves.values())
    if earliest > 1.2 * later:  # the first iterations' spikes would flatten the rest: cut them off, say so
        ax.set_ylim(top=1.1 * later)
        ax.annotate(f"iterations 1-{SPIKY_START}: up to {earliest:.1f}", (0.02, 0.96), xycoords="axes fraction",
                    va="top", fontsize=8, color="dimgrey")
    ratio = ax.twinx()
    fp8 = [(k, v) for k, v in curves.items() if k != "bf16"]  # one FP8 run, or two (runs 7 and 8)
    for (name, losses), style in zip(fp8, ("-", ":")[:len(fp8)], strict=True):
        ratio.plot(iterations, [f / b - 1 for f, b in zip(losses, curves["bf16"], strict=True)], color="grey",
                   linestyle=style, linewidth=0.8, label=f"{name} / bf16 - 1 (right axis)")
    ratio.axhline(0, color="grey", linewidth=0.5)
    ratio.set_ylabel("fp8 / bf16 - 1", color="grey")
    ax.set_xlabel("iteration")
    ax.set_ylabel("training loss")
    ax.set_title(f"1.4B GPT, {what}, micro batch 16: bf16 vs FP8 delayed", fontsize=10)
    ax.grid(alpha=0.3)
    lines = ax.get_legend_handles_labels(), ratio.get_legend_handles_labels()
    ax.legend(lines[0][0] + lines[1][0], lines[0][1] + lines[1][1], loc="upper center", bbox_to_anchor=(0.5, -0.15),
              ncol=2, fontsize=8)  # below the axes: inside, it covers the curves
    return ax


def gpu_run6_table(results: dict) -> Table:
    """Run 6's bf16 / FP8 delayed pairs at global batch 64, each on one machine (README, "Precision")."""
    run6 = results["run6"]
    pairs = {"Python docs, 200 iterations (calls 1 + 2)": run6["call1_2_pydocs_200"],
             "WikiText-2, 12 iterations (call 2)": run6["call2_wikitext_12"],
             "WikiText-2, 12 iterations (call 3)": run6["call3_wikitext_12"]}
    return Table({"pair": k, "bf16 step s": p["bf16"]["step_time_s"], "fp8 step s": p["fp8_delayed"]["step_time_s"],
                  "vs bf16": f"{p['speedup_delayed']:.3f}x",  # as text: 1.293 must not print as 1.3
                  "final loss vs bf16": p["final_loss_gap_delayed"] if p["bf16"]["iters"] >= 200 else "",
                  "test loss vs bf16": p["test_loss_gap_delayed"] if p["bf16"]["iters"] >= 200 else ""}
                 for k, p in pairs.items())


RUN7 = {"bf16": "bf16", "fp8_delayed": "fp8 delayed", "fp8_delayed_repeat": "fp8 delayed, again"}


def gpu_run7_table(results: dict) -> Table:
    """Run 7's three 200-iteration runs (warm-up + cosine schedule), each on its own machine: speed ratios
    across machines, losses against bf16 (README, "Precision")."""
    run7 = results["run7"]
    base = run7["bf16"]
    return Table({"run": name, "step s": r["step_time_s"],
                  "vs bf16 (other machine)": f"{base['step_time_s'] / r['step_time_s']:.3f}x",  # 1.274 is not 1.3
                  "final loss (last 10)": r["final_loss_mean10"],
                  "vs bf16": r["final_loss_mean10"] / base["final_loss_mean10"] - 1,
                  "test loss": r["test_loss"], "test vs bf16": r["test_loss"] / base["test_loss"] - 1,
                  "peak allocated GiB": r["max_allocated_bytes"] / 2**30} for key, name in RUN7.items()
                 for r in [run7[key]])


RUN8 = {"bf16": "bf16", "fp8_delayed": "fp8 delayed", "fp8_delayed_out": "fp8 delayed + output layer"}
RUN_JOBS = {"run7": RUN7, "run8": RUN8}  # the 200-iteration jobs of the runs with per-iteration and per-second records


def gpu_run8_table(results: dict) -> Table:
    """Run 8's three 200-iteration runs on one GPU (warm-up + cosine schedule): speed ratios within one
    machine, losses against bf16, peak memory against the planner's (README, "Precision")."""
    run8 = results["run8"]
    base = run8["bf16"]
    return Table({"run": name, "step s": r["step_time_s"], "tokens/s": r["tokens_per_s"],
                  "vs bf16 (same machine)": f"{r['tokens_per_s'] / base['tokens_per_s']:.3f}x",  # 1.284 is not 1.3
                  "final loss (last 10)": r["final_loss_mean10"],
                  "vs bf16": r["final_loss_mean10"] / base["final_loss_mean10"] - 1,
                  "test vs bf16": r["test_loss"] / base["test_loss"] - 1,
                  "peak allocated GiB": r["max_allocated_bytes"] / 2**30, "planned GiB": r["planned_bytes"] / 2**30}
                 for key, name in RUN8.items() for r in [run8[key]])


def training_seconds(entry: dict, busy_w: float = 600.0) -> list[list[float]]:
    """The per-second GPU samples (SM MHz, W, °C) of a job's training: those drawing more than `busy_w`
    (starting the job and compiling its kernels draw under 200 W, training at the 700 W limit)."""
    return [row for row in entry["gpu_samples"]["per_second"] if row[1] > busy_w]


def clocks(entry: dict) -> dict:
    """Medians of a job's SM clock, power and temperature over its first 30 and last 60 seconds of training,
    and its SM clock and power over all of it (what docs/precision_gpu_results.json records as run 8's
    clocks_during_training)."""
    rows = training_seconds(entry)
    names = ("sm_mhz", "power_w", "temperature_c")
    over = lambda part, n: {name: statistics.median(r[i] for r in part) for i, name in enumerate(names[:n])}  # noqa: E731
    return {"training_seconds": len(rows), "first_30s": over(rows[:30], 3), "last_60s": over(rows[-60:], 3),
            "all": over(rows, 2)}


def plot_gpu_clocks(results: dict, run: str = "run8", axes=None):
    """SM clock and power of each job of a run over its training seconds (medians of 10 s), under the
    GPU's power limit: steps are power-bound, and the clock falls as the GPU warms."""
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    entries = results[run]
    for key, name in RUN_JOBS[run].items():
        rows = training_seconds(entries[key])
        tens = range(0, len(rows) - 9, 10)
        for ax, column in zip(axes, (0, 1), strict=True):
            ax.plot([i + 5 for i in tens], [statistics.median(r[column] for r in rows[i:i + 10]) for i in tens],
                    label=name, linewidth=1.2)
    axes[1].axhline(entries["power_limit_w"], color="grey", linestyle="--", linewidth=0.8)
    axes[1].annotate("power limit", (0.02, entries["power_limit_w"]), xycoords=("axes fraction", "data"),
                     va="bottom", fontsize=8, color="dimgrey")
    for ax, label in zip(axes, ("SM clock MHz", "power W"), strict=True):
        ax.set_xlabel("second of training")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[1].set_ylim(600, entries["power_limit_w"] * 1.02)
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"SM clock (max {entries['sm_clock_max_mhz']:.0f} MHz)", fontsize=10)
    axes[1].set_title("power draw", fontsize=10)
    return axes


def step_drift(times: list[float], first=slice(3, 20)) -> list[float]:
    """Each iteration's step time against the median of iterations 4-20 (a GPU that has just started)."""
    start = statistics.median(times[first])
    return [t / start - 1 for t in times]


def plot_step_drift(results: dict, run: str = "run7", ax=None):
    """Step time over a run's 200-iteration jobs (run 7: the first with per-iteration times; run 8: one
    GPU), each against its own first iterations (medians of 10), to show the slowdown that short runs
    do not see."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.5))
    for key, name in RUN_JOBS[run].items():
        drift = step_drift(results[run][key]["step_times_s"])
        tens = range(0, len(drift) - 9, 10)
        ax.plot([i + 5 for i in tens], [statistics.median(drift[i:i + 10]) for i in tens], marker="o", markersize=3,
                label=name)
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:+.1%}"))
    ax.set_xlabel("iteration")
    ax.set_ylabel("step time vs iterations 4-20")
    ax.set_title("1.4B GPT on one H200, 200 iterations: steps slow down, then hold", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def plot_gpu_losses(results: dict, ax=None):
    """The recorded loss curves of the H200 runs (bf16 and FP8 from the same initial weights)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4))
    for name, r in gpu_runs(results).items():
        ax.plot(range(1, len(r["losses"]) + 1), r["losses"], label=name, linewidth=1.2)
    ax.set_xlabel("iteration")
    ax.set_ylabel("training loss")
    ax.set_title(f"1.4B GPT on {results['run1']['gpu']}: bf16 vs FP8")
    ax.grid(alpha=0.3)
    ax.legend()
    return ax
