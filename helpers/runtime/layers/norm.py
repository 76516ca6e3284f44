"""SequenceParallelNorm replaces: Transformer Engine's norms (TENorm), which the local backend
lacks. Megatron's local `WrappedTorchNorm` refuses sequence parallel. Under SP each
TP rank normalises only its slice of the sequence, so the norm's weight gradient is partial on
every rank. Marking the parameters `sequence_parallel = True` is all it takes: Megatron's
`finalize_model_grads` then all-reduces those gradients across the TP group (as it does for TE's
norms). Without SP it is exactly torch's LayerNorm/RMSNorm."""
from __future__ import annotations

import torch


class SequenceParallelNorm:
    def __new__(cls, config, hidden_size: int, eps: float = 1e-5, **_unused) -> torch.nn.Module:
        if config.normalization == "RMSNorm":
            norm = torch.nn.RMSNorm(hidden_size, eps=eps)
        elif config.normalization == "LayerNorm":
            norm = torch.nn.LayerNorm(hidden_size, eps=eps)
        else:
            raise ValueError(f"normalization {config.normalization!r} is not supported by the kit's norm")
        for p in norm.parameters():
            p.sequence_parallel = config.sequence_parallel
        return norm
