"""The attention core of one layer on one rank for one microbatch (queries against keys and
values; the projections around it are helpers/perf/layer_gemms.py's), forward and backward seconds.

* flash (Transformer Engine's fused attention, torch SDPA): no s x s scores in memory; the FLOPs
  of the full square (as Megatron counts them) at the GPU's achieved fused-attention rate, the
  backward twice the forward (the rate was measured forward + backward as 3x the forward's FLOPs:
  helpers/perf/rates.py), scaled by the call's size class (FLASH_SIZE_CLASSES: measured on the H200
  with torch SDPA at 1-4K tokens, 8 or 16 heads, head dims 64 and 128, as a fraction of the
  roofline's rate; benchmarks/advisor/gemm_sizes.py `flash_size_classes`);
* materialised (Megatron's local DotProductAttention, Megatron-DeepSpeed): Q.K^T and P.V as batched
  GEMMs (helpers/perf/gemm.py, one product per sequence and head), and the scores' softmax
  (+ dropout) in memory, bf16 bytes per score: forward softmax 4 (read, write), dropout 5 (read, write, a 1-byte
  mask); backward softmax 6 (output, gradient, result), dropout 5.
With CP a rank's s/CP queries meet all s keys (the kit's and Megatron's causal load balancing give
each rank an equal share of the square)."""
from __future__ import annotations

from helpers.advisor.execution import Execution
from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.perf import gemm
from helpers.perf.gemm import Gemm
from helpers.perf.gpus import GpuProfile
from helpers.perf.rates import rates

# (forward FLOPs of one call at least, fraction of the roofline's measured attention rate)
FLASH_SIZE_CLASSES = [(0.0, 0.026), (4e9, 0.104), (1.6e10, 0.374), (6.4e10, 0.752), (2.56e11, 1.184)]
SOFTMAX_BYTES = (4, 6)  # per score, forward and backward
DROPOUT_BYTES = (5, 5)


def head_dims(model: ModelPreset) -> tuple[int, int]:
    """(query/key width, value width) of one head."""
    if model.multi_latent_attention:
        return model.qk_head_dim + model.qk_pos_emb_head_dim, model.v_head_dim
    d = model.kv_channels or model.hidden_size // model.num_attention_heads
    return d, d


def flops(model: ModelPreset, lay: Layout) -> float:
    """Forward FLOPs of the full square on one rank: 2 b heads (s/cp) s (dk + dv)."""
    dk, dv = head_dims(model)
    heads = model.num_attention_heads // lay.tp
    return 2.0 * lay.micro_batch * heads * (lay.seq_len // lay.cp) * lay.seq_len * (dk + dv)


def core(model: ModelPreset, lay: Layout, gpu: GpuProfile, execution: Execution) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's attention core."""
    if execution.attention == "flash":
        f = flops(model, lay)
        f /= rates(gpu).attention_tflops * 1e12 * gemm.size_fraction(f, FLASH_SIZE_CLASSES)
        return f, 2 * f
    dk, dv = head_dims(model)
    batch = lay.micro_batch * model.num_attention_heads // lay.tp
    q, s = lay.seq_len // lay.cp, lay.seq_len
    products = [Gemm("scores", q, dk, s, batch), Gemm("values", q, s, dv, batch)]
    fwd = gemm.total_seconds(products, gpu)
    bwd = gemm.total_seconds([b for p in products for b in p.backward()], gpu)
    per_score = [a + (d if execution.attention_dropout else 0) for a, d in zip(SOFTMAX_BYTES, DROPOUT_BYTES)]
    scores = batch * q * s / (rates(gpu).elementwise_gb_per_s * 1e9)
    return fwd + per_score[0] * scores, bwd + per_score[1] * scores
