"""What Megatron-LM keeps in a checkpoint's common state besides the tensors (`generate_state_dict`
in megatron/training/checkpointing.py), made so that Megatron-LM's `pretrain_gpt.py` loads and
resumes a kit checkpoint with the run's own megatron-lm.sh plus `--load`:

- `args`: the argparse.Namespace Megatron-LM's own `parse_args` + `validate_args` produce for the
  run's megatron-lm.sh (helpers/rundir/megatron_lm_check.parsed_here: parsed, not written by hand),
  with the position in the data at this iteration (`consumed_train_samples`). Its loader compares
  the model's shape with the command's (`check_checkpoint_args`) and reads the layout and the
  consumed samples from it.
- `iteration`, `checkpoint_version` 3.0, `num_floating_point_operations_so_far`;
- `opt_param_scheduler`: the job's OptimizerParamScheduler, which counts samples as Megatron-LM's
  does (build.lr_schedule), so Megatron-LM's scheduler loads it unchanged;
- `rng_state` in Megatron-LM's layout (one entry per (PP, TP) rank, DP rank 0's generators) on
  GPU. A CPU job's generators are CPU ones, which a GPU's `torch.cuda.set_rng_state` cannot take:
  there `no_save_rng` is True and Megatron-LM skips the RNG state. The kit keeps every rank's
  generators under its own key as well (io.py), restored in an unchanged layout.

Validation: the kit evaluates the same validation batches every time (from sample 0), so
`consumed_valid_samples` stays 0 and Megatron-LM's `--skip-train` evaluation of a kit checkpoint
reads the batches the kit read."""
from __future__ import annotations

import argparse
import copy
import random

import numpy as np
import torch
import torch.distributed as dist

from helpers.errors import MegatronRefused
from helpers.job.flops import flops_per_token

_PARSED: dict[str, argparse.Namespace | str] = {}  # megatron-lm.sh path -> its parsed args, or the refusal


def floating_point_operations(spec, model, iteration: int) -> float:
    """Training FLOPs up to `iteration` (helpers/job/flops.py), what Megatron-LM counts as
    num_floating_point_operations_so_far."""
    return float(flops_per_token(model, spec.seq_len) * spec.seq_len * spec.global_batch_size * iteration)


def parsed(script, world_size: int) -> argparse.Namespace | str:
    """Megatron-LM's parsed arguments for the run's megatron-lm.sh (collective: rank 0 parses in a
    forked child, every rank gets the same object), or Megatron-LM's refusal as text. Once per job."""
    key = str(script)
    if key not in _PARSED:
        answer = [None]
        if dist.get_rank() == 0:
            from helpers.rundir import megatron_lm, megatron_lm_check
            try:
                answer[0] = megatron_lm_check.parsed_here(megatron_lm.arguments(script), world_size)
            except (MegatronRefused, OSError, ValueError) as e:
                answer[0] = str(e)
        dist.broadcast_object_list(answer, src=0)
        _PARSED[key] = answer[0]
    return _PARSED[key]


def rng_state(on_gpu: bool):
    """This rank's generators in Megatron-LM's layout (checkpointing.get_rng_state, torch_dist
    format), or None on CPU (module docstring)."""
    if not on_gpu:
        return None
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    state = {"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
             "torch_rng_state": torch.get_rng_state(), "cuda_rng_state": torch.cuda.get_rng_state(),
             "rng_tracker_states": tensor_parallel.get_cuda_rng_tracker().get_states()}
    return ShardedObject("rng_state", [state],
                         (ps.get_pipeline_model_parallel_world_size(), ps.get_tensor_model_parallel_world_size()),
                         (ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank()),
                         replica_id=ps.get_data_parallel_rank(with_context_parallel=True))


def common_state(args, spec, model, iteration: int, scheduler_state: dict | None, on_gpu: bool) -> dict:
    """The common state Megatron-LM saves at `iteration` (module docstring). `args`: `parsed`'s
    answer (a refusal leaves `args` out: Megatron-LM then loads the weights and says it found no
    arguments)."""
    state = {"checkpoint_version": 3.0, "iteration": iteration,
             "num_floating_point_operations_so_far": floating_point_operations(spec, model, iteration)}
    if scheduler_state is not None:
        state["opt_param_scheduler"] = dict(scheduler_state)
    if isinstance(args, argparse.Namespace):
        args = copy.copy(args)
        # what pretrain_gpt.py's initialisation adds to the parsed arguments: the padded vocabulary
        # (build_tokenizer; megatron-lm.sh's --make-vocab-size-divisible-by pads the tokenizer's to the model's)
        args.padded_vocab_size = model.vocab_size
        args.consumed_train_samples = iteration * spec.global_batch_size
        args.skipped_train_samples = 0
        args.consumed_valid_samples = 0  # the kit's validation batches start at sample 0 every time
        args.no_save_rng = not on_gpu
        args.no_save_optim = False
        args.iteration = iteration
        state["args"] = args
    if (rng := rng_state(on_gpu)) is not None:
        state["rng_state"] = rng
    return state


def saved_args_summary(args) -> dict:
    """What the kit's record says about the `args` it saved: parsed from megatron-lm.sh, or why not."""
    if isinstance(args, argparse.Namespace):
        return {"megatron_lm_args": "parsed from megatron-lm.sh by Megatron-LM's parse_args + validate_args"}
    return {"megatron_lm_args": f"not saved: {args}"}
