"""One name table: each JobSpec field (and each ModelPreset field) that Megatron has a counterpart
for, with that counterpart's name in Megatron-Core (and the object that takes it), in Megatron-LM
(`args.<dest>`; its flag comes from Megatron-LM's own parser, helpers/rundir/megatron_flags.py) and
in Megatron-Bridge's ConfigContainer (`section.field`), and the value conversions both ways.

Every place that maps the kit's names to Megatron's reads this table: the worker's configs
(runtime/setup.py, runtime/build.py), megatron.json's batch record (runtime/measure/megatron_calls.py),
Megatron-LM's flags (rundir/megatron_flags.py, rundir/megatron_lm.py), the Bridge recipe and run
config (rundir/bridge_recipe.py, runtime/checkpoint/bridge_files.py) and the way back from a
Megatron-LM command or a Bridge recipe (launch/from_megatron.py). A new JobSpec field with Megatron
names is one `Name` row below. JobSpec fields with no Megatron counterpart are in KIT_ONLY, each with
its reason; tests/unit/test_megatron_names.py checks both against the installed Megatron-Core,
Megatron-LM and Megatron-Bridge.

Plain data: no torch, no Megatron; both sides import it."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable

from helpers.job.sizes import ParallelSizes

# The Megatron-Core objects a value goes to
PARALLEL_STATE = "initialize_model_parallel"  # megatron.core.parallel_state.initialize_model_parallel's arguments
TRANSFORMER_CONFIG = "TransformerConfig"
DDP_CONFIG = "DistributedDataParallelConfig"
OPTIMIZER_CONFIG = "OptimizerConfig"
# The batch and the learning-rate schedule: what get_forward_backward_func and
# OptimizerParamScheduler are given, recorded in megatron.json under Megatron-LM's names.
BATCH = "batch"
OBJECTS = (PARALLEL_STATE, TRANSFORMER_CONFIG, DDP_CONFIG, OPTIMIZER_CONFIG, BATCH)

SAME = "="  # Megatron-LM's (or Bridge's) name is Megatron-Core's


@dataclass(frozen=True)
class Name:
    """One kit field and its names in Megatron-Core, Megatron-LM and Megatron-Bridge.

    kit: the JobSpec (owner "spec") or ModelPreset (owner "model") field; None for a value the kit
        always sets the same way (no field to change it).
    core: Megatron-Core's name, as megatron.json records it; objects: the Megatron-Core objects
        that take it (empty: no Megatron-Core object, Megatron-LM and Bridge only).
    lm: Megatron-LM's argument (args.<dest>): SAME = core's, None = Megatron-LM has none.
    bridge: "section.field" of Bridge's ConfigContainer (SAME = "model.<core>"), None = none.
    resolved: the kit's value Megatron is given, when it is not the field itself: the name of a
        property (etp -> expert_tp) or a function of the spec or model.
    to_megatron / to_kit: the value conversion each way (None: the same value).
    to_lm: Megatron-LM's value when its argument says the opposite of Megatron-Core's
        (--no-load-optim); None: Megatron-Core's value.
    model_kind: "moe" / "mla" / "hybrid": the config takes it only for that kind of model (a MoE block, an
        MLATransformerConfig); Megatron-LM's defaults for other models are not read back.
    reads_back: from_megatron sets the kit field from the Megatron value (False: the kit decides
        it itself, or reads it from a combination of values).
    """
    kit: str | None
    core: str
    objects: tuple[str, ...] = ()
    lm: str | None = SAME
    bridge: str | None = SAME
    owner: str = "spec"
    resolved: str | Callable | None = None
    to_megatron: Callable | None = None
    to_kit: Callable | None = None
    to_lm: Callable | None = None
    model_kind: str | None = None
    reads_back: bool = True

    @property
    def lm_name(self) -> str | None:
        return self.core if self.lm == SAME else self.lm

    @property
    def bridge_name(self) -> str | None:
        return f"model.{self.core}" if self.bridge == SAME else self.bridge

    @property
    def bridge_section(self) -> str | None:
        return self.bridge_name.split(".")[0] if self.bridge_name else None

    @property
    def bridge_field(self) -> str | None:
        return self.bridge_name.split(".", 1)[1] if self.bridge_name else None

    def kit_value(self, obj):
        """The kit's value Megatron is given (the field, or what `resolved` says)."""
        if callable(self.resolved):
            return self.resolved(obj)
        return getattr(obj, self.resolved or self.kit)

    def megatron_value(self, obj):
        """Megatron-Core's (and Bridge's) value for the kit's spec or model `obj`."""
        value = self.kit_value(obj)
        return self.to_megatron(value) if self.to_megatron else value

    def lm_value(self, obj):
        """Megatron-LM's value for `obj` (args.<lm_name>)."""
        value = self.megatron_value(obj)
        return self.to_lm(value) if self.to_lm else value

    def kit_from(self, value):
        """The kit field's value for a Megatron-Core value."""
        return self.to_kit(value) if self.to_kit else value


