"""Build the Megatron-Core pieces of a job: config, GPT model chunks (one per virtual pipeline
stage), DDP wrapping and the optimizer. Only Megatron-Core APIs; nothing re-implemented."""
from __future__ import annotations

import torch
from megatron.core import parallel_state as ps
from megatron.core.distributed import (
    DistributedDataParallel,
    DistributedDataParallelConfig,
)
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_block import (
    TransformerBlockSubmodules,
    get_num_layers_to_build,
)

from helpers.job.models import ModelPreset
from helpers.job.spec import JobSpec
from helpers.runtime.attention.core import SDPACoreAttention
from helpers.runtime.modules import ContextParallelAttention, SequenceParallelNorm


def transformer_config(model: ModelPreset, spec: JobSpec, on_cpu: bool, bf16: bool) -> TransformerConfig:
    moe = {}
    if model.is_moe:
        moe = dict(
            num_moe_experts=model.num_experts,
            moe_router_topk=model.moe_router_topk,
            moe_ffn_hidden_size=model.moe_ffn_hidden_size or model.ffn_hidden_size,
            moe_token_dispatcher_type=spec.moe_dispatcher,
            moe_router_load_balancing_type="aux_loss",
            moe_aux_loss_coeff=1e-2,
            moe_grouped_gemm=False,
            moe_permute_fusion=False,
            moe_shared_expert_intermediate_size=model.moe_shared_expert_intermediate_size,
        )
    return TransformerConfig(
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        num_attention_heads=model.num_attention_heads,
        num_query_groups=model.num_query_groups,
        ffn_hidden_size=model.ffn_hidden_size,
        normalization=model.normalization,
        add_bias_linear=model.add_bias_linear,
        tensor_model_parallel_size=spec.tp,
        pipeline_model_parallel_size=spec.pp,
        virtual_pipeline_model_parallel_size=spec.vpp,
        num_layers_in_first_pipeline_stage=spec.first_stage_layers,
        num_layers_in_last_pipeline_stage=spec.last_stage_layers,
        context_parallel_size=spec.cp,
        expert_model_parallel_size=spec.ep,
        expert_tensor_parallel_size=spec.expert_tp,
        sequence_parallel=spec.sp,
        # As Megatron-LM's arguments do: interleaved schedules overlap P2P and post each send/recv
        # on its own (with pp=2, next and previous stage are the same peer; a single batched
        # isend/irecv would pair a forward activation with a backward gradient).
        overlap_p2p_comm=bool(spec.vpp),
        batch_p2p_comm=not spec.vpp,
        # Dropout off: every layout must compute exactly what one process computes.
        hidden_dropout=0.0,
        attention_dropout=0.0,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        bf16=bf16,
        pipeline_dtype=torch.bfloat16 if bf16 else torch.float32,
        # CPU: build full weights on the host, then split (no CUDA RNG, no CUDA kernels).
        use_cpu_initialization=on_cpu,
        # Fusions that need apex or TE kernels stay off. On GPU the kit takes the ones Megatron
        # writes in torch and compiles (megatron/core/fusions, jit_fuser = torch.compile):
        # bias+GeLU (only with linear biases), bias+dropout+add, and the vocab-parallel
        # cross-entropy. CPU keeps the plain paths (cpu_compat imports Megatron without compile).
        gradient_accumulation_fusion=False,
        bias_activation_fusion=not on_cpu and model.add_bias_linear and model.activation == "gelu",
        bias_dropout_fusion=not on_cpu,
        cross_entropy_loss_fusion=not on_cpu,
        cross_entropy_fusion_impl="native",
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        persist_layer_norm=False,
        init_method_std=0.02,
        **moe,
    )


def core_attention(config: TransformerConfig, attention: str):
    """The layer spec's core attention: the kit's SDPA one (default), or Megatron's local
    DotProductAttention, which the spec already holds. Megatron's refuses CP: CP always uses the kit's."""
    if config.context_parallel_size > 1:
        return ContextParallelAttention
    return SDPACoreAttention if attention == "sdpa" else None


