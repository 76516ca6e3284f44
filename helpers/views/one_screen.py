"""The picture of lesson 01: Megatron-Core's training loop as eight boxes, each with the call that
does it, the setup on the left and the per-iteration loop on the right."""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

SETUP = [
    ("process groups", "parallel_state.initialize_model_parallel(tp, pp, ...)"),
    ("model", "TransformerConfig(...) + GPTModel(config, layer_spec)"),
    ("data-parallel wrapper", "DistributedDataParallel(config, ddp_config, model)"),
    ("optimizer", "get_megatron_optimizer(OptimizerConfig(...), [model])"),
    ("schedule", "forward_backward = get_forward_backward_func()"),
]
LOOP = [
    ("zero gradients", "model.zero_grad_buffer(); optimizer.zero_grad()"),
    ("forward + backward, every microbatch", "forward_backward(...)  (ends: grads reduced across DP)"),
    ("optimizer step", "optimizer.step()  (clipped, Adam)"),
]


def plot_steps(ax=None):
    if ax is None:
        _, ax = plt.subplots(figsize=(11.5, 4.2))
    ax.set_xlim(0, 11.9)
    ax.set_ylim(0, 5.6)
    ax.axis("off")

    def box(x, y, w, title, call, color):
        ax.add_patch(FancyBboxPatch((x, y), w, 0.8, boxstyle="round,pad=0.05", fc=color, ec="0.3"))
        ax.text(x + 0.1, y + 0.55, title, fontsize=9, weight="bold", va="center")
        ax.text(x + 0.1, y + 0.22, call, fontsize=7.5, family="monospace", va="center")

    for i, (title, call) in enumerate(SETUP):
        y = 4.6 - i * 1.0
        box(0.1, y, 5.2, f"{i + 1}. {title}", call, "#dbe9f6")
        if i:
            ax.annotate("", (2.7, y + 0.86), (2.7, y + 1.0), arrowprops=dict(arrowstyle="-|>", color="0.4"))
    for i, (title, call) in enumerate(LOOP):
        y = 3.6 - i * 1.2
        box(5.8, y, 5.1, f"{len(SETUP) + i + 1}. {title}", call, "#fde2c8")
        if i:
            ax.annotate("", (8.3, y + 0.85), (8.3, y + 1.2), arrowprops=dict(arrowstyle="->", color="0.4"))
    ax.annotate("", (10.95, 4.0), (10.95, 1.6), arrowprops=dict(arrowstyle="->", color="0.4",
                                                                connectionstyle="arc3,rad=0.5"))
    ax.text(11.55, 2.8, "every\niteration", fontsize=8, ha="center", color="0.3")
    ax.annotate("", (5.75, 4.0), (5.35, 1.0), arrowprops=dict(arrowstyle="->", color="0.4"))
    ax.set_title("Megatron-Core's training loop: the setup once, then the loop (the calls are Megatron's)")
    return ax
