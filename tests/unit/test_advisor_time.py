"""The advisor's time model (helpers/advisor/time/ on helpers/perf/), term by term against hand
computations on a made-up GPU with round numbers, and the measured constants against the
measurements they come from (benchmarks/advisor/gemm_sizes_results.json). No processes."""
import json
from pathlib import Path

import pytest

from benchmarks.advisor import gemm_sizes
from helpers.advisor.execution import KIT_LOCAL, MEGATRON_CORE, MEGATRON_DEEPSPEED
from helpers.advisor.time import (attention, context_parallel, data_parallel, elementwise, expert_parallel, layer,
                                  optimizer, pipeline, recompute, step, tensor_parallel)
from helpers.job.layout import Layout
from helpers.job.models import preset
from helpers.memory.training import Training
from helpers.perf import calibration, collectives, gemm, gpus, layer_gemms, links
from helpers.perf.gemm import Gemm
from helpers.perf.gpus import GpuProfile
from helpers.perf.links import Link
from helpers.perf.rates import H200_MEASURED, rates

RESULTS = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "advisor" /
                      "gemm_sizes_results.json").read_text())
GPU = GpuProfile("test GPU", peak_bf16_tflops=1000.0, memory_gib=80.0, hbm_gb_per_s=1000.0, intra_node_gb_per_s=100.0,
                 inter_node_gb_per_s=10.0, source="made up", gemm_fraction=0.5, elementwise_fraction=0.5)
ELEMENTWISE = 500e9  # bytes/s: 0.5 of 1000 GB/s
COPY = 1000e9 * H200_MEASURED.copy_gb_per_s / 4800  # the H200's copy fraction of its datasheet
EFF = calibration.COLLECTIVE_EFFICIENCY
LAT = calibration.HOP_LATENCY_S
LLAMA = preset("llama3-8b")


def test_the_size_classes_are_the_h200_measurements():
    assert "H200" in RESULTS["gpu"]
    derived = gemm_sizes.gemm_size_classes(RESULTS)
    assert [b for b, _ in derived] == [b for b, _ in gemm.SIZE_CLASSES]
    assert [f for _, f in derived] == pytest.approx([f for _, f in gemm.SIZE_CLASSES], abs=1e-3)
    flash = gemm_sizes.flash_size_classes(RESULTS, H200_MEASURED.attention_tflops)
    assert [b for b, _ in flash] == [b for b, _ in attention.FLASH_SIZE_CLASSES]
    assert [f for _, f in flash] == pytest.approx([f for _, f in attention.FLASH_SIZE_CLASSES], abs=1e-3)


def test_rates_take_the_profiles_fractions_or_the_h200s():
    r = rates(GPU)
    assert (r.gemm_fraction, r.elementwise_gb_per_s) == (0.5, 500.0)
    plain = rates(GPU.with_(gemm_fraction=None, elementwise_fraction=None))
    assert plain.gemm_fraction == pytest.approx(747.3 / 989)  # the H200's measured TFLOP/s over its peak
    assert plain.elementwise_gb_per_s == pytest.approx(1000 * 2154.2 / 4800)
    assert rates(gpus.PROFILES["h200"]).measured and not plain.measured


def test_a_large_gemm_runs_at_the_large_rate_and_a_narrow_one_at_the_copy_rate():
    big = Gemm("big", 8192, 8192, 8192)
    assert gemm.seconds(big, GPU) == pytest.approx(2 * 8192**3 / (1000e12 * 0.5 * gemm.size_fraction(2 * 8192**3)))
    assert gemm.size_fraction(2 * 8192**3) == gemm.SIZE_CLASSES[-1][1]
    narrow = Gemm("narrow", 1_000_000, 64, 64)  # 8.2 GFLOPs, 256 MB: the bytes bound it
    assert gemm.seconds(narrow, GPU) == pytest.approx(2 * (64e6 + 64 * 64 + 64e6) / COPY)
    # the small class: FLOPs at 0.461 of the large rate
    small = Gemm("small", 1024, 1024, 2048)
    assert gemm.seconds(small, GPU) == pytest.approx(small.flops / (1000e12 * 0.5 * 0.461))


