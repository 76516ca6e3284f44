"""The kit's core attention for the local (no Transformer Engine) layer spec, on torch's fused
`scaled_dot_product_attention`.

    sdpa.attend(query, key, value, scale, causal, allowed=None)   the one attention computation
    core.SDPACoreAttention                                         drop-in for Megatron's local
                                                                   DotProductAttention (layer spec)

The context-parallel attention (helpers/runtime/modules.py) calls `sdpa.attend` for its local
computation, so every layout computes attention through the same kernels on CPU and GPU."""
