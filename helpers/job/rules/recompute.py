"""Activation recompute (JobSpec.recompute_*): the combinations Megatron-Core 0.19.2's
TransformerConfig.__post_init__ and Megatron-LM's validate_args refuse, settings Megatron would
silently ignore, and recompute modules the kit's local backend does not build. Category "recompute".

What Megatron does with the fields (megatron/core/recompute.py, transformer_layer.py):
  full       each model chunk's layers run under `tensor_parallel.checkpoint`: uniform = in units of
             recompute_num_layers layers, block = the first recompute_num_layers layers one by one;
             a model chunk is one pipeline stage's layers, or one virtual stage's with vpp
  selective  only the modules named: core_attn (the attention core), mlp (dense MLPs), moe (the
             whole MoE layer), shared_experts, mla_up_proj (MLA's up projections), layernorm
             (output-discarding), moe_act (grouped-GEMM experts' activation), gdn_norm_out"""
from __future__ import annotations

from helpers.job.models import ModelPreset
from helpers.job.rules.environment import Environment
from helpers.job.violation import Found, Violation
from helpers.job.spec import RECOMPUTE_MODULES, RECOMPUTE_MODULES_DEFAULT

_FULL_FIX = "recompute_method='uniform', recompute_num_layers=1 (every layer recomputed on its own)"


def modules_of(spec) -> list:
    """The modules a selective job recomputes: its own, or Megatron's default."""
    return list(RECOMPUTE_MODULES_DEFAULT) if spec.recompute_modules is None else list(spec.recompute_modules)


def check(spec, model: ModelPreset | None, env: Environment) -> list[Violation]:
    v = Found("recompute")
    granularity, method, n = spec.recompute_granularity, spec.recompute_method, spec.recompute_num_layers
    if granularity is None:
        given = [f"{k}={getattr(spec, k)!r}" for k in ("recompute_method", "recompute_num_layers",
                                                       "recompute_modules") if getattr(spec, k) is not None]
        if given:
            v.add("recompute_without_granularity", f"{', '.join(given)} but recompute_granularity is none: Megatron "
                  "recomputes nothing and ignores them", "set recompute_granularity='full' or 'selective', or leave "
                  "them unset")
        return v
    if n is not None and n < 1:
        v.add("recompute_num_layers_positive", f"recompute_num_layers must be >= 1, not {n} (Megatron's uniform "
              "method would never leave its first layer)", "use 1 or more")
    if granularity == "full":
        if method is None:
            v.add("recompute_full_needs_method", "recompute_granularity='full' needs recompute_method 'uniform' or "
                  "'block' (Megatron's TransformerConfig raises without one)", f"set {_FULL_FIX}")
        if n is None:
            v.add("recompute_full_needs_num_layers", "recompute_granularity='full' needs recompute_num_layers "
                  "(Megatron's TransformerConfig raises without it)",
                  "set recompute_num_layers=1 (uniform: every layer on its own; block: one layer per model chunk)")
        if spec.recompute_modules is not None:
            v.add("recompute_modules_need_selective", f"recompute_modules={spec.recompute_modules!r} with "
                  "recompute_granularity='full': full recomputes whole layers and Megatron ignores the modules",
                  "use recompute_granularity='selective' for those modules, or leave recompute_modules unset")
        if model is not None and n is not None and n >= 1:
            _num_layers_in_chunk(spec, model, n, v)
    elif granularity == "selective":
        if method is not None:
            v.add("recompute_selective_with_method", f"recompute_method={method!r} with recompute_granularity="
                  "'selective': the method chooses whole layers for full recompute (Megatron-LM's validate_args "
                  "asserts it is unset)", "leave recompute_method unset, or use recompute_granularity='full'")
        if n is not None:
            v.add("recompute_selective_with_num_layers", f"recompute_num_layers={n} with recompute_granularity="
                  "'selective' (Megatron's TransformerConfig raises: selective recomputes in every layer)",
                  "leave recompute_num_layers unset, or use recompute_granularity='full'")
        _modules(spec, model, env, v)
    return v


def _num_layers_in_chunk(spec, model: ModelPreset, n: int, v: Found) -> None:
    """Megatron counts recompute_num_layers within each model chunk (TransformerBlock), in the range
    its own message gives: 1 to the layers of one chunk. Beyond that, uniform recomputes each chunk
    as one unit and block every layer, which the largest chunk's count already says."""
    most = max(chunk_layers(spec, model), default=0)
    if most and n > most:
        vpp = f" x vpp={spec.vpp}" if spec.vpp else ""
        v.add("recompute_num_layers_past_chunk", f"recompute_num_layers={n} but a model chunk holds at most {most} "
              f"layer(s) ({model.num_layers} layers over pp={spec.pp}{vpp}); Megatron counts them within each "
              "chunk", f"use recompute_num_layers between 1 and {most}")


