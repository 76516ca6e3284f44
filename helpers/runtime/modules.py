"""The kit's own small modules for the no-Transformer-Engine path, each used through Megatron's
layer spec (so the rest of the model is Megatron-Core's code).

SequenceParallelNorm: Megatron's local `WrappedTorchNorm` refuses sequence parallel. Under SP each
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


class ContextParallelAttention(torch.nn.Module):
    """Causal core attention for context parallel (CP > 1) without Transformer Engine.

    Megatron's local `DotProductAttention` refuses CP > 1. Under CP each rank holds two chunks of
    the sequence (chunks r and 2*CP-1-r, Megatron's causal load balancing), so its queries need
    keys/values from everywhere before them. This module **all-gathers K and V** over the CP group
    (Megatron's own `gather_from_sequence_parallel_region`: all-gather forward, reduce-scatter of
    the K/V gradients backward), then computes masked softmax attention for the local queries
    against the global positions. Why all-gather, not a p2p ring: it is the simplest exact method
    and easy to read; a ring (what TE's `p2p` mode does) overlaps each K/V transfer with compute,
    which pays off only on GPUs with long sequences. Memory for K/V is then O(full sequence) per
    rank; queries, scores and everything outside attention stay split by CP."""

    def __init__(self, config, layer_number, attn_mask_type, attention_type=None, cp_comm_type=None,
                 softmax_scale=None, pg_collection=None, **_unused):
        super().__init__()
        from megatron.core import parallel_state as ps
        from megatron.core.transformer.enums import AttnMaskType

        if attn_mask_type != AttnMaskType.causal:
            raise ValueError("the kit's context-parallel attention supports causal masks only")
        tp = ps.get_tensor_model_parallel_world_size()
        self.cp_group = getattr(pg_collection, "cp", None) or ps.get_context_parallel_group()
        self.heads = config.num_attention_heads // tp
        self.kv_heads = config.num_query_groups // tp
        self.scale = softmax_scale or config.kv_channels ** -0.5

    def _positions(self, rank: int, cp: int, chunk: int, device) -> torch.Tensor:
        """Global sequence positions of the rows a CP rank holds (its two load-balanced chunks)."""
        first = torch.arange(rank * chunk, (rank + 1) * chunk, device=device)
        second = torch.arange((2 * cp - 1 - rank) * chunk, (2 * cp - rank) * chunk, device=device)
        return torch.cat([first, second])

    def forward(self, query, key, value, attention_mask=None, attn_mask_type=None,
                attention_bias=None, packed_seq_params=None):
        from megatron.core.tensor_parallel.mappings import (
            gather_from_sequence_parallel_region,
        )

        # query: [s_local, b, heads, d]; key/value: [s_local, b, kv_heads, d]
        cp, rank = self.cp_group.size(), self.cp_group.rank()
        s_local, b, _, d = query.shape
        chunk = s_local // 2
        key = gather_from_sequence_parallel_region(key.contiguous(), True, group=self.cp_group)
        value = gather_from_sequence_parallel_region(value.contiguous(), True, group=self.cp_group)
        q_pos = self._positions(rank, cp, chunk, query.device)
        k_pos = torch.cat([self._positions(j, cp, chunk, query.device) for j in range(cp)])
        allowed = k_pos[None, :] <= q_pos[:, None]  # causal, on global positions
        repeat = self.heads // self.kv_heads  # grouped-query attention: share each K/V head
        key = key.repeat_interleave(repeat, dim=2)
        value = value.repeat_interleave(repeat, dim=2)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, h, s, d]
        scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * self.scale
        probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).to(q.dtype)
        out = torch.matmul(probs, v)  # [b, h, s_local, d]
        return out.permute(2, 0, 1, 3).reshape(s_local, b, self.heads * d)
