"""The worker's measuring instruments in one object, so train.py needs only a few short calls:

    inst = instruments.Instruments(model, device, enabled)   # after DDP and optimizer; enabled: JobSpec.instruments
    inst.begin(it)        # before forward_backward   ... inst.paused() around the kit's own loss sum
    inst.phase("optimizer")                          # before opt.step
    inst.end()            # after opt.step
    inst.rank_facts()     # extra ranks.json fields: local parameter shapes, activation bytes
    inst.finish(run_dir)  # after the loop (collective): comm.jsonl and timeline.jsonl on rank 0
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
from megatron.core.utils import unwrap_model

from helpers.rundir import names
from helpers.runtime.measure.clock import Clock
from helpers.runtime.measure.comm_log import CommLog
from helpers.runtime.measure.gather import gather_to_rank0
from helpers.runtime.measure.timeline import Timeline


class Instruments:
    def __init__(self, model: list, device: torch.device, enabled: bool):
        self.enabled = enabled  # off: no hook installed, nothing recorded, no CUDA event
        rank = dist.get_rank()
        # one clock for every record: on GPU its stamps are CUDA events, settled once per iteration
        self.clock = Clock(cuda=device.type == "cuda" and self.enabled)
        self.comm = CommLog(rank)
        self.timeline = Timeline(rank, model)
        self.model, self._t = model, {}
        if not self.enabled:
            return
        self.comm = CommLog(rank, clock=self.clock).install()
        self.timeline = Timeline(rank, model, clock=self.clock).install()

    def begin(self, iteration: int) -> None:
        if not self.enabled:
            return
        self.clock.anchor()  # settles the previous iteration's stamps (one synchronisation)
        self.timeline.iteration = iteration
        self.comm.begin(iteration, "forward_backward")
        self._t = {"forward_backward": self.clock.stamp()}

    def paused(self):
        return self.comm.paused()

    def phase(self, name: str) -> None:
        if not self.enabled:
            return
        now = self.clock.stamp()
        prev, t0 = next(iter(self._t.items()))
        self.timeline.mark(prev, t0, now)
        self._t = {name: now}
        self.comm.phase = name

    def end(self) -> None:
        if not self.enabled:
            return
        self.comm.end()
        prev, t0 = next(iter(self._t.items()))
        self.timeline.mark(prev, t0, self.clock.stamp())
        self._t = {}

    def rank_facts(self) -> dict:
        return {"param_shapes": param_shapes(self.model),
                "saved_activation_bytes_per_microbatch": self.timeline.max_saved_bytes()}

    def finish(self, run_dir: Path) -> None:
        """Gather every rank's records to rank 0 (a collective: all ranks call it)."""
        if not self.enabled:
            return
        self.clock.settle()
        comm = gather_to_rank0(self.comm.records)
        events = gather_to_rank0(self.timeline.events + self.comm.events)
        if dist.get_rank() != 0:
            return
        _write_jsonl(Path(run_dir) / names.COMM, [r for rank in comm for r in rank])
        _write_jsonl(Path(run_dir) / names.TIMELINE,
                     sorted((e for rank in events for e in rank), key=lambda e: (e["rank"], e["t0"])))


def param_shapes(model: list) -> dict:
    """{name: {shape, tp_split_dim, sequence_parallel}} of the parameters this rank holds, read from
    the live model. `tp_split_dim` is the dimension Megatron split across TP ranks (None: replicated)."""
    out = {}
    for i, inner in enumerate(unwrap_model(model)):
        for name, p in inner.named_parameters():
            key = f"chunk{i}.{name}" if len(model) > 1 else name
            out[key] = {"shape": list(p.shape),
                        "tp_split_dim": p.partition_dim if getattr(p, "tensor_model_parallel", False) else None,
                        "sequence_parallel": bool(getattr(p, "sequence_parallel", False))}
    return out


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    import json
    tmp = Path(str(path) + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)
