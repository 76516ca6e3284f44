"""Build the Megatron-Core pieces of a job: config, GPT model chunks (one per virtual pipeline
stage), DDP wrapping, the optimizer and its learning-rate scheduler. Only Megatron-Core APIs;
nothing re-implemented (the kit's modules come in through the layer specs, layers/specs.py)."""
from __future__ import annotations

import torch
from megatron.core import parallel_state as ps
from megatron.core.distributed import (
    DistributedDataParallel,
    DistributedDataParallelConfig,
)
from megatron.core.models.gpt import GPTModel
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.module import Float16Module

from helpers.job import megatron_names
from helpers.job.models import ModelPreset
from helpers.job.spec import JobSpec
from helpers.runtime.layers import fp8_linear, local_global_rotary
from helpers.runtime.layers import specs as layer_specs


def job_fields(spec: JobSpec, on_cpu: bool, bf16: bool) -> dict:
    """The TransformerConfig fields the job decides, whatever the model: layout, activation recompute
    (the JobSpec fields of helpers/job/megatron_names.py; helpers/job/rules/ checked them), precision,
    and the fused kernels off. Used for a preset's config and as overrides of an imported model's provider."""
    dtype = torch.bfloat16 if bf16 else torch.float32
    return dict(
        **megatron_names.core_values(spec, megatron_names.TRANSFORMER_CONFIG),
        # As Megatron-LM's arguments do: interleaved schedules overlap P2P and post each send/recv
        # on its own (with pp=2, next and previous stage are the same peer; a single batched
        # isend/irecv would pair a forward activation with a backward gradient).
        overlap_p2p_comm=bool(spec.vpp),
        batch_p2p_comm=not spec.vpp,
        # Dropout off: every layout must compute exactly what one process computes.
        hidden_dropout=0.0,
        attention_dropout=0.0,
        params_dtype=dtype,
        bf16=bf16,
        pipeline_dtype=dtype,
        # CPU: build full weights on the host, then split (no CUDA RNG, no CUDA kernels).
        use_cpu_initialization=on_cpu,
        # Fusions that need apex or TE kernels stay off. On GPU the kit takes the ones Megatron
        # writes in torch and compiles (megatron/core/fusions, jit_fuser = torch.compile):
        # bias+dropout+add (bias+GeLU: transformer_config, it depends on the model); the
        # vocab-parallel cross-entropy as the config names it (JobSpec.cross_entropy = "kit": computed by
        # the kit's Triton kernels, layers/cross_entropy_triton.py, TE's way, no fp32 softmax kept), and
        # the weight-gradient accumulation into fp32 main_grad,
        # whose apex kernels the kit substitutes (layers/wgrad_accumulation.py; the kit's FP8 linears
        # accumulate their own FP8 weight gradients: precision/cublaslt_accumulate.py). CPU keeps the
        # plain paths (cpu_compat imports Megatron without compile).
        gradient_accumulation_fusion=not on_cpu,
        bias_activation_fusion=False,
        bias_dropout_fusion=not on_cpu,
        cross_entropy_loss_fusion=not on_cpu,
        cross_entropy_fusion_impl="native",
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        persist_layer_norm=False,
        moe_grouped_gemm=False,
        moe_permute_fusion=False,
        **te_fp8_fields(spec),
    )


def moe_job_fields(spec: JobSpec) -> dict:
    """The TransformerConfig fields a MoE model takes from the job (its token dispatcher)."""
    return megatron_names.core_values(spec, megatron_names.TRANSFORMER_CONFIG, model_kind="moe")


def te_fp8_fields(spec: JobSpec) -> dict:
    """precision='fp8' with backend='te': Megatron's own FP8 path, which is Transformer Engine's
    (e4m3 forward, e5m2 gradients = "hybrid"; Megatron's fp8_recipe "tensorwise" = TE's current
    scaling, "delayed" = TE's DelayedScaling, the same names as the kit's). A thin switch: TE cannot
    be installed on this kit's machines, so it has not run here. On the local backend the config
    keeps fp8 unset (Megatron would ignore it without TE) and the kit's FP8 linears come in
    through the layer spec (layers/specs.py, layers/fp8_linear.py)."""
    if spec.precision != "fp8" or spec.backend != "te":
        return {}
    return dict(fp8="hybrid", fp8_recipe=spec.fp8_recipe)


