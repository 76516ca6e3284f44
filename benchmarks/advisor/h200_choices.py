"""The advisor's single-GPU choices against measured step times and peaks on one H200.

On one GPU the layout is fixed (TP = PP = DP = 1); what is left to choose is the micro batch and
activation recompute (none, selective: Megatron's core-attention recompute, full: every layer's forward
again), with the distributed optimizer off (it shards nothing at DP = 1). For two models, the advisor
(`Execution.KIT_LOCAL`, the local layer spec) ranks those choices by predicted step time and says which
fit; the bare Megatron-Core loop (benchmarks/speed/bare_mcore_loop.py: Megatron's GPTModel, DDP, Adam,
schedule; TransformerConfig's recompute_granularity/recompute_method set as Megatron-LM's
--recompute-granularity/--recompute-method do) measures each one:

  - gpt-1.4b: the 1.4B GPT of benchmarks/speed/throughput.py (seq 2048, global batch 32);
  - llama3-8b-l16: Llama-3-8B's widths (GQA 32/8, SwiGLU FFN 14336, vocabulary 128256) with 16 of its
    32 layers, so that it fits on one H200 (seq 4096, global batch 16): here the larger micro batches
    fit only with recompute.

    python -m benchmarks.advisor.h200_choices --measure OUT [--models gpt-1.4b,llama3-8b-l16]
        (on the GPU: OUT/choices.json)
    python -m benchmarks.advisor.h200_choices --compare FILE [FILE ...] [--write docs/results/advisor_h200_choices.md]
        (anywhere: the advisor's predictions for the same choices, side by side with the measurements;
        several files, one a model each, are read as one)

A choice that runs out of device memory is recorded as not fitting (the loop's CUDA out-of-memory
error), which is what the advisor's `fits` predicts."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.speed.throughput import model_of
from helpers.job.models import preset
from helpers.job.paths import REPO_ROOT

ITERS = 6  # the loop's median leaves out the first 3 (compile, allocator growth)
# the recorded measurements docs/results/advisor_h200_choices.md and docs/results/advisor.md read
RECORDED = ["benchmarks/advisor/h200_choices_results_2026-12-04.json"]
PAGE = "docs/results/advisor_h200_choices.md"
MODELS = {  # name -> (model, seq_len, global batch, the (micro batch, recompute) choices measured)
    "gpt-1.4b": (lambda: model_of("gpt-1.4b"), 2048, 32,
                 [(1, "none"), (2, "none"), (4, "none"), (8, "none"), (16, "none"), (4, "selective"),
                  (8, "selective"), (4, "full"), (16, "full")]),
    "llama3-8b-l16": (lambda: preset("llama3-8b").with_(num_layers=16, max_seq_len=4096), 4096, 16,
                      [(1, "none"), (2, "none"), (4, "none"), (2, "selective"), (1, "full"), (4, "full"),
                       (8, "full")]),
}


# ---- on the GPU ----------------------------------------------------------------------------------------
def measure_one(model, seq: int, gbs: int, micro: int, recompute: str) -> dict:
    cfg = dict(model=model.to_dict(), seq_len=seq, micro_batch=micro, global_batch=gbs, iters=ITERS,
               attention="sdpa", fusions=True, fused_adam=True, profile=None, recompute=recompute)
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", PYTHONUNBUFFERED="1")
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "benchmarks.speed.bare_mcore_loop", json.dumps(cfg)],
                       capture_output=True, text=True, env=env, timeout=300, cwd=REPO_ROOT)
    line = next((x for x in p.stdout.splitlines() if x.startswith("BARE_RESULT ")), None)
    if line is not None:
        return dict(json.loads(line.removeprefix("BARE_RESULT ")), fits=True, wall_s=time.time() - t0)
    text = p.stdout + p.stderr
    if "OutOfMemoryError" in text or "CUDA out of memory" in text:
        return {"fits": False, "wall_s": time.time() - t0}
    return {"error": text[-3000:], "wall_s": time.time() - t0}


def measure(out: Path, names: list[str]) -> None:
    import torch
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m benchmarks.advisor.h200_choices --measure OUT"
    if names != list(MODELS):
        command += " --models " + ",".join(names)
    results = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
               "commands": [command], "gradient_accumulation_fusion": True, "models": {}}  # the bare loop's, with fusions
    for name in names:
        make, seq, gbs, choices = MODELS[name]
        model = make()
        rows = results["models"][name] = []
        for micro, recompute in choices:
            r = dict(measure_one(model, seq, gbs, micro, recompute), micro_batch=micro, recompute=recompute)
            rows.append(r)
            shown = (f"{r['step_time_s']:.3f} s, reserved {r['max_reserved_bytes'] / 2**30:.1f} GiB" if "step_time_s" in r
                     else "out of memory" if r.get("fits") is False else "FAILED " + r["error"][-800:])
            print(f"{name} mb{micro} {recompute}: {shown} ({r['wall_s']:.0f} s)", flush=True)
            (out / "choices.json").write_text(json.dumps(results, indent=1))


# ---- anywhere: the advisor against the measurements ----------------------------------------------------
def predictions(name: str, fused_accumulation: bool = True) -> dict:
    """The advisor's rows for the measured choices, planned for the execution that was measured: files
    without `gradient_accumulation_fusion` come from a bare loop that added each weight gradient into
    main_grad after its GEMM (`fused_accumulation=False`)."""
    from helpers.advisor.advise import advise
    from helpers.advisor.execution import KIT_LOCAL

    make, seq, gbs, choices = MODELS[name]
    execution = KIT_LOCAL.with_(grad_accumulation_fused=fused_accumulation)
    advice = advise(make(), 1, "h200", 1, seq_len=seq, global_batch=gbs, execution=execution, backend="local",
                    max_micro_batch=max(m for m, _ in choices))
    return {(r.layout.micro_batch, r.training.recompute): r for r in advice.rows if not r.training.dist_opt}


def spearman(a: list[float], b: list[float]) -> float:
    def ranks(xs):
        order = sorted(range(len(xs)), key=lambda i: xs[i])
        r = [0.0] * len(xs)
        for k, i in enumerate(order):
            r[i] = float(k)
        return r
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1)) if n > 1 else 1.0


def compare(measured: dict) -> dict:
    unknown = [name for name in measured["models"] if name not in MODELS]
    if unknown:
        raise SystemExit(f"measured model(s) {unknown} unknown here: the advisor predicts {', '.join(MODELS)}; "
                         "compare files that --measure wrote")
    out = {}
    for name, rows in measured["models"].items():
        predicted = predictions(name, measured.get("gradient_accumulation_fusion", False))
        table = []
        for m in rows:
            p = predicted[(m["micro_batch"], m["recompute"])]
            table.append({"micro_batch": m["micro_batch"], "recompute": m["recompute"],
                          "predicted_s": p.step.step_s, "predicted_gib": p.memory_gib, "predicted_fits": p.fits,
                          "measured_s": m.get("step_time_s"), "fits": m.get("fits"),
                          "measured_range_s": ((min(m["step_times_s"][1:]), max(m["step_times_s"][1:]))
                                               if len(m.get("step_times_s", [])) > 1 else None),
                          "measured_reserved_gib": m["max_reserved_bytes"] / 2**30 if "max_reserved_bytes" in m else None})
        both = [t for t in table if t["predicted_fits"] and t["fits"]]
        by_predicted = sorted(both, key=lambda t: t["predicted_s"])
        by_measured = sorted(both, key=lambda t: t["measured_s"])
        swapped = [(a, b) for i, a in enumerate(by_predicted) for b in by_predicted[i + 1:]
                   if b["measured_s"] < a["measured_s"]]  # predicted a faster, measured b faster
        out[name] = {"rows": table, "fits_agree": all(t["predicted_fits"] == t["fits"] for t in table),
                     "swapped": [(choice(a), choice(b)) for a, b in swapped],
                     "same_order": [(t["micro_batch"], t["recompute"]) for t in by_predicted]
                     == [(t["micro_batch"], t["recompute"]) for t in by_measured],
                     "spearman": spearman([t["predicted_s"] for t in both], [t["measured_s"] for t in both]),
                     "predicted_best": choice(by_predicted[0]), "measured_best": choice(by_measured[0])}
    return out


def merged(files: list[Path]) -> dict:
    """Several measurement files (say one a model) as one: their commands in turn, their models together."""
    out = None
    for f in files:
        m = json.loads(f.read_text())
        if out is None:
            out = dict(m, commands=list(m["commands"]), models=dict(m["models"]))
            continue
        if m.get("gradient_accumulation_fusion", False) != out.get("gradient_accumulation_fusion", False):
            raise SystemExit(f"{f}: measured with gradient_accumulation_fusion "
                             f"{m.get('gradient_accumulation_fusion', False)}, the other files without; compare one "
                             "execution only")
        for key in ("gpu", "torch"):
            if m[key] != out[key]:
                raise SystemExit(f"{f}: measured on {key} {m[key]!r}, the other files on {out[key]!r}; "
                                 "compare measurements of one machine only")
        if set(m["models"]) & set(out["models"]):
            raise SystemExit(f"{f}: model(s) {sorted(set(m['models']) & set(out['models']))} measured twice; "
                             "pass each model's file once")
        out["commands"] += m["commands"]
        out["models"].update(m["models"])
        out["date"] = max(out["date"], m["date"])
    return out


def choice(t: dict) -> str:
    return f"mb{t['micro_batch']} {t['recompute']}"


UNSTEADY = 0.05  # steps after the first that spread wider than this: the host, not the GPU, sets the pace


def unsteady(t: dict) -> bool:
    return bool(t["measured_range_s"]) and t["measured_range_s"][1] / t["measured_range_s"][0] - 1 > UNSTEADY


def differences(r: dict) -> str:
    """Where the advisor and the measurements part: errors, order swaps, unsteady (host-bound) choices."""
    rows = {choice(t): t for t in r["rows"]}
    both = [t for t in r["rows"] if t["measured_s"] and t["predicted_fits"]]
    errors = sorted(both, key=lambda t: t["predicted_s"] / t["measured_s"])
    worst = max(both, key=lambda t: abs(t["predicted_s"] / t["measured_s"] - 1))
    text = (f"Predicted steps are {errors[0]['predicted_s'] / errors[0]['measured_s'] - 1:+.1%} to "
            f"{errors[-1]['predicted_s'] / errors[-1]['measured_s'] - 1:+.1%} off the measured ones; the largest miss "
            f"is {choice(worst)} ({worst['predicted_s']:.3f} s predicted, {worst['measured_s']:.3f} s measured). ")
    over = [t["predicted_gib"] - t["measured_reserved_gib"] for t in both]
    text += (f"Planned memory lies {min(over):.1f} to {max(over):.1f} GiB above the measured reserved peak. "
             if min(over) > 0 else
             f"Planned memory is {min(over):+.1f} to {max(over):+.1f} GiB off the measured reserved peak. ")
    if r["swapped"]:
        text += "Order swaps (predicted faster first): " + "; ".join(
            f"{a} {rows[a]['measured_s']:.3f} s against {b} {rows[b]['measured_s']:.3f} s measured "
            f"({rows[a]['measured_s'] / rows[b]['measured_s'] - 1:.1%} apart)" for a, b in r["swapped"]) + ". "
    host_bound = [t for t in both if unsteady(t)]
    if host_bound:
        text += (f"Steps after the first spread by more than {UNSTEADY:.0%} (host-bound): " + "; ".join(
            f"{choice(t)} {t['measured_range_s'][0]:.3f}-{t['measured_range_s'][1]:.3f} s" for t in host_bound)
            + f"; every other choice's steps lie within {UNSTEADY:.0%}.")
    else:
        text += f"Every choice's steps after the first lie within {UNSTEADY:.0%} of each other."
    return text


def markdown(measured: dict, result: dict, source: str) -> str:
    lines = ["# The advisor's single-GPU choices on one H200", "",
             "On one GPU the advisor chooses the micro batch and activation recompute (the distributed optimizer off). "
             "Its predictions (`Execution.KIT_LOCAL`, local layer spec; weight gradients "
             + ("accumulated by their GEMM" if measured.get("gradient_accumulation_fusion") else
                "added into main_grad after their GEMM") +
             ", as the measured loop did) against the bare Megatron-Core loop's "
             "measured median step and reserved peak, each choice in its own process "
             "(`benchmarks/advisor/h200_choices.py`).", "",
             "The advisor's step is a roofline of GPU work: GEMMs at the rates measured for their size (small "
             "ones slowed by their launch), attention, memory-bound kernels, the optimizer. It does not count the "
             "host's time per micro batch (Python, the schedule, the launch of every elementwise kernel), which "
             "sets the pace when micro batches are small and many: there it predicts too low, and the measured "
             "steps vary from one iteration to the next.", "",
             f"**Measured** {measured['date']} on one {measured['gpu']} (torch {measured['torch']}): "
             + ", then ".join(f"`{c}`" for c in measured["commands"]) + f"; raw in `{source}`.  ",
             f"**Compared**: `python -m benchmarks.advisor.h200_choices --compare {source} --write "
             "docs/results/advisor_h200_choices.md`", ""]
    for name, r in result.items():
        _, seq, gbs, _ = MODELS[name]
        lines += [f"## {name} (sequence {seq}, global batch {gbs})", "",
                  "| micro batch | recompute | predicted s | measured s | error | planned GiB | measured reserved GiB | fits (predicted / measured) |",
                  "|---|---|---|---|---|---|---|---|"]
        for t in sorted(r["rows"], key=lambda t: (not t["predicted_fits"], t["predicted_s"])):
            err = (f"{t['predicted_s'] / t['measured_s'] - 1:+.1%}" if t["measured_s"] else "")
            ms = f"{t['measured_s']:.3f}" if t["measured_s"] else "—"
            mg = f"{t['measured_reserved_gib']:.1f}" if t["measured_reserved_gib"] else "—"
            lines.append(f"| {t['micro_batch']} | {t['recompute']} | {t['predicted_s']:.3f} | {ms} | {err} | "
                         f"{t['predicted_gib']:.1f} | {mg} | {'yes' if t['predicted_fits'] else 'no'} / "
                         f"{'yes' if t['fits'] else 'no'} |")
        lines += ["", f"Order of the choices that fit: {'the same' if r['same_order'] else 'not the same'} "
                  f"(Spearman {r['spearman']:.2f}); predicted best {r['predicted_best']}, "
                  f"measured best {r['measured_best']}; fits predicted right for "
                  f"{'every' if r['fits_agree'] else 'not every'} choice.", "", differences(r), ""]
    return "\n".join(lines)


def summary(files: list[Path] | None = None) -> list[str]:
    """A short account for another page (docs/results/advisor.md): per model the choices that fit, Spearman,
    order, best, fits, how far the predicted steps lie off, computed from the recorded measurements."""
    files = files or [REPO_ROOT / f for f in RECORDED]
    measured = merged(files)
    lines = [f"The advisor choosing one GPU's micro batch and activation recompute (none, selective, full) for two "
             f"models, against the bare Megatron-Core loop's median step and reserved peak measured on one "
             f"{measured['gpu']} ({measured['date']}); every choice in {PAGE} "
             f"(`python -m benchmarks.advisor.h200_choices --compare {' '.join(RECORDED)} --write {PAGE}`).", "",
             "| model | choices (fit) | Spearman | same order | best (predicted / measured) | fits predicted right "
             "| predicted step vs measured | planned memory above reserved peak |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in compare(measured).items():
        _, seq, gbs, _ = MODELS[name]
        rows = {choice(t): t for t in r["rows"]}
        both = [t for t in r["rows"] if t["measured_s"] and t["predicted_fits"]]
        order = "yes" if r["same_order"] else "no: " + "; ".join(
            f"{a} predicted faster than {b}, measured {rows[a]['measured_s'] / rows[b]['measured_s'] - 1:.1%} slower"
            for a, b in r["swapped"])
        error = {choice(t): t["predicted_s"] / t["measured_s"] - 1 for t in both}
        steady = [error[choice(t)] for t in both if not unsteady(t)]
        off = f"{min(steady):+.1%} to {max(steady):+.1%}" if steady else ""
        host = [f"{choice(t)} {error[choice(t)]:+.1%}" for t in both if unsteady(t)]
        if host:
            off += ("; host-bound " if off else "host-bound ") + ", ".join(host)
        over = [t["predicted_gib"] - t["measured_reserved_gib"] for t in both]
        agree = sum(t["predicted_fits"] == t["fits"] for t in r["rows"])
        lines.append(f"| {name} (sequence {seq}, global batch {gbs}) | {len(r['rows'])} "
                     f"({sum(bool(t['fits']) for t in r['rows'])}) | {r['spearman']:.2f} | {order} | "
                     f"{r['predicted_best']} / {r['measured_best']} | {agree} of {len(r['rows'])} | {off} | "
                     f"{min(over):+.1f} to {max(over):+.1f} GiB |")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", type=Path, help="(GPU) measure every choice, OUT/choices.json")
    ap.add_argument("--models", default=",".join(MODELS), help="which of " + ", ".join(MODELS) + " to measure")
    ap.add_argument("--compare", type=Path, nargs="+", help="choices.json file(s) to compare the advisor with")
    ap.add_argument("--write", type=Path, help="write the markdown page here")
    args = ap.parse_args(argv)
    if args.measure:
        names = args.models.split(",")
        unknown = [n for n in names if n not in MODELS]
        if unknown:
            ap.error(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(MODELS)}")
        measure(args.measure, names)
        return
    if not args.compare:
        ap.error("--measure OUT or --compare FILE")
    measured = merged(args.compare)
    result = compare(measured)
    text = markdown(measured, result, " ".join(str(f) for f in args.compare))
    print(text)
    if args.write:
        args.write.write_text(text)


if __name__ == "__main__":
    main()
