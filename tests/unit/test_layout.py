"""Layout.validate: every invalid layout is rejected with the intended constraint name (and a
fix), the runner refuses them before any process starts, and valid layouts pass."""
import pytest

from helpers import launch
from helpers.errors import InvalidLayout
from helpers.job import models
from helpers.job.layout import Layout

P = models.preset
TE = dict(backend="te")  # Megatron-Core with Transformer Engine: only the layout rules apply

INVALID = [
    # tiny-gpt: 4 layers, 4 heads, hidden 64, ffn 256, max_seq_len 256
    ("tiny-gpt", dict(tp=3), "heads_divisible_by_tp"),
    ("tiny-gpt", dict(tp=8), "heads_divisible_by_tp"),
    ("tiny-gpt", dict(tp=2, nproc=3), "world_divisible_dense"),
    ("tiny-gpt", dict(pp=3), "layers_divisible_by_pp"),
    ("tiny-gpt", dict(pp=8), "layers_divisible_by_pp"),
    ("tiny-gpt", dict(pp=2, vpp=4), "layers_divisible_by_pp"),
    ("tiny-gpt", dict(vpp=2), "vpp_requires_pp"),
    ("tiny-gpt", dict(sp=True), "sp_requires_tp"),
    ("tiny-gpt", dict(ep=2, nproc=2), "ep_requires_moe"),
    ("tiny-gpt", dict(seq_len=512), "seq_len_too_long"),
    ("tiny-gpt", dict(nproc=4, micro_batch=2, global_batch=6), "global_batch_divisible"),
    ("tiny-gpt", dict(pp=2, vpp=2, micro_batch=1, global_batch=3), "microbatches_divisible_by_pp_for_vpp"),
    ("tiny-gpt", dict(tp=0), "size_positive"),
    ("tiny-gpt", dict(first_stage_layers=2), "uneven_requires_pp"),
    ("tiny-gpt", dict(pp=2, first_stage_layers=3, last_stage_layers=2), "uneven_split_invalid"),
    ("tiny-gpt", dict(pp=2, vpp=2, first_stage_layers=3, last_stage_layers=1), "uneven_stage_divisible_by_vpp"),
    ("tiny-gpt", dict(nproc=4, gpus_per_node=3), "world_divisible_nodes"),
    ("tiny-gpt", dict(cp=3), "seq_divisible_by_2cp"),
    ("tiny-gpt", dict(cp=2, seq_len=66, **TE), "seq_divisible_by_2cp"),
    ("tiny-gpt", dict(tp=2, sp=True, seq_len=63), "seq_divisible_by_tp_for_sp"),
    ("tiny-gpt", dict(backend="xla"), "unknown_backend"),
    # tiny-moe: 8 experts, 2 query groups, expert ffn 128
    ("tiny-moe", dict(ep=3, nproc=3), "experts_divisible_by_ep"),
    ("tiny-moe", dict(tp=2), "moe_tp_requires_sp"),
    ("tiny-moe", dict(etp=3, nproc=3), "expert_ffn_divisible_by_etp"),
    ("tiny-moe", dict(ep=4, nproc=2), "world_divisible_expert"),
    # control-moe: 8 heads, 2 query groups, 128 experts, top-8
    ("control-moe", dict(ep=256, nproc=256), "experts_divisible_by_ep"),
    ("control-moe", dict(tp=16, sp=True), "heads_divisible_by_tp"),
    ("control-moe", dict(tp=2, sp=True, nproc=6, ep=3), "experts_divisible_by_ep"),
    ("control-moe", dict(tp=2, pp=2, cp=3, ep=4, etp=1, sp=True, nproc=16), "world_divisible_dense"),
    ("control-moe-cpu", dict(ep=32, nproc=32), "experts_divisible_by_ep"),
    ("control-moe-cpu", dict(etp=3, nproc=3), "expert_ffn_divisible_by_etp"),
    # deepseek-v2-lite: 27 layers, MLA, 16 heads, 64 routed + 2 shared experts
    ("deepseek-v2-lite", dict(pp=2, **TE), "layers_divisible_by_pp"),
    ("deepseek-v2-lite", dict(pp=2, first_stage_layers=13, last_stage_layers=13, **TE), "uneven_split_invalid"),
    ("deepseek-v2-lite", dict(pp=4, first_stage_layers=7, last_stage_layers=7), "uneven_split_invalid"),
    ("deepseek-v2-lite", dict(tp=32, sp=True), "heads_divisible_by_tp"),  # the local backend builds MLA
    ("deepseek-v2-lite", dict(tp=32, sp=True, **TE), "heads_divisible_by_tp"),
    ("deepseek-v2-lite", dict(ep=5, nproc=5, **TE), "experts_divisible_by_ep"),
    ("deepseek-v2-lite", dict(tp=3, sp=True, **TE), "shared_expert_ffn_divisible_by_tp"),
    ("deepseek-v2-lite", dict(pp=3, vpp=2, **TE), "layers_divisible_by_pp"),
    # qwen3-30b-a3b: 48 layers, 32 heads, 4 KV heads, 128 experts, expert ffn 768
    ("qwen3-30b-a3b", dict(tp=3, sp=True, **TE), "query_groups_divisible_by_tp"),
    ("qwen3-30b-a3b", dict(ep=3, nproc=3, **TE), "experts_divisible_by_ep"),
    ("qwen3-30b-a3b", dict(seq_len=65536, **TE), "seq_len_too_long"),
    ("qwen3-30b-a3b", dict(etp=5, nproc=5, **TE), "expert_ffn_divisible_by_etp"),
    ("qwen3-30b-a3b", dict(pp=5, **TE), "layers_divisible_by_pp"),
    ("qwen3-30b-a3b", dict(tp=6, sp=True), "query_groups_divisible_by_tp"),
    # nemotron-3-nano-30b-a3b: 52-layer Mamba/attention/MoE hybrid, 2 KV heads, 64 Mamba heads, 8 groups
    ("nemotron-3-nano-30b-a3b", dict(tp=16, sp=True, **TE), "mamba_groups_divisible_by_tp"),
    ("nemotron-3-nano-30b-a3b", dict(tp=3, sp=True, **TE), "mamba_heads_divisible_by_tp"),
    ("nemotron-3-nano-30b-a3b", dict(ep=3, nproc=3, **TE), "experts_divisible_by_ep"),
    ("nemotron-3-nano-30b-a3b", dict(tp=4, sp=True, ep=8, nproc=8), "hybrid_needs_hf_import"),
    ("nemotron-3-nano-30b-a3b", dict(tp=4, sp=True, cp=32, seq_len=8192, nproc=128, **TE), "mamba_heads_divisible_by_tp_cp"),
    ("nemotron-3-nano-30b-a3b", dict(tp=2, sp=True, cp=3, seq_len=8190, nproc=6, **TE), "mamba_groups_vs_cp"),
    ("nemotron-3-nano-30b-a3b", dict(pp=2, vpp=2), "hybrid_no_vpp"),
    ("nemotron-3-nano-30b-a3b", dict(pp=3, **TE), "layers_divisible_by_pp"),
    # llama3-8b: 32 layers, 32 heads, 8 KV heads, dense
    ("llama3-8b", dict(tp=12, **TE), "heads_divisible_by_tp"),
    ("llama3-8b", dict(ep=2, nproc=2, **TE), "ep_requires_moe"),
    ("llama3-8b", dict(pp=3, **TE), "layers_divisible_by_pp"),
    ("llama3-8b", dict(tp=8, pp=2, nproc=8, gpus_per_node=8, **TE), "world_divisible_dense"),
    ("llama3-8b", dict(tp=2, **TE, seq_len=16384), "seq_len_too_long"),
    ("llama3-8b", dict(tp=5), "heads_divisible_by_tp"),  # the local backend builds Llama: only layout rules
]


