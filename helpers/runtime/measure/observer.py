"""Observer: everything the kit records around Megatron's training loop, owned by one object so
that the loop itself (helpers/runtime/train.py) reads like Megatron's. It calls four methods:

    observer = Observer(worker, start)    # process groups, report card, instruments installed
    scale = observer.begin(iteration)      # stamps, heartbeat, injected fault (loss scale: 1.0 or NaN)
    loss = observer.loss(losses)           # the global-batch loss from Megatron's per-microbatch dicts
    observer.end(ok, grad_norm)            # metrics.jsonl line (and TensorBoard), report card, ranks.json
    observer.finish(validation_records)    # comm/timeline/moe files, device peaks, the card's last checks

What it owns: the report card (report_card.py), metrics.jsonl and its TensorBoard events
(tensorboard.py), the heartbeat, the instruments
(comm log, timeline: instruments.py), the MoE router log, captured GEMM operands
(KIT_CAPTURE_TENSORS), the profiler window (KIT_TORCH_PROFILE) and fault injection (KIT_FAULT).
None of it changes what Megatron computes. With KIT_INSTRUMENT=0 the instruments record nothing
and install no hook; what remains on the GPU path is one synchronisation per iteration for the
step time, which Megatron's own timers also take."""
from __future__ import annotations

import math
import time

import torch

from helpers.rundir import names, writer
from helpers.runtime.measure import (
    faults,
    gather,
    instruments,
    linear_tensors,
    megatron_calls,
    memory_stats,
    moe_stats,
    tensorboard,
)
from helpers.runtime.measure.report_card import Report
from helpers.runtime.measure.torch_profile import ProfileWindow
from helpers.runtime.step import global_loss


class Observer:
    def __init__(self, worker, start: int):
        self.worker, self.start = worker, start
        spec, rank = worker.spec, worker.rank
        worker.beat("recording process groups")
        gather.write_groups(worker.run_dir)
        self.card = Report(worker.run_dir, spec)  # report.json: the smoke-test contract
        self.card.groups(), self.card.model(worker.model, worker.model_desc.name), self.card.data(worker.data)
        self.host = gather.gather_to_rank0(gather.host_facts(worker.device))
        trees = gather.gather_to_rank0(megatron_calls.module_tree(worker.model))  # megatron.json: what was asked
        if rank == 0:
            megatron_calls.write(worker.run_dir / names.MEGATRON, megatron_calls.record(worker), trees)
        self.metrics = writer.Metrics(worker.run_dir, enabled=rank == 0)
        self.tensorboard = tensorboard.TensorBoard(worker.run_dir, enabled=rank == 0 and spec.tensorboard == "on")
        self.instruments = instruments.Instruments(worker.model, worker.device)  # comm.jsonl, timeline.jsonl
        self.routers = moe_stats.RouterLog(worker.model)  # moe.jsonl (MoE models)
        self.captured = linear_tensors.install(worker.model, rank)  # KIT_CAPTURE_TENSORS=N (lesson 16)
        self.profile = ProfileWindow(spec.iters, rank)  # KIT_TORCH_PROFILE=FILE (benchmarks)
        self.tokens_per_iteration = spec.global_batch_size * spec.seq_len
        self.iteration, self.times = start, {}

    def begin(self, iteration: int) -> float:
        """Before the iteration's first step. Returns the loss scale the forward step applies: 1.0,
        or NaN when KIT_FAULT injects one (other faults raise, hang or exit here)."""
        self.iteration = iteration
        self.profile.before(iteration - 1)
        self.times = {"start": time.perf_counter()}
        scale = faults.maybe_inject(iteration, self.worker.rank)
        self.worker.beat("forward/backward", iteration)
        self.instruments.begin(iteration)
        self.routers.begin(iteration)
        if self.captured:
            self.captured.current = iteration
        self.times["queueing"] = time.perf_counter()
        return scale

    def loss(self, losses: list) -> float:
        """After Megatron's forward/backward schedule: the global-batch mean loss (a collective the
        instruments do not count: it is the kit's, not Megatron's). Stops the job on NaN."""
        self.times["issued"] = time.perf_counter()  # every microbatch is queued (on a GPU nothing waited yet)
        with self.instruments.paused():
            loss = global_loss(losses, self.worker.spec, self.worker.device)  # waits for the device (.item)
        self.times["drained"] = time.perf_counter()
        self.card.loss(self.iteration, loss)
        self.loss_value = loss
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss is {loss} at iteration {self.iteration}: training stopped "
                                     "(check the learning rate, precision and input data)")
        self.worker.beat("optimizer step", self.iteration)
        self.instruments.phase("optimizer")
        return loss

    def end(self, ok: bool, grad_norm) -> None:
        """After the optimizer step (before the learning-rate scheduler moves on: the line records
        the lr this step used)."""
        worker, it, t = self.worker, self.iteration, self.times
        lr = float(worker.opt.param_groups[0]["lr"])
        self.instruments.end()
        self.routers.end()
        self.card.step(it, ok, grad_norm, worker.model, check_replicas=it - 1 in (self.start, worker.spec.iters - 1))
        if worker.device.type == "cuda":
            torch.cuda.synchronize()
        step = time.perf_counter() - t["start"]
        self.profile.after(it - 1)
        record = {"iteration": it, "time": time.time(), "loss": self.loss_value, "grad_norm": float(grad_norm or 0.0),
                  "lr": lr, "skipped": not ok, "step_time_s": step, "tokens_per_s": self.tokens_per_iteration / step,
                  # host-bound or device-bound: how long the host took to queue the forward/backward
                  # passes, and how long it then waited for the device to finish them (~0: host-bound)
                  "fwd_bwd_issue_s": t["issued"] - t["queueing"], "fwd_bwd_drain_s": t["drained"] - t["issued"]}
        if it - 1 == self.start:  # ranks.json: what each rank holds, after the first step allocated it all
            static = gather.gather_to_rank0({**memory_stats.static_memory(worker.model, worker.opt),
                                             **self.instruments.rank_facts()})
            if worker.rank == 0:
                writer.write_json(worker.run_dir / names.RANKS,
                                  {str(r): {**self.host[r], **static[r]} for r in range(len(static))})
        record.update(memory_stats.device_memory(worker.device))
        self.metrics.write(record)
        self.tensorboard.iteration(record)
        worker.beat("iteration done", it)

    def finish(self, validation_records: list[dict]) -> None:
        """After the loop (collectives: every rank calls it)."""
        worker = self.worker
        memory_stats.write_device_peaks(worker.run_dir, worker.device)  # every rank's peak (metrics.jsonl: rank 0's)
        self.instruments.finish(worker.run_dir)
        self.routers.finish(worker.run_dir)
        if self.captured:
            self.captured.write(worker.run_dir)
        self.card.evaluation(validation_records)
        self.tensorboard.evaluation(validation_records)
        self.card.checkpoint(worker)