def _on(value: str) -> bool:
    return value == "on"  # "auto" is decided before a job starts (helpers/job/rules/resolve.py)


def _on_off(value: bool) -> str:
    return "on" if value else "off"


def _bucket_size(spec):
    # without overlap Megatron reduces the whole buffer as one bucket: nothing starts early
    return spec.overlap_bucket_size if spec.overlap_grad_reduce == "on" else None


def _first_load(spec):
    return (spec.load_dirs() or [None])[0]  # Megatron-LM and Bridge load one checkpoint per run


L, TC, DDP, OPT = PARALLEL_STATE, TRANSFORMER_CONFIG, DDP_CONFIG, OPTIMIZER_CONFIG  # short, for the rows below

# In the order megatron.json records each object's values (and Megatron-LM's flags follow it).
SPEC_NAMES = (
    # ---- the layout
    Name("tp", "tensor_model_parallel_size", (L, TC)),
    Name("pp", "pipeline_model_parallel_size", (L, TC)),
    Name("vpp", "virtual_pipeline_model_parallel_size", (L, TC), lm="num_virtual_stages_per_pipeline_rank"),
    Name("first_stage_layers", "num_layers_in_first_pipeline_stage", (TC,), lm="decoder_first_pipeline_num_layers"),
    Name("last_stage_layers", "num_layers_in_last_pipeline_stage", (TC,), lm="decoder_last_pipeline_num_layers"),
    Name("cp", "context_parallel_size", (L, TC)),
    Name("ep", "expert_model_parallel_size", (L, TC)),
    Name("etp", "expert_tensor_parallel_size", (L, TC), resolved="expert_tp"),  # none = TP, as Megatron's
    Name("sp", "sequence_parallel", (TC,)),
    # Megatron-LM's default (10 minutes) is a GPU cluster's; the kit's is per backend (runtime/setup.py)
    Name("collective_timeout_s", "distributed_timeout_minutes", (L,), bridge="dist.distributed_timeout_minutes",
         to_megatron=lambda s: s / 60, to_kit=lambda m: m * 60, reads_back=False),
    # ---- data-parallel communication and the optimizer
    # Megatron-LM's validate_args turns accumulate_allreduce_grads_in_fp32 on for --bf16 unless
    # --grad-reduce-in-bf16 (read back from both: launch/from_megatron.py; the switch: rundir/megatron_flags.py)
    Name("grad_reduce_dtype", "grad_reduce_in_fp32", (DDP,), lm="accumulate_allreduce_grads_in_fp32",
         bridge="ddp.grad_reduce_in_fp32", to_megatron=lambda dtype: dtype == "fp32",
         to_kit=lambda fp32: "fp32" if fp32 else "bf16"),
    Name("overlap_grad_reduce", "overlap_grad_reduce", (DDP,), bridge="ddp.overlap_grad_reduce",
         to_megatron=_on, to_kit=_on_off),
    Name("overlap_param_gather", "overlap_param_gather", (DDP, OPT), bridge="ddp.overlap_param_gather",
         to_megatron=_on, to_kit=_on_off),
    Name("dist_opt", "use_distributed_optimizer", (DDP, OPT), bridge="ddp.use_distributed_optimizer"),
    # Planned, not built by the kit's worker (helpers/job/rules/builder.py): no Megatron-Core object
    # takes them from the kit. Megatron-FSDP's strategy counts only with --use-megatron-fsdp (read
    # back from both: launch/from_megatron.py).
    Name("megatron_fsdp", "data_parallel_sharding_strategy", bridge="ddp.data_parallel_sharding_strategy",
         to_megatron=lambda strategy: strategy or "no_shard", reads_back=False),
    Name("fp8_param_gather", "fp8_param_gather", bridge="mixed_precision.fp8_param_gather"),
    Name("ddp_bucket_size", "bucket_size", (DDP,), lm="ddp_bucket_size", bridge="ddp.bucket_size",
         resolved=_bucket_size),
    Name("weight_decay", "weight_decay", (OPT,), bridge="optimizer.weight_decay"),
    Name("adam_beta1", "adam_beta1", (OPT,), bridge="optimizer.adam_beta1"),
    Name("adam_beta2", "adam_beta2", (OPT,), bridge="optimizer.adam_beta2"),
    Name("adam_eps", "adam_eps", (OPT,), bridge="optimizer.adam_eps"),
    Name("clip_grad", "clip_grad", (OPT,), bridge="optimizer.clip_grad"),
    # ---- the batch and the schedule
    Name("micro_batch", "micro_batch_size", (BATCH,), bridge="train.micro_batch_size"),
    Name("global_batch", "global_batch_size", (BATCH,), bridge="train.global_batch_size",
         resolved="global_batch_size"),
    Name("seq_len", "seq_length", (BATCH,), bridge="model.seq_length"),
    Name("iters", "train_iters", (BATCH,), bridge="train.train_iters"),
    Name("lr", "lr", (OPT, BATCH), bridge="optimizer.lr"),
    Name("min_lr", "min_lr", (OPT, BATCH), bridge="optimizer.min_lr"),
    Name("lr_warmup_iters", "lr_warmup_iters", (BATCH,), bridge="scheduler.lr_warmup_iters"),
    Name("lr_decay", "lr_decay_style", (BATCH,), bridge="scheduler.lr_decay_style"),
    Name("lr_decay_iters", "lr_decay_iters", bridge="scheduler.lr_decay_iters", resolved="lr_decay_end"),
    Name("seed", "seed", (BATCH,), bridge="rng.seed"),
    # ---- the model's MoE routing and activation recompute (TransformerConfig)
    Name("moe_dispatcher", "moe_token_dispatcher_type", (TC,), model_kind="moe"),
    Name("recompute_granularity", "recompute_granularity", (TC,)),
    Name("recompute_method", "recompute_method", (TC,)),
    Name("recompute_num_layers", "recompute_num_layers", (TC,)),
    # a fresh list: TransformerConfig.__post_init__ may append to it
    Name("recompute_modules", "recompute_modules", (TC,),
         to_megatron=lambda modules: None if modules is None else list(modules)),
    # ---- precision, data, evaluation, logging and checkpoints: Megatron-LM's and Bridge's only
    Name("backend", "transformer_impl", lm="transformer_impl", bridge="model.transformer_impl",
         to_megatron=lambda backend: "transformer_engine" if backend == "te" else "local",
         to_kit=lambda impl: "te" if impl == "transformer_engine" else "local", reads_back=False),
    Name("fp8_recipe", "fp8_recipe", bridge="mixed_precision.fp8_recipe", reads_back=False),
    Name("data_split", "split", bridge="dataset.split", reads_back=False),
    Name("eval_interval", "eval_interval", bridge="validation.eval_interval",
         resolved=lambda spec: max(1, spec.eval_interval or spec.iters),  # 0: after the last iteration only
         reads_back=False),
    Name("eval_iters", "eval_iters", bridge="validation.eval_iters", reads_back=False),
    Name("eval_only", "skip_train", bridge="validation.skip_train", reads_back=False),
    Name("log_interval", "log_interval", bridge="logger.log_interval", reads_back=False),
    Name("save_interval", "save_interval", bridge="checkpoint.save_interval", reads_back=False),
    Name("save_dir", "save", bridge="checkpoint.save", reads_back=False),
    Name("load_dir", "load", bridge="checkpoint.load", resolved=_first_load, reads_back=False),
    Name("load_optimizer", "load_optim", lm="no_load_optim", bridge="checkpoint.load_optim",
         to_lm=lambda load: not load, reads_back=False),
)