@pytest.mark.parametrize("model, sizes, name", INVALID,
                         ids=[f"{m}-{n}-{i}" for i, (m, _, n) in enumerate(INVALID)])
def test_invalid_layout_is_named(model, sizes, name):
    with pytest.raises(InvalidLayout) as err:
        Layout(**sizes).check(P(model))
    assert name in err.value.names, str(err.value)
    for v in err.value.violations:  # every violation says what is wrong and what to do
        assert v.message and v.fix and v.category


def test_at_least_forty_invalid_layouts_across_the_presets():
    assert len(INVALID) >= 40
    assert {m for m, _, _ in INVALID} >= {"tiny-gpt", "tiny-moe", "control-moe", "deepseek-v2-lite",
                                          "qwen3-30b-a3b", "nemotron-3-nano-30b-a3b", "llama3-8b"}


def test_mla_down_projections_must_split_over_tp():
    """The local spec's MLA down projections are column-parallel: kv_lora_rank + rope dim (and
    q_lora_rank) must divide by TP. DeepSeek-V2-Lite's 512 + 64 always does; a 62-wide RoPE part does not."""
    odd = P("deepseek-v2-lite").with_(qk_pos_emb_head_dim=62, q_lora_rank=1534)
    names = [v.name for v in Layout(tp=4, sp=True).validate(odd)]
    assert names == ["mla_kv_down_divisible_by_tp", "mla_q_lora_divisible_by_tp"]
    assert Layout(tp=2, sp=True).validate(odd) == []


