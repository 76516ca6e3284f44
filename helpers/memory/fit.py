"""Before a GPU launch: does the memory plan fit the device? The runner warns (a plan can be
wrong, so it does not refuse) with the largest terms and the knobs that shrink them."""
from __future__ import annotations

import warnings

from helpers.errors import MemoryPlanWarning
from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.job.spec import JobSpec
from helpers.memory.plan import plan_memory
from helpers.memory.training import Training


def warn_if_over_device(spec: JobSpec, model: ModelPreset, device_bytes: int | None) -> str | None:
    """Before a GPU launch: warn (and return the message) when the plan's reserved peak exceeds the
    device's memory (`device_bytes`: GPU 0's, helpers/launch/environment.probe; None: no check)."""
    if device_bytes is None:
        return None
    plan = plan_memory(model, Layout.of(spec), Training.of(spec))
    if plan.fits(device_bytes):
        return None
    worst = max(plan.stages, key=lambda s: s.allocated_bytes)
    msg = (f"memory plan: {plan.reserved_bytes / 2**30:.1f} GiB per GPU on the {worst.label} pipeline stage "
           f"(peak allocated {worst.allocated_bytes / 2**30:.1f} GiB + allocator overhead) exceeds the device's "
           f"{device_bytes / 2**30:.1f} GiB; largest terms: "
           + ", ".join(f"{k} {v / 2**30:.1f} GiB" for k, v in sorted(worst.terms.items(), key=lambda x: -x[1])[:3])
           + ". Try a smaller micro batch or sequence, more TP/PP, sequence parallel, or the distributed optimizer.")
    warnings.warn(msg, MemoryPlanWarning, stacklevel=3)
    return msg
