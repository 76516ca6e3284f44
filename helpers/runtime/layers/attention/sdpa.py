"""Attention through torch's `scaled_dot_product_attention` (SDPA), in Megatron's tensor layout.

Why: Megatron-Core's local `DotProductAttention` materialises every [b, heads, s, s] score and
probability matrix (Megatron-LM issue #778); SDPA's fused kernels never do, and run several times
faster on a GPU. Torch picks the first backend in BACKEND_ORDER that supports the inputs (dtype,
head sizes, mask, GQA, device); its own default order does not put cuDNN first, so we say it.
On CPU only the flash (CPU) and math kernels exist; the order changes nothing there."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKEND_ORDER = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                 SDPBackend.MATH]


def sliding_window(allowed: torch.Tensor | None, q_pos: torch.Tensor, k_pos: torch.Tensor, left: int) -> torch.Tensor:
    """Megatron's sliding window `window_size=(left, 0)` (Mistral's `sliding_window` W is left = W - 1):
    query position q sees keys q - left .. q, on top of `allowed` (the causal pattern when None)."""
    distance = q_pos[:, None] - k_pos[None, :]
    band = (distance >= 0) & (distance <= left)
    return band if allowed is None else allowed & band


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float, causal: bool,
           allowed: torch.Tensor | None = None, dropout_p: float = 0.0, window: int | None = None) -> torch.Tensor:
    """Softmax attention of `query` over `key`/`value`, Megatron's layout in and out.

    query [sq, b, heads, dk]; key [sk, b, kv_heads, dk]; value [sk, b, kv_heads, dv] -> [sq, b, heads * dv].
    kv_heads < heads is grouped-query attention: each K/V head serves heads/kv_heads query heads
    (SDPA's `enable_gqa`, so no repeated K/V copy where the kernel supports it). dk != dv is MLA.
    causal: query i sees keys up to i (aligned at the end when sq < sk, as with a KV cache).
    allowed: a boolean mask, True = may attend, broadcastable to [b, heads, sq, sk]; it replaces
    `causal` (context parallel passes the causal pattern of its load-balanced chunks this way).
    window: a causal sliding window, keys at most `window` positions back (sliding_window above)."""
    sq, b, heads, _ = query.shape
    sk, kv_heads = key.shape[0], key.shape[2]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} key/value heads evenly")
    if causal and allowed is None and (sq != sk or window is not None):  # SDPA's is_causal aligns at the start
        q_pos = torch.arange(sk - sq, sk, device=query.device)
        allowed = torch.arange(sk, device=query.device)[None, :] <= q_pos[:, None]
        if window is not None:
            allowed = sliding_window(allowed, q_pos, torch.arange(sk, device=query.device), window)
    q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, d] views
    with sdpa_kernel(BACKEND_ORDER, set_priority=True):
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed, dropout_p=dropout_p, is_causal=causal and allowed is None,
            scale=scale, enable_gqa=kv_heads != heads)
    return out.permute(2, 0, 1, 3).reshape(sq, b, heads * value.shape[-1])
