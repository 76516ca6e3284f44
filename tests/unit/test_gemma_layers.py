"""Gemma's pieces on the kit's builder against transformers' own Gemma layers on the same input:
the norm with a (1 + weight) gain (helpers/runtime/layers/norm.py, chosen by
layernorm_zero_centered_gamma), the embedding scaled by sqrt(hidden)
(helpers/runtime/layers/embedding_scale.py) and Gemma 2's soft-capped attention
(helpers/runtime/layers/attention/softcap.py). The sandwich norms inside the output projections
(layers/post_norm.py) and the final-logit cap (layers/logit_softcap.py) are checked in the whole
model: tests/jobs/test_hf_import.py (logits = transformers' at TP=1, TP=2+SP, PP=2)."""
from types import SimpleNamespace

import torch

from helpers.runtime.layers import embedding_scale
from helpers.runtime.layers.norm import SequenceParallelNorm


def test_zero_centred_norm_equals_transformers_gemma_norm():
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    g = torch.Generator().manual_seed(0)
    reference = GemmaRMSNorm(64, eps=1e-6)
    with torch.no_grad():
        reference.weight.copy_(0.3 * torch.randn(64, generator=g))
    config = SimpleNamespace(normalization="RMSNorm", layernorm_zero_centered_gamma=True, sequence_parallel=True)
    norm = SequenceParallelNorm(config, 64, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(reference.weight)  # the checkpoint's weight, loaded as is
    x = torch.randn(5, 2, 64, generator=g)
    torch.testing.assert_close(norm(x), reference(x), rtol=0, atol=0)
    assert norm.weight.sequence_parallel  # its gradient is summed over TP under SP, like every kit norm


def test_scaled_embedding_equals_transformers_gemma_embedding():
    from transformers.models.gemma.modeling_gemma import GemmaTextScaledWordEmbedding

    reference = GemmaTextScaledWordEmbedding(32, 64, padding_idx=None, embed_scale=64 ** 0.5)
    inner = torch.nn.Embedding(32, 64)
    with torch.no_grad():
        inner.weight.copy_(reference.weight)
    chunk = SimpleNamespace(pre_process=True, embedding=inner)
    embedding_scale.use_in(chunk, 64)
    ids = torch.tensor([[1, 5, 31]])
    torch.testing.assert_close(chunk.embedding(ids), reference(ids), rtol=0, atol=0)
    last_stage = SimpleNamespace(pre_process=False, embedding=None)
    embedding_scale.use_in(last_stage, 64)  # only the first pipeline stage embeds


def _config(**fields):
    from megatron.core.transformer import TransformerConfig

    c = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2, kv_channels=16,
                          attention_dropout=0.0, use_cpu_initialization=True, normalization="RMSNorm")
    for k, v in fields.items():
        setattr(c, k, v)
    return c


def test_soft_capped_attention_equals_transformers_gemma2_eager_attention():
    """Scores x 1/sqrt(query_pre_attn_scalar), capped by cap*tanh(s/cap), the sliding window on the
    layers window_attn_skip_freq=2 picks (1st, 3rd, ...), against transformers' Gemma 2 attention
    with its own sliding-window mask."""
    from megatron.core.transformer.enums import AttnMaskType
    from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    from helpers.runtime.layers.attention.softcap import SoftcapCoreAttention

    g = torch.Generator().manual_seed(0)
    s, b = 12, 2
    q, k, v = torch.randn(s, b, 4, 16, generator=g), torch.randn(s, b, 2, 16, generator=g), torch.randn(
        s, b, 2, 16, generator=g)
    config = _config(attn_logit_softcapping=2.0, query_pre_attn_scalar=24, window_size=(4, 0), window_attn_skip_freq=2)
    rows, cols = torch.arange(s)[:, None], torch.arange(s)[None, :]
    for layer, mask_function in ((1, sliding_window_causal_mask_function(5)), (2, causal_mask_function)):
        allowed = mask_function(0, 0, rows, cols)
        additive = torch.zeros(s, s).masked_fill(~allowed, float("-inf"))[None, None]
        reference, _ = eager_attention_forward(SimpleNamespace(num_key_value_groups=2, training=False),
                                               q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3),
                                               additive, scaling=24 ** -0.5, softcap=2.0)
        out = SoftcapCoreAttention(config, layer, AttnMaskType.causal)(q, k, v)
        torch.testing.assert_close(out, reference.permute(1, 0, 2, 3).reshape(s, b, -1), rtol=1e-6, atol=1e-6)

