"""A Mamba-2 layer, the idea, drawn from the kit's own SSD code (helpers/runtime/layers/mamba/ssd.py) on a
toy head: the causal convolution's window, and the scan written as the matrix it multiplies the
input by. For one head, y = M x with M[i, j] = (C_i . B_j) * exp(a_{j+1} + ... + a_i) * dt_j for
j <= i (a_t = dt_t * A: the log of the state's decay per step) and 0 above the diagonal: a causal
"attention" matrix whose weights decay with distance. The chunked scan computes the diagonal
blocks (inside a chunk) as that matrix, and every block below them through the n x p state that
one chunk hands to the next. Also the per-stage table of a hybrid pattern under PP. Notebook side."""
from __future__ import annotations

import torch


def toy_head(length: int = 24, state: int = 4, seed: int = 0) -> dict:
    """One head (head_dim 1), float64: x, dt, A, B, C as ssd_scan takes them."""
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(1, length, 1, 1, generator=g, dtype=torch.float64),
                dt=torch.nn.functional.softplus(torch.randn(1, length, 1, generator=g, dtype=torch.float64)),
                A=torch.tensor([-0.4], dtype=torch.float64),
                B=torch.randn(1, length, 1, state, generator=g, dtype=torch.float64),
                C=torch.randn(1, length, 1, state, generator=g, dtype=torch.float64))


def ssd_matrix(head: dict) -> torch.Tensor:
    """M [l, l] of one toy head, such that y = M x equals ssd_scan's output."""
    a = (head["dt"][0, :, 0] * head["A"][0])
    cum = torch.cumsum(a, 0)
    decay = torch.exp(cum[:, None] - cum[None, :]).tril()
    cb = head["C"][0, :, 0] @ head["B"][0, :, 0].T
    return cb * decay * head["dt"][0, :, 0][None, :]


def plot(head: dict, chunk: int = 8, conv_width: int = 4):
    """Left: which inputs each output of the depthwise causal conv sees. Right: |M| (log scale)
    with the chunks outlined."""
    import matplotlib.pyplot as plt
    import numpy as np

    length = head["x"].shape[1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [1, 1.25]})
    window = np.array([[1.0 if 0 <= i - j < conv_width else 0.0 for j in range(12)] for i in range(12)])
    left.imshow(window, cmap="Blues", vmin=0, vmax=1.4)
    left.set(title=f"causal conv1d, width {conv_width}: output t sees t-{conv_width - 1}..t",
             xlabel="input position", ylabel="output position")
    m = ssd_matrix(head).abs().numpy()
    shown = np.where(m > 0, np.log10(m + 1e-12), np.nan)
    im = right.imshow(shown, cmap="viridis")
    for edge in range(chunk, length, chunk):
        right.axhline(edge - 0.5, color="white", lw=1.2)
        right.axvline(edge - 0.5, color="white", lw=1.2)
    right.text(1, length - 2, "below the diagonal blocks:\nthrough the n x p state", color="white", fontsize=8)
    right.set(title=f"the scan as a matrix, y = M x (chunks of {chunk})", xlabel="input j", ylabel="output i")
    fig.colorbar(im, ax=right, label="log10 |M[i, j]|", shrink=0.8)
    fig.tight_layout()
    return fig


def stage_rows(model, layouts: dict) -> list[dict]:
    """Per layout and stage: the stage's slice of the pattern, layer kinds, parameters per rank."""
    from helpers.memory.static import stage_patterns, static_memory
    from helpers.memory.training import Training

    rows = []
    for name, lay in layouts.items():
        for stage, pattern in enumerate(stage_patterns(model, lay)):
            rows.append(dict(layout=name, stage=stage, layers=len(pattern), mamba=pattern.count("M"),
                             attention=pattern.count("*"), moe=pattern.count("E"), mlp=pattern.count("-"),
                             params_per_rank=static_memory(model, lay, Training(), stage).params,
                             pattern=pattern))
    return rows
