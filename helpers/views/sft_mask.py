"""Picture: one SFT example as the model sees it, token by token, the tokens the loss counts (an
assistant's answer, helpers/job/data/tokenizers.py `chat`) coloured, the rest (system prompt, user
turns, the chat template's markers) grey."""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

TRAINED, CONTEXT = "#8fd18f", "#e2e2e2"


def plot(pieces: list[str], trained: list[int], width: int = 100, title: str = "", ax=None):
    """`pieces[j]`: token j's text; `trained[j]`: 1 where the loss counts it. Rows wrap at `width`
    characters and at the text's own line breaks."""
    rows, row, used = [], [], 0
    for text, t in zip(pieces, trained, strict=True):
        shown = text.replace("\n", "⏎")
        if row and used + len(shown) > width:
            rows.append(row)
            row, used = [], 0
        row.append((shown, t))
        used += len(shown) + 1
        if "\n" in text:
            rows.append(row)
            row, used = [], 0
    if row:
        rows.append(row)
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 0.32 * len(rows) + 0.8))
    for y, items in enumerate(rows):
        x = 0
        for shown, t in items:
            ax.add_patch(Rectangle((x, -y - 0.8), len(shown) + 0.6, 0.7, color=TRAINED if t else CONTEXT))
            ax.text(x + 0.3, -y - 0.45, shown, va="center", fontsize=8, family="monospace")
            x += len(shown) + 1
    ax.set_xlim(0, width + 2)
    ax.set_ylim(-len(rows) - 0.2, 0.2)
    ax.axis("off")
    n = sum(trained)
    ax.set_title(title or f"{n} of {len(trained)} tokens trained on (green: the answers)", fontsize=10)
    return ax
