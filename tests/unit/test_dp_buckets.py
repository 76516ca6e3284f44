"""DP bucket picture (views/dp_buckets): buckets come from Megatron's own buffer layout, and every
byte label is the ring formula: 2(n-1)/n of the bucket for an all-reduce, (n-1)/n for the
reduce-scatter of gradients and for the all-gather of parameters."""
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from helpers.views import dp_buckets  # noqa: E402

# a tiny GPT's shapes, in model order: embedding, two layers, final norm (elements)
PARAMS = [("embedding", 512 * 64)] + [
    (f"layers.{i}.{n}", k) for i in range(2) for n, k in
    [("ln.w", 64), ("ln.b", 64), ("proj", 64 * 64), ("qkv", 192 * 64), ("fc1", 256 * 64), ("fc2", 64 * 256)]] + [
    ("final_ln.w", 64), ("final_ln.b", 64)]


def _labels(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


@pytest.mark.parametrize("dp", [2, 4])
def test_distributed_optimizer_labels_are_the_ring_formulas(dp):
    grad_elem, param_elem = 4, 2  # fp32 gradients (grad_reduce_in_fp32), bf16 parameters
    fig = dp_buckets.plot(PARAMS, dp, bucket_size=20_000, dist_opt=True, grad_elem=grad_elem, param_elem=param_elem)
    buckets = dp_buckets.bucket_layout(PARAMS, dp, 20_000, dist_opt=True)
    assert len(buckets) > 2
    labels = _labels(fig)
    for b in buckets:
        elements = b["end"] - b["start"]
        assert elements % math.lcm(dp, 128) == 0  # Megatron pads so that each rank owns an equal shard
        rs = (dp - 1) / dp * elements * grad_elem
        ag = (dp - 1) / dp * elements * param_elem
        assert f"reduce-scatter\n{rs:,.0f} B" in labels
        assert f"all-gather\n{ag:,.0f} B" in labels
    assert sum(t.startswith("reduce-scatter") for t in labels) == len(buckets)
    matplotlib.pyplot.close("all")


def test_ddp_labels_are_the_all_reduce_formula():
    dp = 4
    fig = dp_buckets.plot(PARAMS, dp, bucket_size=20_000, dist_opt=False)
    labels = _labels(fig)
    buckets = dp_buckets.bucket_layout(PARAMS, dp, 20_000, dist_opt=False)
    for b in buckets:
        assert f"all-reduce\n{2 * (dp - 1) / dp * (b['end'] - b['start']) * 4:,.0f} B" in labels
    assert not any(t.startswith(("reduce-scatter", "all-gather")) for t in labels)
    matplotlib.pyplot.close("all")


def test_buckets_follow_megatron_layout():
    """Reverse (backward) order, a bucket closes once it reaches bucket_size, every parameter in
    exactly one bucket; no bucket size = one bucket (a job with overlap_grad_reduce off)."""
    ddp = dp_buckets.bucket_layout(PARAMS, 2, 20_000, dist_opt=False)
    assert sorted(p for b in ddp for p in b["params"]) == sorted(name for name, _ in PARAMS)
    assert ddp[0]["params"][0] == "final_ln.b"  # the last parameter's gradient is ready first
    assert all(b["unpadded"] >= 20_000 for b in ddp[:-1])
    assert ddp[-1]["end"] == sum(n for _, n in PARAMS)  # DDP: no padding
    one = dp_buckets.bucket_layout(PARAMS, 2, None, dist_opt=True)
    assert len(one) == 1 and len(one[0]["params"]) == len(PARAMS)
