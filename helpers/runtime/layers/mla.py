"""Multi-latent attention (DeepSeek-V2/V3) on Megatron-Core 0.19.2's local backend: the two kit
classes it needs, and where they go in a layer spec (`use_in`).

LayerNormColumnParallelLinearForMLA replaces: TE's fused norm+linear. MLA normalises its latents
(HF `q_a_layernorm`, `kv_a_layernorm`) right before their up projections. The local spec has a
standalone norm for them, but Megatron's qk-norm resolver (mla_qk_norm_config.py) rejects a
standalone q norm without q-LoRA and asks the backend for a fused norm-linear, which the local
backend lacks. With `qk_layernorm=False` and the norm *inside* the up projection, both layouts
(with and without q-LoRA) build, and the parameter is named `linear_kv_up_proj.layer_norm_weight`,
TE's name, which Megatron-Bridge maps (its TP rule keys on "LayerNormColumnParallelLinear" in the
class name: norm replicated, weight column-split). The norm sits before a column-parallel linear,
whose input all-reduces its gradient over TP, so its gradient is complete on every rank; under SP
its input is a sequence slice, so it is marked `sequence_parallel` (finalize_model_grads sums it).

MLASelfAttentionTP replaces: the upstream fix of Megatron-LM issue #1699 (PR #6839, open). On the
local spec `linear_kv_down_proj` is column-parallel; its output (latent + the one shared K-RoPE head)
is gathered over TP, and the K-RoPE part is then used by each rank's own heads only. The gather's
backward keeps each rank's slice, so the K-RoPE gradient held its rank's heads' share only (measured:
0.56-0.71x of the TP=1 gradient). Here the gather happens in `_qkv_down_projection`, where the
K-RoPE slice can get a TP all-reduce of its gradient (identity forward)."""
from __future__ import annotations

import torch
from megatron.core.tensor_parallel.layers import ColumnParallelLinear
from megatron.core.tensor_parallel.mappings import (
    copy_to_tensor_model_parallel_region,
    gather_from_tensor_model_parallel_region,
    scatter_to_sequence_parallel_region,
)
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.multi_latent_attention import MLASelfAttention

# HF DeepSeek-V2/V3 build q_a_layernorm / kv_a_layernorm with eps=1e-6 whatever rms_norm_eps says.
LATENT_NORM_EPS = 1e-6


class LayerNormColumnParallelLinearForMLA(ColumnParallelLinear):
    """norm(x) then Megatron's ColumnParallelLinear; owns `layer_norm_weight` (+ `layer_norm_bias`)."""

    def __init__(self, input_size, output_size, *, config, **kwargs):
        super().__init__(input_size, output_size, config=config, **kwargs)
        self.rms = config.normalization == "RMSNorm"
        self.layer_norm_weight = torch.nn.Parameter(torch.ones(input_size, dtype=config.params_dtype))
        norm_params = [self.layer_norm_weight]
        if not self.rms:
            self.layer_norm_bias = torch.nn.Parameter(torch.zeros(input_size, dtype=config.params_dtype))
            norm_params.append(self.layer_norm_bias)
        for p in norm_params:
            p.sequence_parallel = config.sequence_parallel

    def forward(self, x, *args, **kwargs):
        shape = (x.shape[-1],)
        if self.rms:
            x = torch.nn.functional.rms_norm(x, shape, self.layer_norm_weight, LATENT_NORM_EPS)
        else:
            x = torch.nn.functional.layer_norm(x, shape, self.layer_norm_weight, self.layer_norm_bias,
                                               LATENT_NORM_EPS)
        return super().forward(x, *args, **kwargs)


class MLASelfAttentionTP(MLASelfAttention):
    """Megatron's MLASelfAttention with the K-RoPE gradient summed over TP."""

    def _qkv_down_projection(self, hidden_states):
        q_compressed, kv_combined = super()._qkv_down_projection(hidden_states)
        latent, rope = self.config.kv_lora_rank, self.config.qk_pos_emb_head_dim
        if kv_combined.size(-1) == latent + rope:
            return q_compressed, kv_combined  # not split over TP: nothing to fix
        # What the caller would do next (gather the TP slices), with the K-RoPE slice's gradient
        # all-reduced over TP: every rank's heads used it.
        kv_compressed, k_pos_emb = torch.split(gather_from_tensor_model_parallel_region(kv_combined),
                                               [latent, rope], dim=-1)
        if self.config.sequence_parallel:
            # Hand over a full-width sequence slice: the caller then all-gathers K-RoPE over the
            # sequence, and that gather's backward (a reduce-scatter) already sums over TP.
            return q_compressed, scatter_to_sequence_parallel_region(torch.cat([kv_compressed, k_pos_emb], -1))
        return q_compressed, torch.cat([kv_compressed, copy_to_tensor_model_parallel_region(k_pos_emb)], -1)


def prepare_config(config) -> None:
    """MLA's latent norms live in the up projections (above), so Megatron must not add its own."""
    config.qk_layernorm = False


def use_in(self_attention, config) -> None:
    """Put the kit's MLA classes into one layer's `self_attention` spec (local backend)."""
    self_attention.module = MLASelfAttentionTP
    sub = self_attention.submodules
    sub.q_layernorm = IdentityOp
    sub.kv_layernorm = IdentityOp
    sub.linear_kv_up_proj = LayerNormColumnParallelLinearForMLA
    if config.q_lora_rank is not None:
        sub.linear_q_up_proj = LayerNormColumnParallelLinearForMLA
