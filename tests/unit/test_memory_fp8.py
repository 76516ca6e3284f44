"""The planner's precision='fp8' terms (helpers/memory/activations.py `_local_fp8`, plan.py): the
kit's local FP8 linears save FP8 inputs for tensorwise (1 byte instead of bf16's 2 for QKV, the
projection, FC1 and FC2), rowwise saves what bf16 saves; both keep two FP8 layouts of every FP8
linear's weight for a training step (fp8_matmul.training_step), and Transformer Engine's FP8 keeps an
FP8 copy and its transpose of every weight. On an H200 the FP8 plans of the 1.4B GPT, the per-step
weight copies included, sit 0.03-0.2% above the measured peaks (docs/results/precision.md)."""
from __future__ import annotations

import dataclasses

from helpers.job.layout import Layout
from helpers.job.models import preset
from helpers.memory.plan import plan_memory
from helpers.memory.training import Training

GPT_1_4B = preset("tiny-gpt").with_(num_layers=24, hidden_size=2048, num_attention_heads=16,
                                    ffn_hidden_size=8192, vocab_size=50304, max_seq_len=2048)
LAYOUT = Layout(seq_len=2048, micro_batch=4, global_batch=8)


def stage(training: Training, layout: Layout = LAYOUT):
    return plan_memory(GPT_1_4B, layout, training).stages[0]


T, H, F, L = 2048 * 4, 2048, 8192, 24
FP8_WEIGHTS = L * (3 * H * H + H * H + 2 * H * F)  # QKV, projection, FC1, FC2 of every layer


def differing(a, b) -> dict:
    return {k: a.terms[k] - b.terms[k] for k in a.terms if a.terms[k] != b.terms[k]}


def test_tensorwise_saves_one_byte_per_linear_input_element_and_keeps_two_weight_copies():
    bf16, fp8 = stage(Training()), stage(Training(precision="fp8"))
    # QKV, projection and FC1 inputs are T x h, FC2's T x f: one byte fewer per element each;
    # the weights of those linears in FP8, row-major and transposed (1 byte each), for the step
    assert differing(fp8, bf16) == {"activations": -L * T * (3 * H + F), "workspace": 2 * FP8_WEIGHTS}
    assert stage(Training(precision="fp8", fp8_recipe="delayed")).terms == fp8.terms  # the same tensors, other scales


def test_rowwise_saves_what_bf16_saves_and_te_adds_its_weight_copies():
    bf16 = stage(Training())
    assert differing(stage(Training(precision="fp8", fp8_recipe="rowwise")), bf16) == {"workspace": 2 * FP8_WEIGHTS}
    te = stage(Training(precision="fp8"), dataclasses.replace(LAYOUT, backend="te"))
    te_bf16 = stage(Training(), dataclasses.replace(LAYOUT, backend="te"))
    # TE's FP8 copy of each linear's weight and its transpose; the embedding and output layer stay bf16
    assert te.terms["workspace"] - te_bf16.terms["workspace"] == 2 * FP8_WEIGHTS


def test_under_sp_the_gathered_input_is_saved():
    """The FP8 linear gathers the sequence-parallel input before quantising it (Megatron's bf16
    linear keeps its local shard and gathers again in backward): at TP=2+SP the FP8 copy of the
    QKV and FC1 inputs (whole sequence, 1 byte) weighs what bf16's shard (half, 2 bytes) did; the
    projection and FC2 inputs (not split by SP) still halve."""
    sp = Layout(seq_len=2048, micro_batch=4, global_batch=8, tp=2, sp=True, nproc=2)
    bf16, fp8 = stage(Training(), sp), stage(Training(precision="fp8"), sp)
    T, f, L = 2048 * 4, 8192 // 2, 24
    q_w = 2048 // 2
    # QKV/FC1: T*h FP8 instead of T/2*h bf16 (the same bytes); projection and FC2: half
    assert bf16.terms["activations"] - fp8.terms["activations"] == L * T * (q_w + f)


def test_fp8_output_layer_saves_its_input_in_fp8_and_keeps_its_weight_twice():
    """Training.fp8_output_layer: the output layer's input saved as FP8 (T x h, one byte fewer per
    element; rowwise keeps bf16), its weight's two FP8 layouts for the step (vocab x h, 1 byte each).
    Its backward's transient (bf16 logits gradient + two FP8 copies, 4 bytes per logit) stays below
    the fused cross-entropy's (fp32 gradient + bf16 copy, 6 bytes) but tops the unfused one's (2)."""
    V = 50304
    fp8 = stage(Training(precision="fp8"))
    out = stage(Training(precision="fp8", fp8_output_layer=True))
    assert differing(out, fp8) == {"logits_loss": -T * H, "workspace": 2 * V * H}
    rowwise = stage(Training(precision="fp8", fp8_recipe="rowwise"))
    assert differing(stage(Training(precision="fp8", fp8_recipe="rowwise", fp8_output_layer=True)), rowwise) == {
        "workspace": 2 * V * H}
    unfused = stage(Training(precision="fp8", fused_cross_entropy=False))
    unfused_out = stage(Training(precision="fp8", fused_cross_entropy=False, fp8_output_layer=True))
    # the unfused backward holds the bf16 logits gradient (2 bytes per logit); with the output layer in FP8 also its FP8 copies
    assert differing(unfused_out, unfused) == {"logits_loss": -T * H, "workspace": 2 * V * H + 2 * T * V}
