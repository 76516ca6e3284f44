"""The kit's modules on Megatron-Core's local layer spec, each replacing a Transformer Engine piece
the local backend lacks (each file's docstring names what it replaces and what TE does instead):
  specs.py          the layer specs every GPT is built with: which module goes where
  norm.py           SequenceParallelNorm (TE's norms: the local norm refuses sequence parallel)
  attention/        core attention on torch SDPA, and its context-parallel form (TE's attention)
  mla.py            multi-latent attention on the local backend (TE's fused norm+linear; a TP fix)
  fp8_linear.py     Megatron's linears with FP8 GEMMs on torch._scaled_mm (TE's FP8 linears)
  fp8_mlp.py        the dense GeLU MLP with its GeLU inside the FP8 casts (TE's LayerNormMLP)
  rotary.py         rotary embedding fused on GPU (TE's rope fusion); rotary_triton.py its kernel
  cross_entropy_triton.py  the loss on GPU in two Triton kernels, no fp32 softmax kept (TE's parallel_cross_entropy)
  wgrad_accumulation.py  weight gradients summed into fp32 main_grad by their GEMM on GPU (apex's kernels)
  mamba/            Mamba-2 hybrids without mamba_ssm (the kernels' torch equivalents)"""