def test_a_gemms_backward_is_its_two_products():
    dgrad, wgrad = Gemm("x", 10, 20, 30, batch=2).backward()
    assert (dgrad.m, dgrad.k, dgrad.n, wgrad.m, wgrad.k, wgrad.n) == (10, 30, 20, 20, 10, 30)
    assert dgrad.flops == wgrad.flops == Gemm("x", 10, 20, 30, batch=2).flops


def test_collectives_send_their_ring_bytes_and_pay_a_hop_per_ring_step():
    nv = Link(100.0, False)
    base, hop = calibration.RING_BASE_LATENCY_S, LAT
    assert [collectives.ring_bytes(k, 1000, 4) for k in collectives.KINDS] == [1500, 750, 750, 750, 1000]
    assert collectives.seconds("all_reduce", 1e9, 8, nv) == pytest.approx(
        2 * 7 / 8 * 1e9 / (100e9 * EFF) + base + 14 * hop["intra"])
    assert collectives.seconds("reduce_scatter", 1e9, 8, nv) == pytest.approx(
        7 / 8 * 1e9 / (100e9 * EFF) + base + 7 * hop["intra"])
    # 4 ranks on 4 nodes: 3 ring steps, all of them between nodes
    assert collectives.seconds("all_gather", 1e9, 4, Link(10.0, True, 4)) == pytest.approx(
        3 / 4 * 1e9 / (10e9 * EFF) + base + 3 * hop["inter"])
    # 64 ranks on 8 nodes: 63 steps, 7 of them between nodes
    assert collectives.seconds("reduce_scatter", 0.0, 64, Link(80.0, True, 8)) == pytest.approx(
        base + 56 * hop["intra"] + 7 * hop["inter"])
    assert collectives.seconds("send", 1e6, 2, nv) == pytest.approx(1e6 / (100e9 * EFF) + base + hop["intra"])
    assert collectives.seconds("all_reduce", 1e9, 1, nv) == collectives.seconds("all_to_all", 1e9, 1, nv) == 0.0
    with pytest.raises(ValueError, match="unknown collective 'gather'"):
        collectives.ring_bytes("gather", 1000, 4)


def test_a_group_wider_than_a_node_takes_the_network():
    assert links.of(Layout(nproc=8, tp=8), "tp", 8, GPU) == Link(100.0)  # TP8 in a node of 8
    # TP16: 8 of its ranks on each of 2 nodes, 8 ports (each rank's own: 10 GB/s)
    assert links.of(Layout(nproc=16, tp=16), "tp", 8, GPU) == Link(80.0, True, 2, 10.0, 8)
    # DP4 over 4 nodes, TP8 in each: one rank per node, one port
    assert links.of(Layout(nproc=32, tp=8), "dp", 8, GPU) == Link(10.0, True, 4, 10.0, 1)
    assert links.of(Layout(nproc=32, tp=4), "dp", 8, GPU) == Link(20.0, True, 4, 10.0, 2)  # two ranks per node


def test_tensor_parallel_collectives_per_layer():
    lay = Layout(nproc=8, tp=8, seq_len=4096, micro_batch=1)
    nv = Link(100.0, False)
    S = 4096 * LLAMA.hidden_size * 2
    ar = collectives.seconds("all_reduce", S, 8, nv)
    no_overlap = KIT_LOCAL.with_(tp_overlap_backward=False)
    assert tensor_parallel.layer(LLAMA, lay, "dense", nv, nv, no_overlap, 1.0) == pytest.approx((2 * ar, 2 * ar))
    # the backward's all-reduce hides under a long enough weight-gradient GEMM
    assert tensor_parallel.layer(LLAMA, lay, "dense", nv, nv, MEGATRON_CORE, 1.0) == pytest.approx((2 * ar, 0.0))
    sp = Layout(nproc=8, tp=8, sp=True, seq_len=4096, micro_batch=1)
    ag, rs = collectives.seconds("all_gather", S, 8, nv), collectives.seconds("reduce_scatter", S, 8, nv)
    assert tensor_parallel.layer(LLAMA, sp, "dense", nv, nv, no_overlap, 1.0) == pytest.approx(
        (2 * (ag + rs), 2 * (ag + ag + rs)))
    overlapped = tensor_parallel.layer(LLAMA, sp, "dense", nv, nv, MEGATRON_CORE, 1.0)
    assert overlapped == pytest.approx((2 * (ag + rs), 2 * ag))
    assert tensor_parallel.layer(LLAMA, Layout(nproc=8), "dense", nv, nv, MEGATRON_CORE, 0.0) == (0.0, 0.0)


