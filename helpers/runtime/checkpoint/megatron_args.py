"""The `args` Megatron-LM keeps in every checkpoint's common state (the argparse.Namespace
`pretrain_gpt.py` parsed), made from the job: the fields Megatron-LM's loader reads back
(megatron/training/checkpointing.py: `load_args_from_checkpoint` takes the model's shape, the layout
and the tokenizer from them, `check_checkpoint_args` compares the shape, `load_checkpoint` reads the
layout, the consumed samples and whether optimizer and RNG states were saved) and the ones
Megatron-Bridge reads from a checkpoint without run_config.yaml (its training/checkpointing.py).

Plain values only (numbers, strings, booleans, None, lists): Megatron-Core loads the common state
with torch's weights_only unpickler, which accepts a Namespace (megatron/core/safe_globals.py) but
no torch object beyond its short list.

The kit's RNG states are saved under its own key (`kit.rng_state`: every rank's generators, restored
only in the same layout), not in Megatron-LM's per-rank layout, so `no_save_rng` is True: Megatron-LM
and Bridge then skip the RNG state instead of stopping at its absence."""
from __future__ import annotations

import argparse
import os

from helpers.job.flops import flops_per_token


def tokenizer(spec, model) -> dict:
    """Megatron-LM's tokenizer arguments for the job's tokenizer: an imported folder's own tokenizer
    is HuggingFaceTokenizer on that folder; the kit's other tokenizers have no Megatron-LM type (the
    kit's data is tokenized already), so NullTokenizer over the model's vocabulary (it adds one
    end-of-document id)."""
    if spec.hf_model and spec.tokenizer == "hf":
        return {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": os.path.abspath(spec.hf_model)}
    return {"tokenizer_type": "NullTokenizer", "vocab_size": model.vocab_size - 1}


def floating_point_operations(spec, model, iteration: int) -> float:
    """Training FLOPs up to `iteration` (helpers/job/flops.py), what Megatron-LM counts as
    num_floating_point_operations_so_far."""
    return float(flops_per_token(model, spec.seq_len) * spec.seq_len * spec.global_batch_size * iteration)


def _plain(value):
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"Megatron-LM's args take plain values, not {type(value).__name__} ({value!r})")


