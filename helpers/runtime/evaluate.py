"""Evaluation loss on a fixed batch (forward only, through Megatron's own schedule). Used to
check that a checkpoint loaded into another layout computes what the saved model computed."""
from __future__ import annotations

from functools import partial

# A sample range no training run reaches in the kit's tests and lessons: the evaluation batch is
# the synthetic source's "iteration" EVAL_INDEX, fixed by the seed alone.
EVAL_INDEX = 1_000_000


def eval_loss(model: list, spec, device, vocab_size: int) -> float:
    """Global-batch mean loss of the fixed evaluation batch (collective: every rank calls)."""
    from megatron.core import parallel_state as ps
    from helpers.runtime import synthetic
    from helpers.runtime.schedule import run_schedule
    from helpers.runtime.train import _forward_step, _global_loss

    data = [iter(synthetic.microbatches(spec.seed, EVAL_INDEX, spec.global_batch_size, spec.micro_batch,
                                        spec.dp, ps.get_data_parallel_rank(), spec.seq_len, vocab_size))
            for _ in model]
    for m in model:
        m.eval()
    losses = run_schedule(model, data, spec, partial(_forward_step, device, 1.0), forward_only=True)
    for m in model:
        m.train()
    return _global_loss(losses, spec, device)
