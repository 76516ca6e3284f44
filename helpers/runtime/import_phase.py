"""Heavy imports with Python's cyclic garbage collector paused.

Importing torch and Megatron-Core creates a few million objects; every 700 new ones the collector
walks the young generation, and the older generations now and then, which finds nothing to free (modules, classes and functions live until the process ends): ~0.5 s of CPU per
process of the ~3.5 s a rank spends importing on the 2-core machine, where four ranks share two
cores. The collector is on again when the block ends, so the job itself runs as before
(reference counting frees everything else either way)."""
from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def without_gc():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
