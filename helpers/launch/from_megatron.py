"""The other way round from megatron-lm.sh and bridge_recipe.py: a Megatron-LM command line or a
Megatron-Bridge recipe read into a JobSpec, so a job written for a GPU cluster can be planned and
run here, full size or shrunk.

    reading = read_megatron_args("--tensor-model-parallel-size 2 --num-layers 4 ...")  # Megatron-LM's own parser
    reading = read_bridge_recipe("megatron.bridge.recipes.llama.llama3:llama3_8b_pretrain_config")
    spec = reading.spec(nproc=8)        # layout, batch, schedule, optimizer, model (model_overrides)
    reading.message()                   # every value set away from Megatron's default that the kit does not model
    small, how = shrink(spec)           # the same layout on CPU, narrow and shallow (launch/shrink.py)
    plan_text(spec, "h100-80gb")        # the full-size memory plan on a named GPU

Both read into Megatron-Core's names (TransformerConfig, DDP and optimizer configs, the batch), the
names megatron.json records; helpers/job/megatron_names.py turns Megatron-LM's argument names into
them and each of them into the JobSpec or ModelPreset field (with its value conversion) that
build.py sets it from."""
from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass, field

from helpers.errors import InvalidJob
from helpers.job import megatron_names
from helpers.job.spec import LR_DECAYS, RECOMPUTE_MODULES, RECOMPUTE_MODULES_DEFAULT, JobSpec
from helpers.launch import bridge_recipe_values
from helpers.launch.shrink import round_up, shrink

# The rows of helpers/job/megatron_names.py read back: Megatron-Core's name -> JobSpec / ModelPreset field.
SPEC_ROWS = tuple(n for n in megatron_names.SPEC_NAMES if n.reads_back)
MODEL_ROWS = tuple(n for n in megatron_names.MODEL_NAMES if n.reads_back)
SPEC = {n.core: n.kit for n in SPEC_ROWS}
MODEL = {n.core: n.kit for n in MODEL_ROWS}
# Read below from a combination of values (or what the kit always builds), not one field each.
COMBINED = {"num_query_groups", "group_query_attention", "gated_linear_unit", "activation_func", "swiglu",
            "squared_relu", "share_embeddings_and_output_weights", "untie_embeddings_and_output_weights",
            "max_position_embeddings", "vocab_size", "padded_vocab_size", "moe_layer_freq", "bf16", "fp16",
            "position_embedding_type", "hidden_dropout", "attention_dropout", "mock_data", "data_path",
            "start_weight_decay", "end_weight_decay", "weight_decay_incr_style", "mixed_precision",
            "recompute_activations", "grad_reduce_in_bf16", "train_samples", "lr_warmup_samples",
            "lr_decay_samples", "lr_warmup_fraction", "fp8", "fp8_recipe", "use_megatron_fsdp",
            "data_parallel_sharding_strategy", "megatron_fsdp_main_grads_dtype", "megatron_fsdp_grad_comm_dtype",
            "num_layers_per_virtual_pipeline_stage", "make_vocab_size_divisible_by",
            "create_attention_mask_in_dataloader", "hybrid_override_pattern", "moe_flex_dispatcher_backend",
            "step_batch_size_schedule",
            "spec",  # the layer-spec module: the planner builds Megatron's stack of the model's kind itself
            # what the planner assumes already: fp32 router logits and probabilities, tokens spread evenly
            "moe_router_dtype", "moe_router_force_load_balancing",
            "fp8_param", "first_last_layers_bf16", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16",
            "use_precision_aware_optimizer", "exp_avg_dtype", "exp_avg_sq_dtype", "main_grads_dtype"}
KIT_BUILDS = {"position_embedding_type": "rope", "hidden_dropout": 0.0, "attention_dropout": 0.0}
# Values that change the model's numbers (its initial weights, RoPE frequencies, the norms' stored
# weight) but neither its memory nor its time: named apart from the ignored ones.
NUMBERS = {"rotary_base", "init_method_std", "apply_layernorm_1p", "layernorm_zero_centered_gamma",
           "fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_margin"}
