"""Replaces: apex's `fused_weight_gradient_mlp_cuda` extension, which Megatron-Core calls for
`gradient_accumulation_fusion` (Megatron-LM's default; with Transformer Engine, TE's linears do the
same inside their own backward).

Why it pays: Megatron's DDP keeps every weight's gradient in an fp32 `main_grad` buffer. Without the
fusion each linear's backward writes its weight gradient as a new bf16 tensor, and a DDP hook then
adds it into `main_grad`: an extra read of both and a write per weight per microbatch (about 5% of
a 1.4B GPT's GPU step on an H200, docs/results/gpu_profile.md). With it, the weight-gradient GEMM
accumulates straight into `main_grad` in fp32 (cuBLAS's C += A @ B with bf16 inputs and an fp32 C),
and Megatron hands DDP an empty placeholder instead of a gradient (`grad_added_to_main_grad`).

The same two calls as apex's module, done by torch's `addmm` with `out_dtype` (CUDA only): GPU jobs
install it (helpers/runtime/build.py), CPU jobs keep the fusion off. What Megatron-Core checks: its
`tensor_parallel.layers` imports the extension at import time and refuses the fusion when that
failed, so `install()` puts this module in its place."""
from __future__ import annotations

import sys

import torch


def wgrad_gemm_accum_fp32(total_input: torch.Tensor, grad_output: torch.Tensor, main_grad: torch.Tensor) -> None:
    """main_grad [out, in] (fp32) += grad_output [tokens, out]^T @ total_input [tokens, in] (bf16/fp16),
    summed in fp32 by one GEMM."""
    torch.addmm(main_grad, grad_output.t(), total_input, out_dtype=torch.float32, out=main_grad)


def wgrad_gemm_accum_fp16(total_input: torch.Tensor, grad_output: torch.Tensor, main_grad: torch.Tensor) -> None:
    """The same for a main_grad kept in the inputs' own 16-bit type."""
    main_grad.addmm_(grad_output.t(), total_input)


def install() -> None:
    """Megatron-Core's linears take this module as their gradient-accumulation kernels (before the
    model is built: the linears check it in their constructors)."""
    from megatron.core.tensor_parallel import layers

    module = sys.modules[__name__]
    layers.fused_weight_gradient_mlp_cuda = module
    layers._grad_accum_fusion_available = True
    # megatron/core/utils.py's deferred embedding wgrad imports the extension by name when called
    sys.modules.setdefault("fused_weight_gradient_mlp_cuda", module)
