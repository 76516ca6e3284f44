"""The MFU FLOP count (helpers/job/flops.py) against Narayanan et al.'s closed form and the
issue's figure for the 1.41B GPT (9.07 GFLOP per token), and what GQA and MoE change."""
import pytest

from helpers.job.flops import flops_per_token
from helpers.job.models import ModelPreset

GPT_1B4 = ModelPreset("gpt-1.4b", num_layers=24, hidden_size=2048, num_attention_heads=16,
                      ffn_hidden_size=8192, vocab_size=50304)


@pytest.mark.parametrize("L,h,a,s,V", [(24, 2048, 16, 2048, 50304), (12, 768, 12, 1024, 50304), (4, 64, 4, 32, 512)])
def test_equals_narayanan_closed_form_for_mha_ffn_4h(L, h, a, s, V):
    model = ModelPreset("m", num_layers=L, hidden_size=h, num_attention_heads=a, ffn_hidden_size=4 * h, vocab_size=V)
    closed = 72 * L * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    assert flops_per_token(model, s) == pytest.approx(closed, rel=1e-12)


def test_issue_figure_for_the_1_4b_gpt():
    assert flops_per_token(GPT_1B4, 2048) / 1e9 == pytest.approx(9.07, abs=0.005)


def test_gqa_and_moe_change_only_their_terms():
    h = 2048
    gqa = GPT_1B4.with_(num_query_groups=4)  # K and V projections shrink from h x h to h x h/4
    saved = 3 * 24 * 2 * h * 128 * 2 * (16 - 4)
    assert flops_per_token(GPT_1B4, 2048) - flops_per_token(gqa, 2048) == pytest.approx(saved)
    moe = GPT_1B4.with_(num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=8192)
    # two experts of the dense width per token, plus the router
    extra = 3 * 24 * (2 * h * 8192 * 2 + 2 * h * 8)
    assert flops_per_token(moe, 2048) - flops_per_token(GPT_1B4, 2048) == pytest.approx(extra)
