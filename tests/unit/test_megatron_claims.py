"""What the lessons say Megatron-Core 0.19.2 does, checked against the installed Megatron-Core by
calling the code that does it (no model, no process group: stand-ins carry only what each check reads).

- MoE with TP > 1 and no sequence parallel: MoELayer.forward raises a ValueError in training
  (lessons 08, 10; the kit's rule moe_tp_requires_sp refuses it before start);
- the interleaved schedule refuses a microbatch count that is not a multiple of PP (lesson 06);
- Megatron's fp8_recipe values, and its delayed-scaling defaults (lesson 17);
- finalize_model_grads all-reduces norm gradients over TP only with sequence parallel or
  qk_layernorm (lesson 01's script, lesson 05)."""
from __future__ import annotations

import importlib
import textwrap
import typing
from types import SimpleNamespace

import pytest
import torch


class Group(SimpleNamespace):
    """A process group as the checks read it: its size and this rank's place in it."""

    def size(self) -> int:
        return self.n

    def rank(self) -> int:
        return 0


def test_moe_with_tensor_parallel_and_no_sequence_parallel_raises_in_training():
    from megatron.core.transformer.moe.moe_layer import MoELayer

    from helpers.job import models
    from helpers.job.layout import Layout

    hidden = torch.zeros(4, 1, 8)

    def layer(tp: int, sp: bool, training: bool = True):
        return SimpleNamespace(training=training, attn_tp_group=Group(n=tp),
                               config=SimpleNamespace(sequence_parallel=sp))

    with pytest.raises(ValueError, match="without also enabling sequence parallelism"):
        MoELayer.forward(layer(tp=2, sp=False), hidden)
    for passes in (layer(tp=2, sp=True), layer(tp=1, sp=False), layer(tp=2, sp=False, training=False)):
        with pytest.raises(AttributeError):  # past the check: the stand-in lacks what routing reads next
            MoELayer.forward(passes, hidden)
    refused = {v.name for v in Layout(tp=2, nproc=2).validate(models.preset("tiny-moe"))}
    assert "moe_tp_requires_sp" in refused


def test_interleaved_schedule_refuses_microbatches_not_a_multiple_of_pp(megatron_cpu):
    """Megatron's own check, with its default group of PP microbatches: m < PP is a ValueError, any
    other m that PP does not divide a RuntimeError, both before the first forward (the `device="cuda"`
    tensor the schedule makes first needs the CPU layer the child has)."""
    out = megatron_cpu(textwrap.dedent("""
        import contextlib
        from types import SimpleNamespace
        import torch
        from megatron.core.enums import ModelType
        from megatron.core.model_parallel_config import ModelParallelConfig
        from megatron.core.pipeline_parallel.schedules import (
            forward_backward_pipelining_with_interleaving as interleaved)

        class Group(SimpleNamespace):
            def size(self): return self.n
            def rank(self): return 0

        pp = 4
        config = ModelParallelConfig(pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=2,
                                     pipeline_dtype=torch.float32)
        assert config.microbatch_group_size_per_vp_stage == pp  # the default group is PP microbatches
        chunks = [torch.nn.Module(), torch.nn.Module()]
        for c in chunks:
            c.config, c.model_type = config, ModelType.encoder_or_decoder
        for m in (2, 6, 7):
            try:
                interleaved(forward_step_func=None, data_iterator=[iter([]), iter([])], model=chunks,
                            num_microbatches=m, seq_length=8, micro_batch_size=1,
                            p2p_communicator=SimpleNamespace(config=config, pp_group=Group(n=pp)),
                            pg_collection=SimpleNamespace(tp=Group(n=1), cp=Group(n=1)))
            except (ValueError, RuntimeError) as e:
                print(m, type(e).__name__, "should range in" in str(e) or "dependency bubbles" in str(e))
    """))
    assert out.split("\n")[:3] == ["2 ValueError True", "6 RuntimeError True", "7 RuntimeError True"], out


def test_fp8_recipe_takes_megatrons_five_names_and_no_rowwise():
    from megatron.core.enums import Fp8Recipe
    from megatron.core.transformer import TransformerConfig

    from helpers.job.rules.precision import TE_RECIPES
    from helpers.job.spec import FP8_RECIPES

    names = {r.value for r in Fp8Recipe}
    assert names == {"tensorwise", "delayed", "mxfp8", "blockwise", "custom"}
    annotation = typing.get_type_hints(TransformerConfig)["fp8_recipe"]
    literal = next(a for a in typing.get_args(annotation) if a is not type(None))
    assert set(typing.get_args(literal)) == names
    assert set(TE_RECIPES) <= names and set(FP8_RECIPES) - names == {"rowwise"}  # rowwise: the kit's own


def test_megatrons_delayed_scaling_defaults_to_the_last_amax():
    """Lesson 17: the kit's delayed recipe looks back 16 steps; Megatron passes its own history to
    TE's DelayedScaling (whose own default is 1024 steps, max), and Megatron's default is 1, most_recent."""
    from megatron.core.transformer import TransformerConfig

    from helpers.precision import fp8_matmul

    fields = TransformerConfig.__dataclass_fields__
    assert fields["fp8_amax_history_len"].default == 1
    assert fields["fp8_amax_compute_algo"].default == "most_recent"
    assert fp8_matmul.HISTORY == 16


@pytest.mark.parametrize("sequence_parallel, qk_layernorm, reduced", [
    (False, False, set()),
    (True, False, {"decoder.layers.0.input_layernorm.weight"}),
    (False, True, {"decoder.layers.0.self_attention.q_layernorm.weight"}),
    (True, True, {"decoder.layers.0.input_layernorm.weight", "decoder.layers.0.self_attention.q_layernorm.weight"}),
])
def test_norm_gradients_go_over_tp_only_with_sequence_parallel_or_qk_layernorm(
        monkeypatch, sequence_parallel, qk_layernorm, reduced):
    """finalize_model_grads' TP step (_allreduce_non_tensor_model_parallel_grads) at TP=2: which
    gradients it all-reduces. Each parameter has its own size, so the coalesced buffer's size names them."""
    fmg = importlib.import_module("megatron.core.distributed.finalize_model_grads")  # the module, not its function

    sizes = {"decoder.layers.0.input_layernorm.weight": 3,  # a norm, marked as the kit's SequenceParallelNorm marks it
             "decoder.layers.0.self_attention.q_layernorm.weight": 5,
             "decoder.layers.0.self_attention.linear_qkv.weight": 7}  # TP-split: never summed
    chunk = torch.nn.Module()
    for i, (name, n) in enumerate(sizes.items()):
        p = torch.nn.Parameter(torch.zeros(n))
        p.grad = torch.ones(n)
        p.sequence_parallel = name.endswith("input_layernorm.weight")  # the q norm is summed for qk_layernorm alone
        chunk.register_parameter(f"p{i}", p)
    by_name = dict(zip(sizes, chunk.parameters()))
    chunk.named_parameters = lambda: iter(by_name.items())
    chunk.ddp_config = SimpleNamespace(use_megatron_fsdp=False)
    summed = []
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda t, op=None, group=None: summed.append(t.numel()))
    monkeypatch.setattr(fmg, "get_tensor_model_parallel_group_if_none", lambda group: group)  # no world here
    config = SimpleNamespace(sequence_parallel=sequence_parallel, qk_layernorm=qk_layernorm)
    fmg._allreduce_non_tensor_model_parallel_grads([chunk], config, Group(n=2))
    assert summed == ([sum(sizes[n] for n in reduced)] if reduced else [])