def test_the_pipeline_bubble_and_sends():
    assert pipeline.bubble_fraction(4, None, 8) == 3 / 8  # 1F1B: (pp-1)/m
    assert pipeline.bubble_fraction(4, 2, 8) == 3 / 16  # interleaved: (pp-1)/(m vpp)
    assert pipeline.bubble_seconds(4, None, 1.0) == 3.0
    assert pipeline.bubble_seconds(4, 3, 1.0) == 1.0
    lay = Layout(nproc=16, tp=2, pp=2, seq_len=4096, micro_batch=2, gpus_per_node=8)
    assert pipeline.send_bytes(LLAMA, lay) == 4096 * 2 * LLAMA.hidden_size * 2 / 2  # 1/TP of it per rank
    assert links.point_to_point(lay, 8, GPU) == Link(10.0, True)  # stages 8 ranks apart: on different nodes
    assert links.point_to_point(Layout(nproc=8, tp=2, pp=2), 8, GPU) == Link(100.0)
    one = collectives.seconds("send", pipeline.send_bytes(LLAMA, lay), 2, Link(10.0, True))
    assert pipeline.sends_per_microbatch_s(LLAMA, lay, 8, GPU) == pytest.approx(2 * one)
    interleaved = Layout(nproc=16, tp=2, pp=2, vpp=2, seq_len=4096, micro_batch=2, gpus_per_node=8)
    assert pipeline.sends_per_microbatch_s(LLAMA, interleaved, 8, GPU) == 0.0


def test_data_parallel_gradients_and_parameters_bucket_by_bucket():
    lay = Layout(nproc=16, tp=2, cp=2)  # DP 4: dense parameters reduce over DP x CP = 8 ranks
    link = Link(100.0, False)
    # 1e9 parameters in 25 buckets of 40M (Megatron-LM's default at this DP): one collective each
    s = data_parallel.sync(1e9, 0, lay, False, MEGATRON_CORE, link, link)
    reduce, gather = s.reduce_s, s.gather_s
    assert (reduce, gather) == (pytest.approx(25 * collectives.seconds("all_reduce", 4e9 / 25, 8, link)), 0.0)
    s = data_parallel.sync(1e9, 0, lay, True, MEGATRON_DEEPSPEED, link, link)
    reduce, gather = s.reduce_s, s.gather_s
    assert reduce == pytest.approx(25 * collectives.seconds("reduce_scatter", 2e9 / 25, 8, link))  # fp16 gradients
    assert gather == pytest.approx(25 * collectives.seconds("all_gather", 2e9 / 25, 8, link))  # bf16 parameters
    moe = Layout(nproc=16, ep=4)  # experts reduce over EDP = 16 / 4 = 4
    reduce = data_parallel.sync(0, 1e9, moe, False, MEGATRON_CORE, link, Link(10.0, True, 4)).reduce_s
    assert reduce == pytest.approx(25 * collectives.seconds("all_reduce", 4e9 / 25, 4, Link(10.0, True, 4)))
    assert data_parallel.bucket_elements(512) == 512_000_000  # 1M per replica past 40 replicas


def test_overlap_hides_at_most_its_window_and_never_the_last_bucket():
    s = data_parallel.Sync(reduce_s=3.0, gather_s=2.0, last_reduce_s=0.1, first_gather_s=0.05)
    assert data_parallel.exposed_seconds(s, MEGATRON_CORE, 1.0, 0.5) == pytest.approx(2.0 + 1.5)
    assert data_parallel.exposed_seconds(s, MEGATRON_CORE, 10.0, 10.0) == pytest.approx(0.1 + 0.05)
    assert data_parallel.exposed_seconds(s, MEGATRON_DEEPSPEED, 1.0, 0.5) == 5.0  # nothing overlapped


