"""The kit's rotary (helpers/runtime/layers/rotary.py, compiled on GPU) is Megatron's own unfused
rotary, bit for bit, eager on CPU: values and gradients, full and partial rotary dims; and the
cases it does not cover go to Megatron's function."""
import pytest
import torch

from helpers.runtime.layers.rotary import apply_rotary_pos_emb


def config(**kw):
    from megatron.core.transformer import TransformerConfig
    return TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True, **kw)


@pytest.mark.parametrize("rot_dim", [16, 8], ids=["full", "partial"])
def test_equals_megatron_unfused_rotary(rot_dim):
    from megatron.core.models.common.embeddings import rope_utils

    g = torch.Generator().manual_seed(0)
    t = torch.randn(12, 2, 4, 16, generator=g, dtype=torch.float64, requires_grad=True)
    freqs = torch.randn(12, 1, 1, rot_dim, generator=g, dtype=torch.float64)
    cfg = config()
    ours = apply_rotary_pos_emb(t, freqs, cfg, mscale=0.9, compiled=False)
    theirs = rope_utils.apply_rotary_pos_emb(t, freqs, cfg, mscale=0.9, cp_group=object())
    assert torch.equal(ours, theirs)
    grad = torch.randn(ours.shape, generator=g, dtype=torch.float64)
    (g_ours,) = torch.autograd.grad(ours, t, grad)
    (g_theirs,) = torch.autograd.grad(theirs, t, grad)
    assert torch.equal(g_ours, g_theirs)


def test_other_cases_go_to_megatron(monkeypatch):
    from megatron.core.models.common.embeddings import rope_utils

    calls = []
    monkeypatch.setattr(rope_utils, "apply_rotary_pos_emb", lambda *a, **kw: calls.append(kw) or "megatron")
    t, freqs = torch.zeros(4, 1, 4, 16), torch.zeros(4, 1, 1, 16)
    assert apply_rotary_pos_emb(t, freqs, config(rotary_interleaved=True)) == "megatron"
    assert apply_rotary_pos_emb(t, freqs, config(), cu_seqlens=torch.tensor([0, 4])) == "megatron"
    assert len(calls) == 2
