"""Lesson 17's tables and pictures: the number formats' range and spacing, and each scaling
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


def variants(comparison: dict) -> dict:
    """The training jobs of one comparison that benchmarks/speed/precision.py recorded: {name: entry}
    for every entry with a loss curve (the others are the comparison's facts: date, GPU, commands)."""
    return {k: v for k, v in comparison.items() if isinstance(v, dict) and "losses" in v}


def label(entry: dict) -> str:
    """A job in words: its precision, recipe and whether the output layer is FP8 too."""
    if entry["precision"] != "fp8":
        return entry["precision"]
    return f"FP8 {entry['recipe']}" + (" + output layer" if entry["fp8_output_layer"] else "")


def comparison_table(comparison: dict, base: str = "bf16") -> Table:
    """One row per job: step time, tokens/s and its ratio to `base` (same machine: the ratio compares
    precisions only), the final loss (mean of the last 10 iterations) and the test loss against
    `base`'s, peak memory against the planner's."""
    jobs = variants(comparison)
    ref = jobs[base]
    return Table({"job": label(r), "step s": r["step_time_s"], "tokens/s": r["tokens_per_s"],
                  "vs bf16": f"{r['tokens_per_s'] / ref['tokens_per_s']:.3f}x",  # 1.284 must not print as 1.3
                  "final loss (last 10)": r["final_loss_mean10"],
                  "vs bf16 loss": r["final_loss_mean10"] / ref["final_loss_mean10"] - 1,
                  "test vs bf16": r["test_loss"] / ref["test_loss"] - 1,
                  "peak allocated GiB": r["max_allocated_bytes"] / 2**30, "planned GiB": r["planned_bytes"] / 2**30}
                 for name, r in jobs.items())


def plot_comparison(comparison: dict, base: str = "bf16", axes=None):
    """Left: every job's training loss (medians of 10 iterations) from the same initial weights on the
    same batches. Right: each job's tokens/s, labelled with its speed-up over `base`."""
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [2, 1]})
    losses, speed = axes
    jobs = variants(comparison)
    for name, r in jobs.items():
        curve = r["losses"]
        tens = range(0, len(curve) - 9, 10)
        losses.plot([i + 5 for i in tens], [statistics.median(curve[i:i + 10]) for i in tens], label=label(r),
                    linewidth=1.2)
    losses.set_xlabel("iteration")
    losses.set_ylabel("training loss (median of 10)")
    losses.set_yscale("log")
    losses.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    losses.yaxis.set_minor_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    losses.grid(alpha=0.3)
    losses.legend(fontsize=8)
    losses.set_title(f"{comparison.get('gpu', 'GPU')}: the same model, data and schedule", fontsize=10)
    names = list(jobs)
    rates = [jobs[n]["tokens_per_s"] for n in names]
    bars = speed.barh([label(jobs[n]) for n in names], rates,
                      color=["tab:blue", "tab:orange", "tab:green", "tab:red"][:len(names)])
    for bar, rate in zip(bars, rates, strict=True):
        speed.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {rate / jobs[base]['tokens_per_s']:.2f}x",
                   va="center", fontsize=9)
    speed.set_xlabel("tokens/s")
    speed.set_xlim(0, max(rates) * 1.25)
    speed.invert_yaxis()
    speed.set_title(f"speed vs {base}", fontsize=10)
    plt.gcf().tight_layout()
    return axes
