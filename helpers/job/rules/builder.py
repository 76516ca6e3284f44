"""What the kit's worker builds: combinations that are valid Megatron but that the chosen backend
does not build, or would build as a different model. Category "backend".

The local backend is Megatron-Core 0.19.2's local layer spec with the kit's modules in place of
Transformer Engine's (helpers/runtime/layers/); `te` is Megatron-Core's own TE spec, which this
kit's machines cannot install (docs/architecture.md, "Backend limits")."""
from __future__ import annotations

from helpers.job.models import ModelPreset
from helpers.job.rules.environment import Environment
from helpers.job.violation import Found, Violation
from helpers.job.sizes import ParallelSizes

# What the worker's layer specs build (helpers/runtime/build.py, layers/specs.py). A preset needing
# more can be planned, but launching it would silently train a different architecture. An imported
# model (hf_model) may also have squared ReLU: Megatron-Bridge's provider sets it.
WORKER_BUILDS = {"activation": {"gelu", "swiglu"}, "normalization": {"LayerNorm", "RMSNorm"}}
WORKER_BUILDS_FROM_HF = {"activation": {"gelu", "swiglu", "geglu", "squared_relu"},
                         "normalization": {"LayerNorm", "RMSNorm"}}


def layout(lay: ParallelSizes, model: ModelPreset, devices) -> list[Violation]:
    """The layout's builder limits (`lay.backend`: "local" or "te"; Layout.validate runs them)."""
    v = Found("backend")
    backend = getattr(lay, "backend", "local")
    if backend not in ("local", "te"):
        v.add("unknown_backend", f"backend {backend!r} is neither 'local' nor 'te'", "use 'local' or 'te'")
        return v
    if backend == "te":
        return v
    # cp > 1 is fine here: Megatron's local attention refuses it, but the kit's ContextParallelAttention
    # takes its place. MLA is built by layers/mla.py (the local spec's two MLA failures and its TP
    # gradient bug fixed there). Mamba layers run through the kit's torch mixer (layers/mamba/) in
    # Megatron's HybridModel, built from a Megatron-Bridge provider: an imported Nemotron-H.
    if model.is_hybrid and not model.built_from_hf:
        v.add("hybrid_needs_hf_import",
              f"{model.name} is a Mamba hybrid: the kit's worker builds hybrids from an imported Hugging Face "
              "Nemotron-H (its Megatron-Bridge config carries the routing and Mamba settings a preset lacks)",
              "plan only, or train an HF Nemotron-H folder: hf_model=PATH (a tiny one: "
              "helpers.launch.tiny_hf.make('nemotronh', PATH))")
    if model.is_hybrid and lay.vpp:
        v.add("hybrid_no_vpp", "virtual pipeline stages are not built for hybrid models (Megatron's HybridModel "
              "needs '|' stage separators in the pattern for them, and Megatron-Bridge 0.6.2's hybrid provider "
              "refuses VPP)", "turn vpp off; split stages with pp and first_stage_layers/last_stage_layers")
    builds = WORKER_BUILDS_FROM_HF if model.built_from_hf else WORKER_BUILDS
    missing = [f"{k}={getattr(model, k)!r}" for k, ok in builds.items() if getattr(model, k) not in ok]
    if missing:
        v.add("kit_worker_lacks_feature",
              f"the kit's worker does not build {', '.join(missing)} yet; it would train a different model",
              "plan only, or pick a preset the worker builds (tiny-*, control-moe*)")
    return v