# Values that change how a run uses memory or time in ways a per-GPU memory plan and the step-time
# model leave out, each with what it does instead: named apart from the ignored ones.
NOT_PLANNED = {
    "empty_unused_memory_level": "torch.cuda.empty_cache() after each step or evaluation: lowers what the "
                                 "caching allocator keeps between steps, not the peak planned here; costs a "
                                 "re-allocation each step",
    "manual_gc": "Python's garbage collector run on every rank at the same iterations instead of at random "
                 "times (no rank-to-rank stalls); no GPU memory and no modelled step time",
    "manual_gc_interval": "the iterations between those collections (see manual_gc)",
    "fsdp_double_buffer": "Megatron-FSDP's gathered layers in two fixed buffers: the plan already holds two "
                          "layers' gathered parameters (the running one and the prefetched next)",
    "nccl_ub": "NCCL user buffers: collectives read and write registered memory in place (faster, "
                   "fewer SMs); the same buffers as planned",
    "fsdp_manual_registration": "registers Megatron-FSDP's buffers for NCCL user buffers once, by hand "
                                "(see --use-nccl-ub)",
    "manual_gc_eval": "Python's garbage collector run after evaluations too (see manual_gc)",
    "moe_hybridep_num_sms": "the SMs HybridEP's dispatch kernels take from the GEMMs: a few percent of step "
                            "time, no memory",
    "cuda_graph_scope": "the parts captured as CUDA graphs: no launch overhead; the graphs' static buffers "
                        "and memory pools come on top of the plan",
}
# Megatron-LM's sizes of a kind of model have defaults (kv_lora_rank 32, mamba_head_dim 64, ...) that a
# model of another kind must not take: read only where the switch is on.
KIND_SWITCH = {"mla": "multi_latent_attention", "hybrid": "hybrid_layer_pattern"}


@dataclass
class Reading:
    """A Megatron-LM command or a Bridge recipe as JobSpec fields, and what of it the kit leaves out."""
    source: str  # "a Megatron-LM command line" or the recipe's MODULE:FUNCTION
    fields: dict  # JobSpec keywords (model_overrides: the whole model)
    ignored: dict = field(default_factory=dict)  # name -> value: set away from Megatron's default, not modelled
    machine: dict = field(default_factory=dict)  # name -> value: kernels and backends the kit picks per machine
    numbers: dict = field(default_factory=dict)  # name -> value: the model's numbers (NUMBERS), not modelled
    not_planned: dict = field(default_factory=dict)  # name -> (value, why): outside the memory plan (NOT_PLANNED)
    changed: list = field(default_factory=list)  # "what -> what the kit trains instead"

    def spec(self, **overrides) -> JobSpec:
        return dataclasses.replace(JobSpec(**self.fields), **overrides)

    def message(self) -> str:
        """One message naming every value the kit does not take over (empty: all of it)."""
        parts = []
        if self.ignored:
            parts.append("ignored (the kit does not model them): "
                         + ", ".join(f"{k}={_short(v)}" for k, v in self.ignored.items()))
        if self.numbers:
            parts.append("not modelled (changes the model's numbers, not memory or time): "
                         + ", ".join(f"{k}={_short(v)}" for k, v in self.numbers.items()))
        if self.not_planned:
            parts.append("read, outside the memory plan: " + "; ".join(
                f"{k}={_short(v)} ({why})" for k, (v, why) in self.not_planned.items()))
        if self.changed:
            parts.append("trained differently: " + "; ".join(self.changed))
        if self.machine:
            parts.append("left to the kit's choice for this machine: "
                         + ", ".join(f"{k}={_short(v)}" for k, v in self.machine.items()))
        return ("; ".join(parts) + ".") if parts else ""


