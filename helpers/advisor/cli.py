"""`python -m helpers.advisor`: every layout of a model on N GPUs, ranked by predicted memory and
step time, with the refused ones and their rules.

    python -m helpers.advisor --model llama3-8b --gpus 64 --gpu h100-80gb [--gpus-per-node 8] \\
        --seq-len 4096 --global-batch 512 [--precision fp8] [--json] [--top 20]
    python -m helpers.advisor --model path/to/hf_folder --gpus 8 --gpu my_gpu.json ...
    python -m helpers.advisor --list-gpus [--json]"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from helpers.advisor.advise import Advice, Row, advise
from helpers.advisor.execution import PRESETS as EXECUTIONS
from helpers.advisor.gpus import resolve
from helpers.errors import KitError
from helpers.job import hf_model, models
from helpers.job.models import ModelPreset
from helpers.perf.gpus import PROFILES, GpuProfile
from helpers.perf.rates import rates


def model_of(name_or_path: str) -> ModelPreset:
    """A preset by name, or a Hugging Face model described as one from its config.json: the folder's
    (weights are not needed to plan) or the file itself."""
    if name_or_path in models.names():
        return models.preset(name_or_path)
    if Path(name_or_path).expanduser().exists():
        return hf_model.describe(name_or_path)
    raise ValueError(f"--model {name_or_path!r} is neither a preset ({', '.join(models.names())}) nor an existing "
                     "folder or file: give a preset name, a Hugging Face model folder holding config.json (the "
                     "weights are not needed to plan), or the path of a config.json")


def gpu_lines(profiles: dict[str, GpuProfile]) -> list[str]:
    out = []
    for key, g in profiles.items():
        r = rates(g)
        low = "".join(f", {peak:g} {name}" for name, peak in (("FP8", g.peak_fp8_tflops), ("FP4", g.peak_fp4_tflops))
                      if peak)
        out.append(f"{key}: {g.name}: {g.peak_bf16_tflops:g} TFLOP/s dense BF16{low}, {g.memory_gib:g} GiB at "
                   f"{g.hbm_gb_per_s:g} GB/s, {g.intra_node_gb_per_s:g} GB/s per GPU inside a node "
                   f"(NVLink domain of {g.nvlink_domain} GPUs), "
                   f"{g.inter_node_gb_per_s:g} GB/s per GPU between nodes; time model takes large GEMMs at "
                   f"{r.gemm_fraction:.2f} of peak, memory-bound kernels at {r.elementwise_gb_per_s:.0f} GB/s"
                   f"{' (measured)' if r.measured else ''}.")
        out.append(f"    source: {g.source}")
    return out


def _layout_cell(r: Row) -> str:
    lay = r.layout
    parts = [f"TP{lay.tp}", f"PP{lay.pp}" + (f"v{lay.vpp}" if lay.vpp else ""), f"DP{lay.dp}"]
    if lay.cp > 1:
        parts.append(f"CP{lay.cp}")
    if lay.ep > 1 or lay.etp not in (None, lay.tp):
        parts.append(f"EP{lay.ep}/ETP{lay.expert_tp}")
    if lay.sp:
        parts.append("SP")
    return " ".join(parts)


def table(advice: Advice, top: int | None) -> str:
    a = advice
    fitting = a.fitting()
    lines = [f"{a.model.name} on {a.gpus} x {a.gpu.name} ({a.gpus_per_node} per node), sequence {a.seq_len}, "
             f"global batch {a.global_batch}; software: {a.execution.name}, {a.execution.precision.upper()} GEMMs.",
             f"{len(a.rows)} layouts the rules accept ({len(fitting)} fit in {a.gpu.memory_gib:g} GiB), "
             f"{len(a.refused)} refused. Predictions, not measurements: step time from helpers/advisor/time/, "
             "memory from helpers/memory/plan.py.", ""]
    head = (f"{'#':>4}  {'layout':<28} {'mb':>3} {'distopt':>7} {'recompute':>9} {'GiB':>7} {'fits':>4} "
            f"{'step s':>8} {'tok/s/GPU':>10} {'MFU':>5}  largest terms")
    lines += [head, "-" * len(head)]
    shown = a.rows if top is None else a.rows[:top]
    for i, r in enumerate(shown, 1):
        terms = sorted(((k, v) for k, v in r.step.terms.items() if v > 0), key=lambda kv: -kv[1])[:3]
        dist_opt = "yes" if r.training.dist_opt else "no"
        lines.append(f"{i:>4}  {_layout_cell(r):<28} {r.layout.micro_batch:>3} {dist_opt:>7} {r.training.recompute:>9} {r.memory_gib:>7.1f} {'yes' if r.fits else 'NO':>4} "
                     f"{r.step.step_s:>8.3f} {r.step.tokens_per_s_per_gpu:>10.0f} "
                     f"{'-' if r.mfu is None else f'{r.mfu:.2f}':>5}  "
                     + ", ".join(f"{k} {v:.2f}" for k, v in terms))
    if top is not None and len(a.rows) > top:
        lines.append(f"      ... {len(a.rows) - top} more (--top N, or --all)")
    if a.refused:
        lines += ["", "Refused by the kit's rules (helpers/job/rules/), by rule:"]
        by_rule = Counter(name for r in a.refused for name in r.refused)
        for name, count in by_rule.most_common():
            example = next(r for r in a.refused if name in r.refused)
            lines.append(f"  {name}: {count} layouts, e.g. {_layout_cell(example)} micro batch "
                         f"{example.layout.micro_batch}")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m helpers.advisor", description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a preset name or a Hugging Face model folder")
    ap.add_argument("--gpus", type=int, help="GPUs in the cluster (whole nodes)")
    ap.add_argument("--gpu", default="h100-80gb", help=f"a GPU profile ({', '.join(PROFILES)}) or a JSON file with "
                    "GpuProfile's fields (--list-gpus --json prints them)")
    ap.add_argument("--gpus-per-node", type=int, default=None,
                    help="GPUs per node, i.e. per NVLink domain (default: the GPU profile's, 8 on a DGX/HGX board, "
                    "72 on a GB200/GB300 NVL72 rack)")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--global-batch", type=int, default=None, help="sequences per iteration (default 2 per GPU)")
    ap.add_argument("--execution", choices=sorted(EXECUTIONS), default="megatron-core",
                    help="how the software runs a step (helpers/advisor/execution.py)")
    ap.add_argument("--precision", choices=["bf16", "fp8"], default="bf16",
                    help="the transformer layers' GEMMs: bf16, or fp8 (Transformer Engine's FP8 linears, experts "
                    "included; embedding and output layer stay bf16) at the GPU's FP8 peak, memory planned for FP8")
    ap.add_argument("--backend", choices=["te", "local"], default="te",
                    help="the builder whose rules apply: te (Megatron-Core with Transformer Engine, a cluster's) or "
                         "local (the kit's own worker)")
    ap.add_argument("--max-micro-batch", type=int, default=16)
    ap.add_argument("--top", type=int, default=20, help="rows to print (text only)")
    ap.add_argument("--all", action="store_true", help="print every accepted layout (text only)")
    ap.add_argument("--json", action="store_true", help="a JSON list: every layout, accepted (ranked) then refused")
    ap.add_argument("--list-gpus", action="store_true", help="the GPU and interconnect profiles, with sources")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.list_gpus:
            extra = {args.gpu: resolve(args.gpu)} if args.gpu not in PROFILES else {}
            profiles = {**PROFILES, **extra}
            if args.json:
                print(json.dumps({k: {**g.to_dict(), "rates": rates(g).__dict__} for k, g in profiles.items()},
                                 indent=1))
            else:
                print("\n".join(gpu_lines(profiles)))
            return 0
        if not args.model or not args.gpus:
            raise ValueError("--model and --gpus are required (or --list-gpus)")
        advice = advise(model_of(args.model), args.gpus, resolve(args.gpu), args.gpus_per_node, args.seq_len,
                        args.global_batch, EXECUTIONS[args.execution], args.backend, args.max_micro_batch,
                        args.precision)
    except (ValueError, KitError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([r.to_dict() for r in advice.rows + advice.refused]))
    else:
        print(table(advice, None if args.all else args.top))
    return 0
