"""Data parallel, the idea: the gradient buffer cut into buckets, each bucket reduced over the DP
group; with the distributed optimizer each rank owns 1/DP of every bucket, reduce-scatters into
it, steps its shard and all-gathers the parameters back. Notebook side only.

The buckets are Megatron's own: `bucket_layout` hands the model's parameter sizes (meta tensors,
no memory) to the same layout functions Megatron's DDP uses (parameters in reverse order, a bucket
closes once it holds `bucket_size` elements; with the distributed optimizer each parameter starts
on a 64-element boundary and each bucket is padded to a multiple of lcm(DP, 128)). A job without
overlap_grad_reduce (the CPU's default) runs one bucket; with it, buckets of ddp_bucket_size
(Megatron's default about 40M elements); a smaller `bucket_size` here shows what they cut. Bytes
per rank are the ring formulas of comm.wire_bytes."""
from __future__ import annotations

import math
import warnings

from helpers.rundir.reader import RunDir
from helpers.views.comm import wire_bytes


def params_of(run: RunDir, rank: int = 0) -> list[tuple[str, int]]:
    """(name, elements) of one rank's parameters, in model order."""
    return [(name, math.prod(p["shape"])) for name, p in run.ranks[rank]["param_shapes"].items()]


def bucket_layout(params: list[tuple[str, int]], dp: int, bucket_size: int | None = None,
                  dist_opt: bool = True) -> list[dict]:
    """[{start, end, unpadded, params}] per bucket, in buffer order (bucket 0 holds the last
    layers: their gradients are ready first in backward), from Megatron's layout code."""
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.distributed import DistributedDataParallelConfig
        from megatron.core.distributed.param_and_grad_buffer import (
            _compute_default_per_buffer_param_layout,
        )
        from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    tensors = [torch.nn.Parameter(torch.empty(n, device="meta")) for _, n in params]
    if dist_opt:
        layout = DistributedOptimizer._compute_per_buffer_param_layout(
            tensors, bucket_size, dp, DistributedDataParallelConfig(use_distributed_optimizer=True))
    else:
        layout = _compute_default_per_buffer_param_layout(tensors, bucket_size)
    names = {id(t): name for t, (name, _) in zip(tensors, params)}
    held = [[names[id(t)] for t, (_, _, b) in layout.param_index_map.items() if b == i]
            for i in range(len(layout.bucket_indices))]
    return [{"start": s, "end": e, "unpadded": u, "params": held[i]}
            for i, ((s, e), u) in enumerate(zip(layout.bucket_indices, layout.per_bucket_numel_unpadded))]


def bucket_traffic(elements: int, dp: int, dist_opt: bool, grad_elem: int = 4, param_elem: int = 4) -> dict[str, float]:
    """{op: bytes one rank sends} for one bucket of `elements`: DDP all-reduces the gradients;
    the distributed optimizer reduce-scatters them and all-gathers the updated parameters."""
    if dist_opt:
        return {"reduce_scatter_tensor": wire_bytes("reduce_scatter_tensor", elements * grad_elem, dp),
                "all_gather_into_tensor": wire_bytes("all_gather_into_tensor", elements * param_elem, dp)}
    return {"all_reduce": wire_bytes("all_reduce", elements * grad_elem, dp)}


WHOLE = {"grads": "#c6d7ec", "reduce": "#9bc59d", "gather": "#e8c9a0"}  # colour of a whole bucket per panel


def _label(nbytes: float) -> str:
    return f"{nbytes:,.0f} B"


def plot(params: list[tuple[str, int]], dp: int, bucket_size: int | None = None, dist_opt: bool = True,
         grad_elem: int = 4, param_elem: int = 4, title: str | None = None):
    """Three panels, one row per DP rank each: the gradient buffer after backward (every rank,
    whole), the reduction of each bucket (distributed optimizer: rank r keeps shard r of every
    bucket and steps only that; DDP: every rank gets the whole sum), and (distributed optimizer)
    the all-gather of the updated parameters. Above each bucket: the bytes one rank sends."""
    import matplotlib.pyplot as plt
    from matplotlib import colormaps

    buckets = bucket_layout(params, dp, bucket_size, dist_opt)
    total = buckets[-1]["end"]
    colours = [colormaps["tab10"](r % 10) for r in range(dp)]
    panels = ["grads", "reduce", "gather"] if dist_opt else ["grads", "reduce"]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, len(panels) * (0.32 * dp + 1.25) + 0.5), sharex=True)
    for ax, panel in zip(axes, panels):
        for r in range(dp):
            y = dp - 1 - r
            for b in buckets:
                size = b["end"] - b["start"]
                if panel == "reduce" and dist_opt:  # this rank keeps the summed shard r, not the rest
                    shard = size // dp  # Megatron pads each bucket so that DP divides it
                    ax.barh(y, size, left=b["start"], height=0.7, color="white", edgecolor="#999999",
                            linewidth=0.5, hatch="///")
                    ax.barh(y, shard, left=b["start"] + r * shard, height=0.7, color=colours[r],
                            edgecolor="black", linewidth=0.8)
                    if shard > total * 0.06:
                        ax.text(b["start"] + (r + 0.5) * shard, y, "step", ha="center", va="center",
                                fontsize=7, color="white")
                else:  # whole bucket: gradients after backward, DDP's all-reduced sum, gathered params
                    ax.barh(y, size, left=b["start"], height=0.7, color=WHOLE[panel], edgecolor="black",
                            linewidth=0.5)
        for i, b in enumerate(buckets):
            size = b["end"] - b["start"]
            traffic = bucket_traffic(size, dp, dist_opt, grad_elem, param_elem)
            if panel == "grads":
                text = f"bucket {i}\n{size:,} elements, {len(b['params'])} params"
            elif panel == "reduce":
                op = "reduce_scatter_tensor" if dist_opt else "all_reduce"
                text = ("reduce-scatter\n" if dist_opt else "all-reduce\n") + _label(traffic[op])
            else:
                text = "all-gather\n" + _label(traffic["all_gather_into_tensor"])
            ax.text(b["start"] + size / 2, dp - 0.35, text, ha="center", va="bottom", fontsize=8)
        ax.set_yticks(range(dp))
        ax.set_yticklabels([f"DP rank {r}" for r in reversed(range(dp))], fontsize=8)
        ax.set_ylim(-0.5, dp + 0.55)
        for spine in ("top", "right"):
            ax.spines[spine].set_visible(False)
    shard_note = f", rank r owns shard r (1/{dp}) of each bucket" if dist_opt else ""
    axes[0].set_title("1. after backward: every rank holds the whole gradient buffer, cut into buckets "
                      "(bucket 0 = the last layers: their gradients are ready first)", fontsize=9, loc="left")
    axes[1].set_title((f"2. reduce-scatter each bucket{shard_note}, then the optimizer steps only that shard "
                       "(bytes = one rank's send, ring: (n-1)/n)") if dist_opt else
                      "2. all-reduce each bucket: every rank gets the summed gradient (ring: 2(n-1)/n)",
                      fontsize=9, loc="left")
    if dist_opt:
        axes[2].set_title("3. all-gather the updated parameter shards: every rank has every parameter again",
                          fontsize=9, loc="left")
    axes[-1].set_xlabel(f"position in the buffer (elements; gradients {grad_elem} B, parameters {param_elem} B each)")
    axes[-1].set_xlim(0, total)
    fig.suptitle(title or f"DP={dp}, {'distributed optimizer' if dist_opt else 'DDP'}: {len(buckets)} bucket(s) "
                 f"of at most {bucket_size or total:,} elements", fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    return fig