def test_not_enough_devices():
    names = [v.name for v in Layout.on(2, 8, tp=8, **TE).validate(P("llama3-8b"), devices=8)]
    assert names == ["not_enough_devices"]


def test_every_problem_is_reported_at_once():
    names = {v.name for v in Layout(tp=3, pp=5, sp=False, nproc=4).validate(P("tiny-moe"))}
    assert {"world_divisible_dense", "heads_divisible_by_tp", "moe_tp_requires_sp", "layers_divisible_by_pp"} <= names


def test_deepseek_27_layers_at_pp2_suggests_14_13_and_accepts_it():
    problems = Layout(pp=2, **TE).validate(P("deepseek-v2-lite"))
    assert [v.name for v in problems] == ["layers_divisible_by_pp"]
    assert "first_stage_layers=14, last_stage_layers=13" in problems[0].fix
    assert Layout.suggest_uneven(27, 2) == (14, 13)
    assert Layout(pp=2, first_stage_layers=14, last_stage_layers=13, **TE).validate(P("deepseek-v2-lite")) == []


def test_uneven_splits_keep_the_busiest_stage_as_short_as_any_split():
    """28 layers on 8 stages: middle stages of 4 leave 4 for the first and last (busiest stage 4
    layers), where middle stages of 3 would leave 10 (5 on each end). Every such split is offered, and
    each passes the pipeline rule; the suggestion keeps the first stage no lighter than the last."""
    assert Layout.uneven_splits(28, 8) == [(1, 3), (2, 2), (3, 1)]
    assert Layout.suggest_uneven(28, 8) == (2, 2)
    lay = dict(pp=8, nproc=8, **TE)
    model = P("tiny-gpt").with_(num_layers=28)
    assert all(Layout(first_stage_layers=f, last_stage_layers=l_, **lay).validate(model) == []
               for f, l_ in Layout.uneven_splits(28, 8))
    assert Layout.uneven_splits(4, 8) == [] and Layout.suggest_uneven(4, 8) is None  # fewer layers than stages


VALID = [
    ("tiny-gpt", dict()),
    ("tiny-gpt", dict(tp=2, pp=2, nproc=8, micro_batch=2, global_batch=8)),
    ("tiny-gpt", dict(pp=2, vpp=2, micro_batch=1, global_batch=2)),
    ("tiny-moe", dict(tp=2, sp=True, ep=2, etp=1, nproc=4)),
    ("tiny-moe", dict(tp=4, sp=True)),  # tp a multiple of the 2 KV groups: Megatron replicates them
    ("control-moe-cpu", dict(tp=2, pp=2, ep=4, etp=1, sp=True, nproc=8)),
    ("control-moe", dict(tp=2, pp=2, cp=2, ep=4, etp=1, sp=True, nproc=16, **TE)),
    ("deepseek-v2-lite", dict(pp=3, ep=8, nproc=24, **TE)),
    ("qwen3-30b-a3b", dict(tp=4, sp=True, ep=8, etp=1, nproc=16, gpus_per_node=8, **TE)),
    ("nemotron-3-nano-30b-a3b", dict(tp=4, sp=True, ep=8, etp=1, nproc=8, **TE)),  # NVIDIA's recipe
    ("llama3-8b", dict(tp=8, pp=2, nproc=32, gpus_per_node=8, seq_len=8192, **TE)),
]


@pytest.mark.parametrize("model, sizes", VALID, ids=[m for m, _ in VALID])
def test_valid_layout_is_accepted(model, sizes):
    assert Layout(**sizes).validate(P(model)) == []


@pytest.mark.parametrize("request_, name", [
    (dict(model="deepseek-v2-lite", pp=2), "layers_divisible_by_pp"),
    (dict(model="tiny-gpt", model_overrides={"activation": "squared_relu"}), "kit_worker_lacks_feature"),
    (dict(model="control-moe-cpu", tp=2, nproc=2), "moe_tp_requires_sp"),
    (dict(cp=2, seq_len=66), "seq_divisible_by_2cp"),
    (dict(model="nemotron-3-nano-30b-a3b", model_overrides={"num_layers": 4, "hybrid_pattern": "M*ME"}),
     "hybrid_needs_hf_import"),
])
def test_runner_refuses_before_any_process_starts(request_, name, tmp_path):
    out = tmp_path / "runs"
    with pytest.raises(launch.InvalidJob, match=name) as err:
        launch.run(out=str(out), device="cpu", progress=False, **request_)
    assert name in err.value.names  # the structured violations travel with the error
    assert all(v.fix for v in err.value.violations)
    assert not out.exists()  # no run directory: nothing was started
