"""Context parallel, notebook side: which tokens each CP rank holds, the causal attention work that
puts on each rank, the picture of both, and the communication CP adds (next to comm.jsonl).

Which tokens: asked of Megatron's own `get_batch_on_this_cp_rank` (the function the worker calls on
every microbatch), run here for each CP rank on a tensor of positions. It needs a CP group only for
its size and rank; `_as_cp_rank` answers those two questions without starting torch.distributed."""
from __future__ import annotations

import contextlib

import torch

from helpers.rundir.reader import RunDir


@contextlib.contextmanager
def _as_cp_rank(rank: int, cp: int):
    """torch.distributed's group size and rank answer `cp` and `rank` inside, and are put back on
    the way out: Megatron asks the module for them at call time, and a process group of the
    notebook's own, if any, is never touched."""
    dist = torch.distributed
    real = dist.get_world_size, dist.get_rank
    dist.get_world_size = lambda group=None: cp
    dist.get_rank = lambda group=None: rank
    try:
        yield
    finally:
        dist.get_world_size, dist.get_rank = real


def positions(seq_len: int, cp: int) -> dict[int, list[int]]:
    """{cp rank: sequence positions it holds}, from Megatron's load-balanced split."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.utils import get_batch_on_this_cp_rank
    out = {}
    for r in range(cp):
        batch = {"position_ids": torch.arange(seq_len)[None, :]}
        with _as_cp_rank(r, cp):
            got = get_batch_on_this_cp_rank(batch, is_hybrid_cp=False, cp_group=object())
        out[r] = got["position_ids"][0].tolist()
    return out


def naive_positions(seq_len: int, cp: int) -> dict[int, list[int]]:
    """Contiguous split: rank r holds the r-th block (what CP would do without load balancing)."""
    n = seq_len // cp
    return {r: list(range(r * n, (r + 1) * n)) for r in range(cp)}


def causal_work(held: dict[int, list[int]]) -> dict[int, int]:
    """Query-key pairs each rank computes under a causal mask: a query at position p sees p+1 keys."""
    return {r: sum(p + 1 for p in pos) for r, pos in held.items()}


def plot_split(seq_len: int, cp: int):
    """Left: which rank holds each token (load-balanced vs contiguous). Right: causal work per rank."""
    import matplotlib.pyplot as plt
    from matplotlib import colormaps

    colours = [colormaps["tab10"](i) for i in range(10)]
    splits = {"load-balanced (Megatron)": positions(seq_len, cp), "contiguous (naive)": naive_positions(seq_len, cp)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 2.6), gridspec_kw={"width_ratios": [3, 1.3]})
    for row, (name, held) in enumerate(splits.items()):
        for r, pos in held.items():
            for p in pos:
                left.add_patch(plt.Rectangle((p, row), 0.95, 0.8, color=colours[r % 10]))
        left.text(-0.5, row + 0.4, name, ha="right", va="center", fontsize=9)
    for r in range(cp):
        left.add_patch(plt.Rectangle((0, 0), 0, 0, color=colours[r % 10], label=f"CP rank {r}"))
    left.set_xlim(-0.5, seq_len + 0.5)
    left.set_ylim(2, -0.2)
    left.set_yticks([])
    left.set_xlabel("token position in the sequence")
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=min(cp, 8), fontsize=8, frameon=False)
    left.set_title(f"who holds which token: seq_len={seq_len}, CP={cp} ({2 * cp} chunks of {seq_len // (2 * cp)})",
                   fontsize=10, loc="left")
    width = 0.38
    for i, (name, held) in enumerate(splits.items()):
        work = causal_work(held)
        right.bar([r + (i - 0.5) * width for r in work], list(work.values()), width,
                  label=name.split(" ")[0], color=["#4c72b0", "#dd8452"][i])
    right.set_xticks(range(cp))
    right.set_xlabel("CP rank")
    right.set_ylabel("query-key pairs")
    right.set_title("causal attention work", fontsize=10, loc="left")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def kv_bytes(run: RunDir) -> int:
    """The gathered (full-sequence) K or V of one layer and microbatch on one TP rank:
    seq_len x micro_batch x (query groups / TP) x head dim x element size."""
    spec, model = run.spec, run.manifest["model"]
    elem = 2 if spec.bf16 else 4
    head_dim = model["kv_channels"] or model["hidden_size"] // model["num_attention_heads"]
    groups = model["num_query_groups"] or model["num_attention_heads"]
    return spec.seq_len * spec.micro_batch * (groups // spec.tp) * head_dim * elem


def expected_cp(run: RunDir, layers: int | None = None, last_stage: bool = True) -> dict[str, tuple[int, int]]:
    """{op: (calls, bytes per call)} one rank makes on the CP group per iteration: per layer and
    microbatch, forward all-gathers K and V (2 calls), backward reduce-scatters their gradients (2);
    on the last pipeline stage the loss function also all-reduces the microbatch's token count (one
    fp32 number), so each rank's loss is its token-loss sum over the whole sequence's token count."""
    spec = run.spec
    layers = layers if layers is not None else run.manifest["model"]["num_layers"] // spec.pp
    m = spec.num_microbatches
    out = {"all_gather_into_tensor": (2 * layers * m, kv_bytes(run)),
           "reduce_scatter_tensor": (2 * layers * m, kv_bytes(run))}
    if last_stage:
        out["all_reduce"] = (m, 4)
    return out
