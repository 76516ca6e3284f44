"""The kit's down projection for biased experts (helpers/runtime/layers/biased_experts.py) inside
Megatron-Core's own expert MLP, with GPT-OSS's activation as Megatron-Bridge configures it (clamped
quick-GELU gate, up + 1), against transformers' GptOssExperts on the same input and weights:
outputs and every weight gradient equal. And why the class exists: Megatron's stock
RowParallelLinear in the same MLP cannot be trained (its in-place bias add on the TP reduction's
output is refused by autograd). In the session's Megatron child (tests/unit/conftest.py:
megatron_cpu): Megatron's parallel state and the CPU compatibility layer are process-wide."""
from __future__ import annotations

import json
import textwrap

SCRIPT = """
import json, torch
from megatron.core.fusions.fused_bias_geglu import quick_gelu  # eager: the child imports Megatron as CPU workers do
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.mlp import MLP, MLPSubmodules
from transformers import GptOssConfig
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
from helpers.runtime.layers.biased_experts import RowParallelLinearForBiasedExperts

HIDDEN, FFN, TOKENS = 64, 48, 10
config = TransformerConfig(num_layers=1, hidden_size=HIDDEN, num_attention_heads=4, ffn_hidden_size=FFN,
                           use_cpu_initialization=True, add_bias_linear=True, gated_linear_unit=True,
                           activation_func=quick_gelu, activation_func_clamp_value=7.0, glu_linear_offset=1.0,
                           bias_activation_fusion=False, gradient_accumulation_fusion=False)

g = torch.Generator().manual_seed(0)
hf_config = GptOssConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_local_experts=1, num_attention_heads=4)
hf_config._experts_implementation = "eager"  # transformers' own loop over experts (the reference)
hf = GptOssExperts(hf_config)
with torch.no_grad():
    for p in hf.parameters():
        p.copy_(torch.randn(p.shape, generator=g) * (0.1 if p.dim() > 2 else 1.0))
x = 3 * torch.randn(TOKENS, HIDDEN, generator=g)  # large enough that the clamp at 7 acts
weights = torch.rand(TOKENS, generator=g)  # the router's weights: Megatron's per_token_scale

def megatron_mlp(fc2):
    mlp = MLP(config, MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=fc2), is_expert=True,
              ffn_hidden_size=FFN)
    gate_up, bias = hf.gate_up_proj[0], hf.gate_up_proj_bias[0]  # [hidden, 2 ffn], gate/up interleaved
    with torch.no_grad():
        mlp.linear_fc1.weight.copy_(torch.cat([gate_up[:, ::2], gate_up[:, 1::2]], dim=1).T)
        mlp.linear_fc1.bias.copy_(torch.cat([bias[::2], bias[1::2]]))
        mlp.linear_fc2.weight.copy_(hf.down_proj[0].T)
        mlp.linear_fc2.bias.copy_(hf.down_proj_bias[0])
    return mlp

reference = hf(x, router_indices=torch.zeros(TOKENS, 1, dtype=torch.long), routing_weights=weights[:, None])
reference.square().sum().backward()
mlp = megatron_mlp(RowParallelLinearForBiasedExperts)
out, bias = mlp(x, per_token_scale=weights)
out.square().sum().backward()
rel = lambda a, b: float((a - b).abs().max() / b.abs().max())
gate_up_grad = hf.gate_up_proj.grad[0]
result = {"bias_returned": bias is not None, "out": rel(out, reference),
          "fc1": rel(mlp.linear_fc1.weight.grad, torch.cat([gate_up_grad[:, ::2], gate_up_grad[:, 1::2]], dim=1).T),
          "fc2": rel(mlp.linear_fc2.weight.grad, hf.down_proj.grad[0].T),
          "fc2_bias": rel(mlp.linear_fc2.bias.grad, hf.down_proj_bias.grad[0])}
stock = megatron_mlp(RowParallelLinear)
try:
    stock(x, per_token_scale=weights)[0].square().sum().backward()
    result["stock"] = "trained"
except RuntimeError as e:
    result["stock"] = str(e)
print(json.dumps(result))
"""


def test_equals_transformers_gpt_oss_experts_and_trains_where_the_stock_linear_cannot(megatron_cpu):
    got = json.loads(megatron_cpu(textwrap.dedent(SCRIPT)).strip().splitlines()[-1])
    assert got["bias_returned"] is False  # added inside the expert, scaled by its router weight
    for key in ("out", "fc1", "fc2", "fc2_bias"):
        assert got[key] <= 1e-6, (key, got)  # fp32: measured <= 5e-7
    assert "inplace" in got["stock"] or "in-place" in got["stock"], got["stock"]
