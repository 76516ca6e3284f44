"""The worker, run by torchrun on every rank:
    python -m helpers.runtime.train RUN_DIR [--seed-checkpoint-out PATH]

It reads RUN_DIR/spec.json and trains with Megatron-Core, in the order Megatron-LM's
examples/run_simple_mcore_train_loop.py has it: process groups (`setup.process_groups`), the model
provider (`model_provider`: build.py's config and GPT chunks), DDP and the optimizer
(`wrap_for_training`), the forward step (step.py), Megatron's schedule, the optimizer step, save
(checkpoint/), evaluate (evaluation.py). `train` is that loop. Each step gets what it needs as
arguments, made once (worker.py): the `Rank` (spec, run directory, rank, heartbeat, device), the
`Trainee` (model, optimizer and their config), the data and the injected faults. What the kit
records around the loop (report card, metrics, communication, timeline) is one Observer
(measure/observer.py)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from helpers.job import import_phase
from helpers.job.spec import JobSpec
from helpers.rundir import names, writer
from helpers.runtime.worker import Built, Rank, Trainee

if TYPE_CHECKING:
    from helpers.runtime.data.indexed import Prepared
    from helpers.runtime.measure.faults import Injected

# Megatron-Core is imported inside the functions, after main() knows the job's device: on CPU it
# is imported without torch.compile (compat/cpu.py says why).


def model_provider(rank: Rank) -> Built:
    """Megatron's TransformerConfig and this rank's GPTModel chunks (one per virtual pipeline
    stage): a preset's, or an imported Hugging Face model's with its weights loaded. The model is
    model.json's, as the rules checked it (nothing of the HF folder is read here but Bridge's own)."""
    from helpers.rundir import prepared
    from helpers.runtime import build

    spec, on_cpu = rank.spec, rank.device.type == "cpu"
    model_desc, hf = prepared.model(rank.run_dir)
    if not spec.hf_model:
        config = build.transformer_config(model_desc, spec, on_cpu, spec.bf16)
        return Built(model_desc, hf, config, build.model_chunks(config, model_desc, spec))
    from helpers.runtime.hf import config as hf_config
    from helpers.runtime.hf import weights as hf_weights
    bridge = hf_config.open_bridge(hf)
    config = hf_config.provider_config(bridge, spec, on_cpu, spec.bf16)
    chunks = build.model_chunks(config, model_desc, spec)
    hf_weights.load(bridge, chunks)
    return Built(model_desc, hf, config, chunks)


def wrap_for_training(rank: Rank, built: Built) -> Trainee:
    """Seed-checkpoint weights (the same start in every layout), Megatron's DDP and optimizer, and
    the config hooks Megatron's schedule calls (grad sync, loss scaling), as Megatron's loop wires them."""
    from helpers.runtime import build
    from helpers.runtime.checkpoint import io as checkpoint_io

    spec, config = rank.spec, built.config
    if spec.seed_checkpoint:
        checkpoint_io.load_model(built.chunks, rank.path(spec.seed_checkpoint_dir))
    model = build.wrap_ddp(config, built.chunks, spec, rank.device)
    optimizer = build.optimizer(config, model, spec)
    build.loop_hooks(config, model, optimizer)
    return Trainee(built.model_desc, built.hf, config, model, optimizer, build.ParamGather(config, model, optimizer))


def train(rank: Rank, trainee: Trainee, data: Prepared | None, splits: dict | None, faults: Injected | None) -> None:
    """Megatron's training loop; the kit's only additions are the observer's four calls. `data`: the
    real data prepared on this node (data/indexed.Prepared), `splits`: its Megatron datasets per
    split (both None: synthetic); `faults`: this rank's injected faults (None: none)."""
    from helpers.runtime import build, evaluation, step
    from helpers.runtime.checkpoint import policy as checkpoint
    from helpers.runtime.data import batches
    from helpers.runtime.measure.observer import Observer

    spec, model, optimizer = rank.spec, trainee.model, trainee.optimizer
    start = checkpoint.resume(rank, trainee)  # 0 unless load_dir
    observer = Observer(rank, trainee, data, faults, start)
    validation = evaluation.Validation(rank, trainee, splits)  # real data: the loss before training, the baseline
    validation.run("valid", start)
    scheduler = build.lr_schedule(optimizer, spec, start)  # Megatron's OptimizerParamScheduler, at `start`
    trainee.param_gather.hold()  # overlap_param_gather: the overlapped all-gather from the first step on
    for it in range(start, spec.iters):
        observer.begin(it + 1)
        for chunk in model:
            chunk.zero_grad_buffer()  # Megatron's DDP keeps every gradient in one contiguous buffer
        optimizer.zero_grad()
        data_iterators = batches.for_chunks(rank, trainee, splits, "train", it)  # one per model chunk
        losses = step.forward_backward(model, data_iterators, spec, rank.device)
        observer.loss(losses)  # the global-batch loss on logged iterations (log_interval)
        ok, grad_norm, _ = optimizer.step()  # gradients reduced in forward_backward (finalize_model_grads), clipped
        trainee.param_gather.stepped(first=it == start, last=it == spec.iters - 1)
        observer.end(ok, grad_norm)
        scheduler.step(spec.global_batch_size)  # in samples, as Megatron-LM counts (never skipped in bf16/fp32)
        checkpoint.maybe_save(rank, trainee, it + 1, scheduler)
        validation.after(it + 1)
    validation.test()
    observer.finish(validation.records)
    export_hf(rank, trainee)