# ModelPreset fields with one Megatron-Core TransformerConfig field each.
MODEL_NAMES = (
    Name("num_layers", "num_layers", (TC,), owner="model"),
    Name("hidden_size", "hidden_size", (TC,), owner="model"),
    Name("num_attention_heads", "num_attention_heads", (TC,), owner="model"),
    # read back from --group-query-attention with --num-query-groups (from_megatron)
    Name("num_query_groups", "num_query_groups", (TC,), owner="model", reads_back=False),
    Name("kv_channels", "kv_channels", (TC,), owner="model"),
    Name("ffn_hidden_size", "ffn_hidden_size", (TC,), owner="model"),
    Name("normalization", "normalization", (TC,), owner="model"),
    Name("add_bias_linear", "add_bias_linear", (TC,), owner="model"),
    Name("qk_layernorm", "qk_layernorm", (TC,), owner="model"),
    Name("add_qkv_bias", "add_qkv_bias", (TC,), owner="model"),
    Name("num_experts", "num_moe_experts", (TC,), lm="num_experts", owner="model", model_kind="moe"),
    Name("moe_router_topk", "moe_router_topk", (TC,), owner="model", model_kind="moe"),
    Name("moe_ffn_hidden_size", "moe_ffn_hidden_size", (TC,), owner="model", model_kind="moe",
         resolved="expert_ffn"),  # none = the dense width
    Name("moe_shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", (TC,), owner="model",
         model_kind="moe"),
    # the switch itself on every config; the MLA sizes below only on an MLATransformerConfig
    Name("multi_latent_attention", "multi_latent_attention", (TC,), owner="model"),
    Name("q_lora_rank", "q_lora_rank", (TC,), owner="model", model_kind="mla"),
    Name("kv_lora_rank", "kv_lora_rank", (TC,), owner="model", model_kind="mla"),
    Name("qk_head_dim", "qk_head_dim", (TC,), owner="model", model_kind="mla"),
    Name("qk_pos_emb_head_dim", "qk_pos_emb_head_dim", (TC,), owner="model", model_kind="mla"),
    Name("v_head_dim", "v_head_dim", (TC,), owner="model", model_kind="mla"),
    # Planned, not built from these rows (the worker builds hybrids from an imported Nemotron-H's
    # Bridge provider and no MTP block): read back from a Megatron-LM command for the memory plan.
    # A pattern's pipeline separators ("|") and its MTP part (after "/") are not layers of the stack.
    Name("hybrid_pattern", "hybrid_layer_pattern", lm=SAME, bridge=None, owner="model", model_kind="hybrid",
         to_kit=lambda pattern: pattern.split("/")[0].replace("|", "")),
    Name("mamba_num_heads", "mamba_num_heads", owner="model", model_kind="hybrid"),
    Name("mamba_head_dim", "mamba_head_dim", owner="model", model_kind="hybrid"),
    Name("mamba_state_dim", "mamba_state_dim", owner="model", model_kind="hybrid"),
    Name("mamba_num_groups", "mamba_num_groups", owner="model", model_kind="hybrid"),
    Name("mtp_num_layers", "mtp_num_layers", owner="model", to_kit=lambda n: n or 0),
)

