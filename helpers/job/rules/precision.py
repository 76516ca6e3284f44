"""precision='fp8' checked before any process starts: refused, with the reason, on the CPU, on
GPUs without FP8 tensor cores, for a recipe the GPU lacks and for shapes `torch._scaled_mm` cannot
take; never a silent bf16 run. (Megatron-Core itself, without Transformer Engine, ignores
`config.fp8` and trains bf16.) Category "precision"."""
from __future__ import annotations

from helpers.job.models import ModelPreset
from helpers.job.rules.environment import Environment
from helpers.job.violation import Found, Violation

GEMM_MULTIPLE = 16  # torch._scaled_mm: every matrix dimension a multiple of 16
TE_RECIPES = ("tensorwise", "delayed")  # the kit's names that are also Megatron's fp8_recipe values for TE


def gemm_dimensions(model: ModelPreset, spec) -> dict[str, int]:
    """Each dimension of the FP8 GEMMs on one TP rank (tokens: one microbatch on one CP rank)."""
    tp, h = spec.tp, model.hidden_size
    dims = {"hidden_size": h, "ffn_hidden_size / tp": model.ffn_hidden_size // tp,
            "micro_batch * seq_len / cp": spec.micro_batch * spec.seq_len // spec.cp}
    if not model.multi_latent_attention:
        head = model.kv_channels or h // model.num_attention_heads
        dims["(heads + 2 kv_heads) * head_dim / tp"] = (model.num_attention_heads + 2 * model.kv_heads) * head // tp
        dims["heads * head_dim / tp"] = model.num_attention_heads * head // tp
    if spec.fp8_output_layer:
        dims["vocab_size / tp (fp8_output_layer)"] = model.vocab_size // tp
    return dims


def check(spec, model: ModelPreset, env: Environment) -> list[Violation]:
    """`spec` resolved (device, precision, backend decided)."""
    v = Found("precision")
    if spec.grad_reduce_dtype == "bf16" and not spec.bf16:
        v.add("grad_reduce_bf16_needs_bf16", "grad_reduce_dtype='bf16' keeps the gradient buffers in bf16, but this "
              f"job's parameters and gradients are {spec.precision} (Megatron reduces them in their own dtype)",
              "use grad_reduce_dtype='fp32', or precision='bf16' / 'fp8'")
    if spec.fp8_output_layer and (spec.precision != "fp8" or spec.backend == "te"):
        v.add("fp8_output_layer_needs_local_fp8",
              "fp8_output_layer puts the output layer on the kit's local FP8 GEMMs: it needs precision='fp8' on "
              f"the local backend (this job: precision={spec.precision!r}, backend={spec.backend!r})",
              "drop fp8_output_layer, or use precision='fp8' with backend='local'")
    if spec.precision != "fp8":
        return v
    if spec.device != "cuda":
        v.add("fp8_needs_gpu", "precision='fp8' needs a GPU with FP8 tensor cores (compute capability >= 8.9: Ada, "
              f"Hopper, Blackwell); this job runs on {spec.device}",
              "use precision='fp32' (CPU) or 'bf16' (GPU); notebooks/17_precision shows FP8's numerics on CPU, "
              "emulated")
        return v
    if not env.fp8_recipes:
        v.add("fp8_not_on_this_gpu", f"precision='fp8' cannot run here: {env.fp8_note}", "use precision='bf16'")
        return v
    if spec.backend == "te":  # Megatron's Transformer Engine path (helpers/runtime/layers/specs.py)
        if spec.fp8_recipe not in TE_RECIPES:
            v.add("fp8_recipe_not_te", f"fp8_recipe={spec.fp8_recipe!r} is the kit's local FP8 path",
                  "with backend='te' use fp8_recipe='tensorwise' or 'delayed' (Transformer Engine's current and "
                  "delayed scaling), or backend='local'")
        return v
    if spec.fp8_recipe not in env.fp8_recipes:
        v.add("fp8_recipe_not_on_this_gpu", f"fp8_recipe={spec.fp8_recipe!r} cannot run here: {env.fp8_note}",
              f"use fp8_recipe in {list(env.fp8_recipes)}")
    bad = {k: n for k, n in gemm_dimensions(model, spec).items() if n % GEMM_MULTIPLE}
    if bad:
        v.add("fp8_gemm_shapes", f"precision='fp8': torch._scaled_mm needs every GEMM dimension to be a multiple of "
              f"{GEMM_MULTIPLE}, but " + ", ".join(f"{k} = {n}" for k, n in bad.items()),
              "change the model or layout so they are (or use precision='bf16')")
    return v
