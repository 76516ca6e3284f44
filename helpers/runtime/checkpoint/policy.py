"""When the worker saves, resumes and evaluates checkpoints: the calls the loop makes. The
mechanics (what is saved, how it reloads into another layout) are in io.py."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch.distributed as dist

from helpers.rundir import names
from helpers.rundir.writer import write_json
from helpers.runtime.checkpoint import io
from helpers.runtime.evaluation import fixed_batch_loss

if TYPE_CHECKING:
    from helpers.runtime.worker import Rank, Trainee


def save_root(rank: Rank) -> Path:
    """save_dir ($VARS expanded on this node), or <run_dir>/checkpoints."""
    spec = rank.spec
    return rank.path(spec.save_dir) if spec.save_dir else Path(rank.run_dir) / names.CHECKPOINTS


def resume(rank: Rank, trainee: Trainee) -> int:
    """Load spec.load_dir (if set, and not eval_only) and return the iteration to continue from."""
    spec = rank.spec
    if not spec.load_dir or spec.eval_only:
        return 0
    optimizer = trainee.optimizer if spec.load_optimizer else None  # else the optimizer starts afresh
    info = io.load(spec.load_paths()[0], trainee.model, spec, trainee.model_desc, rank.beat, optimizer)
    if rank.global_rank == 0:
        write_json(Path(rank.run_dir) / names.RESUMED, info)
    return info["iteration"]


def maybe_save(rank: Rank, trainee: Trainee, iteration: int, scheduler) -> None:
    """Save every spec.save_interval iterations and after the last one, with the fixed batch's
    loss (a reload into any other layout must reproduce it) and the learning-rate scheduler's
    state (Megatron's OptimizerParamScheduler, which Megatron-LM's resume loads)."""
    spec = rank.spec
    if not spec.save_interval or (iteration % spec.save_interval and iteration != spec.iters):
        return
    trainee.param_gather.now()  # overlap_param_gather: every replica's weights updated before they are read
    loss = fixed_batch_loss(rank, trainee)
    io.save(rank, trainee, save_root(rank), iteration, {"eval_loss": loss}, scheduler.state_dict())


def evaluate_only(rank: Rank, trainee: Trainee) -> None:
    """eval_only jobs: load each checkpoint of spec.load_dir into this layout and record its
    evaluation loss next to the loss the saving job measured (eval.json)."""
    spec, out = rank.spec, []
    for path in spec.load_paths():
        info = io.load(path, trainee.model, spec, trainee.model_desc, rank.beat)  # the model only
        rank.beat("evaluating", info["iteration"])
        out.append({"checkpoint": info["path"], "iteration": info["iteration"], "saved_layout": info["layout"],
                    "saved_eval_loss": info.get("eval_loss"), "eval_loss": fixed_batch_loss(rank, trainee)})
    if dist.get_rank() == 0:
        write_json(Path(rank.run_dir) / names.EVAL, out)
