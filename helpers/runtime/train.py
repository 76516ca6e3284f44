"""Worker entry point, run by torchrun on every rank:
    python -m helpers.runtime.train RUN_DIR [--seed-checkpoint-out PATH]
Reads RUN_DIR/spec.json; builds Megatron-Core's process groups, GPT model chunks, DDP and
optimizer; trains with Megatron's own forward/backward schedules; writes the run directory."""
from __future__ import annotations

import argparse
import math
import os
import time
from datetime import timedelta
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

from helpers import models
from helpers.runtime import rundir
from helpers.spec import JobSpec


def _setup(spec: JobSpec):
    """torch.distributed + Megatron parallel_state. Returns the torch device of this rank."""
    import megatron.core  # noqa: F401  (import before the compat patches, which target it)
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    on_cpu = spec.device == "cpu"
    if on_cpu:
        from helpers.runtime import cpu_compat
        cpu_compat.activate()
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group("gloo" if on_cpu else "nccl", timeout=timedelta(minutes=5))
    ps.initialize_model_parallel(
        tensor_model_parallel_size=spec.tp,
        pipeline_model_parallel_size=spec.pp,
        virtual_pipeline_model_parallel_size=spec.vpp,
        context_parallel_size=spec.cp,
        expert_model_parallel_size=spec.ep,
        expert_tensor_parallel_size=spec.expert_tp,
        distributed_timeout_minutes=5,
    )
    torch.manual_seed(spec.seed)
    model_parallel_cuda_manual_seed(spec.seed)
    return device


def _loss_func(loss_mask, scale, cp_group, output_tensor):
    """Mean token loss of one microbatch. The clone matters: the schedule divides the returned
    loss in place by the number of microbatches, and we report the unscaled value.
    `scale` is 1.0 except when a fault is injected (NaN).
    Context parallel: Megatron's schedule multiplies the loss by the CP size and DDP averages the
    gradients over DP x CP, so (as Megatron-LM's loss function does) the loss that is
    differentiated is this rank's token-loss sum over the token count of the *whole* sequence; the
    reported value stays this rank's mean (its CP peers' means average to the sequence's)."""
    losses = output_tensor.float()
    total, tokens = torch.sum(losses.view(-1) * loss_mask.view(-1)), loss_mask.sum()
    mean = total / tokens * scale
    loss = mean
    if cp_group is not None:
        all_tokens = tokens.detach().clone()
        dist.all_reduce(all_tokens, group=cp_group)
        loss = total / all_tokens * scale
    return loss, {"lm loss": mean.detach().clone()}


def _forward_step(device, scale, data_iterator, model):
    from megatron.core import parallel_state as ps
    from megatron.core.utils import get_batch_on_this_cp_rank

    batch = {k: v.to(device) for k, v in next(data_iterator).items()}
    if ps.get_context_parallel_world_size() > 1:  # chunks r and 2*CP-1-r of the sequence
        batch = get_batch_on_this_cp_rank(batch, is_hybrid_cp=False, cp_group=ps.get_context_parallel_group())
    output = model(batch["tokens"], batch["position_ids"], attention_mask=None, labels=batch["labels"])
    cp_group = ps.get_context_parallel_group() if ps.get_context_parallel_world_size() > 1 else None
    return output, partial(_loss_func, batch["loss_mask"], scale, cp_group)