def block_spec(config: TransformerConfig, model: ModelPreset, vp_stage: int | None,
               attention: str = "sdpa") -> TransformerBlockSubmodules:
    """Megatron-Core's local layer spec with the kit's SP-capable norm in place of torch's and the
    kit's core attention (`attention`, JobSpec.attention)."""
    layer = get_gpt_layer_local_spec(
        num_experts=model.num_experts, moe_grouped_gemm=False, normalization=model.normalization
    )
    layer.submodules.input_layernorm = SequenceParallelNorm
    layer.submodules.pre_mlp_layernorm = SequenceParallelNorm
    chosen = core_attention(config, attention)
    if chosen is not None:
        layer.submodules.self_attention.submodules.core_attention = chosen
    n_layers = get_num_layers_to_build(config, vp_stage=vp_stage)
    return TransformerBlockSubmodules(layer_specs=[layer] * n_layers, layer_norm=SequenceParallelNorm)


def model_chunks(config: TransformerConfig, model: ModelPreset, spec: JobSpec) -> list[torch.nn.Module]:
    """One GPTModel per virtual pipeline stage held by this rank (one when VPP is off)."""
    if not config.use_cpu_initialization:  # on GPU: rotary embedding compiled (the TE fusion's stand-in)
        from helpers.runtime import compiled_rope
        compiled_rope.install()
    chunks = []
    for vp_stage in range(spec.vpp or 1):
        vp = vp_stage if spec.vpp else None
        chunks.append(GPTModel(
            config=config,
            transformer_layer_spec=block_spec(config, model, vp, spec.attention),
            vocab_size=model.vocab_size,
            max_sequence_length=spec.seq_len,
            pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp),
            post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp),
            position_embedding_type="rope",
            share_embeddings_and_output_weights=False,
            vp_stage=vp,
        ))
    return chunks


def wrap_ddp(config: TransformerConfig, chunks: list[torch.nn.Module], spec: JobSpec, device) -> list:
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=False,
        use_distributed_optimizer=spec.dist_opt,
    )
    wrapped = []
    for i, chunk in enumerate(chunks):
        chunk.to(device)
        if config.bf16:
            chunk = Float16Module(config, chunk)
        wrapped.append(DistributedDataParallel(
            config, ddp_config, chunk,
            # As Megatron's training loop does: only the first chunk gets bucketing off
            # when virtual pipelining would otherwise overlap buckets across chunks.
            disable_bucketing=i > 0,
        ))
    return wrapped


def optimizer(config: TransformerConfig, model: list, spec: JobSpec):
    opt_config = OptimizerConfig(
        optimizer="adam",
        lr=spec.lr,
        weight_decay=0.0,
        clip_grad=spec.clip_grad,
        bf16=config.bf16,
        params_dtype=config.params_dtype,
        use_distributed_optimizer=spec.dist_opt,
    )
    opt = get_megatron_optimizer(opt_config, model)
    if not config.use_cpu_initialization:  # on GPU
        use_fused_adam(opt)
    return opt


def use_fused_adam(opt) -> None:
    """Without apex/TE, Megatron builds torch's Adam with its default multi-tensor (foreach)
    implementation; torch's single fused kernel (`fused=True`) does the same update in one pass
    over the fp32 main parameters, gradients and moments. Adam reads the flag per step from its
    param groups, so switching it after construction is enough."""
    for chained in getattr(opt, "chained_optimizers", [opt]):
        for group in chained.optimizer.param_groups:
            group.update(fused=True, foreach=False)


def unwrap(chunk: torch.nn.Module) -> torch.nn.Module:
    """The GPTModel inside DDP (and Float16Module)."""
    while hasattr(chunk, "module"):
        chunk = chunk.module
    return chunk
