"""The kit's full-width q/k norms (helpers/runtime/layers/full_width_qk_norm.py) against transformers'
own OLMoE norm on the same input: at TP=1 on all heads, and at TP=2 as two ranks' halves whose
sum of squares is exchanged (the all-reduce replaced by the sum it returns), each rank using its
heads' slice of the whole weight. The gradients through the TP all-reduce and Megatron's sum of
q/k-norm weight gradients: tests/jobs/test_hf_import.py trains OLMoE at TP=2+SP like one process."""
from types import SimpleNamespace

import pytest
import torch

from helpers.runtime.layers import full_width_qk_norm as fw

HEADS, GROUPS, HEAD_DIM, EPS = 4, 2, 8, 1e-5


def config():
    return SimpleNamespace(num_attention_heads=HEADS, num_query_groups=GROUPS, normalization="RMSNorm",
                           params_dtype=torch.float32)


def transformers_norm(width: int, weight: torch.Tensor):
    from transformers.models.olmoe.modeling_olmoe import OlmoeRMSNorm

    norm = OlmoeRMSNorm(width, eps=EPS)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm


@pytest.mark.parametrize("cls,heads", [(fw.FullWidthQNorm, HEADS), (fw.FullWidthKNorm, GROUPS)], ids=["q", "k"])
@pytest.mark.parametrize("tp", [1, 2])
def test_equals_transformers_olmoe_norm(cls, heads, tp, monkeypatch):
    from megatron.core import parallel_state as ps

    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 2, heads, HEAD_DIM, generator=g)
    weight = 1 + 0.3 * torch.randn(heads * HEAD_DIM, generator=g)
    expected = transformers_norm(heads * HEAD_DIM, weight)(x.reshape(5, 2, -1)).reshape_as(x)
    monkeypatch.setattr(ps, "get_tensor_model_parallel_world_size", lambda: tp)
    rank = iter(range(tp))
    monkeypatch.setattr(ps, "get_tensor_model_parallel_rank", lambda: next(rank))
    local = heads // tp
    halves = [x[:, :, r * local:(r + 1) * local] for r in range(tp)]
    total = sum(h.pow(2).sum(dim=(-2, -1), keepdim=True) for h in halves)
    monkeypatch.setattr(fw, "_tp_sum", lambda squares: total)  # what the all-reduce returns
    out = []
    for r, half in enumerate(halves):
        norm = cls(config(), HEAD_DIM, eps=EPS)
        with torch.no_grad():
            norm.weight.copy_(weight)  # whole on every rank (replicated)
        out.append(norm(half))
    torch.testing.assert_close(torch.cat(out, dim=2), expected, rtol=1e-6, atol=1e-6)


def test_heads_that_do_not_split_over_tp_are_refused(monkeypatch):
    from megatron.core import parallel_state as ps

    monkeypatch.setattr(ps, "get_tensor_model_parallel_world_size", lambda: 4)
    with pytest.raises(ValueError, match="num_query_groups"):
        fw.FullWidthKNorm(config(), HEAD_DIM)


def test_a_rank_s_weight_gradient_is_zero_outside_its_heads(monkeypatch):
    """So Megatron's TP sum of q/k-norm gradients (finalize_model_grads) adds up the whole gradient."""
    from megatron.core import parallel_state as ps

    monkeypatch.setattr(ps, "get_tensor_model_parallel_world_size", lambda: 2)
    monkeypatch.setattr(ps, "get_tensor_model_parallel_rank", lambda: 1)
    monkeypatch.setattr(fw, "_tp_sum", lambda squares: 2 * squares)
    norm = fw.FullWidthQNorm(config(), HEAD_DIM)
    norm(torch.randn(3, 1, HEADS // 2, HEAD_DIM)).sum().backward()
    grad = norm.weight.grad.view(HEADS, HEAD_DIM)
    assert grad[:HEADS // 2].abs().max() == 0 and grad[HEADS // 2:].abs().min() > 0