def _short(value) -> str:
    text = getattr(value, "__name__", None) or str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _read(values: dict, given: dict, source: str, label: str) -> Reading:
    """`values`: every Megatron-Core-named value (defaults too); `given`: display name -> (Megatron-Core
    name, value) of those set away from the default (e.g. "--disable-bias-linear": ("add_bias_linear", False))."""
    from helpers.rundir.megatron_flags import DERIVED, MACHINE

    v = values.get
    fields, model, changed = {}, {"name": label, "source": source}, []
    for n in SPEC_ROWS:
        if v(n.core) is not None:
            fields[n.kit] = n.kit_from(v(n.core))
    if fields.get("sp") and fields.get("tp", 1) == 1:  # Megatron-LM's validate_args does the same
        fields["sp"] = False
        changed.append("sequence_parallel True -> False at tensor_model_parallel_size 1 (Megatron-LM turns it off: "
                       "no tensor-parallel group to split the sequence over)")
    _samples(fields, v, changed)
    _recompute(fields, v("recompute_activations"), changed)
    _virtual_stages(fields, v)
    _megatron_fsdp(fields, v)
    if v("moe_token_dispatcher_type") == "flex":
        fields["moe_dispatcher"] = "alltoall"
        changed.append(f"moe_token_dispatcher_type flex ({v('moe_flex_dispatcher_backend')}) -> alltoall: the same "
                       "tokens over the same links; the fused dispatcher's own communication buffers are not planned")
    if v("create_attention_mask_in_dataloader"):  # Megatron-LM's default; its fused attention ignores it
        mask = fields.get("micro_batch", 1) * (fields.get("seq_len") or 0) ** 2 / 2**20
        changed.append(f"create_attention_mask_in_dataloader True -> False: the kit's batches carry no mask (causal "
                       f"attention needs none); Megatron-LM's is a b x s x s boolean per micro batch, {mask:.0f} MiB "
                       "here, outside the plan (--no-create-attention-mask-in-dataloader turns it off)")
    if fields.get("lr_decay") not in LR_DECAYS:
        changed.append(f"lr_decay_style {fields.pop('lr_decay', None)} -> {JobSpec.lr_decay} (the kit's: "
                       f"{', '.join(LR_DECAYS)})")
    if v("weight_decay_incr_style", "constant") == "constant" and v("end_weight_decay") is not None:
        fields["weight_decay"] = v("end_weight_decay")  # Bridge's scheduler holds the decay it trains with
    if v("fp16"):
        changed.append("fp16 -> bf16 (the kit trains bf16 or fp32)")
    fields["precision"] = "bf16" if v("bf16") or v("fp16") else "fp32"
    if v("fp8"):
        _fp8(fields, v, changed)
    # Megatron's cross-entropy, fused or not, keeps an fp32 softmax for the backward; Transformer
    # Engine's (the fused one with impl te) keeps the logits as they are, as the kit's kernels do
    te_loss = v("cross_entropy_loss_fusion") and v("cross_entropy_fusion_impl") == "te"
    fields["cross_entropy"] = "kit" if te_loss else "megatron"
    _precision_aware_optimizer(fields, v, changed)
    if fields["precision"] == "fp32":
        fields.pop("grad_reduce_dtype", None)  # fp32 gradients whatever the DDP setting says
    if isinstance(v("data_path"), list) and len(v("data_path")) == 1:
        fields["data"] = v("data_path")[0]  # one indexed-dataset prefix
    elif v("data_path"):
        changed.append(f"data_path {v('data_path')} -> synthetic data (the kit reads one prefix)")
    for n in MODEL_ROWS:
        if v(n.core) is not None and (n.model_kind not in KIND_SWITCH or v(KIND_SWITCH[n.model_kind])):
            model[n.kit] = n.kit_from(v(n.core))
    if model.get("hybrid_pattern"):  # Megatron-LM counts the layers from the pattern
        model["num_layers"] = len(model["hybrid_pattern"])
        if not model.get("mamba_num_heads") and v("hidden_size"):  # MambaMixer's: expand 2 x hidden / head dim
            model["mamba_num_heads"] = 2 * v("hidden_size") // model["mamba_head_dim"]
    heads, hidden = v("num_attention_heads"), v("hidden_size")
    groups = v("num_query_groups") if v("group_query_attention", True) else None
    model["num_query_groups"] = groups if groups and heads and groups < heads else None
    if heads and hidden and model.get("kv_channels") == hidden // heads:
        model["kv_channels"] = None  # derived, as in the presets
    if not v("ffn_hidden_size") and hidden:
        model["ffn_hidden_size"] = 4 * hidden  # Megatron's default width
    act = getattr(v("activation_func"), "__name__", str(v("activation_func") or ""))
    model["activation"] = ("swiglu" if v("swiglu") or (v("gated_linear_unit") and act.endswith("silu"))
                           else "squared_relu" if v("squared_relu") or act.endswith("squared_relu") else "gelu")
    if v("gated_linear_unit") and not act.endswith("silu"):
        changed.append(f"gated {act} MLP -> GeLU (the kit gates SiLU only)")
    model["tied_embeddings"] = (not v("untie_embeddings_and_output_weights")
                                if "untie_embeddings_and_output_weights" in values
                                else bool(v("share_embeddings_and_output_weights", True)))
    model["max_seq_len"] = v("max_position_embeddings") or v("seq_length") or JobSpec.seq_len
    vocab = v("padded_vocab_size") or v("vocab_size")
    if vocab:
        model["vocab_size"] = vocab
    else:
        changed.append(f"no vocabulary size -> {JobSpec().model_preset().vocab_size} tokens (give --vocab-size)")
    freq = v("moe_layer_freq", 1)
    if isinstance(freq, list) and freq and model.get("num_experts"):
        dense = freq.index(1) if 1 in freq else len(freq)
        model["first_k_dense"] = dense
        if freq[dense:] != [1] * (len(freq) - dense):
            changed.append(f"moe_layer_freq {freq} -> {dense} leading dense layers, then every layer MoE")
    elif isinstance(freq, int) and freq != 1:
        changed.append(f"moe_layer_freq {freq} -> every layer MoE")
    if model.get("moe_shared_expert_intermediate_size"):
        model["num_shared_experts"] = 1
    for name, built in KIT_BUILDS.items():
        if name in values and v(name) != built:
            changed.append(f"{name} {v(name)} -> {built}")
    used = set(SPEC) | set(MODEL) | COMBINED | DERIVED
    unused = {k: (core, x) for k, (core, x) in given.items() if core not in used}
    fields["model_overrides"] = model
    named = MACHINE | NUMBERS | set(NOT_PLANNED)
    return Reading(source, fields,
                   ignored={k: x for k, (core, x) in unused.items() if core not in named},
                   machine={k: x for k, (core, x) in unused.items() if core in MACHINE},
                   numbers={k: x for k, (core, x) in unused.items() if core in NUMBERS},
                   not_planned={k: (x, NOT_PLANNED[core]) for k, (core, x) in unused.items() if core in NOT_PLANNED},
                   changed=changed)


