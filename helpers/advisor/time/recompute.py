"""Activation recompute's extra work, run in the backward of each layer: `full` runs the layer's
whole forward again (its GEMMs, attention, elementwise kernels and its forward collectives: TP, CP,
EP), `selective` only the attention core (Megatron's core_attn recompute), `none` nothing. Memory
saved is the planner's (helpers/memory/activations.py)."""
from __future__ import annotations


def extra_seconds(recompute: str, layer_forward_s: float, attention_forward_s: float) -> float:
    if recompute == "full":
        return layer_forward_s
    if recompute == "selective":
        return attention_forward_s
    if recompute == "none":
        return 0.0
    raise ValueError(f"recompute must be none, selective or full, not {recompute!r}")
