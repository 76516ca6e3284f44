"""Per-rank forward/backward events with wall-clock times, for schedule pictures and the measured
pipeline bubble. Worker side only; the notebook reads `timeline.jsonl` (helpers.views.schedule).

Megatron's schedules call the module functions `schedules.forward_step(...)` and
`schedules.backward_step(...)` by name, once per microbatch and model chunk; both are replaced by
timing wrappers. The forward wrapper also counts the activation bytes autograd saves for the
backward pass of that microbatch (torch.autograd.graph.saved_tensors_hooks; parameters and
duplicate views of one storage are not counted): the number sequence parallelism shrinks.

Times are wall-clock seconds, comparable between the ranks of one host. On GPU they say when the
device ran the microbatch's kernels (CUDA events, `clock.py`), without synchronising per event."""
from __future__ import annotations

import weakref

import torch

from helpers.runtime.measure.clock import Clock


class _SavedBytes:
    """Bytes of distinct non-parameter storages saved for backward while active, counted when
    `total` is read (right after the forward, its output held): only what is still saved then. A
    tensor saved by a step whose result nothing reads is freed with that step during the forward,
    and its address may go to a later saved tensor; keyed by address as they came, the later one
    was then taken for the first and dropped. Weak references say which saved tensors are alive,
    and storages alive together have distinct addresses."""

    def __init__(self, param_ptrs: set[int]):
        self.param_ptrs = param_ptrs
        self.saved: list[weakref.ref] = []

    def pack(self, t):
        self.saved.append(weakref.ref(t))
        return t

    @staticmethod
    def unpack(t):
        return t

    @property
    def total(self) -> int:
        seen: dict[int, int] = {}
        for t in (r() for r in self.saved):
            if t is None:
                continue
            try:
                storage = t.untyped_storage()
                seen.setdefault(storage.data_ptr(), storage.nbytes())
            except (RuntimeError, NotImplementedError):  # tensors without storage (e.g. wrapper subclasses)
                pass
        return sum(n for ptr, n in seen.items() if ptr not in self.param_ptrs)


class Timeline:
    def __init__(self, rank: int, model: list, clock: Clock | None = None):
        self.rank = rank
        self.events: list[dict] = []
        self.iteration = 0
        self.clock = clock or Clock(cuda=False)
        self._param_ptrs = {p.untyped_storage().data_ptr() for chunk in model for p in chunk.parameters()}
        for chunk in model:  # Megatron DDP's gradient buffers are not activations either
            for buf in list(getattr(chunk, "buffers", [])) + list(getattr(chunk, "expert_parallel_buffers", [])):
                self._param_ptrs.add(buf.grad_data.untyped_storage().data_ptr())
        self._pending: dict[int, tuple[int, int]] = {}  # id(output) -> (chunk, microbatch)
        self._fifo: list[tuple[int, int]] = []

    def mark(self, kind: str, t0, t1, **extra) -> None:
        """t0/t1: stamps of `self.clock` (floats on CPU, CUDA events settled once per iteration)."""
        self.events.append(self.clock.keep({"rank": self.rank, "iteration": self.iteration, "kind": kind,
                                            "t0": t0, "t1": t1, **extra}))

    def install(self) -> "Timeline":
        from megatron.core.pipeline_parallel import schedules

        forward, backward = schedules.forward_step, schedules.backward_step
        tl = self

        def forward_step(*args, **kwargs):
            chunk = kwargs.get("vp_stage") or 0
            mb = kwargs.get("current_microbatch")
            saved = _SavedBytes(tl._param_ptrs)
            t0 = tl.clock.stamp()
            with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
                out = forward(*args, **kwargs)
            t1 = tl.clock.stamp()
            tl.mark("F", t0, t1, chunk=chunk, microbatch=mb, saved_bytes=saved.total)
            tl._pending[id(out[0])] = (chunk, mb)
            tl._fifo.append((chunk, mb))
            return out

        def backward_step(input_tensor, output_tensor, output_tensor_grad, config, *args, **kwargs):
            where = tl._pending.pop(id(output_tensor), None)
            if where is None and tl._fifo:
                where = tl._fifo[0]
            if where in tl._fifo:
                tl._fifo.remove(where)
            t0 = tl.clock.stamp()
            out = backward(input_tensor, output_tensor, output_tensor_grad, config, *args, **kwargs)
            t1 = tl.clock.stamp()
            chunk, mb = where or (0, None)
            tl.mark("B", t0, t1, chunk=chunk, microbatch=mb)
            return out

        schedules.forward_step, schedules.backward_step = forward_step, backward_step
        return self

    def max_saved_bytes(self) -> int:
        """Largest activation footprint of one microbatch forward on this rank (bytes)."""
        return max((e["saved_bytes"] for e in self.events if e["kind"] == "F"), default=0)
