"""Observer: everything the kit records around Megatron's training loop, owned by one object so
that the loop itself (helpers/runtime/train.py) reads like Megatron's. It calls four methods:

    observer = Observer(rank, trainee, data, faults, start)  # process groups, report card, instruments
    observer.begin(iteration)              # stamps, heartbeat, injected faults (`faults`)
    loss = observer.loss(losses)           # logged iterations: the global-batch loss (else None)
    observer.end(ok, grad_norm)            # NaN guard; logged iterations: metrics.jsonl line, TensorBoard
    observer.finish(validation_records)    # comm/timeline/moe files, device peaks, the card's last checks

What it owns: the report card (report_card.py), metrics.jsonl and its TensorBoard events
(tensorboard.py), the heartbeat, and what the job asks for in its JobSpec: the instruments
(`instruments`: comm log and timeline, instruments.py; the MoE router log, moe_stats.py), captured
GEMM operands (`capture_tensors_at`, linear_tensors.py), the profiler window (`torch_profile`,
torch_profile.py) and the faults' iteration hook (`faults`, faults.py, installed by train.run).
It is given the rank (worker.py's Rank), the model it watches (the Trainee), the real data prepared
on this node (data/indexed.Prepared; None: synthetic) and this rank's injected faults (None: none).
None of it changes what Megatron computes.

What every iteration costs: a few host-side notes (the heartbeat is written by its own thread, at
most once a second) and a NaN check of the grad norm Megatron's optimizer has already brought to
the host. Only a logged iteration (every `log_interval`-th, and the last) waits for the device: the
global loss is a collective and one `.item()`. Its metrics.jsonl line gives the interval's mean
step time (the host time of its iterations, without the checkpoints and validations between them,
as Megatron-LM's interval timer). The report card is written at the first and last iteration, at
checkpoint and validation iterations, and when a NaN stops the job; never per iteration."""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from helpers.rundir import names, writer
from helpers.runtime.measure import (
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

if TYPE_CHECKING:
    from helpers.runtime.data.indexed import Prepared
    from helpers.runtime.measure.faults import Injected
    from helpers.runtime.worker import Rank, Trainee


class Observer:
    def __init__(self, rank: Rank, trainee: Trainee, data: Prepared | None, faults: Injected | None, start: int):
        self.rank, self.trainee, self.faults, self.start = rank, trainee, faults, start
        spec, model, global_rank = rank.spec, trainee.model, rank.global_rank
        rank.beat("recording process groups")
        gather.write_groups(rank.run_dir)
        self.card = Report(rank.run_dir, spec)  # report.json: the smoke-test contract
        self.card.groups(), self.card.model(model, trainee.model_desc.name), self.card.data(data)
        self.host = gather.gather_to_rank0(gather.host_facts(rank.device))
        trees = gather.gather_to_rank0(megatron_calls.module_tree(model))  # megatron.json: what was asked
        if global_rank == 0:
            megatron_calls.write(rank.run_dir / names.MEGATRON, megatron_calls.record(spec, trainee, data), trees)
        self.metrics = writer.Metrics(rank.run_dir, enabled=global_rank == 0)
        self.tensorboard = tensorboard.TensorBoard(rank.run_dir, enabled=global_rank == 0 and spec.tensorboard == "on")
        recording = spec.instruments == "on"
        self.instruments = instruments.Instruments(model, rank.device, recording)  # comm, timeline
        self.routers = moe_stats.RouterLog(model, recording)  # moe.jsonl (MoE models)
        self.captured = linear_tensors.install(model, global_rank, spec.capture_tensors_at)  # lesson 17
        self.profile = ProfileWindow(spec, global_rank)  # benchmarks
        self.tokens_per_iteration = spec.global_batch_size * spec.seq_len
        self.iteration, self.times, self.loss_value = start, {}, None
        self.interval: list[float] = []  # host seconds of each iteration since the last logged one

    def logged(self, iteration: int) -> bool:
        """Every log_interval-th iteration (Megatron-LM's --log-interval) and the last one."""
        spec = self.rank.spec
        return iteration % spec.log_interval == 0 or iteration == spec.iters

    def begin(self, iteration: int) -> None:
        """Before the iteration's first step; an injected fault fires or arms here."""
        self.iteration = iteration
        self.profile.before(iteration - 1)
        self.times = {"start": time.perf_counter()}
        if self.faults:
            self.faults.begin(iteration)
        self.rank.beat("forward/backward", iteration)
        self.instruments.begin(iteration)
        self.routers.begin(iteration)
        if self.captured:
            self.captured.current = iteration
        self.times["queueing"] = time.perf_counter()

    def loss(self, losses: list) -> float | None:
        """After Megatron's forward/backward schedule. On a logged iteration: the global-batch mean
        loss, recorded on the card; a NaN stops the job. None on the others."""
        self.loss_value = self._global_loss(losses) if self.logged(self.iteration) else None
        self.rank.beat("optimizer step", self.iteration)
        self.instruments.phase("optimizer")
        return self.loss_value

    def _global_loss(self, losses: list) -> float:
        """A collective the instruments do not count (it is the kit's, not Megatron's), and the
        iteration's one wait for the device (.item)."""
        self.times["issued"] = time.perf_counter()  # every microbatch is queued (on a GPU nothing waited yet)
        with self.instruments.paused():
            loss = global_loss(losses, self.rank.spec, self.rank.device)
        self.times["drained"] = time.perf_counter()
        self.card.loss(self.iteration, loss)
        if not math.isfinite(loss):
            stop(f"loss is {loss} at iteration {self.iteration}")
        return loss

    def end(self, ok: bool, grad_norm) -> None:
        """After the optimizer step (before the learning-rate scheduler moves on: the line records
        the lr this step used)."""
        it = self.iteration
        self.interval.append(time.perf_counter() - self.times["start"])
        self.instruments.end()
        self.routers.end()
        last = self.rank.spec.iters - 1
        self.card.step(it, ok, grad_norm, self.trainee.model, check_replicas=it - 1 in (self.start, last))
        if grad_norm is not None and not math.isfinite(grad_norm):  # a NaN between logged losses
            stop(f"grad norm is {grad_norm} at iteration {it}")
        if it - 1 == self.start:
            self._write_ranks()
        if self.logged(it):
            self._log(ok, grad_norm)
        if self._card_due(it):
            self.card.write()
        self.profile.after(it - 1)
        self.rank.beat("iteration done", it)

    def _log(self, ok: bool, grad_norm) -> None:
        """metrics.jsonl's line (and TensorBoard's points) for a logged iteration."""
        t = self.times
        step = sum(self.interval) / len(self.interval)
        self.interval = []
        record = {"iteration": self.iteration, "time": time.time(), "loss": self.loss_value,
                  "grad_norm": float(grad_norm or 0.0), "lr": float(self.trainee.optimizer.param_groups[0]["lr"]),
                  "skipped": not ok, "step_time_s": step, "tokens_per_s": self.tokens_per_iteration / step,
                  # host-bound or device-bound: how long the host took to queue the forward/backward
                  # passes, and how long it then waited for the device to finish them (~0: host-bound)
                  "fwd_bwd_issue_s": t["issued"] - t["queueing"], "fwd_bwd_drain_s": t["drained"] - t["issued"],
                  **memory_stats.device_memory(self.rank.device)}
        self.metrics.write(record)
        self.tensorboard.iteration(record)

    def _write_ranks(self) -> None:
        """ranks.json: what each rank holds, after the first step allocated it all (collective)."""
        static = gather.gather_to_rank0({**memory_stats.static_memory(self.trainee.model, self.trainee.optimizer),
                                         **self.instruments.rank_facts()})
        if self.rank.global_rank == 0:
            writer.write_json(self.rank.run_dir / names.RANKS,
                              {str(r): {**self.host[r], **static[r]} for r in range(len(static))})

    def _card_due(self, it: int) -> bool:
        """The iterations after which report.json is written: the first and the last, and those
        that save a checkpoint or validate."""
        spec = self.rank.spec
        saves = bool(spec.save_interval) and it % spec.save_interval == 0
        validates = spec.data != "synthetic" and bool(spec.eval_interval) and it % spec.eval_interval == 0
        return it in (self.start + 1, spec.iters) or saves or validates

    def finish(self, validation_records: list[dict]) -> None:
        """After the loop (collectives: every rank calls it)."""
        run_dir = self.rank.run_dir
        memory_stats.write_device_peaks(run_dir, self.rank.device)  # every rank's peak (metrics.jsonl: rank 0's)
        self.instruments.finish(run_dir)
        self.routers.finish(run_dir)
        if self.captured:
            self.captured.write(run_dir)
        self.card.evaluation(validation_records)
        self.tensorboard.evaluation(validation_records)
        self.card.checkpoint(self.rank, self.trainee)


def stop(what: str) -> None:
    raise FloatingPointError(f"{what}: training stopped (check the learning rate, precision and input data)")
