"""Gemma 3's attention as the kit builds it (helpers/runtime/layers/local_global_rotary.py: the kit's
layer spec with Megatron-Bridge's Gemma3SelfAttention and Gemma3RotaryEmbedding, the kit's core
attention and q/k norms) against transformers' Gemma3Attention on the same input and weights, for a
sliding-window layer (its own rotary base, window 8 of 24 tokens) and for the full layer (the other
base, scaled linearly by 8). In the session's Megatron child (tests/unit/conftest.py: megatron_cpu):
Megatron's parallel state and the CPU compatibility layer are process-wide. The whole model: tests/jobs/test_hf_import.py."""
from __future__ import annotations

import json
import textwrap

SCRIPT = """
import json, types, torch
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.spec_utils import build_module
from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function
from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention, Gemma3RotaryEmbedding
from helpers.launch import tiny_hf
from helpers.runtime.hf import te_standin
from helpers.runtime.layers import local_global_rotary, specs

te_standin.import_auto_bridge(["Gemma3ForCausalLM"])  # Bridge's Gemma 3 module imports TE names
hf_config = tiny_hf.hf_config("gemma3")
hf_config._attn_implementation = "eager"
HEADS, GROUPS, D, HIDDEN, S, B = 4, 2, 32, 64, 24, 2
config = TransformerConfig(num_layers=6, hidden_size=HIDDEN, num_attention_heads=HEADS, num_query_groups=GROUPS,
                           kv_channels=D, qk_layernorm=True, normalization="RMSNorm",
                           layernorm_zero_centered_gamma=True, layernorm_epsilon=1e-6,
                           softmax_scale=hf_config.query_pre_attn_scalar ** -0.5, add_bias_linear=False,
                           attention_dropout=0.0, hidden_dropout=0.0, use_cpu_initialization=True,
                           gradient_accumulation_fusion=False)
# What Bridge's provider and the kit's provider_config set (helpers/runtime/hf/config.py)
config.interleaved_attn_pattern = (5, 1)
config.window_size = hf_config.sliding_window
config.rotary_base = (1e4, 1e6)
config.rope_scaling_factor = 8.0
local_global_rotary.prepare_config(config)
model = types.SimpleNamespace()
local_global_rotary.use_in_model(model, config)
rotary = model.rotary_pos_emb(S)  # [2, S, 1, 1, D]: local, global
hf_rotary = Gemma3RotaryEmbedding(hf_config)
g = torch.Generator().manual_seed(0)
x = torch.randn(S, B, HIDDEN, generator=g)
positions = torch.arange(S)[None].expand(B, S)
rows, cols = torch.arange(S)[:, None], torch.arange(S)[None, :]
result = {"tables": list(rotary.shape)}
for layer in (2, 6):  # 1-based: layer 2 slides, layer 6 is full
    spec = specs.layer_spec(config, moe=False, attention="sdpa")
    ours = build_module(spec.submodules.self_attention, config=config, layer_number=layer)
    hf = Gemma3Attention(hf_config, layer_idx=layer - 1)
    with torch.no_grad():
        for p in hf.parameters():  # norm weights 0.3 N (gains 1 + w), projections 0.1 N
            p.copy_((0.3 if p.dim() == 1 else 0.1) * torch.randn(p.shape, generator=g))
        q = hf.q_proj.weight.view(GROUPS, HEADS // GROUPS * D, HIDDEN)
        k, v = hf.k_proj.weight.view(GROUPS, D, HIDDEN), hf.v_proj.weight.view(GROUPS, D, HIDDEN)
        ours.linear_qkv.weight.copy_(torch.cat([q, k, v], dim=1).reshape(-1, HIDDEN))  # Megatron: per group q.., k, v
        ours.linear_proj.weight.copy_(hf.o_proj.weight)
        ours.q_layernorm.weight.copy_(hf.q_norm.weight)
        ours.k_layernorm.weight.copy_(hf.k_norm.weight)
    mask = (sliding_window_causal_mask_function(hf_config.sliding_window) if hf.is_sliding
            else causal_mask_function)(0, 0, rows, cols)
    additive = torch.zeros(S, S).masked_fill(~mask, float("-inf"))[None, None]
    with torch.no_grad():
        cos_sin = hf_rotary(x, positions, layer_type=hf_config.layer_types[layer - 1])
        reference = hf(x.transpose(0, 1), cos_sin, additive)[0].transpose(0, 1)
        out, _ = ours(x, attention_mask=None, rotary_pos_emb=rotary)
    other = torch.stack([rotary[1], rotary[0]])  # the other kind's table: must change the output
    with torch.no_grad():
        swapped, _ = ours(x, attention_mask=None, rotary_pos_emb=other)
    scale = float(reference.abs().max())
    result[str(layer)] = {"sliding": hf.is_sliding, "diff": float((out - reference).abs().max()) / scale,
                          "swapped": float((swapped - reference).abs().max()) / scale,
                          "module": type(ours).__name__}
print(json.dumps(result))
"""


def test_gemma3_attention_equals_transformers_on_a_sliding_and_a_full_layer(megatron_cpu):
    got = json.loads(megatron_cpu(textwrap.dedent(SCRIPT)).strip().splitlines()[-1])
    assert got["tables"] == [2, 24, 1, 1, 32]
    assert got["2"]["sliding"] is True and got["6"]["sliding"] is False
    for layer in ("2", "6"):
        assert got[layer]["module"] == "Gemma3SelfAttention"
        assert got[layer]["diff"] <= 1e-6, got  # fp32
        assert got[layer]["swapped"] > 1e-3, got  # each layer really uses its own kind's table
