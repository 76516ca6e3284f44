"""Number formats and scaling recipes for low-precision training, in torch (CPU and GPU), with the
GPU's quantiser in Triton.

Used on both sides: the worker's FP8 linears (helpers/runtime/layers/fp8_linear.py, on
`torch._scaled_mm`) quantise with these recipes, and lesson 17 measures their error on CPU.
  formats.py     fp32, bf16, fp16, e4m3, e5m2, e8m0: range, spacing, the round-trip bound
  recipes.py     quantise/dequantise: delayed scaling (amax history), current tensorwise,
                 rowwise, MXFP8 (blocks of 32 sharing a power-of-two E8M0 scale)
  fp8_matmul.py  one linear's three GEMMs (forward, input gradient, weight gradient) in FP8, the
                 per-step weight cache and delayed-scaling histories (training_step)
  fp8_gelu_mlp.py  the dense GeLU MLP's four FP8 GEMMs as one Function, the GeLU and its gradient
                 computed inside the casts (TE's LayerNormMLP and fused activation-cast kernels)
  fp8_cast_gpu.py  the GPU quantiser: one Triton kernel per tensor, optionally computing GeLU or its
                 gradient on the way (imported only on a GPU)
  cublaslt_accumulate.py  the FP8 weight gradient summed into fp32 main_grad by cuBLASLt (beta = 1),
                 TE's fused wgrad accumulation (GPU only, through ctypes)
  hardware.py    which GPU runs which recipe (compute capability), with the reason
Nothing here imports the rest of the kit except helpers.errors."""
