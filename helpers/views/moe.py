"""Mixture of experts, notebook side: the routers' decisions (`moe.jsonl`, written by
helpers/runtime/measure/moe_stats.py), the token histogram, the load-balancing loss, and the token-dispatch
volume the all-to-all dispatcher must move (next to what comm.jsonl measured)."""
from __future__ import annotations

import json
from collections import defaultdict

from helpers.rundir import names
from helpers.rundir.reader import RunDir


def rows(run: RunDir) -> list[dict]:
    path = run.path / names.MOE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: not a MoE model, or the job ran without instruments "
                                "(instruments='off'; auto is off on cuda) or stopped before its last iteration; "
                                "run it with instruments='on'")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tokens_per_expert(run: RunDir, iteration: int = 1) -> dict[int, list[int]]:
    """{layer: global tokens sent to each expert} in one iteration: the sum over every rank that
    routes that layer (each routes its own slice of the batch/sequence)."""
    out: dict[int, list[int]] = {}
    for r in rows(run):
        if r["iteration"] == iteration:
            prev = out.get(r["layer"], [0] * len(r["tokens_per_expert"]))
            out[r["layer"]] = [a + b for a, b in zip(prev, r["tokens_per_expert"])]
    return out


def rank_tokens(run: RunDir, rank: int, iteration: int = 1) -> dict[int, list[int]]:
    """{layer: tokens this rank's router sent to each expert} (the rank's own slice of the batch)."""
    return {r["layer"]: r["tokens_per_expert"] for r in rows(run)
            if r["rank"] == rank and r["iteration"] == iteration}


def aux_loss(run: RunDir) -> dict[int, dict[int, float]]:
    """{iteration: {layer: load-balancing loss}} as Megatron's own report computes it: each
    TP*CP rank holds a partial, summed over its TP*CP group; then averaged over data-parallel
    replicas and microbatches (the tracker accumulates one value per microbatch)."""
    spec = run.spec
    total: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for r in rows(run):
        if r["aux_loss_partial"] is not None:
            total[r["iteration"]][r["layer"]] += r["aux_loss_partial"]
    per = spec.dp * spec.num_microbatches
    return {it: {layer: v / per for layer, v in sorted(d.items())} for it, d in sorted(total.items())}


def plot_histogram(run: RunDir, iteration: int = 1, title: str | None = None):
    """One bar chart per MoE layer: tokens each expert received; dashed line = perfect balance;
    colours = the EP rank that holds the expert."""
    import matplotlib.pyplot as plt
    from matplotlib import colormaps

    hist = tokens_per_expert(run, iteration)
    ep = run.spec.ep
    layers = sorted(hist)
    fig, axes = plt.subplots(1, len(layers), figsize=(3.2 * len(layers), 2.6), sharey=True, squeeze=False)
    for ax, layer in zip(axes[0], layers):
        counts = hist[layer]
        per_rank = len(counts) // ep
        colours = [colormaps["tab10"](e // per_rank % 10) for e in range(len(counts))]
        ax.bar(range(len(counts)), counts, color=colours)
        ax.axhline(sum(counts) / len(counts), color="black", linestyle="--", linewidth=1)
        ax.set_title(f"layer {layer}", fontsize=10)
        ax.set_xlabel("expert")
    axes[0][0].set_ylabel("tokens routed")
    fig.suptitle(title or f"tokens per expert, iteration {iteration} (colour = EP rank holding the expert; "
                 f"dashed = balanced)", fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    return fig


def expected_alltoall_bytes(run: RunDir, rank: int, iteration: int = 1) -> int:
    """Bytes entering `all_to_all_single` on one rank in one iteration, alltoall dispatcher, ETP=1.

    Per MoE layer and microbatch Megatron calls it three times forward and three times backward:
      forward:  dispatch tokens [T*k, H], dispatch probs [T*k], combine expert outputs [R, H]
      backward: gradients of the combine [T*k, H], of the probs [R], of the tokens [R, H]
    T = tokens this rank routes, k = top-k (dropless: every token reaches exactly k experts), H =
    hidden size, R = token copies this rank's experts receive (from the histogram: what every rank
    of its EP group sent to the experts this rank holds). So the sum is (2H + 1)(T*k + R) elements."""
    spec, model = run.spec, run.manifest["model"]
    if spec.ep == 1:
        return 0
    if spec.expert_tp != 1:
        raise ValueError("the formula covers ETP=1 (with ETP>1 the dispatcher also all-gathers over ETP)")
    hidden = model["hidden_size"]
    elem = 2 if spec.bf16 else 4
    ep_group = run.groups[rank]["ep"]
    mine = ep_group.index(rank)
    per_rank = model["num_experts"] // spec.ep
    experts = range(mine * per_rank, (mine + 1) * per_rank)
    sent, received = 0, 0
    for layer, counts in rank_tokens(run, rank, iteration).items():
        sent += sum(counts)  # = T * k * microbatches
        for peer in ep_group:
            received += sum(rank_tokens(run, peer, iteration)[layer][e] for e in experts)
    return (2 * hidden + 1) * (sent + received) * elem
