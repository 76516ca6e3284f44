"""A roofline model of one training iteration on one rank: a MODEL, not a measurement. Each rank's
time is split into a compute term and one communication term per parallel axis (the bytes that axis
moves, over a link named for it: links.LINKS). It ignores overlap, latency, kernel launches and the
host, so it says which term dominates and roughly how long each is; the measured step says the rest
(docs/results/roofline.md checks it against a measured H200 step; helpers/views/roofline.py draws it).

Compute: the model's FLOPs (helpers/job/flops.py; every layer counted as the model's usual one: a
MoE model's as its top-k routed experts, shared experts and router) of the rank's layers, forward
and backward, at the GPU's achieved GEMM and attention rates (rates.py: measured on the H200), plus
the memory-bound kernels at the rate its norm, add and GeLU kernels were measured to reach, counted
in bf16 elements read and written per token and layer:
  forward: two norms (read + write h each), rotary on q and k (4h at full width), two fused
           bias-dropout-adds (3h each), the activation (2F; 3F for a gated unit over 2F)
  backward: the norms (3h each), rotary (4h), the adds (3h each), the activation (3F; 5F gated)
  = 30h + 5F (gated 30h + 8F) elements; then per microbatch the fused cross entropy (12 bytes per
  logit: bf16 logits read, fp32 exponentials kept and read back, bf16 gradient) and the bf16
  gradients added into DDP's fp32 buffer (10 bytes per parameter), and per iteration Adam
  (30 bytes per parameter: fp32 weight, gradient and two moments read, three written, bf16 copy).
With SP (TP > 1) the per-token terms split over TP.
Communication, per axis, in bf16 activations and fp32 gradients, at the ring bytes per rank of
collectives.py:
  tp  per layer and microbatch, 2 all-reduces forward + 2 backward of s*b*h activations (with SP the
      same bytes as all-gathers and reduce-scatters)
  cp  per layer and microbatch, K and V all-gathered forward (their gradients reduce-scattered back):
      (n-1)/n of s*b*g*d each, twice
  pp  per microbatch, one activation s/cp*b*h sent forward and its gradient back
  ep  per MoE layer and microbatch, dispatch and combine all-to-all forward and backward: 4 x
      (n-1)/n of the routed tokens' s*b*k*h
  dp  once per iteration, the fp32 gradients all-reduced (2(n-1)/n), or with the distributed
      optimizer reduce-scattered (4 bytes) and the bf16 parameters all-gathered (2 bytes), (n-1)/n each;
      a MoE model's routed experts over the expert-data-parallel group instead (counted under dp)"""
from __future__ import annotations

from dataclasses import dataclass

from helpers.job import flops
from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.perf.collectives import ring_bytes
from helpers.perf.gpus import GpuProfile
from helpers.perf.links import Link
from helpers.perf.rates import rates

BF16, FP32 = 2, 4
# The memory-bound kernels' bf16 elements per token and layer (the docstring's count), as
# (forward, backward): per hidden unit (norms, rotary, residual adds) and per FFN unit (the activation).
ELEMENTWISE_PER_HIDDEN = (14, 16)
ELEMENTWISE_PER_FFN = {"plain": (2, 3), "gated": (3, 5)}
GRAD_ACCUMULATE_BYTES_PER_PARAM = 10  # bf16 gradient read, fp32 buffer read and written, per microbatch
ADAM_BYTES_PER_PARAM = 30  # fp32 weight, gradient, two moments read; three written; the bf16 copy
CROSS_ENTROPY_BYTES_PER_LOGIT = 12  # bf16 logits read, fp32 exponentials kept and read back, bf16 gradient


@dataclass
class Terms:
    math_s: float  # GEMMs and attention at the measured rates
    memory_s: float  # memory-bound kernels at the measured bandwidth
    comm_s: dict[str, float]  # axis -> seconds

    @property
    def compute_s(self) -> float:
        return self.math_s + self.memory_s

    @property
    def total_s(self) -> float:
        """No overlap: compute and every transfer one after the other (an upper bound of this model)."""
        return self.compute_s + sum(self.comm_s.values())


def math_seconds(model: ModelPreset, lay: Layout, gpu: GpuProfile) -> float:
    """One rank's GEMM and attention time per iteration, at the GPU's achieved rates."""
    r = rates(gpu)
    tokens = lay.seq_len * lay.micro_batch
    # forward + backward (3x) of one layer's projections and MLP, of the output layer, of the attention core
    layer_gemm = 3 * tokens * (flops.projections(model) + flops.mlp(model, moe=model.is_moe))
    output = 3 * tokens * flops.logits(model)
    attention = 3 * tokens * flops.attention_core(model, lay.seq_len)
    layers = model.num_layers / lay.pp
    gemm_rate = gpu.peak_bf16_tflops * r.gemm_fraction * 1e12
    per_micro = (layers * (layer_gemm / lay.tp / lay.cp) + output / lay.tp / lay.cp / lay.pp) / gemm_rate
    per_micro += layers * attention / lay.tp / lay.cp / (r.attention_tflops * 1e12)
    return per_micro * lay.num_microbatches


