"""Heavy imports with Python's cyclic garbage collector paused, their objects then frozen: the
ranks' (runtime/train.py, runtime/hf/te_standin.py) and torchrun's agent's (launch/torchrun_main.py).
Here in job/, the package both sides import, because launch/ does not import runtime/; stdlib only.

Importing torch and Megatron-Core creates a few million objects that live until the process ends
(modules, classes, functions). The collector walks them again and again: every 700 new objects
the young ones, now and then all of them, during the import and for as long as the job runs,
and finds nothing to free. Paused during the import and `gc.freeze()`d after it (moved to the
permanent generation, which no collection visits), they cost nothing more. Measured on the 2-core
machine for torch + Megatron-Core + torch._dynamo, then 200k surviving allocations: 2.8-3.1 s of
CPU with the collector as usual, 2.1-2.3 s frozen. (Paused and *not* frozen is worse, 3.4 s: the
first collections afterwards walk all of them at once.) Objects made after the block are collected
as usual, so the job itself runs as before."""
from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def without_gc():
    """`with without_gc(): import ...`: the collector off for the block (if it was on), then
    everything alive frozen (gc.freeze) and the collector back as it was, even if the block raised."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # what the imports made lives until exit: no collection needs to look at it again
        if enabled:
            gc.enable()


@contextlib.contextmanager
def without_modelopt():
    """`with without_modelopt(): from megatron.training ... import ...`: nvidia-modelopt looks absent
    for the block. It is installed for Megatron-Bridge's checkpoint conversion (pyproject.toml), and
    Megatron-LM's `megatron.training` (its argument parser, its memory formula) imports it whenever
    it is there, for the quantised-model state of its checkpoints: 5-8 s of CPU, measured on the
    2-core machine (0.4 s for the same import without it), on rank 0 of every job that writes
    megatron-lm.sh. The kit never quantises; Megatron's own `try: import modelopt` takes its
    no-modelopt branch. Where modelopt is imported already, nothing changes."""
    import sys

    if "modelopt" in sys.modules:
        yield
        return
    sys.modules["modelopt"] = None  # Python's marker for "this import fails"
    try:
        yield
    finally:
        if sys.modules.get("modelopt", 0) is None:
            del sys.modules["modelopt"]
