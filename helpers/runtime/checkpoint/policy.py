"""When the worker saves, resumes and evaluates checkpoints: the calls the loop makes. The
mechanics (what is saved, how it reloads into another layout) are in io.py."""
from __future__ import annotations

from pathlib import Path

import torch.distributed as dist

from helpers.rundir import names
from helpers.rundir.writer import write_json
from helpers.runtime.checkpoint import io
from helpers.runtime.evaluation import fixed_batch_loss


def save_root(worker) -> Path:
    """save_dir ($VARS expanded on this node), or <run_dir>/checkpoints."""
    spec = worker.spec
    return worker.path(spec.save_dir) if spec.save_dir else Path(worker.run_dir) / names.CHECKPOINTS


def resume(worker) -> int:
    """Load spec.load_dir (if set, and not eval_only) and return the iteration to continue from."""
    spec = worker.spec
    if not spec.load_dir or spec.eval_only:
        return 0
    info = io.load(worker, spec.load_paths()[0], spec.load_optimizer)
    if worker.rank == 0:
        write_json(Path(worker.run_dir) / names.RESUMED, info)
    return info["iteration"]


def maybe_save(worker, iteration: int, scheduler) -> None:
    """Save every spec.save_interval iterations and after the last one, with the fixed batch's
    loss (a reload into any other layout must reproduce it) and the learning-rate scheduler's
    state (Megatron's OptimizerParamScheduler, which Megatron-LM's resume loads)."""
    spec = worker.spec
    if not spec.save_interval or (iteration % spec.save_interval and iteration != spec.iters):
        return
    worker.param_gather.now()  # overlap_param_gather: every replica's weights updated before they are read
    loss = fixed_batch_loss(worker)
    io.save(worker, save_root(worker), iteration, {"eval_loss": loss}, scheduler.state_dict())


def evaluate_only(worker) -> None:
    """eval_only jobs: load each checkpoint of spec.load_dir into this layout and record its
    evaluation loss next to the loss the saving job measured (eval.json)."""
    out = []
    for path in worker.spec.load_paths():
        info = io.load(worker, path, load_optimizer=False)
        worker.beat("evaluating", info["iteration"])
        out.append({"checkpoint": info["path"], "iteration": info["iteration"], "saved_layout": info["layout"],
                    "saved_eval_loss": info.get("eval_loss"), "eval_loss": fixed_batch_loss(worker)})
    if dist.get_rank() == 0:
        write_json(Path(worker.run_dir) / names.EVAL, out)
