"""The picture of lesson 01: Megatron-Core's training loop as ten boxes, each with the call that
does it: the setup on the left, the per-iteration loop on the right, and below it what follows the
loop (the held-out loss and the checkpoint)."""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

SETUP = [
    ("process groups", "parallel_state.initialize_model_parallel(tp, pp, ...)"),
    ("model (2b. --load: its weights, saved at any layout)",
     "gpt = GPTModel(config, spec); 2b. dist_checkpointing.load"),
    ("data-parallel wrapper", "model = DistributedDataParallel(config, ddp_config, gpt)"),
    ("optimizer", "get_megatron_optimizer(OptimizerConfig(...), [model])"),
    ("schedule", "forward_backward = get_forward_backward_func()"),
]
LOOP = [
    ("zero gradients", "model.zero_grad_buffer(); optimizer.zero_grad()"),
    ("forward + backward, this DP rank's microbatches", "forward_backward(...)  (ends: grads reduced across DP)"),
    ("optimizer step", "optimizer.step()  (clipped, Adam)"),
]
AFTER = [
    ("held-out loss, forward only", "forward_backward(..., forward_only=True)"),
    ("checkpoint (--save)", "dist_checkpointing.save(gpt.sharded_state_dict(), dir)"),
]


def plot_steps(ax=None):
    if ax is None:
        _, ax = plt.subplots(figsize=(11.5, 5.0))
    ax.set_xlim(0, 11.9)
    ax.set_ylim(0.0, 5.6)
    ax.axis("off")

    def box(x, y, w, title, call, color):
        ax.add_patch(FancyBboxPatch((x, y), w, 0.8, boxstyle="round,pad=0.05", fc=color, ec="0.3"))
        ax.text(x + 0.1, y + 0.55, title, fontsize=9, weight="bold", va="center")
        ax.text(x + 0.1, y + 0.22, call, fontsize=7.5, family="monospace", va="center")

    def arrow(x, y_from, y_to):
        ax.annotate("", (x, y_to), (x, y_from), arrowprops=dict(arrowstyle="-|>", color="0.4"))

    for i, (title, call) in enumerate(SETUP):
        y = 4.6 - i * 1.0
        box(0.1, y, 5.2, f"{i + 1}. {title}", call, "#dbe9f6")
        if i:
            arrow(2.7, y + 1.0, y + 0.86)
    for i, (title, call) in enumerate(LOOP):
        y = 4.6 - i * 1.0
        box(5.8, y, 5.1, f"{len(SETUP) + i + 1}. {title}", call, "#fde2c8")
        if i:
            arrow(8.3, y + 1.0, y + 0.86)
    ax.annotate("", (10.95, 5.0), (10.95, 3.0), arrowprops=dict(arrowstyle="->", color="0.4",
                                                                connectionstyle="arc3,rad=0.5"))
    ax.text(11.55, 4.0, "every\niteration", fontsize=8, ha="center", color="0.3")
    ax.annotate("", (5.75, 5.0), (5.35, 1.0), arrowprops=dict(arrowstyle="->", color="0.4"))
    ax.text(8.45, 2.33, "after the last iteration", fontsize=8, color="0.3", va="center")
    for i, (title, call) in enumerate(AFTER):
        y = 1.2 - i * 1.0
        box(5.8, y, 5.1, f"{len(SETUP) + len(LOOP) + i + 1}. {title}", call, "#dcefd9")
        arrow(8.3, y + 1.4 if i == 0 else y + 1.0, y + 0.86)
    ax.set_title("Megatron-Core's training loop: the setup once, the loop, then evaluate and save "
                 "(the calls are Megatron's)")
    return ax
