"""DeepSeek-V4-Flash in the memory planner (helpers/job/models.py preset, helpers/memory/smallest_fit.py):
its parameters against transformers' own DeepseekV4 model built from the published config (meta
device), the seed's observation that it does not train on one node of 8 GPUs of 96 GB, and the
smallest whole-node layout that does."""
import pytest

from helpers.job import models
from helpers.job.layout import Layout
from helpers.memory import smallest_fit as sf
from helpers.memory.static import static_memory

V4 = models.preset("deepseek-v4-flash")
GPU_GIB = 96


def test_the_preset_has_the_published_model_s_parameters():
    """0.5%: the MLA stand-in for V4's attention plans 8.2M more parameters a layer (0.35B of 284B)."""
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.DeepseekV4Config())
    published = sum(p.numel() for p in model.parameters())
    planned = static_memory(V4, Layout(nproc=1), sf.LARGE_MOE).params
    assert abs(planned / published - 1) < 0.005, (planned, published)


def test_no_layout_of_one_node_of_8_gpus_fits():
    assert sf.smallest_fit(V4, GPU_GIB, gpus_per_node=8, max_gpus=8) is None
    layout, plan = sf.lowest_peak(V4, 8)
    assert plan.reserved_bytes / sf.GiB > 6 * GPU_GIB  # 662 GiB at best (TP8, EP8): not close


@pytest.fixture(scope="module")
def fit():
    return sf.smallest_fit(V4, GPU_GIB, gpus_per_node=8)


def test_the_smallest_fit_is_8_nodes(fit):
    assert fit.gpus == 64 and fit.layout.nodes == 8
    assert fit.plan.fits(GPU_GIB * sf.GiB) and fit.layout.validate(V4) == []
    # the lowest peak of those fitting on 64: PP4 (43 layers as 11/11/11/10: the busiest stage as short as
    # any split makes it), the experts over 16 ranks of a stage
    assert (fit.layout.pp, fit.layout.ep, fit.layout.expert_tp) == (4, 16, 1)
    assert (fit.layout.first_stage_layers, fit.layout.last_stage_layers) == (11, 10)


def test_the_skipped_layouts_are_below_the_floor_the_plan_counts(fit):
    """The search skips a layout when its first stage's expert weights + gradients exceed the device:
    those bytes are part of what the plan counts, so a skipped layout could not have fitted."""
    for gpus in (8, 32, 64):
        for lay in list(sf.layouts(V4, gpus, 8, 4096, 1))[::7]:
            static = static_memory(V4, lay, sf.LARGE_MOE, stage=0)
            assert sf.expert_floor_bytes(V4, lay, sf.LARGE_MOE) <= static.param_bytes + static.grad_bytes, lay
