"""SequenceParallelNorm replaces: Transformer Engine's norms (TENorm), which the local backend
lacks. Megatron's local `WrappedTorchNorm` refuses sequence parallel. Under SP each
TP rank normalises only its slice of the sequence, so the norm's weight gradient is partial on
every rank. Marking the parameters `sequence_parallel = True` is all it takes: Megatron's
`finalize_model_grads` then all-reduces those gradients across the TP group (as it does for TE's
norms). Without SP it is exactly torch's LayerNorm/RMSNorm.

ZeroCenteredRMSNorm replaces: TE's `zero_centered_gamma` (config.layernorm_zero_centered_gamma,
Gemma): the gain is 1 + weight, the weight starting at 0, computed in float32 as Gemma's own norm."""
from __future__ import annotations

import torch


class ZeroCenteredRMSNorm(torch.nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.zeros(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[-1],)
        return torch.nn.functional.rms_norm(x.float(), shape, 1.0 + self.weight.float(), self.eps).to(x.dtype)


class SequenceParallelNorm:
    def __new__(cls, config, hidden_size: int, eps: float = 1e-5, **_unused) -> torch.nn.Module:
        zero_centered = getattr(config, "layernorm_zero_centered_gamma", False)
        if config.normalization == "RMSNorm" and zero_centered:
            norm = ZeroCenteredRMSNorm(hidden_size, eps)
        elif config.normalization == "RMSNorm":
            norm = torch.nn.RMSNorm(hidden_size, eps=eps)
        elif config.normalization == "LayerNorm" and not zero_centered:
            norm = torch.nn.LayerNorm(hidden_size, eps=eps)
        else:
            raise ValueError(f"normalization {config.normalization!r} (zero-centred gain: {zero_centered}) is not "
                             "supported by the kit's norm")
        for p in norm.parameters():
            p.sequence_parallel = config.sequence_parallel
        norm.kit_substitute = "SequenceParallelNorm, for Transformer Engine's TENorm"  # megatron.json says so
        return norm
