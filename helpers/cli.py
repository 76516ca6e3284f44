"""Command line of the job runner: `python -m helpers.launch [flags]`.
The last line printed is the run directory (scripts can capture it)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from helpers import models
from helpers.spec import JobSpec


def parser() -> argparse.ArgumentParser:
    d = JobSpec()
    p = argparse.ArgumentParser(prog="python -m helpers.launch",
                                description="Run a Megatron-Core training job with torchrun.")
    p.add_argument("--tp", type=int, default=d.tp, help="tensor parallel size")
    p.add_argument("--pp", type=int, default=d.pp, help="pipeline parallel size")
    p.add_argument("--vpp", type=int, default=None, help="virtual pipeline stages per rank (interleaved)")
    p.add_argument("--cp", type=int, default=d.cp, help="context parallel size")
    p.add_argument("--ep", type=int, default=d.ep, help="expert parallel size")
    p.add_argument("--etp", type=int, default=None, help="expert tensor parallel size (default: tp)")
    p.add_argument("--sp", action="store_true", help="sequence parallel (needs tp > 1)")
    p.add_argument("--dist-opt", action="store_true", help="distributed optimizer")
    p.add_argument("--nproc", type=int, default=None,
                   help="processes (default tp*pp*cp); data parallel = nproc/(tp*pp*cp)")
    p.add_argument("--first-stage-layers", type=int, default=None, help="uneven PP: layers on stage 0")
    p.add_argument("--last-stage-layers", type=int, default=None, help="uneven PP: layers on the last stage")
    p.add_argument("--model", default=d.model, help=f"model preset: {', '.join(models.names())}")
    p.add_argument("--iters", type=int, default=d.iters)
    p.add_argument("--micro-batch", type=int, default=d.micro_batch)
    p.add_argument("--global-batch", type=int, default=None, help="default: micro_batch * dp")
    p.add_argument("--seq-len", type=int, default=d.seq_len)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--data", choices=["synthetic", "wikitext", "sft"], default=d.data,
                   help="synthetic tokens, WikiText-2 (continued pretraining) or prompt/response SFT")
    p.add_argument("--tokenizer", choices=["byte", "gpt2", "qwen3"], default=d.tokenizer)
    p.add_argument("--data-dir", default=None,
                   help="data folder (default KIT_DATA_DIR), an SFT .jsonl file, or 'generated'")
    p.add_argument("--eval-interval", type=int, default=d.eval_interval,
                   help="validate every K iterations (0 = after the last only)")
    p.add_argument("--eval-iters", type=int, default=d.eval_iters, help="global batches per validation/test")
    p.add_argument("--moe-dispatcher", choices=["alltoall", "allgather"], default=d.moe_dispatcher)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=d.device)
    p.add_argument("--precision", choices=["auto", "fp32", "bf16"], default=d.precision)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--no-seed-checkpoint", action="store_true",
                   help="start from the layout's own random init instead of the shared seed checkpoint")
    p.add_argument("--out", default=d.out, help="parent folder of run directories")
    p.add_argument("--timeout", type=float, default=d.timeout_s, help="wall-clock limit in seconds")
    p.add_argument("--from-manifest", type=Path, default=None,
                   help="repeat the run recorded in a manifest.json (other flags are ignored)")
    return p


def spec_from_args(a: argparse.Namespace) -> JobSpec:
    if a.from_manifest is not None:
        if not a.from_manifest.is_file():
            sys.exit(f"error: manifest not found: {a.from_manifest}")
        recorded = json.loads(a.from_manifest.read_text())["spec"]
        recorded["env"] = {k: v for k, v in recorded.get("env", {}).items() if k != "KIT_SEED_CHECKPOINT"}
        return dataclasses.replace(JobSpec.from_dict(recorded), name=None)
    return JobSpec(tp=a.tp, pp=a.pp, vpp=a.vpp, cp=a.cp, ep=a.ep, etp=a.etp, sp=a.sp, dist_opt=a.dist_opt,
                   nproc=a.nproc, first_stage_layers=a.first_stage_layers, last_stage_layers=a.last_stage_layers,
                   model=a.model, iters=a.iters, micro_batch=a.micro_batch, global_batch=a.global_batch,
                   seq_len=a.seq_len, lr=a.lr, moe_dispatcher=a.moe_dispatcher, data=a.data,
                   tokenizer=a.tokenizer, data_dir=a.data_dir, eval_interval=a.eval_interval,
                   eval_iters=a.eval_iters, device=a.device,
                   precision=a.precision, seed=a.seed, seed_checkpoint=not a.no_seed_checkpoint,
                   out=a.out, timeout_s=a.timeout)


def main(argv=None) -> None:
    from helpers.launch import InvalidJob, JobFailed, run

    args = parser().parse_args(argv)
    spec = spec_from_args(args)
    try:
        result = run(spec, progress=sys.stderr.isatty())
    except InvalidJob as e:
        sys.exit(f"error: {e}")
    except JobFailed as e:
        sys.exit(f"error: {e}")
    for m in result.metrics:
        print(f"iteration {m['iteration']:4d}  loss {m['loss']:.6f}  grad_norm {m['grad_norm']:.4f}  "
              f"step {m['step_time_s'] * 1000:.0f} ms")
    print(f"world size {result.spec.world_size} ({result.spec.layout_name()}), "
          f"final loss {result.final_loss:.6f}" if result.metrics else "no iterations run")
    if result.report:
        from helpers.report_card import text
        print(text(result.report))
    print(result.path)