TABLE = SPEC_NAMES + MODEL_NAMES

# JobSpec fields with no one Megatron counterpart, and why.
KIT_ONLY = {
    "nproc": "the ranks torchrun starts; Megatron-LM reads WORLD_SIZE, Bridge the launcher's",
    "model": "a kit preset's name; its fields are MODEL_NAMES' rows",
    "model_overrides": "changes to the preset's fields (MODEL_NAMES' rows)",
    "hf_model": "an HF folder: Bridge's AutoBridge builds the provider from it, Megatron-LM loads Bridge's import",
    "export_hf": "Bridge's export of the trained checkpoint after the run, not a training argument",
    "attention": "the kit's core attention for its local backend; Megatron-LM's attention_backend stays TE's",
    "cross_entropy": "which kernels compute the fused cross-entropy on GPU; the script keeps Megatron's "
                     "cross_entropy_fusion_impl (native; te, with Transformer Engine, works as the kit's kernels do)",
    "data": "several arguments (--mock-data, --data-path or per-split paths) from the resolved data record",
    "tokenizer": "several arguments, made by one rule: helpers/rundir/megatron_lm.tokenizer_arguments",
    "data_dir": "where the kit finds raw text to tokenize; Megatron reads the tokenized indexed datasets",
    "data_column": "which JSONL key or Parquet column the kit tokenizes; Megatron reads indexed datasets",
    "device": "where the kit's ranks run; Megatron-LM and Bridge run on GPUs",
    "precision": "several fields at once: bf16 and params_dtype (TransformerConfig), --bf16 / --fp8",
    "fp8_output_layer": "the kit's own FP8 linears on the output layer; Megatron's FP8 is Transformer Engine's",
    "seed_checkpoint": "the kit's cached world-size-1 start, so every layout starts from the same weights",
    "seed_checkpoint_dir": "where the workers find that start (a node-local copy on a multi-node job)",
    "name": "the run directory's name",
    "out": "the run directories' parent folder",
    "tensorboard": "the kit writes its event files into the run directory itself",
    "timeout_s": "the kit's wall-clock watchdog on the whole job",
    "stall_timeout_s": "the kit's heartbeat watchdog",
    "env": "environment variables for the kit's ranks",
    "hf_parity_layouts": "the kit's logits check against transformers",
    "groups_only": "the kit's process-group probe",
    "instruments": "the kit's own measurements (comm, timeline, MoE)",
    "capture_tensors_at": "the kit's tensor capture for a lesson",
    "torch_profile": "the kit's torch.profiler tables",
    "torch_profile_mode": "the kit's torch.profiler tables",
    "faults": "failures the kit injects on purpose",
}