def memory_bound_seconds(model: ModelPreset, lay: Layout, gpu: GpuProfile, dist_opt: bool = False) -> float:
    """The memory-bound kernels' time per iteration on one rank at the GPU's achieved elementwise rate."""
    h, f = model.hidden_size, (model.expert_ffn * model.moe_router_topk if model.is_moe else model.ffn_hidden_size)
    per_ffn = ELEMENTWISE_PER_FFN["gated" if model.gated else "plain"]
    per_token_layer = (sum(ELEMENTWISE_PER_HIDDEN) * h + sum(per_ffn) * f) * BF16
    tokens = lay.seq_len * lay.micro_batch / lay.cp / lay.tp
    layers = model.num_layers / lay.pp
    params = model.approx_params() / (lay.tp * lay.pp)
    per_micro = layers * tokens * per_token_layer + GRAD_ACCUMULATE_BYTES_PER_PARAM * params
    # the last stage's cross entropy, as an average
    per_micro += CROSS_ENTROPY_BYTES_PER_LOGIT * tokens * model.vocab_size / lay.pp
    adam = ADAM_BYTES_PER_PARAM * params / (lay.dp if dist_opt else 1)
    return (per_micro * lay.num_microbatches + adam) / (rates(gpu).elementwise_gb_per_s * 1e9)


def expert_params(model: ModelPreset) -> float:
    """The routed experts' weights (no shared experts): the part of a MoE model EP shards."""
    if not model.is_moe:
        return 0.0
    glu = 3 if model.gated else 2
    return model.layer_kinds()["moe"] * model.num_experts * glu * model.hidden_size * model.expert_ffn


def link_of(links: Link | dict[str, Link], axis: str) -> Link:
    """`links`: one Link for every axis, or {axis: Link, "default": Link} (e.g. TP on NVLink inside a
    node, the rest over InfiniBand)."""
    return links if isinstance(links, Link) else links.get(axis, links["default"])


def comm_seconds(model: ModelPreset, lay: Layout, links: Link | dict[str, Link],
                 dist_opt: bool = False) -> dict[str, float]:
    """Seconds each axis's bytes take per rank and iteration over its link."""
    h = model.hidden_size
    d = model.kv_channels or h // model.num_attention_heads
    s, b, m, layers = lay.seq_len // lay.cp, lay.micro_batch, lay.num_microbatches, model.num_layers / lay.pp
    out = {}  # bytes first, then over each axis's link
    if lay.tp > 1:
        out["tp"] = layers * m * 4 * ring_bytes("all_reduce", s * b * h * BF16, lay.tp)
    if lay.cp > 1:
        kv = s * lay.cp * b * model.kv_heads * d * BF16 / lay.tp
        out["cp"] = layers * m * 2 * 2 * ring_bytes("all_gather", kv, lay.cp)
    if lay.pp > 1:
        out["pp"] = m * 2 * ring_bytes("send", s * b * h * BF16 / lay.tp, 2)
    if model.is_moe and lay.ep > 1:
        routed = s * b * model.moe_router_topk * h * BF16 / lay.tp
        out["ep"] = layers * m * 4 * ring_bytes("all_to_all", routed, lay.ep)

    def grads(n: int) -> float:
        """Bytes per parameter: fp32 gradients all-reduced, or reduce-scattered and bf16 parameters gathered."""
        if dist_opt:
            return ring_bytes("reduce_scatter", FP32, n) + ring_bytes("all_gather", BF16, n)
        return ring_bytes("all_reduce", FP32, n)

    experts = expert_params(model)  # sharded over EP x ETP, their gradients reduced over EDP
    if lay.dp > 1:
        out["dp"] = (model.approx_params() - experts) / (lay.tp * lay.pp) * grads(lay.dp)
    if experts and lay.edp > 1:
        out["dp"] = out.get("dp", 0.0) + experts / (lay.ep * lay.expert_tp * lay.pp) * grads(lay.edp)
    return {axis: nbytes / (link_of(links, axis).gb_per_s * 1e9) for axis, nbytes in out.items()}


def terms(model: ModelPreset, lay: Layout, gpu: GpuProfile, links: Link | dict[str, Link],
          dist_opt: bool = False) -> Terms:
    return Terms(math_seconds(model, lay, gpu), memory_bound_seconds(model, lay, gpu, dist_opt),
                 comm_seconds(model, lay, links, dist_opt))
