"""Expert and context-parallel formulas without processes: the all-to-all formula's scope, and
the CP token split that the kit's attention assumes (Megatron's get_batch_on_this_cp_rank)."""
import pytest

from helpers.views import context_parallel, moe


def test_alltoall_formula_refuses_etp(tmp_path):
    from helpers.job.spec import JobSpec
    from helpers.rundir.reader import RunDir
    (tmp_path / "manifest.json").write_text('{"model": {"hidden_size": 64, "moe_router_topk": 2, "num_experts": 8}}')
    JobSpec(model="tiny-moe", tp=2, sp=True, ep=2, etp=2, nproc=4).write(tmp_path / "spec.json")
    with pytest.raises(ValueError, match="ETP=1"):
        moe.expected_alltoall_bytes(RunDir(tmp_path), 0)


@pytest.mark.parametrize("cp", [2, 4])
def test_cp_split_is_what_the_kit_attention_assumes(cp):
    """Megatron's get_batch_on_this_cp_rank gives rank r chunks r and 2*CP-1-r; the kit's
    ContextParallelAttention builds its causal mask on exactly those global positions."""
    import torch

    from helpers.runtime.layers.attention.context_parallel import ContextParallelAttention

    seq = 8 * cp
    held = context_parallel.positions(seq, cp)
    for r in range(cp):
        assert held[r] == ContextParallelAttention._positions(None, r, cp, seq // (2 * cp), torch.device("cpu")).tolist()
    work = context_parallel.causal_work(held)
    assert len(set(work.values())) == 1
    assert sum(work.values()) == seq * (seq + 1) // 2  # every query-key pair of the causal mask, once
