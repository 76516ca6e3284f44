"""A child process of tests/jobs/test_checkpoint.py: what Megatron-LM's `pretrain_gpt.py` does with a kit
checkpoint when it is started with the run's own megatron-lm.sh plus `--load ROOT`, as far as it runs on
CPU (megatron/training/checkpointing.py and training.py of the megatron-core wheel):

1. `parse_args` + `validate_args` of the script's arguments + `--load ROOT` at the job's world size
   (as on a Hopper GPU), then `set_args`: Megatron-LM's global arguments for that command;
2. `_load_base_checkpoint`: the tracker and the common state, as `load_checkpoint` reads them;
3. `check_checkpoint_args` on the saved `args` (the check that refused `add_position_embedding`);
4. the resume's reads: `iteration`, `consumed_train_samples`, `num_floating_point_operations_so_far`,
   and `opt_param_scheduler` loaded into the scheduler Megatron-LM builds for that command
   (`get_optimizer_param_scheduler`), which asserts that the saved schedule is the command's.

    python tests/jobs/megatron_lm_resume.py RUN_DIR WORLD_SIZE [RUN_DIR WORLD_SIZE ...]

prints one JSON object: {run_dir: {"ok": what was read} or {"error": Megatron-LM's message}}."""
import json
import os
import sys
import warnings
from pathlib import Path


class _ParamGroups:
    """What Megatron's OptimizerParamScheduler touches of an optimizer: its param groups' lr and wd."""

    def __init__(self):
        self.param_groups = [{"params": []}]


def resume_reads(run_dir: str, world_size: int) -> dict:
    import torch
    from megatron.training import arguments, checkpointing, global_vars
    from megatron.training.training import get_optimizer_param_scheduler

    from helpers.rundir import megatron_lm, names

    root = str(Path(run_dir) / names.CHECKPOINTS)
    argv = megatron_lm.arguments(Path(run_dir) / names.MEGATRON_LM_SCRIPT) + ["--load", root]
    os.environ.update(WORLD_SIZE=str(world_size), RANK="0", LOCAL_RANK="0", CUDA_DEVICE_MAX_CONNECTIONS="1")
    arguments.get_device_arch_version = lambda: 9
    torch.cuda.get_device_capability = lambda *_, **__: (9, 0)
    sys.argv = ["pretrain_gpt.py", *argv]
    args = arguments.parse_args()
    arguments.validate_args(args)
    global_vars.set_args(args)
    state, checkpoint_name, release, _ = checkpointing._load_base_checkpoint(root, args, rank0=True)
    checkpointing.set_checkpoint_version(state.get("checkpoint_version", 0))
    checkpointing.check_checkpoint_args(state["args"])
    scheduler = get_optimizer_param_scheduler(_ParamGroups())
    scheduler.load_state_dict(state["opt_param_scheduler"])
    saved = state["args"]
    return {"checkpoint": Path(checkpoint_name).name, "release": release, "iteration": state["iteration"],
            "checkpoint_version": state["checkpoint_version"],
            "consumed_train_samples": saved.consumed_train_samples,
            "num_floating_point_operations_so_far": state["num_floating_point_operations_so_far"],
            "scheduler_num_steps": scheduler.num_steps, "lr": scheduler.optimizer.param_groups[0]["lr"],
            "no_save_rng": saved.no_save_rng, "global_batch_size": args.global_batch_size,
            "tensor_model_parallel_size": saved.tensor_model_parallel_size,
            "pipeline_model_parallel_size": saved.pipeline_model_parallel_size,
            "data_parallel_size": saved.data_parallel_size}


def main() -> None:
    warnings.simplefilter("ignore")
    from helpers.job.import_phase import without_modelopt

    with without_modelopt():
        import megatron.training.training  # noqa: F401  (imported once; each check runs in a fork of this process)
    from helpers.job import forked

    pairs = list(zip(sys.argv[1::2], sys.argv[2::2]))
    out = {}
    for run_dir, world in pairs:  # a fork per run: Megatron-LM's argument checks set module state
        answer = forked.call(resume_reads, run_dir, int(world))
        out[run_dir] = answer if "error" in answer else {"ok": answer}
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