def transformer_config(model: ModelPreset, spec: JobSpec, on_cpu: bool, bf16: bool) -> TransformerConfig:
    """A preset's config: its architecture (every feature helpers/job/rules/ lets through) plus the job's fields."""
    import torch.nn.functional as F
    from megatron.core.transformer import MLATransformerConfig

    fields = dict(
        **megatron_names.core_values(model, megatron_names.TRANSFORMER_CONFIG, owner="model"),
        init_method_std=0.02,
        **job_fields(spec, on_cpu, bf16),
    )
    if model.activation == "swiglu":
        fields.update(gated_linear_unit=True, activation_func=F.silu)
    elif model.activation == "gelu" and model.add_bias_linear and not on_cpu:  # Megatron's torch-compiled bias+GeLU
        fields.update(bias_activation_fusion=True)
    if model.is_moe:
        fields.update(
            **megatron_names.core_values(model, megatron_names.TRANSFORMER_CONFIG, owner="model", model_kind="moe"),
            **moe_job_fields(spec),
            moe_router_load_balancing_type="aux_loss",
            moe_aux_loss_coeff=1e-2,
            # Leading dense layers (DeepSeek's first_k_dense_replace): 0 = dense, 1 = MoE, per layer.
            moe_layer_freq=[0] * model.first_k_dense + [1] * (model.num_layers - model.first_k_dense),
        )
    if not model.multi_latent_attention:
        return TransformerConfig(**fields)
    return MLATransformerConfig(
        **fields, **megatron_names.core_values(model, megatron_names.TRANSFORMER_CONFIG, owner="model", model_kind="mla"),
        rope_type="rope")


def gpt_model_options(config: TransformerConfig, model: ModelPreset, seq_len: int) -> dict:
    """GPTModel's constructor arguments that are not config fields. A Megatron-Bridge provider
    (which *is* the config of an imported model) carries them as attributes; a preset's config
    has none, so Megatron's defaults apply."""
    get = lambda name, default: getattr(config, name, default)  # noqa: E731
    return dict(
        vocab_size=model.vocab_size,
        max_sequence_length=seq_len,
        position_embedding_type=get("position_embedding_type", "rope"),
        rotary_percent=get("rotary_percent", 1.0),
        rotary_base=local_global_rotary.global_rotary_base(config) if get("local_global_rotary", False)
        else get("rotary_base", 10000),
        rope_scaling=get("rope_scaling", False),
        rope_scaling_factor=get("rope_scaling_factor", 8.0),
        seq_len_interpolation_factor=get("seq_len_interpolation_factor", None),
        share_embeddings_and_output_weights=get("share_embeddings_and_output_weights", False),
    )


def model_chunks(config: TransformerConfig, model: ModelPreset, spec: JobSpec) -> list[torch.nn.Module]:
    """One GPTModel per virtual pipeline stage held by this rank (one when VPP is off)."""
    te = spec.backend == "te"  # decided before start (helpers/job/rules/resolve.py)
    if not config.use_cpu_initialization and not te:  # on GPU: rotary compiled (the TE fusion's stand-in)
        from helpers.runtime.layers import rotary
        rotary.install()
    if config.gradient_accumulation_fusion:  # apex's weight-gradient kernels, substituted (also under TE: the output layer)
        from helpers.runtime.layers import wgrad_accumulation
        wgrad_accumulation.install()
    if spec.cross_entropy == "kit" and config.cross_entropy_loss_fusion and not config.use_cpu_initialization:
        from helpers.runtime.layers import cross_entropy_triton  # Megatron's compiled one keeps an fp32 softmax
        cross_entropy_triton.install()
    if getattr(config, "hybrid_layer_pattern", None):  # an imported Nemotron-H: Megatron's HybridModel
        return [hybrid_model(config, model, spec)]
    chunks = []
    for vp_stage in range(spec.vpp or 1):
        vp = vp_stage if spec.vpp else None
        chunks.append(GPTModel(
            config=config,
            transformer_layer_spec=(layer_specs.te_block_spec(config, vp) if te
                                    else layer_specs.block_spec(config, vp, spec.attention, local_fp8_recipe(spec))),
            pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp),
            post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp),
            vp_stage=vp,
            **gpt_model_options(config, model, spec.seq_len),
        ))
    if getattr(config, "local_global_rotary", False):  # Gemma 3 (set by helpers/runtime/hf/config.py)
        for chunk in chunks:
            local_global_rotary.use_in_model(chunk, config)
    if getattr(config, "scale_embedding", False):  # Gemma (set by helpers/runtime/hf/config.py)
        from helpers.runtime.layers import embedding_scale
        for chunk in chunks:
            embedding_scale.use_in(chunk, config.hidden_size)
    if getattr(config, "final_logit_softcapping", None):  # Gemma 2
        from helpers.runtime.layers import logit_softcap
        for chunk in chunks:
            logit_softcap.use_in(chunk, config.final_logit_softcapping)
    if local_fp8_recipe(spec) and spec.fp8_output_layer:
        for chunk in chunks:
            fp8_linear.use_in_output_layer(chunk, local_fp8_recipe(spec))
    if local_fp8_recipe(spec) and not any(getattr(m, "fp8_recipe", None) for c in chunks for m in c.modules()):
        raise RuntimeError("precision='fp8' but no linear of this model took the kit's FP8 GEMMs "
                           "(helpers/runtime/layers/fp8_linear.py): a rule of helpers/job/rules/builder.py "
                           "(fp8_not_built_for_hybrid) should have refused this job; refusing to train in bf16 instead")
    return chunks


