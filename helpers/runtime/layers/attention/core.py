"""SDPACoreAttention: the kit's drop-in for Megatron-Core's local `DotProductAttention`, used as
the layer spec's `core_attention` (helpers/runtime/build.py; JobSpec.attention = "sdpa").

Same constructor and call as Megatron's (what `SelfAttention`/`MLASelfAttention` pass), computed
by `sdpa.attend`. Beyond the local class it accepts MLA's `k_channels`/`v_channels` (different
query/key and value head sizes; Megatron-LM issue #1589 is the local class refusing them) and
sizes its output from the value head size, and takes Megatron's sliding window (`window_size`,
on the layers `window_attn_skip_freq` picks, as Megatron's own attention decides). What it does not
do is refused at construction or call, never silently computed differently: context parallel
(ContextParallelAttention does that), softmax offsets, attention bias, packed sequences."""
from __future__ import annotations

import torch

from helpers.runtime.layers.attention.sdpa import attend


class SDPACoreAttention(torch.nn.Module):
    def __init__(self, config, layer_number: int, attn_mask_type, attention_type: str = "self",
                 attention_dropout: float | None = None, softmax_scale: float | None = None,
                 k_channels: int | None = None, v_channels: int | None = None, cp_comm_type=None,
                 pg_collection=None, **_unused):
        super().__init__()
        from megatron.core.transformer.enums import AttnMaskType

        if config.context_parallel_size > 1:
            raise ValueError("SDPACoreAttention is for cp=1; context parallel uses ContextParallelAttention")
        if config.softmax_type != "vanilla":
            raise ValueError(f"softmax_type={config.softmax_type!r} needs Megatron's own attention "
                             "(attention='megatron_local')")
        self.config = config
        self.layer_number = max(1, layer_number)
        self.attn_mask_type = attn_mask_type
        self.causal = attn_mask_type == AttnMaskType.causal
        self.k_channels = k_channels or config.kv_channels
        # As Megatron's: 1/sqrt(head size of q and k) unless given. (Megatron's query-key layer
        # scaling divides the scores by the layer number and multiplies them back inside its
        # softmax: no net change, so nothing to do for it here.)
        self.softmax_scale = softmax_scale if softmax_scale is not None else self.k_channels ** -0.5
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout
        self.window = layer_window(config, self.layer_number)

    def forward(self, query, key, value, attention_mask=None, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None):
        """query [sq, b, heads, dk], key [sk, b, kv_heads, dk], value [sk, b, kv_heads, dv]
        -> [sq, b, heads * dv]. `attention_mask` uses Megatron's convention (True = masked out)
        and replaces the causal pattern when given, as in Megatron's local attention."""
        if attention_bias is not None or packed_seq_params is not None:
            raise ValueError("attention bias and packed sequences need Transformer Engine's attention")
        allowed = None if attention_mask is None else ~attention_mask
        dropout_p = self.dropout if self.training else 0.0
        if dropout_p and not self.config.sequence_parallel:  # as Megatron's: TP ranks drop differently
            from megatron.core import tensor_parallel
            with tensor_parallel.get_cuda_rng_tracker().fork():
                return attend(query, key, value, self.softmax_scale, self.causal, allowed, dropout_p, self.window)
        return attend(query, key, value, self.softmax_scale, self.causal, allowed, dropout_p, self.window)


def layer_window(config, layer_number: int) -> int | None:
    """This layer's causal window (keys at most this far back), or None: Megatron's own rule for
    which layers `window_attn_skip_freq` windows (layer_number 1-based, global)."""
    from megatron.core.transformer.utils import is_layer_window_attention

    layer_number = max(1, layer_number)
    if not is_layer_window_attention(config.window_size, config.window_attn_skip_freq, layer_number):
        return None
    return window_left(config, layer_number)


def window_left(config, layer_number: int) -> int:
    """How far back a query sees, from Megatron's `window_size=(left, right)`: causal windows only."""
    left, right = config.window_size
    if right not in (0, None) or left is None or left < 0:
        raise ValueError(f"window_size={config.window_size}: the kit's attention takes causal windows (left, 0)")
    return left