def export_hf(rank: Rank, trainee: Trainee) -> None:
    """The model as it is now, written as a Hugging Face folder through Bridge (collective)."""
    if not rank.spec.export_hf:
        return
    from megatron.core.utils import unwrap_model

    from helpers.runtime.hf import config as hf_config
    from helpers.runtime.hf import weights as hf_weights
    rank.beat("exporting to Hugging Face format")
    hf_weights.export(hf_config.open_bridge(trainee.hf), unwrap_model(trainee.model), rank.path(rank.spec.export_hf))


def run(spec: JobSpec, run_dir: Path, global_rank: int, beat: writer.Heartbeat, seed_out: Path | None) -> None:
    """What the job asks of this rank: only its process groups, an HF parity check, the seed
    checkpoint, an evaluation of saved checkpoints, or training."""
    from helpers.runtime import preflight, setup
    from helpers.runtime.checkpoint import io as checkpoint_io
    from helpers.runtime.checkpoint import policy as checkpoint
    from helpers.runtime.measure import faults as injected_faults
    from helpers.runtime.measure import gather

    data = None  # synthetic
    if spec.data != "synthetic" and seed_out is None and not spec.groups_only:
        from helpers.runtime.data import indexed
        beat("preparing data")  # tokenized and index-cached on each node, before torch.distributed
        data = indexed.prepare(run_dir, spec)
    beat("initialising process groups")
    rank = Rank(spec, run_dir, global_rank, beat, setup.process_groups(spec))
    if spec.groups_only:  # before any model: no model, no data
        return gather.write_groups(run_dir)
    if spec.hf_parity_layouts:  # an HF import checked against transformers, layout by layout
        from helpers.runtime.hf import parity
        return parity.run(run_dir, spec, rank.device)
    preflight.check(spec, beat)  # multi-node: every node sees the same data/checkpoint files
    beat("building the model")
    built = model_provider(rank)
    if seed_out is not None:  # a world-size-1 job whose only task is the seed checkpoint
        return checkpoint_io.save_model(built.chunks, seed_out)
    trainee = wrap_for_training(rank, built)
    faults = injected_faults.install(spec, global_rank, trainee.model)  # spec.faults: failures injected on purpose
    splits = data.build() if data else None  # Megatron's dataset builder (a cache hit)
    if spec.eval_only:  # with export_hf: a saved checkpoint written back as Hugging Face
        checkpoint.evaluate_only(rank, trainee)
        return export_hf(rank, trainee)
    train(rank, trainee, data, splits, faults)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--seed-checkpoint-out", type=Path, default=None)
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", 0))
    writer.redirect_output(args.run_dir, rank)
    spec = JobSpec.read(args.run_dir / names.SPEC)
    beat = writer.Heartbeat(args.run_dir, rank)
    try:
        import_megatron(spec.device)
        run(spec, args.run_dir, rank, beat, args.seed_checkpoint_out)
    except BaseException as exc:
        from helpers.runtime.measure.comm_log import in_flight
        beat.flush()  # the last phase reached, next to the error
        writer.write_error(args.run_dir, rank, exc, in_collective=in_flight())
        raise  # torchrun sees the failure and stops the other ranks
    beat.flush()
    import torch.distributed as dist
    dist.destroy_process_group()
    exit_without_teardown()


def import_megatron(device: str) -> None:
    """The heavy imports every rank makes, with the collector paused and their objects then frozen:
    Megatron-Core (on CPU without torch.compile, compat/cpu.py; on GPU with it, as Megatron-Core
    binds it) and torch._dynamo, which torch.optim imports when the first optimizer is built. A
    forked CPU rank finds them made already (rank_imports.py)."""
    with import_phase.without_gc():
        if device == "cpu":
            from helpers.runtime.compat import cpu as cpu_compat
            cpu_compat.import_megatron_eagerly()
        import megatron.core  # noqa: F401
        import torch._dynamo  # noqa: F401


def exit_without_teardown() -> None:
    """Every file of the run is written and closed (each written to a temporary name and renamed).
    Skip the interpreter's teardown of torch and Megatron-Core, which takes ~1 s per process on two
    cores before torchrun can notice the exit (minutes across the suite's few hundred jobs). What
    that teardown would have done and still must be done: stop this process's multiprocessing
    children, if any (left alone, they outlive the job; dist_checkpointing's spawned write-results
    server would be one, ~300 MB, but checkpoint/io.py gives the writer an in-process queue), and flush
    the output streams. torchrun's agent skips its teardown too (launch/torchrun_main.py)."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.terminate()
    for child in multiprocessing.active_children():
        child.join(timeout=10)
    sys.stdout.flush()
    sys.stderr.flush()
    if multiprocessing.parent_process() is not None:
        return  # a rank forked by torchrun's forkserver: torch's wrapper hands the agent our result, then os._exit
    os._exit(0)


if __name__ == "__main__":  # required: dist_checkpointing's writer re-imports the main module
    main()