def job(spec, model: ModelPreset, env: Environment) -> list[Violation]:
    """The job's backend and core attention against what this machine has and the model needs
    (`spec` resolved: helpers/job/rules/resolve.py)."""
    v = Found("backend")
    if spec.backend == "te" and spec.device != "cuda":
        v.add("te_needs_gpu", "backend='te' needs a GPU (Transformer Engine has no CPU kernels)",
              "use backend='local' or 'auto' on CPU")
    elif spec.backend == "te" and not env.te_installed:
        v.add("te_not_installed", "backend='te' asks for Transformer Engine, but `transformer_engine` is not "
              "installed here", "install it (transformer-engine[pytorch]) or use backend='local' or 'auto'")
    if spec.backend == "te" and spec.attention not in ("auto", "transformer_engine"):
        v.add("attention_is_te_on_te", f"attention={spec.attention!r} chooses among the local backend's core "
              "attentions; Megatron's TE layer spec brings Transformer Engine's",
              "leave attention='auto' with backend='te'")
    if spec.backend == "local" and spec.attention == "transformer_engine":
        v.add("attention_needs_te", "attention='transformer_engine' is Transformer Engine's attention, which the "
              "local backend does not build", "use attention='auto' (the kit's SDPA attention) or backend='te'")
    if model.is_moe and model.add_bias_linear and spec.expert_tp != 1:
        v.add("moe_bias_needs_etp1", f"the experts have biases, which Megatron-Core builds only with expert tensor "
              f"parallel 1 (etp is {spec.expert_tp}: it defaults to tp)", "set etp=1")
    if spec.backend == "local" and model.attention_softcap and spec.cp > 1:
        v.add("softcap_attention_no_cp", f"the model soft-caps its attention scores (Gemma 2), which the kit's "
              f"soft-capped attention computes for cp=1 only (cp={spec.cp})", "use cp=1 (spread with tp, pp or dp)")
    if spec.backend == "local" and spec.attention == "sdpa" and model.attention_sinks:
        v.add("sdpa_no_attention_sinks", "the model has attention sinks (a learned softmax offset per head), which "
              "torch SDPA does not compute", "use attention='megatron_local' (or 'auto')")
    if spec.backend == "local" and spec.attention == "megatron_local":
        if spec.cp > 1:
            v.add("megatron_local_attention_no_cp", f"Megatron's local DotProductAttention refuses context "
                  f"parallel (cp={spec.cp}); the kit's context-parallel attention runs on torch SDPA",
                  "use cp=1: attention sinks need Megatron's attention" if model.attention_sinks else
                  "use attention='sdpa' (or 'auto') with cp > 1")
        if model.multi_latent_attention:
            v.add("megatron_local_attention_no_mla", "Megatron's local DotProductAttention does not take MLA's "
                  "separate key and value head sizes (Megatron-LM issue #1589)", "use attention='sdpa' (or 'auto')")
    planned_only = [f"{name}={value!r}" for name, value in (("megatron_fsdp", spec.megatron_fsdp),
                                                             ("fp8_param_gather", spec.fp8_param_gather),
                                                             ("mtp_num_layers", model.mtp_num_layers)) if value]
    if planned_only:
        v.add("planned_not_built", f"{', '.join(planned_only)}: the memory planner models them, but the kit's "
              "worker builds Megatron's DDP, bf16 weights and no multi-token-prediction layers",
              "plan the job (--plan-on GPU), or run it without them (megatron_fsdp -> dist_opt=True, "
              "fp8_param_gather=False, model_overrides mtp_num_layers=0); shrink() does this for a CPU run")
    if spec.fp8_param_gather and (spec.precision != "fp8" or not (spec.dist_opt or spec.megatron_fsdp)):
        v.add("fp8_param_gather_needs_fp8_and_sharding", "fp8_param_gather keeps FP8 parameters for an FP8 job "
              "whose parameters are gathered: Megatron-LM asserts the distributed optimizer or Megatron-FSDP",
              "set precision='fp8' and dist_opt=True (or megatron_fsdp), or drop fp8_param_gather")
    if spec.precision == "fp8" and spec.backend == "local" and model.is_hybrid:
        v.add("fp8_not_built_for_hybrid", "precision='fp8' is not built for hybrid models: the kit's local hybrid "
              "stack (helpers/runtime/layers/mamba/stack.py) uses Megatron's plain linears, so the job would "
              "train in bf16", "use precision='bf16' for a Mamba hybrid")
    return v