def _fp8(fields: dict, v, changed: list) -> None:
    """FP8 training (Megatron-LM's --fp8-format, Bridge's mixed_precision.fp8): Transformer Engine's
    FP8 GEMMs with bf16 master weights; the recipe decides how tensors are scaled. The E4M3-only and
    the hybrid format (E5M2 gradients) keep the same bytes."""
    from helpers.job.spec import FP8_RECIPES

    fields["precision"] = "fp8"
    if v("fp8_param"):  # Bridge's FP8 parameters: the weights Megatron gathers are FP8
        fields["fp8_param_gather"] = True
    if v("first_last_layers_bf16"):
        changed.append(f"first_last_layers_bf16: the first {v('num_layers_at_start_in_bf16')} and last "
                       f"{v('num_layers_at_end_in_bf16')} layers in bf16 -> planned in FP8 like the rest (their "
                       "saved GEMM inputs take 1 byte per value more than planned)")
    recipe = v("fp8_recipe") or "delayed"
    if recipe in FP8_RECIPES:
        fields["fp8_recipe"] = recipe
    else:  # blockwise / mxfp8: per-block scales beside the same 1-byte tensors
        fields["fp8_recipe"] = "tensorwise"
        changed.append(f"fp8_recipe {recipe} -> tensorwise (the kit's recipes: {', '.join(FP8_RECIPES)}; the same "
                       "1-byte tensors, per-block scales aside)")


