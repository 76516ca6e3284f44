"""The quantise/dequantise recipes of helpers/precision against the formats' own bounds: every
recipe round-trips every element within half a step of its format (relative in the normal range,
absolute among the subnormals), MXFP8's per-block scale beats one scale per tensor when a few
outliers stretch the range, delayed scaling saturates when the amax grows past its history, and
the E8M0 scales are powers of two."""
from __future__ import annotations

import pytest
import torch

from helpers.precision import formats, recipes


def activations(seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(64, 256) * torch.logspace(-3, 1, 256)  # columns spanning four decades


def with_outliers(seed: int = 0) -> torch.Tensor:
    """Gaussian values with one element in 1000 blown up 10^5 times (as the outlier features of
    large transformers' activations): one tensorwise scale must fit both."""
    torch.manual_seed(seed + 1)
    x = torch.randn(64, 256)
    x.view(-1)[::1000] *= 1e5
    return x


def test_formats_come_from_torch():
    e4m3, e5m2, bf16 = formats.get("e4m3"), formats.get("e5m2"), formats.get("bf16")
    assert (e4m3.max, e4m3.smallest_normal, e4m3.subnormal_step) == (448.0, 2.0 ** -6, 2.0 ** -9)
    assert (e5m2.max, e5m2.smallest_normal, e5m2.subnormal_step) == (57344.0, 2.0 ** -14, 2.0 ** -16)
    assert bf16.rounding_bound == 2.0 ** -8 and e4m3.rounding_bound == 2.0 ** -4
    assert (e4m3.max_exponent, e5m2.max_exponent) == (8, 15)
    # e4m3 spends the all-ones exponent on finite values (one NaN pattern): 126 positive finite + 0
    assert len(formats.representable("e4m3")) == 127 and len(formats.representable("e5m2")) == 124
    with pytest.raises(KeyError, match="unknown format"):
        formats.get("fp4")


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("recipe", recipes.RECIPES)
def test_every_recipe_round_trips_within_the_format_bound(recipe, fmt):
    x = activations()
    q = recipes.quantize(x, recipe, fmt)
    assert q.data.dtype == formats.get(fmt).dtype and q.clipped == 0
    ratio = recipes.bound_ratio(x, q)
    # <= 1: within half a step everywhere; > 0.5: the bound is tight (rounding does use it), so
    # a recipe that lost a bit (a wrong scale, a double rounding) would exceed 1
    assert 0.5 < ratio <= 1.0, ratio


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_plain_casts_round_trip_within_their_bound(fmt):
    x = activations()
    assert recipes.bound_ratio(x, recipes.cast(x, fmt)) <= 1.0


def test_bound_check_fails_on_a_coarser_format():
    """The check can fail: e5m2 data judged by e4m3's (one bit finer) bound exceeds it."""
    x = activations()
    q = recipes.tensorwise(x, "e5m2")
    q.fmt = formats.get("e4m3")
    assert recipes.bound_ratio(x, q) > 1.0


def test_mxfp8_per_block_scaling_beats_tensorwise_on_outliers():
    x = with_outliers()
    tensorwise = recipes.errors(x, recipes.tensorwise(x, "e4m3"))
    mx = recipes.errors(x, recipes.mxfp8(x, "e4m3"))
    # measured: tensorwise flushes ~38% of the values to zero (their scaled size is below e4m3's
    # smallest subnormal once the scale fits the outliers), MXFP8 only those sharing a block with one
    assert tensorwise["flushed_to_zero"] > 0.2 and mx["flushed_to_zero"] < 0.02
    assert mx["mean_relative"] < tensorwise["mean_relative"] / 10
    # without outliers both are at e4m3's precision: the gain comes from the per-block scales
    plain = activations()
    gap = recipes.errors(plain, recipes.mxfp8(plain))["mean_relative"] / \
        recipes.errors(plain, recipes.rowwise(plain))["mean_relative"]
    assert 0.5 < gap < 2


def test_mxfp8_scales_are_e8m0_powers_of_two_one_per_block():
    x = with_outliers()
    q = recipes.mxfp8(x)
    assert q.scale.shape == (64, 256 // recipes.MX_BLOCK)
    assert torch.equal(q.scale, torch.exp2(torch.log2(q.scale).round()))
    blocks = x.reshape(64, -1, recipes.MX_BLOCK).abs().amax(-1)
    assert bool(((blocks / q.scale) <= 448).all()) and bool(((blocks / q.scale) > 224).all())
    with pytest.raises(ValueError, match="multiple of the block"):
        recipes.mxfp8(torch.ones(4, 48))


def test_delayed_scaling_uses_the_history_and_saturates_when_amax_grows():
    stream = recipes.DelayedScaling("e4m3", history=4)
    x = activations()
    first = stream.quantize(x)  # no history yet: scale 1
    assert float(first.scale) == 1.0
    steady = stream.quantize(x)
    assert recipes.bound_ratio(x, steady) <= 1.0 and steady.clipped == 0
    grown = stream.quantize(4 * x)  # amax 4x the history's: the top of the range saturates
    assert grown.clipped > 0 and recipes.errors(4 * x, grown)["saturated"] > 0
    for _ in range(4):  # once the larger amax is in the history, it fits again
        caught_up = stream.quantize(4 * x)
    assert caught_up.clipped == 0 and recipes.bound_ratio(4 * x, caught_up) <= 1.0


def test_rowwise_scales_each_row_on_its_own():
    x = activations().t().contiguous()  # rows of very different size
    q = recipes.rowwise(x)
    assert q.scale.shape == (256, 1)
    assert recipes.errors(x, q)["flushed_to_zero"] == 0
    assert recipes.errors(x, recipes.tensorwise(x))["mean_relative"] > recipes.errors(x, q)["mean_relative"]
