"""Embeddings scaled by sqrt(hidden size) (Gemma). Replaces: Megatron-Bridge's
EmbeddingScalingMixin, which its Gemma providers mix into the embedding in `provide()`, a path the
kit does not take (it builds the GPTModel itself: helpers/runtime/build.py). As Gemma's own
embedding, the factor is cast to the embedding's dtype before the product."""
from __future__ import annotations

import torch


def use_in(chunk, hidden_size: int) -> None:
    """Scale the embedding output of a first-stage chunk, in place (the parameter names stay)."""
    if getattr(chunk, "pre_process", False):
        embedding = chunk.embedding
        original = embedding.forward

        def forward(*args, **kwargs):
            out = original(*args, **kwargs)
            return out * torch.tensor(hidden_size ** 0.5, dtype=out.dtype, device=out.device)
        embedding.forward = forward
