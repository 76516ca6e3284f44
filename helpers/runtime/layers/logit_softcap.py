"""Final-logit soft-capping (Gemma 2): logits -> cap * tanh(logits / cap) on the last stage's
output layer. Replaces: Megatron-Bridge's Gemma2OutputLayer, mixed in by its provider's
`provide()`, a path the kit does not take. Elementwise, so a TP rank caps its vocabulary slice."""
from __future__ import annotations

import torch


def use_in(chunk, cap: float) -> None:
    if not getattr(chunk, "post_process", False):
        return
    layer = chunk.output_layer
    original = layer.forward

    def forward(*args, **kwargs):
        logits, bias = original(*args, **kwargs)
        return cap * torch.tanh(logits / cap), bias
    layer.forward = forward
