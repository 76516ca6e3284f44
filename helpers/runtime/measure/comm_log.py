"""Records every torch.distributed collective and point-to-point operation this rank runs while
training: op name, the group (as global ranks and as the parallel axis it belongs to), bytes and
dtype. Worker side only; the notebook reads the result from `comm.jsonl` (helpers.views.comm).

How: the public functions of `torch.distributed` are replaced by thin recording wrappers. Megatron
looks most of them up at call time (`torch.distributed.all_reduce(...)`), but a few modules keep
module-level aliases made at import (`dist_all_gather_func = torch.distributed.all_gather_into_tensor`
in tensor_parallel/mappings.py and distributed/param_and_grad_buffer.py); every loaded module's
attribute that *is* one of the original functions is swapped too. `P2POp` checks that its op *is*
torch's own isend/irecv, so it is replaced by a subclass that hands the originals over.

`bytes` is the size of the whole buffer the operation works on (the unsharded tensor for
reduce-scatter and all-gather), so formulas read naturally; what crosses the wire per rank follows
from the algorithm (ring all-reduce: 2(n-1)/n of it; reduce-scatter/all-gather: (n-1)/n)."""
from __future__ import annotations

import contextlib
import sys

import torch
import torch.distributed as dist

from helpers.runtime.measure.clock import Clock

# name -> how to find the buffer whose size is reported (positional index, keyword)
_COLLECTIVES = {
    "all_reduce": (0, "tensor"),
    "broadcast": (0, "tensor"),
    "reduce": (0, "tensor"),
    "all_gather_into_tensor": (0, "output_tensor"),  # the gathered (full) tensor
    "_all_gather_base": (0, "output_tensor"),
    "reduce_scatter_tensor": (1, "input"),  # the full tensor before scattering
    "_reduce_scatter_base": (1, "input"),
    "all_gather": (0, "tensor_list"),
    "reduce_scatter": (1, "input_list"),
    "all_to_all_single": (1, "input"),
    "all_to_all": (1, "input_tensor_list"),
    "gather": (0, "tensor"),
    "scatter": (0, "tensor"),
    "barrier": (None, None),
}
_P2P = {"isend": (0, "tensor"), "irecv": (0, "tensor"), "send": (0, "tensor"), "recv": (0, "tensor")}
# Axes in the order a group object is attributed to when several getters return the same object.
_AXIS_GETTERS = ["tp", "cp", "dp", "dp_cp", "pp", "ep", "etp", "edp", "mp", "embedding"]


def _nbytes(x) -> int:
    if torch.is_tensor(x):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


def _dtype(x) -> str | None:
    if torch.is_tensor(x):
        return str(x.dtype).replace("torch.", "")
    if isinstance(x, (list, tuple)) and x:
        return _dtype(x[0])
    return None


def _arg(args, kwargs, where):
    pos, key = where
    if key in kwargs:
        return kwargs[key]
    return args[pos] if pos is not None and len(args) > pos else None


class _TimedWork:
    """Wraps an async Work handle so that the time spent waiting on it is recorded."""

    def __init__(self, work, log: "CommLog", record: dict):
        self._work, self._log, self._record = work, log, record

    def wait(self, *args, **kwargs):
        t0 = self._log.clock.stamp()
        out = self._work.wait(*args, **kwargs)
        self._log._event("wait", self._record, t0, self._log.clock.stamp())
        return out

    def __getattr__(self, name):
        return getattr(self._work, name)


_CURRENT: "CommLog | None" = None  # the rank's log, for in_flight()


def in_flight() -> dict | None:
    """The collective this rank is inside right now (op, axis, group, bytes, iteration), or None:
    what a rank that fails in a collective (a timeout, a lost peer) writes into its error file."""
    log = _CURRENT
    rec = log and log.in_flight
    return {k: rec[k] for k in ("op", "axis", "group", "bytes", "iteration", "phase") if k in rec} if rec else None


