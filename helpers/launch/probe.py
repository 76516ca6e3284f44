"""A live job's process groups against the prediction: every rank of a job records the groups
Megatron-Core's `initialize_model_parallel` built (groups.json, `RunDir.groups`), and `mismatches`
lists where they differ from `Layout.rank_groups()`. A job with JobSpec.groups_only stops right
after building them (no model, no data): the cheap way to check a layout's groups."""
from __future__ import annotations

from helpers.job.layout import Layout


def mismatches(layout: Layout, live: dict[int, dict]) -> list[str]:
    """Where a live job's groups (RunDir.groups) differ from Layout.rank_groups(); [] = identical.
    An axis the rank does not take part in (embedding on a middle pipeline stage) is absent on
    both sides."""
    out = []
    if sorted(live) != list(range(layout.world_size)):
        out.append(f"live ranks {sorted(live)} != 0..{layout.world_size - 1}")
    for rank, axes in sorted(live.items()):
        predicted = layout.groups_of(rank)
        for axis in sorted(set(predicted) | set(axes)):
            if predicted.get(axis) != axes.get(axis):
                out.append(f"rank {rank} {axis}: predicted {predicted.get(axis)}, live {axes.get(axis)}")
    return out