def _global_loss(losses_reduced, spec: JobSpec, device) -> float:
    """Global-batch mean loss on every rank: last-stage ranks hold their DP shard's mean; the
    tp*cp*dp last-stage ranks sum their values and we divide by their count."""
    from megatron.core import parallel_state as ps

    local = torch.zeros(1, dtype=torch.float64, device=device)
    if ps.is_pipeline_last_stage(ignore_virtual=True) and losses_reduced:
        local += torch.stack([d["lm loss"].double() for d in losses_reduced]).mean()
    dist.all_reduce(local)
    return float(local) / (spec.world_size // spec.pp)


def train(run_dir: Path, spec: JobSpec, seed_out: Path | None) -> None:
    from megatron.core.distributed import finalize_model_grads
    from helpers.runtime.schedule import run_schedule
    from megatron.core import parallel_state as ps
    from helpers.runtime import build, checkpoint, faults, instrument, memory_stats, synthetic

    beat = rundir.Heartbeat(run_dir, int(os.environ.get("RANK", 0)))
    prepared = None  # real data: tokenized and index-cached on each node before torch.distributed
    if spec.data != "synthetic" and seed_out is None and not spec.groups_only:
        from helpers.runtime import data as textdata
        beat("preparing data")
        prepared = textdata.prepare(run_dir, spec)
    beat("initialising process groups")
    device = _setup(spec)
    rank = dist.get_rank()
    if spec.groups_only:  # before the model is built: the local spec cannot build every layout (CP)
        rundir.write_groups(run_dir)
        return
    from helpers.runtime import preflight
    preflight.check(spec, beat)  # multi-node: every node sees the same data/checkpoint files
    beat("building the model")
    bf16 = spec.precision == "bf16"
    model_desc = models.preset(spec.model).with_(**spec.model_overrides)
    config = build.transformer_config(model_desc, spec, on_cpu=device.type == "cpu", bf16=bf16)
    chunks = build.model_chunks(config, model_desc, spec)
    if seed_out is not None:  # world-size-1 job whose only task is the seed checkpoint
        checkpoint.save_model(chunks, seed_out)
        return
    if spec.seed_checkpoint:
        checkpoint.load_model(chunks, Path(os.path.expandvars(spec.env["KIT_SEED_CHECKPOINT"])))
    model = build.wrap_ddp(config, chunks, spec, device)
    opt = build.optimizer(config, model, spec)
    # What Megatron's own training loop wires into the schedule.
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = opt.scale_loss
    config.no_sync_func = [m.no_sync for m in model] if len(model) > 1 else model[0].no_sync
    start = checkpoint.resume(spec, run_dir, model, opt, model_desc, beat)  # 0 unless load_dir
    if spec.eval_only:
        return checkpoint.evaluate_only(spec, run_dir, model, model_desc, beat, device)

    beat("recording process groups")
    rundir.write_groups(run_dir)
    from helpers.runtime import report, validation
    card = report.Report(run_dir, spec)  # report.json: the smoke-test contract
    card.groups(), card.model(model), card.data(prepared)
    facts = rundir.gather_to_rank0(rundir.host_facts(device))

    metrics = rundir.Metrics(run_dir, enabled=rank == 0)
    inst = instrument.Instruments(model, device)  # comm.jsonl, timeline.jsonl, ranks.json extras
    from helpers.runtime import moe_stats
    routers = moe_stats.RouterLog(model)  # moe.jsonl: tokens per expert, aux loss (MoE models)
    dp_rank = ps.get_data_parallel_rank()
    splits = prepared.build() if prepared else None  # Megatron's dataset builder (cache hit)
    evals = splits and validation.Evaluator(run_dir, spec, splits, model, device, dp_rank, _forward_step,
                                            _global_loss, rank)
    if evals:
        evals.before_training(start)
    tokens_per_iter = spec.global_batch_size * spec.seq_len
    for it in range(start, spec.iters):
        t0 = time.perf_counter()
        scale = faults.maybe_inject(it + 1, rank)
        beat("forward/backward", it + 1)
        data = [iter(synthetic.microbatches(spec.seed, it, spec.global_batch_size, spec.micro_batch,
                                            spec.dp, dp_rank, spec.seq_len, model_desc.vocab_size)
                     if splits is None else textdata.microbatches(splits["train"], it, spec, dp_rank))
                for _ in model]  # one iterator per model chunk (interleaved schedule)
        for m in model:
            m.zero_grad_buffer()
        opt.zero_grad()
        inst.begin(it + 1)
        routers.begin(it + 1)
        losses = run_schedule(model, data, spec, partial(_forward_step, device, scale), forward_only=False)
        with inst.paused():  # the kit's own loss sum is not Megatron's traffic
            loss = _global_loss(losses, spec, device)
        card.loss(it + 1, loss)
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss is {loss} at iteration {it + 1}: training stopped "
                                     "(check the learning rate, precision and input data)")
        beat("optimizer step", it + 1)
        inst.phase("optimizer")
        ok, grad_norm, _ = opt.step()
        inst.end()
        routers.end()
        card.step(it + 1, ok, grad_norm, model, check_replicas=it in (start, spec.iters - 1))
        if device.type == "cuda":
            torch.cuda.synchronize()
        step = time.perf_counter() - t0
        record = {"iteration": it + 1, "time": time.time(), "loss": loss, "grad_norm": float(grad_norm or 0.0),
                  "lr": spec.lr, "skipped": not ok, "step_time_s": step,
                  "tokens_per_s": tokens_per_iter / step}
        if it == start:
            static = rundir.gather_to_rank0({**memory_stats.static_memory(model, opt), **inst.rank_facts()})
            if rank == 0:
                rundir.write_json(run_dir / "ranks.json", {
                    str(r): {**facts[r], **static[r]} for r in range(len(static))})
        record.update(memory_stats.device_memory(device))
        metrics.write(record)
        beat("iteration done", it + 1)
        checkpoint.maybe_save(spec, run_dir, it + 1, model, opt, model_desc, beat, device)
        if evals:
            evals.after_step(it + 1)
    memory_stats.write_device_peaks(run_dir, device)  # every rank's peak (metrics.jsonl: rank 0's)
    inst.finish(run_dir)
    routers.finish(run_dir)
    if evals:
        evals.test()
        card.evaluation(evals.records)
    card.checkpoint(spec, run_dir, model, opt, model_desc, beat)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--seed-checkpoint-out", type=Path, default=None)
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", 0))
    rundir.redirect_output(args.run_dir, rank)
    spec = JobSpec.read(args.run_dir / "spec.json")
    try:
        train(args.run_dir, spec, args.seed_checkpoint_out)
    except BaseException as exc:
        rundir.write_error(args.run_dir, rank, exc)
        raise  # torchrun sees the failure and stops the other ranks
    dist.destroy_process_group()


if __name__ == "__main__":  # required: dist_checkpointing's writer re-imports the main module
    main()
