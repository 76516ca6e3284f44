"""A Megatron-LM command's memory and time flags that the kit plans but its worker does not build
(Megatron-FSDP, FP8 parameters, multi-token prediction, a hybrid layer pattern) or that it reads as
Megatron-LM resolves them (virtual stages from layers per stage, FP8 recipes, the flex dispatcher, a
batch schedule): read into the job, planned, refused by name where a run would need the real
feature, and dropped by shrink() for a CPU run."""
from __future__ import annotations

import pytest

from helpers.errors import InvalidJob
from helpers.job import rules
from helpers.launch import from_megatron
from helpers.launch.shrink import shrink

BASE = ("--num-layers 8 --hidden-size 256 --num-attention-heads 4 --vocab-size 1000 --seq-length 256 "
        "--max-position-embeddings 256 --micro-batch-size 1 --global-batch-size 8 --train-iters 10 --lr 1e-4 "
        "--bf16 --position-embedding-type rope --hidden-dropout 0 --attention-dropout 0 "
        "--no-create-attention-mask-in-dataloader ")


def _read(extra: str):
    return from_megatron.read_megatron_args(BASE + extra)


def test_megatron_fsdp_is_read_with_its_strategy_and_bf16_gradients():
    reading = _read("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads "
                    "--megatron-fsdp-main-grads-dtype bf16 --use-distributed-optimizer --use-nccl-ub")
    spec = reading.spec()
    assert (spec.megatron_fsdp, spec.grad_reduce_dtype) == ("optim_grads", "bf16")
    assert not reading.ignored and "--use-nccl-ub" in reading.not_planned
    assert _read("--data-parallel-sharding-strategy optim").spec().megatron_fsdp is None  # without the switch: DDP


def test_fp8_flags_become_the_job_precision_and_fp8_parameters():
    spec = _read("--fp8-format hybrid --fp8-param-gather --use-distributed-optimizer").spec()
    assert (spec.precision, spec.fp8_recipe, spec.fp8_param_gather) == ("fp8", "delayed", True)  # Megatron-LM's recipe
    reading = _read("--fp8-format e4m3 --fp8-recipe mxfp8")
    assert reading.spec().fp8_recipe == "tensorwise" and "fp8_recipe mxfp8 -> tensorwise" in reading.message()


def test_layers_per_virtual_stage_become_virtual_stages_as_validate_args_counts_them():
    assert _read("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2").spec().vpp == 2
    assert _read("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 4").spec().vpp is None


def test_a_hybrid_pattern_and_mtp_layers_are_the_planned_model():
    m = _read("--hybrid-layer-pattern M-M*-M- --mamba-num-groups 2").spec().model_preset()
    assert (m.hybrid_pattern, m.num_layers, m.mamba_head_dim, m.mamba_num_groups) == ("M-M*-M-", 7, 64, 2)
    assert m.mamba_num_heads == 2 * 256 // 64  # MambaMixer: expand 2 x hidden / head dim
    assert _read("").spec().model_preset().mamba_head_dim is None  # a GPT takes no Mamba defaults
    from helpers.job.layout import Layout
    from helpers.memory.plan import plan_memory
    from helpers.memory.training import Training

    with_mtp, without = _read("--mtp-num-layers 1").spec(nproc=1), _read("").spec(nproc=1)
    assert with_mtp.model_preset().mtp_num_layers == 1
    mtp, plain = (plan_memory(s.model_preset(), Layout.of(s), Training.of(s)).stages[0] for s in (with_mtp, without))
    h = 256  # a GPT layer: 4h x h attention and 8h x h MLP weights, their biases (9h), two LayerNorms (4h)
    layer = 12 * h * h + 9 * h + 4 * h
    # one more layer, the hidden-and-embedding projection (2h x h) and three LayerNorms (enorm, hnorm, final)
    assert mtp.params - plain.params == layer + 2 * h * h + 3 * 2 * h
    assert mtp.terms["logits_loss"] == 2 * plain.terms["logits_loss"]  # a second prediction's logits


def test_flex_dispatcher_and_batch_schedule_are_answered():
    moe = "--num-experts 4 --moe-router-topk 2 --expert-model-parallel-size 2 "
    reading = _read(moe + "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep")
    assert reading.spec().moe_dispatcher == "alltoall" and "flex (deepep) -> alltoall" in reading.message()
    with pytest.raises(InvalidJob, match="Cannot specify both"):
        _read("--step-batch-size-schedule '0:4 1M:8'")
    schedule = from_megatron.read_megatron_args(BASE.replace("--global-batch-size 8 ", "")
                                                + "--step-batch-size-schedule '0:4 1M:16'")
    assert schedule.spec().global_batch_size == 16


def test_a_run_with_planned_only_features_is_refused_by_name_and_shrink_drops_them():
    full = _read("--use-megatron-fsdp --fp8-format hybrid --fp8-param-gather --use-distributed-optimizer "
                 "--mtp-num-layers 1").spec(nproc=8, device="cpu", precision="fp32")
    found = {v.name for v in rules.check(rules.resolve(full, rules.CPU_ONLY)).violations}
    assert "planned_not_built" in found and "fp8_param_gather_needs_fp8_and_sharding" in found
    small, how = shrink(full)
    assert (small.megatron_fsdp, small.dist_opt, small.fp8_param_gather, small.model_preset().mtp_num_layers) == \
        (None, True, False, 0)
    assert "megatron_fsdp optim_grads_params -> None" in how
    assert not {"planned_not_built", "fp8_param_gather_needs_fp8_and_sharding"} & \
        {v.name for v in rules.check(rules.resolve(small, rules.CPU_ONLY)).violations}