# ---- lookups ------------------------------------------------------------------------------------
def for_object(obj: str, owner: str = "spec") -> tuple[Name, ...]:
    """The rows a Megatron-Core object takes from the kit's spec (or model), in table order."""
    return tuple(n for n in TABLE if obj in n.objects and n.owner == owner)


def core_values(source, obj: str, owner: str = "spec", model_kind: str | None = None) -> dict:
    """{Megatron-Core name: value} of `source` (a JobSpec, or a ModelPreset with owner "model")
    for the object `obj`: the rows every model takes, or with `model_kind` ("moe", "mla") only
    that kind's."""
    return {n.core: n.megatron_value(source) for n in for_object(obj, owner) if n.model_kind == model_kind}


def of_kit(field: str) -> Name:
    """The row of a kit field."""
    return next(n for n in TABLE if n.kit == field)


def core_name(field: str) -> str:
    return of_kit(field).core


def lm_name(field: str) -> str:
    return of_kit(field).lm_name


def bridge_field(field: str) -> str:
    return of_kit(field).bridge_field


def lm_values(spec, fields) -> dict:
    """{Megatron-LM argument: value} for these JobSpec fields, in their order."""
    return {of_kit(f).lm_name: of_kit(f).lm_value(spec) for f in fields}


def bridge_values(spec, fields) -> dict:
    """{Bridge field: value} for these JobSpec fields, in their order (one section's)."""
    return {of_kit(f).bridge_field: of_kit(f).megatron_value(spec) for f in fields}


def layout_rows() -> tuple[Name, ...]:
    """The parallel sizes TransformerConfig takes (ParallelSizes' fields), in table order."""
    sizes = {f.name for f in fields(ParallelSizes)}
    return tuple(n for n in for_object(TRANSFORMER_CONFIG) if n.kit in sizes)


# Megatron-Core's name -> Megatron-LM's argument, where the two differ.
RENAMED = {n.core: n.lm_name for n in TABLE if n.lm_name and n.objects and n.core != n.lm_name}
# ... and back: Megatron-LM's argument (or a Bridge field, which keeps Megatron-Core's names) -> Megatron-Core's.
CORE_OF_LM = {lm: core for core, lm in RENAMED.items()}