def _precision_aware_optimizer(fields: dict, v, changed: list) -> None:
    """Megatron's precision-aware optimizer (TE's FusedAdam): its main gradients' dtype is the
    gradient buffers'; Adam's moments in a narrower dtype are planned in fp32 and named."""
    if not v("use_precision_aware_optimizer"):
        return
    if _dtype(v("main_grads_dtype")) == "bf16":
        fields["grad_reduce_dtype"] = "bf16"
    narrow = {k: _dtype(v(k)) for k in ("exp_avg_dtype", "exp_avg_sq_dtype") if _dtype(v(k)) != "fp32"}
    if narrow:
        changed.append("use_precision_aware_optimizer with " + ", ".join(f"{k} {x}" for k, x in narrow.items())
                       + " -> Adam's moments planned in fp32 (8 bytes per parameter of the optimizer's shard; "
                       "bf16 moments take 4)")


def _dtype(value) -> str:
    """'fp32' / 'bf16' / ... for a torch dtype, its name or Megatron's short name."""
    text = str(value).removeprefix("torch.")
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "None": "fp32"}.get(text, text)


def _virtual_stages(fields: dict, v) -> None:
    """--num-layers-per-virtual-pipeline-stage as validate_args reads it: the layers of a pipeline
    stage over that many per virtual stage (1: no virtual stages)."""
    per_virtual, pp, layers = v("num_layers_per_virtual_pipeline_stage"), fields.get("pp", 1), v("num_layers")
    if per_virtual and layers and pp > 1 and fields.get("vpp") is None:
        vpp = layers // pp // per_virtual
        fields["vpp"] = vpp if vpp > 1 else None


def _megatron_fsdp(fields: dict, v) -> None:
    """Megatron-FSDP (--use-megatron-fsdp) with its sharding strategy; its gradients in bf16 when its
    main-gradient dtype says so (its gradient communication then moves bf16 too)."""
    strategy = v("data_parallel_sharding_strategy")
    if v("use_megatron_fsdp") and strategy and strategy != "no_shard":
        fields["megatron_fsdp"] = strategy
        if v("megatron_fsdp_main_grads_dtype") == "bf16":
            fields["grad_reduce_dtype"] = "bf16"


def _samples(fields: dict, v, changed: list) -> None:
    """A schedule counted in samples, as iterations: Megatron-LM's update_train_iters divides
    --train-samples by the global batch (no batch ramp-up), and its scheduler counts the warm-up
    and decay samples against the samples consumed, so each is that many global batches. A
    --lr-warmup-fraction is that share of the decay (OptimizerParamScheduler's warm-up steps)."""
    batch = fields.get("global_batch")
    if v("train_samples") and v("train_iters") is None:
        if batch:
            fields["iters"] = v("train_samples") // batch
            changed.append(f"train_samples {v('train_samples')} -> {fields['iters']} iterations of {batch} "
                           "sequences (Megatron-LM's update_train_iters)")
        else:
            changed.append(f"train_samples {v('train_samples')} -> iters {JobSpec.iters} (no global batch size "
                           "to divide by: give --global-batch-size)")
    for name, kit in (("lr_warmup_samples", "lr_warmup_iters"), ("lr_decay_samples", "lr_decay_iters")):
        if v(name) and batch:
            fields[kit] = v(name) // batch
            changed.append(f"{name} {v(name)} -> {kit} {fields[kit]} (global batches of {batch})")
        elif v(name):
            changed.append(f"{name} {v(name)} -> {kit} {fields.get(kit, getattr(JobSpec, kit))} (no global "
                           "batch size to divide by)")
    if v("lr_warmup_fraction") is not None:
        end = next((fields[k] for k in ("lr_decay_iters", "iters") if fields.get(k) is not None), JobSpec.iters)
        fields["lr_warmup_iters"] = math.floor(round(v("lr_warmup_fraction") * end, 6))  # 0.29 * 100 = 28.999...
        changed.append(f"lr_warmup_fraction {v('lr_warmup_fraction')} -> lr_warmup_iters "
                       f"{fields['lr_warmup_iters']} (of a decay over {end} iterations)")


