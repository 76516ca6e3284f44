"""Context-parallel exchange of one attention layer on one rank for one microbatch. Each CP rank
holds s/CP of the sequence and needs every rank's keys and values: forward, (CP-1)/CP of the whole
sequence's K and V arrive (Megatron's ring passes them chunk by chunk, under the attention of the
chunk before: only what exceeds the attention core's time shows); backward, K and V again and their
gradients sent back, twice the bytes, under the attention's backward. K and V per rank: the KV
heads of its TP shard (GQA: max(g/TP, 1); MLA: every head its own key and value), (dk + dv) wide."""
from __future__ import annotations

from helpers.advisor.time.attention import head_dims
from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.perf import collectives
from helpers.perf.links import Link
from helpers.perf.roofline import BF16


def kv_bytes(model: ModelPreset, lay: Layout) -> float:
    """K and V of the whole sequence for one rank's heads, one microbatch."""
    dk, dv = head_dims(model)
    heads = model.num_attention_heads // lay.tp if model.multi_latent_attention else max(model.kv_heads // lay.tp, 1)
    return lay.micro_batch * lay.seq_len * heads * (dk + dv) * BF16


def layer(model: ModelPreset, lay: Layout, link: Link, attention_s: tuple[float, float]) -> tuple[float, float]:
    """(forward, backward) exposed seconds; `attention_s`: the attention core's (forward, backward)."""
    if lay.cp <= 1:
        return 0.0, 0.0
    fwd = collectives.seconds("all_gather", kv_bytes(model, lay), lay.cp, link)
    return max(0.0, fwd - attention_s[0]), max(0.0, 2 * fwd - attention_s[1])
