"""Worker entry point, run by torchrun on every rank:
    python -m helpers.runtime.train RUN_DIR [--seed-checkpoint-out PATH]
Reads RUN_DIR/spec.json; builds Megatron-Core's process groups, model chunks, DDP and optimizer;
trains with Megatron's own forward/backward schedules; writes the run directory. The steps are
short functions in the order Megatron's run_simple_mcore_train_loop.py has them: setup (setup.py),
model provider (build.py), forward step (step.py), save/load (checkpoint/)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from helpers.job import import_phase
from helpers.job.spec import JobSpec
from helpers.rundir import names, writer

# The Megatron-Core side of the worker is imported inside the functions, after main() knows the
# job's device: on CPU, megatron.core is imported without torch.compile (cpu_compat.py says why).


def build_model(spec: JobSpec, device, seed_out: Path | None):
    """Config, model chunks (seed-checkpoint weights), DDP and optimizer, wired as Megatron's own
    training loop wires them into the schedule. Returns (model_desc, config, model, opt), or
    None when this job only writes the seed checkpoint."""
    from megatron.core.distributed import finalize_model_grads

    from helpers.runtime import build
    from helpers.runtime.checkpoint import io as checkpoint_io

    model_desc = spec.model_preset()
    on_cpu, bf16 = device.type == "cpu", spec.bf16
    if spec.hf_model:  # the architecture and the weights come from the HF folder, in every layout
        from helpers.runtime import hf_import, hf_weights
        bridge = hf_import.open_bridge(spec.hf_model)
        config = hf_import.provider_config(bridge, spec, on_cpu, bf16)
        chunks = build.model_chunks(config, model_desc, spec)
        hf_weights.load(bridge, chunks)
    else:
        config = build.transformer_config(model_desc, spec, on_cpu, bf16)
        chunks = build.model_chunks(config, model_desc, spec)
    if seed_out is not None:  # world-size-1 job whose only task is the seed checkpoint
        checkpoint_io.save_model(chunks, seed_out)
        return None
    if spec.seed_checkpoint:
        checkpoint_io.load_model(chunks, Path(os.path.expandvars(spec.env["KIT_SEED_CHECKPOINT"])))
    model = build.wrap_ddp(config, chunks, spec, device)
    opt = build.optimizer(config, model, spec)
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = opt.scale_loss
    config.no_sync_func = [m.no_sync for m in model] if len(model) > 1 else model[0].no_sync
    return model_desc, config, model, opt


def batches(spec: JobSpec, model: list, splits, it: int, dp_rank: int, vocab_size: int) -> list:
    """One iterator of this DP rank's microbatches per model chunk (the interleaved schedule
    asks each chunk for its own)."""
    from helpers.runtime import synthetic

    if splits is None:
        return [iter(synthetic.microbatches(spec.seed, it, spec.global_batch_size, spec.micro_batch, spec.dp,
                                            dp_rank, spec.seq_len, vocab_size)) for _ in model]
    from helpers.runtime import data
    return [iter(data.microbatches(splits["train"], it, spec, dp_rank)) for _ in model]


def train(run_dir: Path, spec: JobSpec, seed_out: Path | None) -> None:
    import math
    import time
    from functools import partial

    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from helpers.precision import fp8_matmul
    from helpers.runtime import build, evaluation, faults, gather, preflight, report, setup
    from helpers.runtime.checkpoint import policy as checkpoints
    from helpers.runtime.measure import (
        instruments,
        linear_tensors,
        memory_stats,
        moe_stats,
    )
    from helpers.runtime.measure.torch_profile import ProfileWindow
    from helpers.runtime.step import forward_step, global_loss, run_schedule

    beat = writer.Heartbeat(run_dir, int(os.environ.get("RANK", 0)))
    prepared = None  # real data: tokenized and index-cached on each node before torch.distributed
    if spec.data != "synthetic" and seed_out is None and not spec.groups_only:
        from helpers.runtime import data
        beat("preparing data")
        prepared = data.prepare(run_dir, spec)
    beat("initialising process groups")
    device = setup.process_groups(spec)
    rank = dist.get_rank()
    if spec.groups_only:  # before the model is built: no model, no data
        gather.write_groups(run_dir)
        return
    if spec.hf_parity_layouts:  # an HF import checked against transformers, layout by layout
        from helpers.runtime import hf_parity
        return hf_parity.run(run_dir, spec, device)
    preflight.check(spec, beat)  # multi-node: every node sees the same data/checkpoint files
    beat("building the model")
    built = build_model(spec, device, seed_out)
    if built is None:
        return
    model_desc, config, model, opt = built
    dp_rank = ps.get_data_parallel_rank()
    start = checkpoints.resume(spec, run_dir, model, opt, model_desc, beat)  # 0 unless load_dir
    if spec.eval_only:  # with export_hf: a saved checkpoint written back as Hugging Face
        checkpoints.evaluate_only(spec, run_dir, model, model_desc, beat, device, dp_rank)
        return export_hf(spec, model, beat)

    beat("recording process groups")
    gather.write_groups(run_dir)
    card = report.Report(run_dir, spec)  # report.json: the smoke-test contract
    card.groups(), card.model(model), card.data(prepared)
    facts = gather.gather_to_rank0(gather.host_facts(device))
    metrics = writer.Metrics(run_dir, enabled=rank == 0)
    inst = instruments.Instruments(model, device)  # comm.jsonl, timeline.jsonl, ranks.json extras
    routers = moe_stats.RouterLog(model)  # moe.jsonl: tokens per expert, aux loss (MoE models)
    captured = linear_tensors.install(model, rank)  # KIT_CAPTURE_TENSORS=N: GEMM operands (lesson 15)
    splits = prepared.build() if prepared else None  # Megatron's dataset builder (cache hit)
    evals = splits and evaluation.Evaluator(run_dir, spec, splits, model, device, dp_rank, rank)
    if evals:
        evals.before_training(start)
    tokens_per_iter = spec.global_batch_size * spec.seq_len
    schedule = build.lr_schedule(opt, spec, start)  # Megatron's scheduler, at the resumed iteration
    profiled = ProfileWindow(spec.iters, rank)  # KIT_TORCH_PROFILE=FILE (benchmarks)
    for it in range(start, spec.iters):
        profiled.before(it)
        t0 = time.perf_counter()
        scale = faults.maybe_inject(it + 1, rank)
        beat("forward/backward", it + 1)
        data_iters = batches(spec, model, splits, it, dp_rank, model_desc.vocab_size)
        for m in model:
            m.zero_grad_buffer()
        opt.zero_grad()
        inst.begin(it + 1)
        routers.begin(it + 1)
        if captured:
            captured.current = it + 1
        queueing = time.perf_counter()
        with fp8_matmul.training_step():  # FP8 linears: each weight quantised once per step; delayed scales advance
            losses = run_schedule(model, data_iters, spec, partial(forward_step, device, scale), forward_only=False)
        issued = time.perf_counter()  # every microbatch is queued (on one GPU nothing above waits for the device)
        with inst.paused():  # the kit's own loss sum is not Megatron's traffic
            loss = global_loss(losses, spec, device)  # waits for the GPU (.item of the reduced loss)
        drained = time.perf_counter()
        card.loss(it + 1, loss)
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss is {loss} at iteration {it + 1}: training stopped "
                                     "(check the learning rate, precision and input data)")
        beat("optimizer step", it + 1)
        inst.phase("optimizer")
        lr = float(opt.param_groups[0]["lr"])  # what this step uses (the schedule set it)
        ok, grad_norm, _ = opt.step()
        schedule.step(1)  # every iteration, as a resumed job counts (bf16/fp32 steps are never skipped)
        inst.end()
        routers.end()
        card.step(it + 1, ok, grad_norm, model, check_replicas=it in (start, spec.iters - 1))
        if device.type == "cuda":
            torch.cuda.synchronize()
        step = time.perf_counter() - t0
        profiled.after(it)
        record = {"iteration": it + 1, "time": time.time(), "loss": loss, "grad_norm": float(grad_norm or 0.0),
                  "lr": lr, "skipped": not ok, "step_time_s": step,
                  "tokens_per_s": tokens_per_iter / step,
                  # host-bound or device-bound: how long the host took to queue the forward/backward
                  # passes, and how long it then waited for the device to finish them (~0: host-bound)
                  "fwd_bwd_issue_s": issued - queueing, "fwd_bwd_drain_s": drained - issued}
        if it == start:
            static = gather.gather_to_rank0({**memory_stats.static_memory(model, opt), **inst.rank_facts()})
            if rank == 0:
                writer.write_json(run_dir / names.RANKS, {str(r): {**facts[r], **static[r]} for r in range(len(static))})
        record.update(memory_stats.device_memory(device))
        metrics.write(record)
        beat("iteration done", it + 1)
        checkpoints.maybe_save(spec, run_dir, it + 1, model, opt, model_desc, beat, device, dp_rank)
        if evals:
            evals.after_step(it + 1)
    memory_stats.write_device_peaks(run_dir, device)  # every rank's peak (metrics.jsonl: rank 0's)
    inst.finish(run_dir)
    routers.finish(run_dir)
    if captured:
        captured.write(run_dir)
    if evals:
        evals.test()
        card.evaluation(evals.records)
    card.checkpoint(spec, run_dir, model, opt, model_desc, beat)
    export_hf(spec, model, beat)


def export_hf(spec: JobSpec, model: list, beat) -> None:
    """The model as it is now, written as a Hugging Face folder through Bridge (collective)."""
    if not spec.export_hf:
        return
    from helpers.runtime import build, hf_import, hf_weights
    beat("exporting to Hugging Face format")
    hf_weights.export(hf_import.open_bridge(spec.hf_model), [build.unwrap(m) for m in model],
                      Path(os.path.expandvars(spec.export_hf)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--seed-checkpoint-out", type=Path, default=None)
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", 0))
    writer.redirect_output(args.run_dir, rank)
    spec = JobSpec.read(args.run_dir / names.SPEC)
    try:
        with import_phase.without_gc():  # the heavy imports every rank makes: collector paused, then frozen
            if spec.device == "cpu":
                from helpers.runtime import cpu_compat
                cpu_compat.import_megatron_eagerly()
            import megatron.core  # noqa: F401  (on GPU with torch.compile, as Megatron-Core binds it)
            import torch._dynamo  # noqa: F401  (torch.optim imports it when the first optimizer is built)
        train(args.run_dir, spec, args.seed_checkpoint_out)
    except BaseException as exc:
        from helpers.runtime.measure.comm_log import in_flight
        writer.write_error(args.run_dir, rank, exc, in_collective=in_flight())
        raise  # torchrun sees the failure and stops the other ranks
    import torch.distributed as dist
    dist.destroy_process_group()
    exit_without_teardown()


def exit_without_teardown() -> None:
    """Every file of the run is written and closed (each written to a temporary name and renamed).
    Skip the interpreter's teardown of torch and Megatron-Core, which takes ~1 s per process on two
    cores before torchrun can notice the exit (minutes across the suite's few hundred jobs). What
    that teardown would have done and still must be done: stop this process's multiprocessing
    children, if any (left alone, they outlive the job; dist_checkpointing's spawned write-results
    server was one, ~300 MB, until checkpoint/io.py gave the writer an in-process queue), and flush
    the output streams. torchrun's agent skips its teardown too (launch/torchrun_main.py)."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.terminate()
    for child in multiprocessing.active_children():
        child.join(timeout=10)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":  # required: dist_checkpointing's writer re-imports the main module
    main()
