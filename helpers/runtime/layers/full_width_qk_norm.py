"""FullWidthQNorm / FullWidthKNorm replace: Megatron-Bridge's OLMoESelfAttention (a TE layer spec,
its norms sized for TP=1). OLMoE (and MiniMax-M2) normalise the query and the key projection over
all heads at once, not per head: RMSNorm over heads x head_dim, one weight of that width.

Megatron's SelfAttention applies `q_layernorm` / `k_layernorm` to [s, b, heads, head_dim] per
rank, so these take that tensor and normalise over its last two dims. Under TP a rank holds its
heads only: the sum of squares is all-reduced over TP (forward, and backward: every rank's output
depends on it). The weight is kept whole on every rank (Megatron-Bridge loads it replicated:
registry.py registers these class names so) and each rank multiplies by its heads' slice. Why
whole: Megatron's finalize_model_grads sums the gradient of every `q_layernorm`/`k_layernorm`
parameter over TP (right for per-head norms, whose weight every rank shares); a rank's gradient is
zero outside its slice, so that sum is exactly the whole gradient, on every rank."""
from __future__ import annotations

import torch


def _tp_sum(x: torch.Tensor) -> torch.Tensor:
    """All-reduce over TP in the forward and in the backward."""
    from megatron.core.tensor_parallel.mappings import (
        copy_to_tensor_model_parallel_region,
        reduce_from_tensor_model_parallel_region,
    )
    return reduce_from_tensor_model_parallel_region(copy_to_tensor_model_parallel_region(x))


class _FullWidthRMSNorm(torch.nn.Module):
    heads_field = ""  # the config field with the (global) head count this norm spans

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **_unused):
        super().__init__()
        from megatron.core import parallel_state as ps

        self.tp = ps.get_tensor_model_parallel_world_size()
        heads = getattr(config, self.heads_field) or config.num_attention_heads
        if config.normalization != "RMSNorm" or heads % self.tp:
            raise ValueError(f"a full-width qk-norm needs RMSNorm and {self.heads_field} ({heads}) divisible by TP "
                             f"({self.tp})")
        self.rank = ps.get_tensor_model_parallel_rank() if self.tp > 1 else 0
        self.width = heads * hidden_size  # hidden_size: the head dim Megatron passes
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(self.width, dtype=config.params_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [s, b, local heads, head_dim] -> the same, normalised over every head of the token."""
        squares = x.float().pow(2).sum(dim=(-2, -1), keepdim=True)
        if self.tp > 1:
            squares = _tp_sum(squares)
        y = x.float() * torch.rsqrt(squares / self.width + self.eps)
        heads = x.shape[-2]
        mine = self.weight.view(-1, x.shape[-1])[self.rank * heads:(self.rank + 1) * heads]  # this rank's heads
        return (y * mine.float()).to(x.dtype)


class FullWidthQNorm(_FullWidthRMSNorm):
    heads_field = "num_attention_heads"


class FullWidthKNorm(_FullWidthRMSNorm):
    heads_field = "num_query_groups"