def test_a_fixed_batch_on_more_data_parallel_gpus_is_slower_per_gpu():
    """A 1B model, sequence 4096, global batch 512: on 512 H100s each GPU has one micro batch, whose
    compute cannot hide the gradient and parameter collectives over 64 nodes; on 8 H100s it can."""
    from helpers.job.models import ModelPreset

    one_b = ModelPreset("1b", num_layers=16, hidden_size=2048, num_attention_heads=32, num_query_groups=8,
                        ffn_hidden_size=8192, vocab_size=128256, normalization="RMSNorm", activation="swiglu")
    h100 = gpus.PROFILES["h100-80gb"]
    per_gpu = {}
    for n in (8, 512):
        lay = Layout(nproc=n, seq_len=4096, micro_batch=1, global_batch=512, gpus_per_node=8, backend="te")
        per_gpu[n] = step.predict(one_b, lay, Training(dist_opt=True), h100, 8, MEGATRON_CORE)
    # 8 GPUs: 64 micro batches each, the collectives hide under the last one's backward but for one bucket
    assert per_gpu[8].terms["dp"] < 0.01 * per_gpu[8].step_s
    # 512 GPUs: ~3.6 GB of gradients and parameters per GPU over 64 nodes (ring latency ~2 ms per collective),
    # under one micro batch of compute
    assert per_gpu[512].terms["dp"] > 0.1 * per_gpu[512].step_s
    assert per_gpu[512].tokens_per_s_per_gpu < 0.9 * per_gpu[8].tokens_per_s_per_gpu


def test_context_parallel_exchange_hides_under_attention():
    lay = Layout(nproc=4, cp=4, seq_len=8192)
    kv = context_parallel.kv_bytes(LLAMA, lay)
    d = LLAMA.hidden_size // LLAMA.num_attention_heads
    assert kv == 1 * 8192 * LLAMA.kv_heads * 2 * d * 2
    link = Link(100.0, False)
    gather = collectives.seconds("all_gather", kv, 4, link)
    assert context_parallel.layer(LLAMA, lay, link, (0.0, 0.0)) == pytest.approx((gather, 2 * gather))
    assert context_parallel.layer(LLAMA, lay, link, (1.0, 1.0)) == (0.0, 0.0)
    assert context_parallel.layer(LLAMA, Layout(nproc=4), link, (0.0, 0.0)) == (0.0, 0.0)


def test_expert_parallel_all_to_all():
    moe = preset("qwen3-30b-a3b")
    lay = Layout(nproc=8, tp=2, sp=True, ep=4, etp=1, seq_len=4096)
    sent = 4096 / 2 * moe.moe_router_topk * moe.hidden_size * 2
    assert expert_parallel.dispatch_bytes(moe, lay) == sent
    one = collectives.seconds("all_to_all", sent, 4, Link(100.0, False))
    assert expert_parallel.layer(moe, lay, Link(100.0, False)) == pytest.approx((2 * one, 2 * one))


def test_recompute_adds_a_forward():
    assert recompute.extra_seconds("full", 3.0, 1.0) == 3.0
    assert recompute.extra_seconds("selective", 3.0, 1.0) == 1.0
    assert recompute.extra_seconds("none", 3.0, 1.0) == 0.0
    with pytest.raises(ValueError, match="recompute"):
        recompute.extra_seconds("some", 3.0, 1.0)


def test_the_optimizer_step_and_gradient_accumulation():
    lay = Layout(nproc=8, cp=2)  # DP 4 x CP 2
    assert optimizer.step_seconds(8e9, 0, lay, False, GPU) == pytest.approx(30 * 8e9 / ELEMENTWISE)
    assert optimizer.step_seconds(8e9, 0, lay, True, GPU) == pytest.approx(30 * 1e9 / ELEMENTWISE)
    assert optimizer.accumulate_seconds(1e9, GPU, MEGATRON_CORE) == 0.0
    assert optimizer.accumulate_seconds(1e9, GPU, KIT_LOCAL) == 0.0  # runtime/layers/wgrad_accumulation.py
    unfused = MEGATRON_CORE.with_(grad_accumulation_fused=False)
    assert optimizer.accumulate_seconds(1e9, GPU, unfused) == pytest.approx(10 * 1e9 / ELEMENTWISE)
    assert optimizer.accumulate_seconds(1e9, GPU, unfused, 4) == pytest.approx(10 * 1e9 / ELEMENTWISE)


