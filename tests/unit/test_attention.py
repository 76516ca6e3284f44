"""The kit's core attention (helpers/runtime/layers/attention/) against a naive softmax(QK^T)V written
here in float64: causal, grouped-query, MLA head sizes (dk != dv), a given softmax scale, a
Megatron-style mask, and the context-parallel module's load-balanced chunks, whose outputs put
back in sequence order must equal attention over the whole sequence. No processes: the CP
all-gather is replaced by the concatenation it would return."""
from types import SimpleNamespace

import pytest
import torch

from helpers.runtime.layers.attention.context_parallel import ContextParallelAttention
from helpers.runtime.layers.attention.core import SDPACoreAttention
from helpers.runtime.layers.attention.sdpa import attend


def naive(q, k, v, scale, allowed):
    """q [sq, b, h, dk], k [sk, b, g, dk], v [sk, b, g, dv], allowed [sq, sk] -> [sq, b, h*dv]."""
    h, g = q.shape[2], k.shape[2]
    k, v = (t.repeat_interleave(h // g, dim=2) for t in (k, v))
    scores = torch.einsum("qbhd,kbhd->bhqk", q, k) * scale
    probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    out = torch.einsum("bhqk,kbhd->qbhd", probs, v)
    return out.reshape(q.shape[0], q.shape[1], -1)


def qkv(s, b, heads, groups, dk, dv, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(s, b, heads, dk, generator=g, dtype=dtype),
            torch.randn(s, b, groups, dk, generator=g, dtype=dtype),
            torch.randn(s, b, groups, dv, generator=g, dtype=dtype))


def config(heads, groups, kv_channels, cp=1):
    from megatron.core.transformer import TransformerConfig
    return TransformerConfig(num_layers=1, hidden_size=heads * kv_channels, num_attention_heads=heads,
                             num_query_groups=groups, kv_channels=kv_channels, context_parallel_size=cp,
                             attention_dropout=0.0, use_cpu_initialization=True)


def causal(sq, sk):
    return torch.arange(sk)[None, :] <= torch.arange(sk - sq, sk)[:, None]


ONE_TP = SimpleNamespace(tp=SimpleNamespace(size=lambda: 1))
# fp64: the SDPA math kernel vs the reference agree to rounding; fp32 runs the CPU flash kernel,
# whose blocked online softmax differs from the two-pass reference by a few float32 ulps.
TOL = {torch.float64: 1e-12, torch.float32: 2e-6}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("heads,groups,dk,dv", [(4, 4, 8, 8), (8, 2, 8, 8), (4, 4, 12, 6), (4, 2, 16, 8)],
                         ids=["mha", "gqa", "mla", "mla-gqa"])
def test_core_attention_matches_naive(dtype, heads, groups, dk, dv):
    from megatron.core.transformer.enums import AttnMaskType

    q, k, v = qkv(16, 2, heads, groups, dk, dv, dtype)
    attn = SDPACoreAttention(config(heads, groups, dk), 1, AttnMaskType.causal, k_channels=dk, v_channels=dv,
                             pg_collection=ONE_TP)
    out = attn(q, k, v, None)
    assert out.shape == (16, 2, heads * dv)
    ref = naive(q.double(), k.double(), v.double(), dk ** -0.5, causal(16, 16))
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=TOL[dtype])


def test_given_scale_and_megatron_mask_are_used():
    """softmax_scale overrides 1/sqrt(dk); a given mask (True = masked, Megatron's convention)
    replaces the causal pattern, as in Megatron's local attention."""
    from megatron.core.transformer.enums import AttnMaskType

    q, k, v = qkv(8, 1, 2, 2, 4, 4, torch.float64)
    attn = SDPACoreAttention(config(2, 2, 4), 1, AttnMaskType.causal, softmax_scale=0.7, pg_collection=ONE_TP)
    masked = torch.rand(8, 8, generator=torch.Generator().manual_seed(1)) < 0.4
    masked.fill_diagonal_(False)  # every query keeps at least one key
    out = attn(q, k, v, masked[None, None])
    torch.testing.assert_close(out, naive(q, k, v, 0.7, ~masked), rtol=0, atol=1e-12)
    with pytest.raises(AssertionError):  # the scale is not ignored
        torch.testing.assert_close(out, naive(q, k, v, 0.5, ~masked), rtol=0, atol=1e-6)


def test_causal_with_fewer_queries_aligns_at_the_end():
    """sq < sk (a KV cache): the last query sees every key, not only the first sq."""
    q, k, v = qkv(8, 1, 2, 2, 4, 4, torch.float64)
    out = attend(q[-3:], k, v, 0.5, causal=True)
    torch.testing.assert_close(out, naive(q[-3:], k, v, 0.5, causal(3, 8)), rtol=0, atol=1e-12)


def test_unsupported_features_are_refused():
    from megatron.core.transformer.enums import AttnMaskType

    with pytest.raises(ValueError, match="ContextParallelAttention"):
        SDPACoreAttention(config(2, 2, 4, cp=2), 1, AttnMaskType.causal, pg_collection=ONE_TP)
    attn = SDPACoreAttention(config(2, 2, 4), 1, AttnMaskType.causal, pg_collection=ONE_TP)
    q, k, v = qkv(4, 1, 2, 2, 4, 4, torch.float32)
    with pytest.raises(ValueError, match="packed"):
        attn(q, k, v, None, packed_seq_params=object())


@pytest.mark.parametrize("cp,heads,groups,dk,dv", [(2, 4, 4, 8, 8), (4, 8, 2, 8, 8), (2, 4, 2, 12, 6)],
                         ids=["cp2-mha", "cp4-gqa", "cp2-mla-gqa"])
def test_context_parallel_chunks_equal_whole_sequence(cp, heads, groups, dk, dv, monkeypatch):
    """Each CP rank attends its two load-balanced chunks over the all-gathered K/V under its
    explicit global-position mask; put back in order, the ranks' outputs are full causal attention."""
    from megatron.core.tensor_parallel import mappings
    from megatron.core.transformer.enums import AttnMaskType

    seq, chunk = 8 * cp, 4
    q, k, v = qkv(seq, 2, heads, groups, dk, dv, torch.float64)
    order = [torch.cat([torch.arange(r * chunk, (r + 1) * chunk),
                        torch.arange((2 * cp - 1 - r) * chunk, (2 * cp - r) * chunk)]) for r in range(cp)]
    gathered = {"k": torch.cat([k[o] for o in order]), "v": torch.cat([v[o] for o in order])}
    out = torch.empty(seq, 2, heads * dv, dtype=torch.float64)
    for r in range(cp):
        group = SimpleNamespace(size=lambda: cp, rank=lambda r=r: r)
        attn = ContextParallelAttention(config(heads, groups, dk, cp=cp), 1, AttnMaskType.causal,
                                        pg_collection=SimpleNamespace(tp=ONE_TP.tp, cp=group),
                                        k_channels=dk, v_channels=dv)
        pick = iter(["k", "v"])
        monkeypatch.setattr(mappings, "gather_from_sequence_parallel_region",
                            lambda t, *a, **kw: gathered[next(pick)])
        out[order[r]] = attn(q[order[r]], k[order[r]], v[order[r]], None)
    torch.testing.assert_close(out, naive(q, k, v, dk ** -0.5, causal(seq, seq)), rtol=0, atol=1e-12)


def transformers_sliding_window(seq: int, window: int) -> torch.Tensor:
    """transformers' own sliding-window causal mask (Mistral's `sliding_window`), [q, k], True = sees."""
    from transformers.masking_utils import sliding_window_causal_mask_function

    allowed = sliding_window_causal_mask_function(window)
    return allowed(0, 0, torch.arange(seq)[:, None], torch.arange(seq)[None, :])


def window_config(heads, groups, kv_channels, window, cp=1, skip_freq=None):
    c = config(heads, groups, kv_channels, cp)
    c.window_size, c.window_attn_skip_freq = (window - 1, 0), skip_freq  # what Bridge's Mistral provider sets
    return c


def test_sliding_window_equals_transformers_mask_and_skips_the_layers_megatron_skips():
    """HF sliding_window W (Megatron window_size (W-1, 0)): each query sees its last W keys; with
    window_attn_skip_freq=2, layer 2 is a full-attention layer, as Megatron's own attention decides."""
    from megatron.core.transformer.enums import AttnMaskType

    q, k, v = qkv(16, 2, 4, 2, 8, 8, torch.float64)
    mask = transformers_sliding_window(16, 5)
    assert mask.sum() < causal(16, 16).sum()  # the window does cut keys off
    for layer, expected in ((1, mask), (2, causal(16, 16))):
        attn = SDPACoreAttention(window_config(4, 2, 8, 5, skip_freq=2), layer, AttnMaskType.causal,
                                 pg_collection=ONE_TP)
        torch.testing.assert_close(attn(q, k, v, None), naive(q, k, v, 8 ** -0.5, expected), rtol=0, atol=1e-12)


def test_context_parallel_sliding_window_equals_the_whole_sequence(monkeypatch):
    """CP=2 with a window of 5 over chunks of 4: windows cross chunk and rank borders."""
    from megatron.core.tensor_parallel import mappings
    from megatron.core.transformer.enums import AttnMaskType

    cp, seq, chunk = 2, 16, 4
    q, k, v = qkv(seq, 2, 4, 2, 8, 8, torch.float64)
    order = [torch.cat([torch.arange(r * chunk, (r + 1) * chunk),
                        torch.arange((2 * cp - 1 - r) * chunk, (2 * cp - r) * chunk)]) for r in range(cp)]
    gathered = {"k": torch.cat([k[o] for o in order]), "v": torch.cat([v[o] for o in order])}
    out = torch.empty(seq, 2, 4 * 8, dtype=torch.float64)
    for r in range(cp):
        group = SimpleNamespace(size=lambda: cp, rank=lambda r=r: r)
        attn = ContextParallelAttention(window_config(4, 2, 8, 5, cp=cp), 1, AttnMaskType.causal,
                                        pg_collection=SimpleNamespace(tp=ONE_TP.tp, cp=group))
        pick = iter(["k", "v"])
        monkeypatch.setattr(mappings, "gather_from_sequence_parallel_region",
                            lambda t, *a, **kw: gathered[next(pick)])
        out[order[r]] = attn(q[order[r]], k[order[r]], v[order[r]], None)
    torch.testing.assert_close(out, naive(q, k, v, 8 ** -0.5, transformers_sliding_window(seq, 5)), rtol=0,
                               atol=1e-12)