def local_fp8_recipe(spec: JobSpec) -> str | None:
    """The kit's FP8 linears' recipe for a precision='fp8' job on the local backend, else None."""
    return spec.fp8_recipe if spec.precision == "fp8" and spec.backend != "te" else None


def hybrid_model(config: TransformerConfig, model: ModelPreset, spec: JobSpec) -> torch.nn.Module:
    """Megatron's HybridModel (Mamba/attention/MLP/MoE layers by pattern) on the kit's local
    hybrid stack (runtime/layers/mamba/stack.py); pipeline stages cut the pattern by Megatron's own
    select_pipeline_segment (first/last stage layer counts for uneven splits). No VPP (a rule)."""
    from megatron.core.models.hybrid.hybrid_model import HybridModel

    from helpers.runtime.layers.mamba import stack

    options = gpt_model_options(config, model, spec.seq_len)
    return HybridModel(
        config=config, hybrid_stack_spec=stack.stack_spec(config, spec.attention),
        vocab_size=options["vocab_size"], max_sequence_length=spec.seq_len,
        hybrid_layer_pattern=config.hybrid_layer_pattern,
        pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
        share_embeddings_and_output_weights=options["share_embeddings_and_output_weights"],
        position_embedding_type=getattr(config, "position_embedding_type", "none"),
        rotary_percent=options["rotary_percent"], rotary_base=options["rotary_base"])


def ddp_config(spec: JobSpec) -> DistributedDataParallelConfig:
    """Megatron's DDP settings, derived from the job as Megatron-LM derives them from its flags
    (training.py: get_megatron_ddp_config, resolve_ddp_bucket_size; arguments.py: validate_args)."""
    values = megatron_names.core_values(spec, megatron_names.DDP_CONFIG)
    return DistributedDataParallelConfig(
        **values,
        # Megatron-LM lines up the pipeline stages' parameter all-gathers (the schedule starts them
        # through config.param_sync_func) under the interleaved schedule only; without VPP each
        # stage's forward pre-hooks start its own.
        align_param_gather=values["overlap_param_gather"] and bool(spec.vpp),
    )


def wrap_ddp(config: TransformerConfig, chunks: list[torch.nn.Module], spec: JobSpec, device) -> list:
    ddp = ddp_config(spec)
    wrapped = []
    for i, chunk in enumerate(chunks):
        chunk.to(device)
        if config.bf16:
            chunk = Float16Module(config, chunk)
        wrapped.append(DistributedDataParallel(
            config, ddp, chunk,
            # As Megatron-LM's get_model does: only the first virtual chunk is cut into buckets
            # (with overlap_grad_reduce); every later chunk is reduced as one bucket.
            disable_bucketing=i > 0,
        ))
    return wrapped


def optimizer_config(config: TransformerConfig, spec: JobSpec) -> OptimizerConfig:
    """Megatron's optimizer settings: Adam (torch's AdamW without apex/TE) with the job's
    hyperparameters, as Megatron-LM's get_megatron_optimizer_config takes them from its flags (the
    weight decay is AdamW's, decoupled; Megatron skips biases and 1-D weights; overlap_param_gather
    and use_distributed_optimizer are DDP's flags, which Megatron-LM passes here too)."""
    return OptimizerConfig(
        optimizer="adam",
        **megatron_names.core_values(spec, megatron_names.OPTIMIZER_CONFIG),
        bf16=config.bf16,
        params_dtype=config.params_dtype,
    )


def optimizer(config: TransformerConfig, model: list, spec: JobSpec):
    opt = get_megatron_optimizer(optimizer_config(config, spec), model)
    if not config.use_cpu_initialization:  # on GPU
        use_fused_adam(opt)
    return opt