def _recompute(fields: dict, recompute_activations: bool, changed: list) -> None:
    """The recompute fields as Megatron acts on them: Megatron-LM's --recompute-activations is
    selective recompute (its validate_args); without a granularity Megatron recomputes nothing, and
    it reads the modules only for selective recompute (TransformerConfig fills in its default,
    core_attn, either way). Modules the kit never builds are left out, and said so."""
    if recompute_activations and fields.get("recompute_granularity") is None:
        fields["recompute_granularity"] = "selective"
    granularity, modules = fields.get("recompute_granularity"), fields.get("recompute_modules")
    if modules is not None and list(modules) == list(RECOMPUTE_MODULES_DEFAULT):
        fields.pop("recompute_modules")  # Megatron's default, as the kit's none says it
    elif modules is not None and granularity != "selective":
        changed.append(f"recompute_modules {modules} -> none (Megatron reads them only with selective recompute)")
        fields.pop("recompute_modules")
    if granularity is None:
        for name in ("recompute_method", "recompute_num_layers"):
            if fields.get(name) is not None:
                changed.append(f"{name} {fields.pop(name)} -> none (without recompute_granularity Megatron "
                               "recomputes nothing)")
        return
    if granularity != "selective" or fields.get("recompute_modules") is None:
        return
    given = list(fields["recompute_modules"])
    kept = [m for m in given if m in RECOMPUTE_MODULES and m != "moe_act"]
    dropped = [f"{m} ({'the kit builds no grouped-GEMM experts' if m == 'moe_act' else 'not in Megatron-Core 0.19.2'})"
               for m in given if m not in kept]
    if dropped:
        changed.append(f"recompute_modules {given} -> {kept or 'no recompute'}: left out {', '.join(dropped)}")
        fields["recompute_modules"] = kept
        if not kept:
            fields.pop("recompute_modules")
            fields["recompute_granularity"] = None


# ---- Megatron-LM's command line ---------------------------------------------------------------
def read_megatron_args(text: str) -> Reading:
    """A Megatron-LM command line (its flags; `torchrun ... pretrain_gpt.py` and line breaks may
    stay) read through Megatron-LM's own parser."""
    from helpers.rundir import megatron_flags

    words = shlex.split(text.replace("\\\n", " "))
    script = max((i for i, w in enumerate(words) if w.endswith(".py")), default=-1)  # torchrun's flags before it
    parser = megatron_flags.parser()
    try:
        args, extra = parser.parse_known_args(words[script + 1:])
    except SystemExit:
        raise InvalidJob(f"[megatron_args] Megatron-LM's parser refused {text!r} -> check the flags against "
                         f"megatron/training/arguments.py") from None
    if extra:
        raise InvalidJob(f"[megatron_args] Megatron-LM has no flag {' '.join(extra)} -> remove it or spell it as "
                         f"Megatron-LM's parser does (python pretrain_gpt.py --help)")
    defaults = vars(parser.parse_args([]))  # what each argument holds when no flag sets it
    options = {a.dest: max(a.option_strings, key=len) for a in parser._actions if a.option_strings}
    given = {options[d]: (bridge_recipe_values.core_name(d), x) for d, x in vars(args).items() if x != defaults.get(d)}
    if args.step_batch_size_schedule is not None and args.global_batch_size is not None:
        raise InvalidJob("[megatron_args] --step-batch-size-schedule with --global-batch-size: Megatron-LM's "
                         "validate_args refuses the pair ('Cannot specify both') -> keep one: the schedule's "
                         "last batch as --global-batch-size, or the schedule alone")
    values = {bridge_recipe_values.core_name(name): value for name, value in vars(args).items()}
    if args.step_batch_size_schedule is not None:  # "0:16 2.4B:320 ...": planned at its last global batch
        values["global_batch_size"] = int(args.step_batch_size_schedule.split()[-1].split(":")[-1])
    if args.bf16:  # validate_args: bf16 gradients accumulated and reduced in fp32 unless --grad-reduce-in-bf16
        values["grad_reduce_in_fp32"] = not args.grad_reduce_in_bf16 and (
            args.accumulate_allreduce_grads_in_fp32 or str(args.main_grads_dtype) in ("fp32", "torch.float32"))
    if args.tokenizer_type == "NullTokenizer" and args.vocab_size:  # +1 end-of-document, padded to divisor x TP
        values["padded_vocab_size"] = round_up(args.vocab_size + 1,
                                               args.make_vocab_size_divisible_by * args.tensor_model_parallel_size)
    return _read(values, given, "a Megatron-LM command line", "megatron-lm")


