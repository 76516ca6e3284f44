"""When the worker saves, resumes and evaluates checkpoints: the calls train.py makes. The
mechanics (what is saved, how it reloads into another layout) are in io.py."""
from __future__ import annotations

import os
from pathlib import Path

import torch.distributed as dist

from helpers.rundir import names
from helpers.rundir.writer import write_json
from helpers.runtime.checkpoint import io
from helpers.runtime.evaluation import fixed_batch_loss


def save_root(spec, run_dir: Path) -> Path:
    """save_dir ($VARS expanded on this node), or <run_dir>/checkpoints."""
    return Path(os.path.expandvars(spec.save_dir)) if spec.save_dir else Path(run_dir) / names.CHECKPOINTS


def resume(spec, run_dir: Path, model: list, opt, model_desc, beat) -> int:
    """Load spec.load_dir (if set, and not eval_only) and return the iteration to continue from."""
    if not spec.load_dir or spec.eval_only:
        return 0
    info = io.load(spec.load_paths()[0], model, opt, spec, model_desc, beat, spec.load_optimizer)
    if dist.get_rank() == 0:
        write_json(Path(run_dir) / names.RESUMED, info)
    return info["iteration"]


def maybe_save(spec, run_dir: Path, iteration: int, model: list, opt, model_desc, beat, device, dp_rank: int) -> None:
    """Save every spec.save_interval iterations and after the last one, with the fixed batch's
    loss (a reload into any other layout must reproduce it)."""
    if not spec.save_interval or (iteration % spec.save_interval and iteration != spec.iters):
        return
    loss = fixed_batch_loss(model, spec, device, model_desc.vocab_size, dp_rank)
    io.save(save_root(spec, run_dir), iteration, model, opt, spec, model_desc, beat, {"eval_loss": loss})


def evaluate_only(spec, run_dir: Path, model: list, model_desc, beat, device, dp_rank: int) -> None:
    """eval_only jobs: load each checkpoint of spec.load_dir into this layout and record its
    evaluation loss next to the loss the saving job measured (eval.json)."""
    out = []
    for path in spec.load_paths():
        info = io.load(path, model, None, spec, model_desc, beat, load_optimizer=False)
        beat("evaluating", info["iteration"])
        out.append({"checkpoint": info["path"], "iteration": info["iteration"], "saved_layout": info["layout"],
                    "saved_eval_loss": info.get("eval_loss"),
                    "eval_loss": fixed_batch_loss(model, spec, device, model_desc.vocab_size, dp_rank)})
    if dist.get_rank() == 0:
        write_json(Path(run_dir) / names.EVAL, out)
