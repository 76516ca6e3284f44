"""The MFU FLOP count (helpers/job/flops.py) against Narayanan et al.'s closed form, the 1.41B
GPT's 9.07 GFLOP per token, what GQA and MoE change, and Megatron-LM's own count
(`num_floating_point_operations`, run here on arguments from Megatron-LM's parser): equal but for the
two terms the kit counts differently, the whole attention square and the router."""
import warnings

import pytest

from helpers.job.flops import flops_per_token
from helpers.job.models import ModelPreset, preset

GPT_1B4 = ModelPreset("gpt-1.4b", num_layers=24, hidden_size=2048, num_attention_heads=16,
                      ffn_hidden_size=8192, vocab_size=50304)


@pytest.mark.parametrize("L,h,a,s,V", [(24, 2048, 16, 2048, 50304), (12, 768, 12, 1024, 50304), (4, 64, 4, 32, 512)])
def test_equals_narayanan_closed_form_for_mha_ffn_4h(L, h, a, s, V):
    model = ModelPreset("m", num_layers=L, hidden_size=h, num_attention_heads=a, ffn_hidden_size=4 * h, vocab_size=V)
    closed = 72 * L * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    assert flops_per_token(model, s) == pytest.approx(closed, rel=1e-12)


def test_the_1_4b_gpts_figure():
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


def megatron_lm_flops_per_token(model: ModelPreset, seq_len: int, batch: int = 2) -> float:
    """Megatron-LM's num_floating_point_operations for `batch` sequences, per token, with the model's
    flags through Megatron-LM's parser and the two values validate_args and the tokenizer set."""
    from helpers.rundir.megatron_flags import parse

    flags = [f"--num-layers {model.num_layers}", f"--hidden-size {model.hidden_size}",
             f"--num-attention-heads {model.num_attention_heads}", f"--ffn-hidden-size {model.ffn_hidden_size}",
             f"--seq-length {seq_len}", f"--max-position-embeddings {seq_len}"]
    if model.num_query_groups:
        flags += ["--group-query-attention", f"--num-query-groups {model.num_query_groups}"]
    if model.activation == "swiglu":
        flags.append("--swiglu")
    if model.is_moe:
        dense = model.first_k_dense
        flags += [f"--num-experts {model.num_experts}", f"--moe-router-topk {model.moe_router_topk}",
                  f"--moe-ffn-hidden-size {model.expert_ffn}",
                  f"--moe-layer-freq ([0]*{dense}+[1]*{model.num_layers - dense})"]
        if model.moe_shared_expert_intermediate_size:
            flags.append(f"--moe-shared-expert-intermediate-size {model.moe_shared_expert_intermediate_size}")
    with warnings.catch_warnings():  # megatron.training warns about missing TE/apex, its parser about argparse
        warnings.simplefilter("ignore")
        from megatron.training.training import num_floating_point_operations
        args = parse(flags)
    args.kv_channels = model.kv_channels or model.hidden_size // model.num_attention_heads
    args.padded_vocab_size = model.vocab_size
    return num_floating_point_operations(args, batch) / (batch * seq_len)


MOE_WITH_DENSE_AND_SHARED = ModelPreset("moe", num_layers=4, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                                        ffn_hidden_size=256, vocab_size=512, num_experts=8, moe_router_topk=2,
                                        moe_ffn_hidden_size=128, moe_shared_expert_intermediate_size=64,
                                        first_k_dense=1, activation="swiglu")


@pytest.mark.parametrize("model, seq_len", [(GPT_1B4, 2048), (preset("llama3-8b"), 8192),
                                            (preset("qwen3-30b-a3b"), 4096), (MOE_WITH_DENSE_AND_SHARED, 32)],
                         ids=["gpt-1.4b", "llama3-8b", "qwen3-30b-a3b", "moe-first-dense-shared"])
def test_megatron_lms_count_differs_only_by_the_causal_half_and_the_router(model, seq_len):
    """Megatron-LM counts half the s x s square (the causal mask) where the kit counts all of it, as
    Narayanan et al. do, and leaves out the router's h x E GEMM; every other term is the same."""
    d = model.kv_channels or model.hidden_size // model.num_attention_heads
    half_square = 3 * model.num_layers * 2 * seq_len * model.num_attention_heads * d
    moe_layers = model.num_layers - model.first_k_dense if model.is_moe else 0
    router = 3 * moe_layers * 2 * model.hidden_size * (model.num_experts or 0)
    megatron = megatron_lm_flops_per_token(model, seq_len)
    assert flops_per_token(model, seq_len) - megatron == pytest.approx(half_square + router, rel=1e-12)
