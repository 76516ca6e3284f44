"""The hybrid (Mamba + attention + MLP/MoE) stack on Megatron-Core 0.19.2's local backend: what
Megatron's TE-only `hybrid_stack_spec` (models/hybrid/hybrid_layer_specs.py) holds, with local
pieces, for Megatron's own HybridModel and HybridStack.

Per layer symbol of the pattern (Megatron's hybrid_layer_pattern, Nemotron-H's
hybrid_override_pattern):
  M  MambaLayer: SequenceParallelNorm, then mixer.TorchMambaMixer with a column-parallel in_proj
     and a row-parallel out_proj (TE fuses the norm into in_proj; the parameter is then
     `norm.weight` of the layer, which Megatron-Bridge maps too);
  *  attention only: the kit's GPT attention layer (layer_specs.layer_spec: SDPA or CP core
     attention, SP norm) without its MLP;
  -  MLPLayer: SP norm + local MLP;     E  MoE layer: SP norm + Megatron's local MoE.
LocalHybridStack replaces: HybridStack's final norm, which is hard-coded to TENorm (TE's class
raises without TE) -> SequenceParallelNorm, same parameter name `final_norm.weight`."""
from __future__ import annotations

from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
from megatron.core.models.hybrid.hybrid_block import HybridStack, HybridStackSubmodules
from megatron.core.ssm.mamba_layer import MambaLayer, MambaLayerSubmodules
from megatron.core.ssm.mamba_mixer import MambaMixerSubmodules
from megatron.core.ssm.mlp_layer import MLPLayer
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.identity_op import IdentityFuncOp, IdentityOp
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_layer import (
    MoETransformerLayer,
    TransformerLayerSubmodules,
)

from helpers.runtime.layers import specs as layer_specs
from helpers.runtime.layers.mamba.mixer import TorchMambaMixer
from helpers.runtime.layers.norm import SequenceParallelNorm


class LocalHybridStack(HybridStack):
    """Megatron's HybridStack with the kit's norm as its final norm."""

    def __init__(self, config, submodules, *args, post_layer_norm: bool = True, **kwargs):
        super().__init__(config, submodules, *args, post_layer_norm=False, **kwargs)  # no TENorm built
        self.post_layer_norm = post_layer_norm
        if self.post_process and post_layer_norm:
            self.final_norm = SequenceParallelNorm(config, config.hidden_size, eps=config.layernorm_epsilon)


def stack_spec(config, attention: str = "sdpa") -> ModuleSpec:
    """The ModuleSpec HybridModel takes as `hybrid_stack_spec` (`attention`: JobSpec.attention)."""
    attention_layer = layer_specs.layer_spec(config, moe=False, attention=attention)
    attention_layer.submodules.pre_mlp_layernorm = IdentityOp  # attention only: the MLP is its own layer
    attention_layer.submodules.mlp = IdentityOp
    attention_layer.submodules.mlp_bda = IdentityFuncOp
    mlp = layer_specs.layer_spec(config, moe=False, attention=attention).submodules
    moe = layer_specs.layer_spec(config, moe=True, attention=attention).submodules if config.num_moe_experts else None
    return ModuleSpec(module=LocalHybridStack, submodules=HybridStackSubmodules(
        mamba_layer=ModuleSpec(module=MambaLayer, submodules=MambaLayerSubmodules(
            norm=SequenceParallelNorm,
            mixer=ModuleSpec(module=TorchMambaMixer, submodules=MambaMixerSubmodules(
                in_proj=ColumnParallelLinear, out_proj=RowParallelLinear)),
            mamba_bda=get_bias_dropout_add)),
        attention_layer=attention_layer,
        mlp_layer=ModuleSpec(module=MLPLayer, submodules=TransformerLayerSubmodules(
            pre_mlp_layernorm=SequenceParallelNorm, mlp=mlp.mlp, mlp_bda=get_bias_dropout_add)),
        moe_layer=ModuleSpec(module=MoETransformerLayer, submodules=TransformerLayerSubmodules(
            pre_mlp_layernorm=SequenceParallelNorm, mlp=moe.mlp, mlp_bda=get_bias_dropout_add)) if moe else IdentityOp,
    ))
