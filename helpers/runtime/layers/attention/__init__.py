"""The kit's core attention for the local (no Transformer Engine) layer spec, on torch's fused
`scaled_dot_product_attention`:
  sdpa.py              attend(query, key, value, scale, causal, allowed=None): the one computation
  core.py              SDPACoreAttention: drop-in for Megatron's local DotProductAttention (cp = 1)
  context_parallel.py  ContextParallelAttention: K/V all-gathered over the CP group, then `attend`
Every layout computes attention through the same kernels on CPU and GPU."""
