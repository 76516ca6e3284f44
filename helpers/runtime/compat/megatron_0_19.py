"""Workarounds for Megatron-Core 0.19.2's distributed optimizer on torch's Adam (no apex, no
Transformer Engine), each found by a bit-exact resume test (tests/jobs/test_checkpoint.py) and
named for what it fixes. Re-check them when megatron-core changes: each should become a no-op or
be dropped."""
from __future__ import annotations

import contextlib

import torch


def ensure_optimizer_state(opt) -> None:
    """Without apex/TE the distributed optimizer wraps torch's Adam, which has no state (no `step`)
    before its first step, and DistributedOptimizer.state_dict() asserts on it. Megatron's own
    remedy: one step with zero gradients to allocate the state, which the load then overwrites."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    for o in getattr(opt, "chained_optimizers", [opt]):
        if isinstance(o, DistributedOptimizer) and not o.optimizer.state:
            o._init_optimizer_states_with_dummy_values()


@contextlib.contextmanager
def keep_torch_adam_step():
    """Megatron-Core 0.19.2, distributed optimizer on torch's Adam (no apex/TE), fully_reshardable:
    load_state_dict first restores Adam's `step` (a tensor in the state) from the saved param
    groups, then copies every state tensor from the checkpoint, where `step` is not one -> KeyError.
    During the load, each parameter's source tensors get its own, already restored step."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    original = DistributedOptimizer._set_main_param_and_optimizer_states

    def with_step(self, model_param, tensors):
        group, order = self.model_param_group_index_map[model_param]
        step = self.optimizer.state[self.optimizer.param_groups[group]["params"][order]].get("step")
        if isinstance(step, torch.Tensor) and "step" not in tensors:
            tensors = {**tensors, "step": step.clone()}
        return original(self, model_param, tensors)

    DistributedOptimizer._set_main_param_and_optimizer_states = with_step
    try:
        yield
    finally:
        DistributedOptimizer._set_main_param_and_optimizer_states = original



def unshare_adam_steps(opt) -> None:
    """Megatron-Core 0.19.2's distributed optimizer, on torch's Adam, restores `step` as ONE tensor
    shared by every parameter's state; torch's Adam increments each parameter's `step` in place, so
    the shared counter advanced once per parameter per iteration and the second update after a
    resume used wrong bias corrections. Give each parameter its own copy. And from a checkpoint in
    the distributed optimizer's dp_reshardable format (Megatron-LM's default) the per-parameter
    `step` keeps the dummy value ensure_optimizer_state gave it, while the param groups hold the
    saved step: the groups' step is the one to continue from."""
    for o in getattr(opt, "chained_optimizers", [opt]):
        for group in o.optimizer.param_groups:
            for param in group["params"]:
                state = o.optimizer.state.get(param, {})
                step = state.get("step")
                if not isinstance(step, torch.Tensor):
                    continue
                if group.get("step") is not None:
                    state["step"] = torch.full_like(step, float(group["step"]))
                else:
                    state["step"] = step.clone()