def test_gradient_accumulation_into_a_16bit_grad():
    # Megatron-DeepSpeed: the first microbatch's gradient is stored in .grad, each later one read with
    # .grad and added (2 + 2 + 2 bytes per parameter): over 4 microbatches 3 additions, 4.5 bytes each
    assert MEGATRON_DEEPSPEED.grad_accumulation_buffer == "param_grad"
    assert not MEGATRON_DEEPSPEED.grad_accumulation_fused
    assert optimizer.accumulate_seconds(1e9, GPU, MEGATRON_DEEPSPEED, 4) == pytest.approx(3 * 6 * 1e9 / 4 / ELEMENTWISE)
    assert optimizer.accumulate_seconds(1e9, GPU, MEGATRON_DEEPSPEED, 1) == 0.0
    assert optimizer.accumulate_seconds(1e9, GPU, MEGATRON_DEEPSPEED) == pytest.approx(6 * 1e9 / ELEMENTWISE)
    with pytest.raises(ValueError, match="grad_accumulation_buffer"):
        MEGATRON_CORE.with_(grad_accumulation_buffer="fp16")


def test_the_step_charges_each_stage_its_accumulation():
    model = preset("tiny-gpt")
    lay = Layout(nproc=2, pp=2, micro_batch=1, global_batch=4, seq_len=256)
    fused = step.predict(model, lay, Training(recompute="full"), GPU, 2, MEGATRON_DEEPSPEED.with_(
        grad_accumulation_fused=True))
    unfused = step.predict(model, lay, Training(recompute="full"), GPU, 2, MEGATRON_DEEPSPEED)
    busiest = max(range(2), key=lambda s: unfused.stage_microbatch_s[s])
    ids = [i for c in step.stage_layers(model, lay)[busiest] for i in c]
    dense, expert = step._stage_params(model, lay, ids, busiest)
    per_micro = 6 * (dense + expert) * 3 / 4 / ELEMENTWISE  # 4 microbatches, 3 additions
    assert fused.terms["grad_accumulate"] == 0.0
    assert unfused.terms["grad_accumulate"] == pytest.approx(4 * per_micro)
    assert unfused.step_s > fused.step_s