def namespace(spec, config, model, options: dict, iteration: int) -> argparse.Namespace:
    """`config`: the job's TransformerConfig (a Bridge provider for an imported model); `model`: its
    ModelPreset; `options`: GPTModel's other arguments (build.gpt_model_options)."""
    get = lambda name, default=None: getattr(config, name, default)  # noqa: E731
    heads = config.num_attention_heads
    groups = get("num_query_groups") or heads
    activation = getattr(get("activation_func"), "__name__", "")
    position = options["position_embedding_type"]
    args = dict(
        # the model's shape (load_args_from_checkpoint, check_checkpoint_args)
        num_layers=config.num_layers, hidden_size=config.hidden_size, ffn_hidden_size=config.ffn_hidden_size,
        num_attention_heads=heads, num_query_groups=groups, group_query_attention=groups < heads,
        kv_channels=get("kv_channels"), seq_length=spec.seq_len, max_position_embeddings=options["max_sequence_length"],
        position_embedding_type=position, add_position_embedding=position == "learned_absolute",
        use_rotary_position_embeddings=position == "rope", rotary_base=options["rotary_base"],
        rotary_percent=options["rotary_percent"], rotary_interleaved=get("rotary_interleaved", False),
        use_rope_scaling=options["rope_scaling"], rope_scaling_factor=options["rope_scaling_factor"],
        add_bias_linear=get("add_bias_linear", True), add_qkv_bias=get("add_qkv_bias", False),
        swiglu=bool(get("gated_linear_unit")) and activation == "silu", squared_relu=activation == "squared_relu",
        untie_embeddings_and_output_weights=not options["share_embeddings_and_output_weights"],
        normalization=get("normalization", "LayerNorm"), norm_epsilon=get("layernorm_epsilon", 1e-5),
        apply_layernorm_1p=get("layernorm_zero_centered_gamma", False), qk_layernorm=get("qk_layernorm", False),
        apply_query_key_layer_scaling=get("apply_query_key_layer_scaling", False),
        attention_dropout=get("attention_dropout", 0.0), hidden_dropout=get("hidden_dropout", 0.0),
        window_size=get("window_size"),
        num_experts=get("num_moe_experts"), moe_ffn_hidden_size=get("moe_ffn_hidden_size"),
        moe_router_topk=get("moe_router_topk", 2), moe_layer_freq=get("moe_layer_freq", 1),
        moe_shared_expert_intermediate_size=get("moe_shared_expert_intermediate_size"),
        moe_router_score_function=get("moe_router_score_function", "softmax"),
        moe_router_enable_expert_bias=get("moe_router_enable_expert_bias", False),
        moe_router_topk_scaling_factor=get("moe_router_topk_scaling_factor"),
        moe_router_pre_softmax=get("moe_router_pre_softmax", False),
        moe_router_num_groups=get("moe_router_num_groups"), moe_router_group_topk=get("moe_router_group_topk"),
        moe_token_dispatcher_type=get("moe_token_dispatcher_type", "allgather"), moe_grouped_gemm=False,
        multi_latent_attention=get("multi_latent_attention", False), q_lora_rank=get("q_lora_rank"),
        kv_lora_rank=get("kv_lora_rank"), qk_head_dim=get("qk_head_dim"),
        qk_pos_emb_head_dim=get("qk_pos_emb_head_dim"), v_head_dim=get("v_head_dim"),
        hybrid_layer_pattern=get("hybrid_layer_pattern"), mamba_state_dim=get("mamba_state_dim"),
        mamba_head_dim=get("mamba_head_dim"), mamba_num_groups=get("mamba_num_groups"),
        mamba_num_heads=get("mamba_num_heads"),
        padded_vocab_size=model.vocab_size, **tokenizer(spec, model),
        transformer_impl="transformer_engine" if spec.backend == "te" else "local",
        # the layout (load_checkpoint: RNG and rerun states are restored only in the same one)
        tensor_model_parallel_size=spec.tp, pipeline_model_parallel_size=spec.pp,
        virtual_pipeline_model_parallel_size=spec.vpp, num_layers_per_virtual_pipeline_stage=None,
        decoder_first_pipeline_num_layers=spec.first_stage_layers,
        decoder_last_pipeline_num_layers=spec.last_stage_layers, context_parallel_size=spec.cp,
        expert_model_parallel_size=spec.ep, expert_tensor_parallel_size=spec.expert_tp,
        sequence_parallel=spec.sp, world_size=spec.world_size, data_parallel_size=spec.dp,
        # batches and the position in the data
        micro_batch_size=spec.micro_batch, global_batch_size=spec.global_batch_size, train_iters=spec.iters,
        consumed_train_samples=iteration * spec.global_batch_size, skipped_train_samples=0, consumed_valid_samples=0,
        # optimizer, schedule and precision
        optimizer="adam", lr=spec.lr, min_lr=spec.min_lr, lr_decay_style=spec.lr_decay,
        lr_warmup_iters=spec.lr_warmup_iters, lr_decay_iters=spec.lr_decay_end, weight_decay=spec.weight_decay,
        clip_grad=spec.clip_grad, adam_beta1=spec.adam_beta1, adam_beta2=spec.adam_beta2, adam_eps=spec.adam_eps,
        use_distributed_optimizer=spec.dist_opt, bf16=spec.bf16, fp16=False,
        # what this checkpoint holds
        ckpt_format="torch_dist", use_dist_ckpt=True, no_save_optim=False, no_save_rng=True,
        ckpt_fully_parallel_save=False, dist_ckpt_optim_fully_reshardable=spec.dist_opt,
        seed=spec.seed, data_parallel_random_init=False,
    )
    return argparse.Namespace(**{k: _plain(v) for k, v in args.items()})
