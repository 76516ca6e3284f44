"""The checkpoint fields make sense, and every checkpoint to load is complete, uncorrupted and
holds this model with this kind of optimizer (helpers/job/checkpoint_dir.verify reads the files;
workers verify again on their own node). Category "checkpoint"."""
from __future__ import annotations

from helpers.errors import CheckpointError
from helpers.job import checkpoint_dir
from helpers.job.models import ModelPreset
from helpers.job.violation import Found, Violation


def check(spec, model: ModelPreset | None) -> list[Violation]:
    v = Found("checkpoint")
    if spec.save_interval is not None and spec.save_interval < 1:
        v.add("save_interval_positive", f"save_interval must be >= 1 or None, not {spec.save_interval}",
              "use None (never save) or a positive interval")
    if spec.eval_only and not spec.load_dir:
        v.add("eval_only_needs_load_dir", "eval_only evaluates saved checkpoints, but load_dir is not set",
              "set load_dir to the checkpoint(s) to evaluate")
    if len(spec.load_paths()) > 1 and not spec.eval_only:
        v.add("one_load_dir_to_resume", f"load_dir names {len(spec.load_paths())} checkpoints; a training job "
              "resumes from one", "give one load_dir, or eval_only=True to evaluate several")
    if model is None:
        return v
    for path in spec.load_paths():
        if "$" in str(path):
            continue  # names a node-local variable: the workers check it on their node
        try:
            info = checkpoint_dir.verify(path, model.to_dict())
            checkpoint_dir.check_optimizer(info, spec.dist_opt, spec.load_optimizer and not spec.eval_only)
        except CheckpointError as e:
            message, _, fix = str(e).partition(" Fix: ")
            v.add(f"checkpoint_{e.kind.replace('-', '_')}", message.rstrip("."), fix.rstrip("."))
    return v