# ---- a Megatron-Bridge recipe ----------------------------------------------------------------
def read_bridge_recipe(target: str) -> Reading:
    """`MODULE:FUNCTION` (a Megatron-Bridge recipe returning a ConfigContainer) called and read
    (launch/bridge_recipe_values.py)."""
    values, given, label = bridge_recipe_values.recipe_values(target)
    return _read(values, given, target, label)


GPUS_PER_NODE = 8  # the GPU profiles' nodes (DGX / HGX)


def plan_text(spec: JobSpec, gpu: str) -> str:
    """The memory planner's answer for the full-size spec on `gpu` (a name `python -m helpers.advisor
    --list-gpus` shows, or a GPU profile's JSON file), on nodes of 8. A spec that leaves the backend to
    the machine (auto) is planned as the cluster runs it: Megatron-LM's default, Transformer Engine."""
    from helpers.advisor import gpus
    from helpers.job.layout import Layout
    from helpers.memory.plan import plan_memory
    from helpers.memory.training import Training

    profile = gpus.resolve(gpu)
    spec = dataclasses.replace(spec, device="cuda", backend="te" if spec.backend == "auto" else spec.backend)
    layout = Layout.of(spec, backend=spec.backend, gpus_per_node=min(GPUS_PER_NODE, spec.world_size))
    plan = plan_memory(spec.model_preset(), layout, Training.of(spec))
    need, have = plan.reserved_bytes / 2**30, profile.memory_gib
    worst = max(plan.stages, key=lambda s: s.allocated_bytes)
    terms = sorted(worst.terms.items(), key=lambda t: -t[1])[:4]
    return (f"memory plan on {spec.world_size} x {profile.name} ({layout.describe()}, {spec.backend} layers): "
            f"{need:.1f} GiB per GPU of {have:.0f} GiB: {'fits' if need <= have else 'does not fit'} (largest: "
            + ", ".join(f"{k} {v / 2**30:.1f} GiB" for k, v in terms) + ")")


def job(megatron_args: str | None = None, bridge_recipe: str | None = None, shrunk: bool = False,
        spec: JobSpec | None = None, **overrides) -> tuple[JobSpec, JobSpec, list[str]]:
    """The full-size spec, the spec to run (shrunk, or the same) and the lines that say what was read,
    what the kit left out and how it shrank. The job comes from a Megatron-LM command line, a Bridge
    recipe, or else `spec`; `overrides`: JobSpec fields applied last (e.g. nproc=8, iters=2; with
    `shrunk`, they change the full-size job, which is then shrunk: nproc is the full-size job's)."""
    if megatron_args and bridge_recipe:
        raise InvalidJob("[from_megatron] both megatron_args and bridge_recipe given -> give one of them")
    lines = []
    if megatron_args or bridge_recipe:
        reading = read_megatron_args(megatron_args) if megatron_args else read_bridge_recipe(bridge_recipe)
        base = reading.spec()
        lines.append(f"read {reading.source}: model {_model_text(base)}")
        if reading.message():
            lines.append(reading.message())
    else:
        base = dataclasses.replace(spec or JobSpec(), **overrides)
    full = dataclasses.replace(base, **overrides)
    if not shrunk:
        return full, full, lines
    small, how = shrink(full, schedule_of=base)
    lines.append(f"shrunk for cpu ({full.layout_name()} -> {small.layout_name()}): " + ", ".join(how))
    return full, small, lines


def _model_text(spec: JobSpec) -> str:
    m = spec.model_preset()
    moe = f", {m.num_experts} experts top-{m.moe_router_topk}" if m.is_moe else ""
    return (f"{m.num_layers} layers, hidden {m.hidden_size}, ffn {m.ffn_hidden_size}, {m.num_attention_heads} heads "
            f"/ {m.kv_heads} KV, vocab {m.vocab_size}, {m.normalization}, {m.activation}{moe}")