def chunk_layers(spec, model: ModelPreset) -> list[int]:
    """Layers of each pipeline stage's model chunk (one per stage, or per virtual stage), as Megatron
    splits them: uneven first/last stages take their counts, the middle stages share the rest. Empty
    when the layers do not split (rules/layout.py's pipeline rules name that)."""
    L, pp, vpp = model.num_layers, spec.pp, spec.vpp or 1
    first, last = spec.first_stage_layers, spec.last_stage_layers
    if first is None and last is None:
        return [L // (pp * vpp)] * pp if L % (pp * vpp) == 0 else []
    middle = pp - (first is not None) - (last is not None)
    rest = L - (first or 0) - (last or 0)
    counts = [rest // middle if middle else 0] * pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    if any(c < 1 or c % vpp for c in counts) or (middle and rest % middle):
        return []
    return [c // vpp for c in counts]


def _modules(spec, model: ModelPreset | None, env: Environment, v: Found) -> None:
    modules = spec.recompute_modules
    if modules is not None and (isinstance(modules, str) or not isinstance(modules, (list, tuple))):
        v.add("recompute_modules_not_a_list", f"recompute_modules must be a list of module names, not {modules!r}",
              f"e.g. recompute_modules=['core_attn'] (of {', '.join(RECOMPUTE_MODULES)})")
        return
    modules = modules_of(spec)
    if not modules:
        v.add("recompute_modules_empty", "recompute_granularity='selective' with recompute_modules=[] recomputes "
              "nothing", f"name the modules (of {', '.join(RECOMPUTE_MODULES)}), or leave recompute_modules unset "
              f"for Megatron's {', '.join(RECOMPUTE_MODULES_DEFAULT)}")
    unknown = [m for m in modules if m not in RECOMPUTE_MODULES]
    if unknown:
        v.add("recompute_module_unknown", f"recompute_modules {unknown} are not Megatron-Core 0.19.2's (it asserts)",
              f"use some of {', '.join(RECOMPUTE_MODULES)}")
    if "moe_act" in modules:
        v.add("recompute_module_not_built", "recompute_modules 'moe_act' recomputes the activation of grouped-GEMM "
              "experts; the kit's experts are Megatron's SequentialMLP (moe_grouped_gemm off, which Megatron's "
              "TransformerConfig refuses with moe_act)", "use 'moe' (the whole MoE layer) instead")
    if "layernorm" in modules and not env.te_installed:
        v.add("recompute_layernorm_needs_te", "recompute_modules 'layernorm' runs through Megatron-Core 0.19.2's "
              "CheckpointWithoutOutput, which reads Transformer Engine's FP8 state on every call (its fp8 flag is "
              "`fp8 is not None`, so True for its default False) and fails without Transformer Engine, which is "
              "not installed here", "leave 'layernorm' out (e.g. recompute_modules=['core_attn', 'mlp'])")
    if "gdn_norm_out" in modules:
        v.add("recompute_module_not_in_model", "recompute_modules 'gdn_norm_out' is the gated delta net's output "
              "norm, which the kit does not build (Megatron's TransformerConfig refuses it without "
              "experimental_attention_variant='gated_delta_net')", "leave 'gdn_norm_out' out")
    if model is None:
        return
    kinds = model.layer_kinds()
    absent = {"mla_up_proj": (not model.multi_latent_attention, "multi-latent attention (Megatron's "
                              "TransformerConfig refuses mla_up_proj without it)"),
              "core_attn": (not kinds["attention"], "attention layers"),
              "mlp": (not kinds["mlp"], "dense MLP layers (Megatron recomputes 'mlp' only there; 'moe' is the "
                      "MoE layers')"),
              "moe": (not kinds["moe"], "MoE layers"),
              "shared_experts": (not (kinds["moe"] and model.moe_shared_expert_intermediate_size),
                                 "shared experts")}
    for name, (missing, what) in absent.items():
        if name in modules and missing:
            v.add("recompute_module_not_in_model", f"recompute_modules {name!r} but {model.name} has no {what}: "
                  "nothing would be recomputed", f"leave {name!r} out")