class CommLog:
    """Install once (after the model is built, so Megatron's modules are imported); records only
    between `begin()` and `end()`, and never inside `paused()`."""

    def __init__(self, rank: int, clock: Clock | None = None):
        global _CURRENT
        _CURRENT = self
        self.in_flight: dict | None = None  # the record of a synchronous call that has not returned
        self.rank = rank
        self.records: list[dict] = []
        self.events: list[dict] = []  # timeline events: synchronous calls and waits, with times
        self.iteration = 0
        self.phase = None
        self._active = False
        self.clock = clock or Clock(cuda=False)  # stamps: floats on CPU, CUDA events on GPU (clock.py)
        self._originals: dict[str, object] = {}
        self._axis_of_group: dict[int, str] = {}
        self._ranks_of_axis: dict[str, list[int]] = {}

    # ---- recording window ----------------------------------------------------------
    def begin(self, iteration: int, phase: str = "forward_backward") -> None:
        self.iteration, self.phase, self._active = iteration, phase, True

    def end(self) -> None:
        self._active = False

    @contextlib.contextmanager
    def paused(self):
        was, self._active = self._active, False
        try:
            yield
        finally:
            self._active = was

    # ---- installation --------------------------------------------------------------
    def install(self) -> "CommLog":
        self._map_groups()
        wrappers = {}
        for name, where in {**_COLLECTIVES, **_P2P}.items():
            original = getattr(dist, name, None)
            if original is None:
                continue
            self._originals[name] = original
            wrappers[id(original)] = self._wrap(name, original, where, p2p=name in _P2P)
            setattr(dist, name, wrappers[id(original)])
        original_batch = dist.batch_isend_irecv
        self._originals["batch_isend_irecv"] = original_batch
        dist.batch_isend_irecv = self._wrap_batch(original_batch)
        wrappers[id(original_batch)] = dist.batch_isend_irecv
        dist.P2POp = _p2p_op_class({id(w): self._originals[n] for n, w in
                                    ((n, getattr(dist, n)) for n in ("isend", "irecv"))})
        # Module-level aliases made at import time (e.g. dist_all_gather_func in mappings.py).
        for mod in list(sys.modules.values()):
            if mod is None or not getattr(mod, "__name__", "").startswith("megatron"):
                continue
            for attr, value in list(vars(mod).items()):
                if callable(value) and id(value) in wrappers and value is not wrappers[id(value)]:
                    setattr(mod, attr, wrappers[id(value)])
        return self

    def _map_groups(self) -> None:
        """Group object -> parallel axis, asking parallel_state for each axis's group."""
        from megatron.core import parallel_state as ps

        getters = {
            "tp": ps.get_tensor_model_parallel_group, "cp": ps.get_context_parallel_group,
            "dp": lambda: ps.get_data_parallel_group(with_context_parallel=False),
            "dp_cp": lambda: ps.get_data_parallel_group(with_context_parallel=True),
            "pp": ps.get_pipeline_model_parallel_group, "ep": ps.get_expert_model_parallel_group,
            "etp": ps.get_expert_tensor_parallel_group, "edp": ps.get_expert_data_parallel_group,
            "mp": ps.get_model_parallel_group, "embedding": ps.get_embedding_group,
        }
        for axis in reversed(_AXIS_GETTERS):  # earlier axes win when objects coincide
            try:
                group = getters[axis]()
            except (AssertionError, RuntimeError):
                continue
            if group is not None:
                self._axis_of_group[id(group)] = axis
                self._ranks_of_axis.setdefault(axis, dist.get_process_group_ranks(group))
        # With CP=1 the DP and DP x CP groups are distinct objects with the same ranks: call both DP.
        if self._ranks_of_axis.get("dp") == self._ranks_of_axis.get("dp_cp"):
            self._axis_of_group = {k: "dp" if v == "dp_cp" else v for k, v in self._axis_of_group.items()}

    def _group_info(self, group) -> tuple[str, list[int]]:
        if group is None or group is dist.group.WORLD:
            return "world", list(range(dist.get_world_size()))
        ranks = dist.get_process_group_ranks(group)
        axis = self._axis_of_group.get(id(group))
        if axis is None:  # a group of Megatron's own making (e.g. the distributed optimizer's): by ranks
            axis = next((a for a in _AXIS_GETTERS if self._ranks_of_axis.get(a) == ranks), "other")
        return axis, ranks

    # ---- wrappers ------------------------------------------------------------------
    def _record(self, op: str, tensor, group, peer=None, is_async=False) -> dict:
        axis, ranks = self._group_info(group)
        if peer is not None:  # point-to-point is the pipeline's traffic, whatever group carries it
            axis, ranks = "pp", sorted({self.rank, int(peer)})
        rec = {"rank": self.rank, "iteration": self.iteration, "phase": self.phase, "op": op,
               "axis": axis, "group": ranks, "bytes": _nbytes(tensor), "dtype": _dtype(tensor),
               "async": bool(is_async)}
        if peer is not None:
            rec["peer"] = int(peer)
        self.records.append(rec)
        return rec

    def _event(self, kind: str, rec: dict, t0, t1) -> None:
        self.events.append(self.clock.keep({"rank": self.rank, "iteration": rec["iteration"], "kind": kind,
                                            "op": rec["op"], "axis": rec["axis"], "bytes": rec["bytes"],
                                            "t0": t0, "t1": t1}))

    def _wrap(self, name, original, where, p2p: bool):
        log = self

        def wrapper(*args, **kwargs):
            if not log._active:
                return original(*args, **kwargs)
            tensor = _arg(args, kwargs, where)
            group = kwargs.get("group")
            if group is None and not p2p and len(args) > 2 and name in ("all_reduce", "all_gather_into_tensor",
                                                                         "reduce_scatter_tensor"):
                group = args[2] if not isinstance(args[2], bool) else None
            peer = None
            if p2p:
                peer = kwargs.get("dst", kwargs.get("src", args[1] if len(args) > 1 else None))
            is_async = bool(kwargs.get("async_op", False)) or name in ("isend", "irecv")
            rec = log._record(name, tensor, group, peer=peer, is_async=is_async)
            t0 = log.clock.stamp()
            log.in_flight = rec
            out = original(*args, **kwargs)
            log.in_flight = None
            if is_async and out is not None:
                return _TimedWork(out, log, rec)
            log._event("call", rec, t0, log.clock.stamp())
            return out

        wrapper.__name__ = name
        wrapper.__wrapped__ = original
        return wrapper

    def _wrap_batch(self, original):
        log = self

        def batch_isend_irecv(p2p_op_list):
            if not log._active:
                return original(p2p_op_list)
            recs = [log._record(op.op.__name__, op.tensor, op.group, peer=op.peer, is_async=True)
                    for op in p2p_op_list]
            works = original(p2p_op_list)
            return [_TimedWork(w, log, r) for w, r in zip(works, recs)]

        batch_isend_irecv.__wrapped__ = original
        return batch_isend_irecv


def _p2p_op_class(originals: dict[int, object]):
    """A P2POp that accepts the recording isend/irecv and stores torch's own (P2POp checks `is`)."""

    class P2POp(dist.distributed_c10d.P2POp):
        def __new__(cls, op, *args, **kwargs):
            return super().__new__(cls, originals.get(id(op), op), *args, **kwargs)

        def __init__(self, op, *args, **kwargs):
            super().__init__(originals.get(id(op), op), *args, **kwargs)

    return P2POp
