"""Run under torchrun by tests/jobs/test_checkpoint.py: a checkpoint written by Megatron-LM's own
`save_checkpoint` (megatron/training/checkpointing.py of the megatron-core wheel) on CPU, for the kit
to resume. Each rank builds the kit run's model and optimizer (the kit's worker pieces), loads the
run's iteration-N checkpoint into them, sets Megatron-LM's global arguments to the run's
megatron-lm.sh parsed by Megatron-LM (with `--save OUT`), and calls save_checkpoint with Megatron-LM's
own scheduler for that command (`get_optimizer_param_scheduler`) at iteration N. What lands in OUT
is Megatron-LM's format throughout: its `model` key, its optimizer metadata (`dp_reshardable` for the
distributed optimizer unless the command asks otherwise), its `rng_state`, its tracker, no kit record.

    torchrun --nproc-per-node W tests/jobs/megatron_lm_save.py RUN_DIR CHECKPOINT OUT"""
import os
import sys
import warnings
from pathlib import Path


def main() -> None:
    warnings.simplefilter("ignore")
    run_dir, checkpoint, out = (Path(a) for a in sys.argv[1:4])
    from helpers.job.import_phase import without_modelopt
    from helpers.job.spec import JobSpec
    from helpers.rundir import megatron_lm, megatron_lm_check, names
    from helpers.rundir.writer import Heartbeat
    from helpers.runtime import build, setup, train
    from helpers.runtime.checkpoint import io
    from helpers.runtime.worker import Rank

    spec = JobSpec.read(run_dir / names.SPEC)
    global_rank = int(os.environ["RANK"])
    train.import_megatron(spec.device)
    with without_modelopt():
        from megatron.training import checkpointing, global_vars
        from megatron.training.training import get_optimizer_param_scheduler
    (out.parent / "logs").mkdir(parents=True, exist_ok=True)
    beat = Heartbeat(out.parent, global_rank)  # the kit's loader reports progress
    rank = Rank(spec, run_dir, global_rank, beat, setup.process_groups(spec))
    built = train.model_provider(rank)
    model = build.wrap_ddp(built.config, built.chunks, spec, rank.device)
    optimizer = build.optimizer(built.config, model, spec)
    info = io.load(checkpoint, model, spec, built.model_desc, beat, optimizer)
    argv = megatron_lm.arguments(run_dir / names.MEGATRON_LM_SCRIPT) + ["--save", str(out)]
    args = megatron_lm_check.parsed_here(argv, spec.world_size)
    args.consumed_train_samples = info["iteration"] * args.global_batch_size  # as its training loop counts
    global_vars.set_args(args)
    scheduler = get_optimizer_param_scheduler(optimizer)
    scheduler.step(increment=info["iteration"] * args.global_batch_size)
    checkpointing.save_checkpoint(info["iteration"], model, optimizer, scheduler, 0.0)
    import torch.distributed as dist
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":  # required: dist_checkpointing's writer re-imports the main module
    main()
