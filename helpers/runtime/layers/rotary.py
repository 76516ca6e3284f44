"""Rotary embedding fused on GPU: the kit's stand-in for Megatron's `apply_rope_fusion`, which needs
Transformer Engine. bf16 query/key with full-width rotary go to the hand-written Triton kernel
(rotary_triton.py says why); other dtypes and partial rotary to `rotary`
below under torch.compile.

Why: Megatron's unfused rotary path (rope_utils.apply_rotary_pos_emb, plain torch) runs about ten
elementwise kernels per call (slice, cos, sin, two multiplies, a negate and two concatenations)
on the query and on the key of every layer; on a 1.4B GPT on one H200 they took ~12% of the step
(docs/results/gpu_profile.md). `rotary` is the same formula for the common case (bshd layout, rotate-half,
no MLA interleaving, no packed sequences), written once here so that torch.compile fuses it into
one kernel forward and one backward; every other case goes to Megatron's own function unchanged.
`install()` points Megatron's attention module at it; the worker calls it only on GPU (on CPU the
kit imports Megatron without torch.compile, see compat/cpu.py)."""
from __future__ import annotations

import functools

import torch


def rotary(t: torch.Tensor, freqs: torch.Tensor, mscale: float) -> torch.Tensor:
    """Megatron's rotate-half RoPE for t [s, b, heads, dim] and freqs [s, 1, 1, rot_dim]."""
    rot_dim = freqs.shape[-1]
    t, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    cos, sin = (torch.cos(freqs) * mscale).to(t.dtype), (torch.sin(freqs) * mscale).to(t.dtype)
    x1, x2 = torch.chunk(t, 2, dim=-1)
    t = t * cos + torch.cat((-x2, x1), dim=-1) * sin
    return torch.cat((t, t_pass), dim=-1)


@functools.cache
def _compiled():
    return torch.compile(rotary, dynamic=False)


def apply_rotary_pos_emb(t, freqs, config, cu_seqlens=None, mscale=1.0, cp_group=None,
                         mla_rotary_interleaved=False, compiled: bool = True):
    """Drop-in for Megatron's rope_utils.apply_rotary_pos_emb (same arguments)."""
    from megatron.core.models.common.embeddings import rope_utils

    plain = (cu_seqlens is None and not config.apply_rope_fusion and not config.rotary_interleaved
             and not mla_rotary_interleaved and not config.multi_latent_attention)
    if not plain:
        return rope_utils.apply_rotary_pos_emb(t, freqs, config, cu_seqlens=cu_seqlens, mscale=mscale,
                                               cp_group=cp_group, mla_rotary_interleaved=mla_rotary_interleaved)
    if compiled and t.is_cuda:
        from helpers.runtime.layers import rotary_triton  # triton: GPU machines only
        if rotary_triton.applies(t, freqs):
            return rotary_triton.rotary(t, freqs, mscale)
    return (_compiled() if compiled else rotary)(t, freqs, mscale)


def install() -> None:
    """Make Megatron's self-attention call the compiled rotary (GPU jobs only)."""
    from megatron.core.transformer import attention
    attention.apply_rotary_pos_emb = apply_rotary_pos_emb