def loop_hooks(config: TransformerConfig, model: list, opt) -> None:
    """The config hooks Megatron's schedule calls, set as Megatron-LM's train() sets them: the
    gradient finalisation (DP reduce, then the TP and PP sums) and the loss scale; with
    overlap_grad_reduce, no_sync (no bucket reduced before a chunk's last microbatch) and
    start_grad_sync (the schedule starts each chunk's remaining buckets after its last backward);
    with overlap_param_gather aligned across pipeline stages, start_param_sync."""
    from megatron.core.distributed import finalize_model_grads

    def per_chunk(hooks: list):
        return hooks if len(hooks) > 1 else hooks[0]

    ddp = model[0].ddp_config
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = opt.scale_loss
    if ddp.overlap_grad_reduce:
        config.no_sync_func = per_chunk([chunk.no_sync for chunk in model])
        config.grad_sync_func = per_chunk([chunk.start_grad_sync for chunk in model])
    if ddp.overlap_param_gather and ddp.align_param_gather:
        config.param_sync_func = per_chunk([chunk.start_param_sync for chunk in model])


class ParamGather:
    """With overlap_param_gather the distributed optimizer's step leaves each updated parameter on
    the rank that owns its shard, and Megatron's DDP all-gathers it inside the next forward pass
    (forward pre-hooks; config.param_sync_func under the interleaved schedule). Megatron-LM's
    train() keeps that off until the first step has run (a bad load must not spread through the
    all-gather) and gathers synchronously whenever the weights are read outside a training
    forward: evaluation, saves, the end of training. These are its steps in Megatron-Core's DDP
    calls; without overlap_param_gather each one does nothing."""

    def __init__(self, config: TransformerConfig, model: list, opt):
        self.config, self.model, self.opt = config, model, opt
        self.on = model[0].ddp_config.overlap_param_gather
        self.hooked = self.on  # Megatron's DDP registers its forward pre-hooks when it is built
        self.current = True  # every replica holds the same, up-to-date weights
        self.param_sync_func = None

    def hold(self) -> None:
        """Before the first iteration: no forward pre-hooks, no param_sync_func."""
        if self.hooked:
            for chunk in self.model:
                chunk.disable_forward_pre_hook(param_sync=False)
            self.param_sync_func, self.config.param_sync_func = self.config.param_sync_func, None
            self.hooked = False

    def stepped(self, first: bool, last: bool) -> None:
        """After opt.step(). After the first and the last step the weights are read outside a
        training forward (the report card compares them across replicas): gathered now. Then the
        first step turns the overlap on, and the last turns it off, as Megatron-LM's train() does."""
        self.current = not self.on
        if first or last:
            self.now()
        if first and self.on and not self.hooked:
            for chunk in self.model:
                chunk.enable_forward_pre_hook()
            self.config.param_sync_func = self.param_sync_func
            self.hooked = True
        if last and self.hooked:
            for chunk in self.model:
                chunk.disable_forward_pre_hook(param_sync=False)
            self.hooked = False

    def now(self) -> None:
        """Every replica's weights brought up to date by a synchronous all-gather (Megatron-LM's
        force_param_sync) before evaluation or a save reads them; nothing when they are."""
        if self.current:
            return
        self.opt.prepare_model_params_for_param_sync()
        for chunk in self.model:
            chunk.start_param_sync(force_sync=True)
        self.current = True


def lr_schedule(opt, spec: JobSpec, start: int):
    """Megatron's OptimizerParamScheduler as Megatron-LM's `get_optimizer_param_scheduler` builds it
    for the same run (megatron/training/training.py): counted in samples (each iteration steps it by
    the global batch), warm-up and decay given in iterations x global batch, the weight decay
    constant over the run's samples. So its state_dict() is the one Megatron-LM saves and loads
    (`opt_param_scheduler` in the checkpoint: checkpoint/megatron_args.py), and a job resumed at
    iteration `start` continues the curve. It writes each param group's lr and weight decay before
    every step; the defaults (no warm-up, constant) give lr at every step."""
    gb = spec.global_batch_size
    schedule = OptimizerParamScheduler(
        opt, init_lr=0.0, max_lr=spec.lr, min_lr=spec.min_lr, lr_warmup_steps=spec.lr_warmup_iters * gb,
        lr_decay_steps=max(spec.lr_decay_end, spec.lr_warmup_iters + 1) * gb,  # (Megatron asserts warm-up < decay)
        lr_decay_style=spec.lr_decay, start_wd=spec.weight_decay, end_wd=spec.weight_decay,
        wd_incr_steps=max(spec.iters, 1) * gb, wd_incr_style="constant")
    schedule.step(start * gb)
    return schedule


def use_fused_adam(opt) -> None:
    """Without apex/TE, Megatron builds torch's Adam with its default multi-tensor (foreach)
    implementation; torch's single fused kernel (`fused=True`) does the same update in one pass
    over the fp32 main parameters, gradients and moments. Adam reads the flag per step from its
    param groups, so switching it after construction is enough."""
    for chained in getattr(opt, "chained_optimizers", [opt]):
        for group in chained.optimizer.param_groups:
            group.update(fused=True, foreach=False)
