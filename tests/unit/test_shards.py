"""Checkpoint shard picture (views/shards): the pieces a layout writes tile the global tensor
[layers, rows, cols] exactly (no gap, no overlap), only the first DP/CP replica writes, and the
offsets are those Megatron's dist_checkpointing puts in a checkpoint's .metadata; which layers a
stage holds (the memory planner's split) is what Megatron's own functions say."""
import dataclasses
import warnings

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from helpers.job import models  # noqa: E402
from helpers.job.layout import Layout  # noqa: E402
from helpers.views import shards  # noqa: E402

TINY = models.preset("tiny-gpt")
LAYOUTS = [Layout(), Layout(tp=2), Layout(pp=2), Layout(tp=2, pp=2), Layout(tp=4), Layout(tp=2, nproc=4),
           Layout(pp=2, vpp=2), Layout(pp=2, first_stage_layers=1, last_stage_layers=3), Layout(tp=2, cp=2)]


@pytest.mark.parametrize("matrix", list(shards.MATRICES))
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: l.describe().split(";")[0])
def test_shards_tile_the_global_tensor(layout, matrix):
    rows, cols = shards.matrix_shape(TINY, matrix)
    covered = np.zeros((TINY.num_layers, rows, cols), dtype=int)
    pieces = shards.shards(layout, TINY, matrix)
    for p in pieces:
        (l, r, c), (nl, nr, nc) = p["offset"], p["size"]
        covered[l:l + nl, r:r + nr, c:c + nc] += 1
    assert (covered == 1).all()
    writers = {p["rank"] for p in pieces}
    assert len(writers) == layout.tp * layout.pp  # one model copy writes: DP and CP replicas do not
    assert all(p["file"] == f"__{p['rank']}_0.distcp" for p in pieces)


def test_offsets_match_a_tp2_checkpoint_metadata():
    """What the .metadata of a kit checkpoint saved at TP=2 x DP=2 lists for
    decoder.layers.mlp.linear_fc1.weight (global [4, 256, 64]): per layer, rows 0-127 in
    __0_0.distcp and rows 128-255 in __1_0.distcp; ranks 2 and 3 (DP replica 1) write none."""
    pieces = shards.shards(Layout(tp=2, nproc=4), TINY, "linear_fc1")
    got = sorted((p["offset"], p["size"], p["file"]) for p in pieces)
    want = sorted([((l, 0, 0), (1, 128, 64), "__0_0.distcp") for l in range(4)]
                  + [((l, 128, 0), (1, 128, 64), "__1_0.distcp") for l in range(4)])
    assert got == want
    assert shards.checkpoint_key("linear_fc1") == "decoder.layers.mlp.linear_fc1.weight"


def _megatron_stage_layers(layout: Layout, num_layers: int) -> dict[int, list[int]]:
    """{stage: layers}, asked of Megatron (the offset and count each stage's chunks build)."""
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.transformer import TransformerConfig
        from megatron.core.transformer.transformer_block import get_num_layers_to_build
        from megatron.core.transformer.transformer_layer import get_transformer_layer_offset
        config = TransformerConfig(num_layers=num_layers, hidden_size=8, num_attention_heads=1,
                                   pipeline_model_parallel_size=layout.pp, pipeline_dtype=torch.float32,
                                   virtual_pipeline_model_parallel_size=layout.vpp,
                                   num_layers_in_first_pipeline_stage=layout.first_stage_layers,
                                   num_layers_in_last_pipeline_stage=layout.last_stage_layers)
    out = {}
    for stage in range(layout.pp):
        out[stage] = []
        for vp in range(layout.vpp) if layout.vpp else [None]:
            first = get_transformer_layer_offset(config, vp_stage=vp, pp_rank=stage)
            out[stage] += list(range(first, first + get_num_layers_to_build(config, vp_stage=vp, pp_rank=stage)))
    return out


@pytest.mark.parametrize("layers, sizes", [
    (4, dict()), (4, dict(pp=2)), (4, dict(pp=2, vpp=2)), (4, dict(pp=2, first_stage_layers=1, last_stage_layers=3)),
    (8, dict(pp=4, vpp=2)), (12, dict(pp=3, vpp=2, first_stage_layers=2, last_stage_layers=2)),
    (16, dict(pp=4, first_stage_layers=3, last_stage_layers=1)), (27, dict(pp=3, first_stage_layers=9)),
    (52, dict(pp=2, first_stage_layers=27, last_stage_layers=25)), (6, dict(pp=3, vpp=2, last_stage_layers=2)),
])
def test_stage_layers_are_megatrons(layers, sizes):
    model, layout = dataclasses.replace(TINY, num_layers=layers), Layout(**sizes)
    assert [v.name for v in layout.validate(model) if v.category != "batch"] == []  # a split Megatron accepts
    assert shards.stage_layers(layout, model) == _megatron_stage_layers(layout, layers)


def test_stage_layers_and_files_read_at_another_layout():
    assert shards.stage_layers(Layout(pp=2, vpp=2), TINY) == {0: [0, 2], 1: [1, 3]}  # interleaved chunks
    assert shards.stage_layers(Layout(pp=2, first_stage_layers=1, last_stage_layers=3), TINY) == {0: [0], 1: [1, 2, 3]}
    # saved at TP=2, loaded at PP=2: each stage needs both TP halves of its layers
    assert shards.files_read(Layout(tp=2), Layout(pp=2), TINY, "linear_fc1") == {
        0: ["__0_0.distcp", "__1_0.distcp"], 1: ["__0_0.distcp", "__1_0.distcp"]}
    # saved at PP=2, loaded at TP=2 (row parallel fc2): each TP rank reads both stages' files
    assert shards.files_read(Layout(pp=2), Layout(tp=2), TINY, "linear_fc2") == {
        0: ["__0_0.distcp", "__1_0.distcp"], 1: ["__0_0.distcp", "__1_0.distcp"]}
    # TP=2 x PP=2 -> TP=4: rank 0 needs columns 0-63 of all layers: stage 0's and stage 1's TP-0 files
    assert shards.files_read(Layout(tp=2, pp=2), Layout(tp=4), TINY, "linear_fc2")[0] == ["__0_0.distcp", "__2_0.distcp"]


def test_refuses_what_it_cannot_draw():
    with pytest.raises(ValueError, match="gate/up"):
        shards.matrix_shape(models.preset("control-moe-cpu"), "linear_fc1")
    with pytest.raises(ValueError, match="not divisible by TP=3"):
        shards.shards(Layout(tp=3), TINY, "linear_fc1")
    fig = shards.plot(TINY, "linear_fc1", Layout(tp=2), Layout(pp=2))
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "r1\n(0,128,0)" in texts and any("loading A reads __0_0.distcp, __1_0.distcp" in t for t in texts)
    matplotlib.pyplot.close("all")