def test_attention_core_flash_and_materialised():
    lay = Layout(nproc=2, tp=2, seq_len=4096, micro_batch=2)
    d = LLAMA.hidden_size // LLAMA.num_attention_heads
    flops = 2 * 2 * (32 // 2) * 4096 * 4096 * (2 * d)
    assert attention.flops(LLAMA, lay) == flops
    rate = rates(GPU).attention_tflops * 1e12 * gemm.size_fraction(flops, attention.FLASH_SIZE_CLASSES)
    assert attention.core(LLAMA, lay, GPU, MEGATRON_CORE) == pytest.approx((flops / rate, 2 * flops / rate))
    fwd, bwd = attention.core(LLAMA, lay, GPU, MEGATRON_DEEPSPEED)
    batch = 2 * 16
    products = [Gemm("s", 4096, d, 4096, batch), Gemm("v", 4096, 4096, d, batch)]
    scores = batch * 4096 * 4096 / ELEMENTWISE
    assert fwd == pytest.approx(gemm.total_seconds(products, GPU) + 9 * scores)  # softmax 4 + dropout 5 bytes
    assert bwd == pytest.approx(gemm.total_seconds([b for p in products for b in p.backward()], GPU) + 11 * scores)


def test_elementwise_bytes_follow_the_roofline_count():
    lay = Layout(nproc=4, tp=4, sp=True, seq_len=4096)
    h, F = LLAMA.hidden_size, LLAMA.ffn_hidden_size  # SwiGLU: gated counts (3, 5) per FFN unit
    fwd, bwd = elementwise.layer(LLAMA, lay, GPU, "dense")
    assert fwd == pytest.approx(4096 * (14 * h / 4 + 3 * F / 4) * 2 / ELEMENTWISE)
    assert bwd == pytest.approx(4096 * (16 * h / 4 + 5 * F / 4) * 2 / ELEMENTWISE)
    no_sp = elementwise.layer(LLAMA, Layout(nproc=4, tp=4, seq_len=4096), GPU, "dense")[0]
    assert no_sp == pytest.approx(4096 * (14 * h + 3 * F / 4) * 2 / ELEMENTWISE)  # norms and adds on every rank


def test_layer_gemms_split_as_megatron_splits_them():
    lay = Layout(nproc=8, tp=8, seq_len=4096)
    d = 128
    qkv, proj = layer_gemms.attention(LLAMA, lay)
    assert (qkv.m, qkv.k, qkv.n) == (4096, 4096, (32 // 8 + 2 * 1) * d)  # 8 KV heads: one per rank
    assert (proj.k, proj.n) == (32 * d // 8, 4096)
    fc1, fc2 = layer_gemms.mlp(LLAMA, lay, LLAMA.ffn_hidden_size)
    assert (fc1.n, fc2.k) == (2 * 14336 // 8, 14336 // 8)
    moe = preset("qwen3-30b-a3b")
    ep = Layout(nproc=8, ep=8, etp=1, seq_len=4096)
    router, fc1, fc2 = layer_gemms.moe(moe, ep)
    assert fc1.batch == 128 // 8 and fc1.m * fc1.batch == 4096 * 8  # T top-k pairs over the local experts
    mla = layer_gemms.attention(preset("deepseek-v2-lite"), Layout(nproc=2, tp=2, seq_len=4096))
    assert [g.name for g in mla] == ["q", "kv_down", "kv_up", "proj"]
    assert [g.name for g in layer_gemms.of_kind(preset("nemotron-3-nano-30b-a3b"), lay, "M")][0] == "in_proj"


def test_the_terms_add_up_to_the_step():
    lay = Layout(nproc=16, tp=2, pp=4, sp=True, seq_len=4096, micro_batch=1, global_batch=64, gpus_per_node=8)
    t = step.predict(LLAMA, lay, Training(), GPU, 8, MEGATRON_CORE)
    assert sum(t.terms.values()) == pytest.approx(t.step_s)
    assert t.tokens_per_s_per_gpu == pytest.approx(64 * 4096 / t.step_s / 16)
    assert t.bubble_fraction == 3 / lay.num_microbatches
    flat = step.predict(LLAMA, Layout(nproc=2, tp=2, sp=True, seq_len=4096, global_batch=8), Training(), GPU, 8)
    assert flat.terms["bubble"] == flat.terms["pp_p2p"] == 0.0


def test_recompute_interleaving_and_node_crossing_move_the_step_the_right_way():
    base = dict(seq_len=4096, micro_batch=1, global_batch=64, gpus_per_node=8)
    lay = Layout(nproc=16, tp=2, pp=4, sp=True, **base)
    plain = step.predict(LLAMA, lay, Training(), GPU, 8)
    full = step.predict(LLAMA, lay, Training(recompute="full"), GPU, 8)
    selective = step.predict(LLAMA, lay, Training(recompute="selective"), GPU, 8)
    assert plain.step_s < selective.step_s < full.step_s
    assert full.terms["recompute"] > 0 and plain.terms["recompute"] == 0
    interleaved = step.predict(LLAMA, Layout(nproc=16, tp=2, pp=4, vpp=2, sp=True, **base), Training(), GPU, 8)
    assert interleaved.terms["bubble"] == pytest.approx(plain.terms["bubble"] / 2, rel=0.05)
    inside = step.predict(LLAMA, Layout(nproc=16, tp=8, sp=True, **base), Training(), GPU, 8)
    across = step.predict(LLAMA, Layout(nproc=16, tp=16, sp=True, **base), Training(), GPU, 8)
    assert across.terms["tp"] > 2 * inside.terms["tp"]


def test_an_all_to_all_across_nodes_goes_through_each_ranks_own_port():
    """EP32 over 4 nodes of 8: 24/32 of a rank's tokens go to other nodes, all through its own
    400 Gb/s port, whereas a ring over the same 32 ranks spreads its node-to-node hops over 8 ports."""
    h100 = gpus.PROFILES["h100-80gb"]
    link = links.of(Layout(nproc=32, ep=32, etp=1), "ep", 8, h100)
    assert (link.gb_per_s, link.nodes, link.port_gb_per_s, link.on_own_node) == (400.0, 4, 50.0, 8)
    nbytes = 1e9
    a2a = collectives.seconds("all_to_all", nbytes, 32, link)
    assert a2a == pytest.approx(nbytes * 24 / 32 / (50e9 * EFF) + calibration.RING_BASE_LATENCY_S
                                + LAT["inter"])
    assert a2a > 7 * collectives.seconds("all_to_all", nbytes, 8, links.of(Layout(nproc=8, ep=8, etp=1), "ep", 8, h100))


def test_the_expert_all_to_all_hides_under_the_other_directions_compute():
    """Megatron-Core's overlap_moe_expert_parallel_comm: a forward all-to-all runs under the other
    microbatch's backward compute, a backward one under the forward compute, at most that compute."""
    assert expert_parallel.exposed((1.0, 1.0), (0.5, 3.0)) == (0.0, 0.5)
    assert expert_parallel.exposed((4.0, 2.0), (3.0, 1.0)) == (3.0, 0.0)
    moe = preset("qwen3-30b-a3b")
    assert expert_parallel.overlaps(Layout(nproc=8, ep=8, etp=1), "none")
    assert not expert_parallel.overlaps(Layout(nproc=8, ep=1, etp=1), "none")  # no EP: nothing to overlap
    assert not expert_parallel.overlaps(Layout(nproc=8, pp=2, ep=4, etp=1), "none")  # PP needs virtual stages
    assert expert_parallel.overlaps(Layout(nproc=8, pp=2, vpp=2, ep=4, etp=1), "selective")
    assert not expert_parallel.overlaps(Layout(nproc=8, ep=8, etp=1), "full")
    lay = Layout(nproc=8, ep=8, etp=1, seq_len=4096)
    link = {axis: links.of(lay, axis, 8, GPU) for axis in ("tp", "etp", "cp", "ep")}
    plain = layer.of_kind(moe, lay, "moe", GPU, link, MEGATRON_CORE, "none")
    hidden = layer.of_kind(moe, lay, "moe", GPU, link, MEGATRON_CORE.with_(ep_overlap=True), "none")
    compute = [sum(t[p] for p in ("gemm", "attention", "elementwise")) for t in (plain.forward, plain.backward)]
    assert (hidden.forward["ep"], hidden.backward["ep"]) == pytest.approx(
        expert_parallel.exposed((plain.forward["ep"], plain.backward["ep"]), (compute[0], compute[1])))
    assert {k: v for k, v in hidden.forward.items() if k != "ep"} == \
        {k: v for k, v in plain.forward.items() if k != "ep"}


def test_selective_recompute_runs_the_named_modules_forward_again():
    assert recompute.extra_seconds("selective", 3.0, 1.0, ("layernorm", "moe_act"),
                                   {"layernorm": 0.25, "moe_act": 0.5, "moe": 2.0}) == 0.75
    assert recompute.extra_seconds("selective", 3.0, 1.0, ("mla_up_proj",), {"layernorm": 0.25}) == 0.0  # not here
    with pytest.raises(ValueError, match="not timed"):
        recompute.extra_seconds("selective", 3.0, 1.0, ("everything",))
    moe = preset("qwen3-30b-a3b")
    lay = Layout(nproc=8, ep=8, etp=1, seq_len=4096)
    link = {axis: links.of(lay, axis, 8, GPU) for axis in ("tp", "etp", "cp", "ep")}
    t = layer.of_kind(moe, lay, "moe", GPU, link, MEGATRON_CORE, "selective", ("layernorm", "moe_act"))
    norms = 2 * 4096 * 2 * moe.hidden_size * 2 / ELEMENTWISE  # two norms, input read and output written
    act = 4096 * 3 * (moe.moe_router_topk * moe.expert_ffn) * 2 / ELEMENTWISE  # gated: 3 values per FFN unit
    assert elementwise.norms(moe, lay, GPU)[0] == pytest.approx(norms)
    assert elementwise.activation(moe, lay, GPU, "moe")[0] == pytest.approx(act)
    assert t.backward["recompute"] == pytest.approx(norms + act)


def test_clamped_expert_inputs_move_their_glu_input_again():
    oss, qwen = preset("gpt-oss-120b"), preset("qwen3-30b-a3b")
    lay = Layout(nproc=8, ep=8, etp=1, seq_len=4096, micro_batch=2)
    pairs = 2 * 4096 * oss.moe_router_topk  # every token-expert pair of the rank (TP 1)
    values = pairs * oss.expert_ffn  # F values per pair: each half of the [pairs, 2F] fc1 output
    clamp = elementwise.expert_clamp(oss, lay, GPU)
    assert clamp == pytest.approx((8 * values * 2 / ELEMENTWISE, 10 * values * 2 / ELEMENTWISE))
    assert elementwise.expert_clamp(qwen, lay, GPU) == (0.0, 0.0)  # no clamp: nothing added
    # the MoE layer's memory-bound time carries it, and moe_act's recompute runs the clamp again
    plain = elementwise.layer(oss.with_(attention_sinks=False), lay, GPU, "moe")
    with_clamp = elementwise.layer(oss, lay, GPU, "moe")
    assert with_clamp[0] - plain[0] == pytest.approx(clamp[0]) and with_clamp[1] - plain[1] == pytest.approx(clamp[1])
    link = {axis: links.of(lay, axis, 8, GPU) for axis in ("tp", "etp", "cp", "ep")}
    t = layer.of_kind(oss, lay, "moe", GPU, link, MEGATRON_CORE, "selective", ("moe_act",))
    act = elementwise.activation(oss, lay, GPU, "moe")[0]
    assert t.backward["recompute"] == pytest.approx(act + clamp[0])


def test_biased_experts_add_their_bias_after_fc2():
    oss, qwen = preset("gpt-oss-120b"), preset("qwen3-30b-a3b")
    lay = Layout(nproc=8, ep=8, etp=1, seq_len=4096, micro_batch=2)
    pairs = 2 * 4096 * oss.moe_router_topk  # every token-expert pair of the rank (TP 1)
    values = pairs * oss.hidden_size  # the fc2 output: H values per pair
    bias = elementwise.expert_bias(oss, lay, GPU)
    assert bias == pytest.approx((6 * values * 2 / ELEMENTWISE, 8 * values * 2 / ELEMENTWISE))
    assert elementwise.expert_bias(qwen, lay, GPU) == (0.0, 0.0)  # no expert bias: nothing added
    assert elementwise.expert_bias(oss.with_(add_bias_linear=False), lay, GPU) == (0.0, 0.0)
    # the MoE layer's memory-bound time carries it; moe_act's recompute does not run it again (the bias is
    # added after fc2, outside its checkpoint), the whole-layer module does
    plain = elementwise.layer(oss.with_(add_bias_linear=False), lay, GPU, "moe")
    with_bias = elementwise.layer(oss, lay, GPU, "moe")
    assert with_bias[0] - plain[0] == pytest.approx(bias[0]) and with_bias[1] - plain[1] == pytest.approx(bias[1])
    link = {axis: links.of(lay, axis, 8, GPU) for axis in ("tp", "etp", "cp", "ep")}
    act = elementwise.activation(oss, lay, GPU, "moe")[0] + elementwise.expert_clamp(oss, lay, GPU)[0]
    t = layer.of_kind(oss, lay, "moe", GPU, link, MEGATRON_CORE, "selective", ("moe_act",))
    assert t.backward["recompute"] == pytest.approx(act)
    unbiased = layer.of_kind(oss.with_(add_bias_linear=False), lay, "moe", GPU, link, MEGATRON_CORE, "selective",
                             ("moe",))
    t = layer.of_kind(oss, lay, "moe", GPU, link, MEGATRON_CORE, "selective", ("moe",))
    assert t.backward["recompute"] - unbiased.backward["recompute"] == pytest.approx(bias[0])
