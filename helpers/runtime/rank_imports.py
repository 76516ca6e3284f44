"""The imports every CPU rank makes, made once per job instead of once per rank.

A CPU job's torchrun runs its ranks with `--start-method forkserver --run-path train.py`
(launch/torchrun.py): torch's elastic agent forks each rank from one forkserver process, and
launch/torchrun_main.py names this module as that server's preload. Importing it there means every
rank starts with torch, Megatron-Core (without torch.compile, as compat/cpu.py does on CPU) and the
kit's worker already imported: about 2.5 s of CPU per rank on a 2-core machine, paid once per job.
Nothing else happens here: no process group, no model, no file is opened, so the fork is as clean
as a new interpreter. GPU jobs keep one interpreter per rank (`-m helpers.runtime.train`), where
Megatron-Core binds torch.compile at import and CUDA must not be touched before the fork."""
from __future__ import annotations

from helpers.job import import_phase

with import_phase.without_gc():  # the collector paused, then everything frozen (job/import_phase.py)
    from helpers.runtime import train

    train.import_megatron("cpu")  # what each rank's train.main imports first
    import torch.distributed  # noqa: F401

    # what the worker's loop imports on first use
    from helpers.runtime import build, evaluation, preflight, setup, step  # noqa: F401
    from helpers.runtime.checkpoint import io, policy  # noqa: F401
    from helpers.runtime.data import batches  # noqa: F401
    from helpers.runtime.measure import faults, gather, observer  # noqa: F401
