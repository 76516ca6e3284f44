"""ContextParallelAttention replaces: Transformer Engine's context-parallel attention
(TEDotProductAttention with cp_comm_type p2p/a2a/all_gather), which the local backend lacks."""
from __future__ import annotations

import torch


class ContextParallelAttention(torch.nn.Module):
    """Causal core attention for context parallel (CP > 1) without Transformer Engine.

    Megatron's local `DotProductAttention` refuses CP > 1. Under CP each rank holds two chunks of
    the sequence (chunks r and 2*CP-1-r, Megatron's causal load balancing), so its queries need
    keys/values from everywhere before them. This module **all-gathers K and V** over the CP group
    (Megatron's own `gather_from_sequence_parallel_region`: all-gather forward, reduce-scatter of
    the K/V gradients backward), then computes attention of the local queries against the global
    positions with the kit's SDPA path (helpers/runtime/layers/attention/sdpa.py, the same kernels as
    cp=1) and an explicit boolean mask: causal on *global* positions, which is exact for the
    load-balanced chunks. Why all-gather, not a p2p ring: it is the simplest exact method
    and easy to read; a ring (what TE's `p2p` mode does) overlaps each K/V transfer with compute,
    which pays off only on GPUs with long sequences. Memory for K/V is then O(full sequence) per
    rank; queries, scores and everything outside attention stay split by CP. Accepts MLA's
    `k_channels`/`v_channels` and the sliding window (on global positions) like SDPACoreAttention."""

    def __init__(self, config, layer_number, attn_mask_type, attention_type=None, cp_comm_type=None,
                 softmax_scale=None, pg_collection=None, k_channels=None, v_channels=None, **_unused):
        super().__init__()
        from megatron.core import parallel_state as ps
        from megatron.core.transformer.enums import AttnMaskType

        if attn_mask_type != AttnMaskType.causal:
            raise ValueError("the kit's context-parallel attention supports causal masks only")
        from helpers.runtime.layers.attention.core import layer_window

        self.cp_group = getattr(pg_collection, "cp", None) or ps.get_context_parallel_group()
        self.scale = softmax_scale or (k_channels or config.kv_channels) ** -0.5
        self.window = layer_window(config, layer_number)

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

        from helpers.runtime.layers.attention.sdpa import attend, sliding_window

        # query: [s_local, b, heads, dk]; key: [s_local, b, kv_heads, dk]; value: [.., dv]
        cp, rank = self.cp_group.size(), self.cp_group.rank()
        chunk = query.shape[0] // 2
        key = gather_from_sequence_parallel_region(key.contiguous(), True, group=self.cp_group)
        value = gather_from_sequence_parallel_region(value.contiguous(), True, group=self.cp_group)
        q_pos = self._positions(rank, cp, chunk, query.device)
        k_pos = torch.cat([self._positions(j, cp, chunk, query.device) for j in range(cp)])
        allowed = k_pos[None, :] <= q_pos[:, None]  # causal, on global positions
        if self.window is not None:
            allowed = sliding_window(allowed, q_pos, k_pos, self.window)
        return attend(query, key, value, self.scale, causal=True, allowed=allowed)
