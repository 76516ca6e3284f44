"""When things ran, without stopping the GPU to ask.

The timeline (forward/backward per microbatch) and the communication log (calls and waits) stamp
the start and end of what they record. On CPU a stamp is `time.time()`. On GPU, asking the clock
honestly would need a `torch.cuda.synchronize()` per stamp: the host then waits for the device at
every microbatch, cannot queue the next kernels ahead, and the device idles while it does (it cost
the kit ~6% of the bare Megatron loop's speed on one H200). So on GPU a stamp is a CUDA event
recorded on the current stream: it completes when the kernels queued before it have run, which is
the time the picture should show. Events become wall-clock seconds in `settle()`, once per
iteration after one synchronisation: anchor's wall time + the event's time since the anchor."""
from __future__ import annotations

import time

import torch


class Clock:
    def __init__(self, cuda: bool):
        self.cuda = cuda
        self._pending: list[dict] = []  # records whose "t0"/"t1" may still be CUDA events
        self._anchor: tuple[torch.cuda.Event, float] | None = None

    def stamp(self):
        if not self.cuda:
            return time.time()
        if self._anchor is None:  # a stamp before the first iteration: anchor now
            self.anchor()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def keep(self, record: dict) -> dict:
        """Register a record with stamps in "t0"/"t1" (a no-op on CPU, where they are floats)."""
        if self.cuda:
            self._pending.append(record)
        return record

    def anchor(self) -> None:
        """Synchronise (collective-free), settle what is pending, and start a new reference point.
        Call at the start of an iteration: the device is idle there anyway."""
        if not self.cuda:
            return
        self.settle()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        torch.cuda.synchronize()  # the anchor event has completed at (about) this wall time
        self._anchor = (event, time.time())

    def settle(self) -> None:
        """Every pending stamp as wall-clock seconds (synchronises once)."""
        if not self.cuda or not self._pending:
            return
        torch.cuda.synchronize()
        ref, wall = self._anchor
        for record in self._pending:
            for key in ("t0", "t1"):
                if isinstance(record.get(key), torch.cuda.Event):
                    record[key] = wall + ref.elapsed_time(record[key]) / 1e3
        self._pending = []
