"""precision='fp8' checked before any process starts: refused with the reason on the CPU, on GPUs
without FP8 tensor cores and for shapes `torch._scaled_mm` cannot take; never a silent bf16 run.
(Megatron-Core itself, without Transformer Engine, ignores `config.fp8` and trains bf16.)"""
from __future__ import annotations

from helpers.errors import InvalidJob
from helpers.job.models import ModelPreset
from helpers.job.spec import JobSpec

GEMM_MULTIPLE = 16  # torch._scaled_mm: every matrix dimension a multiple of 16
TE_RECIPES = ("tensorwise", "delayed")  # the kit's names that are also Megatron's fp8_recipe values for TE


def device_support():
    """What GPU 0 of this machine runs (helpers/precision/hardware.py)."""
    from helpers.precision import hardware
    return hardware.this_device()


def gemm_dimensions(model: ModelPreset, spec: JobSpec) -> dict[str, int]:
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


def check(spec: JobSpec, model: ModelPreset, support=None) -> None:
    """Raise InvalidJob unless a precision='fp8' job (device and backend resolved) can run as asked.
    `support`: a hardware.Support (default: this machine's GPU 0)."""
    if spec.fp8_output_layer and (spec.precision != "fp8" or spec.backend == "te"):
        raise InvalidJob("fp8_output_layer puts the output layer on the kit's local FP8 GEMMs: it needs "
                         f"precision='fp8' on the local backend (this job: precision={spec.precision!r}, "
                         f"backend={spec.backend!r}). Drop fp8_output_layer, or use precision='fp8' with "
                         "backend='local'")
    if spec.precision != "fp8":
        return
    if spec.device != "cuda":
        raise InvalidJob("precision='fp8' needs a GPU with FP8 tensor cores (compute capability >= 8.9: Ada, "
                         f"Hopper, Blackwell); this job runs on {spec.device}. Use precision='fp32' (CPU) or "
                         "'bf16' (GPU); notebooks/15_precision shows FP8's numerics on CPU, emulated")
    support = support or device_support()
    if not support.fp8_recipes:
        raise InvalidJob(f"precision='fp8' cannot run here: {support.message()}. Use precision='bf16'")
    if spec.backend == "te":  # Megatron's Transformer Engine path (helpers/runtime/build.py)
        if spec.fp8_recipe not in TE_RECIPES:
            raise InvalidJob(f"fp8_recipe={spec.fp8_recipe!r} is the kit's local FP8 path; with backend='te' use "
                             "fp8_recipe='tensorwise' or 'delayed' (Transformer Engine's current and delayed "
                             "scaling), or backend='local'")
        return
    if spec.fp8_recipe not in support.fp8_recipes:
        raise InvalidJob(f"fp8_recipe={spec.fp8_recipe!r} cannot run here: {support.message()}. "
                         f"Use fp8_recipe in {list(support.fp8_recipes)}")
    bad = {k: v for k, v in gemm_dimensions(model, spec).items() if v % GEMM_MULTIPLE}
    if bad:
        raise InvalidJob("precision='fp8': torch._scaled_mm needs every GEMM dimension to be a multiple of "
                         f"{GEMM_MULTIPLE}, but " + ", ".join(f"{k} = {v}" for k, v in bad.items()) +
                         "; change the model or layout so they are (or use precision='bf16')")
