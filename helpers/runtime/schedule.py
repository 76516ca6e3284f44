"""One call into Megatron's forward/backward schedule for training, evaluation and validation.
Megatron wants a single model/iterator without virtual stages and lists with them."""
from __future__ import annotations


def run_schedule(model: list, iterators: list, spec, forward_step_func, forward_only: bool):
    from megatron.core.pipeline_parallel import get_forward_backward_func

    chunks = len(model) > 1
    return get_forward_backward_func()(
        forward_step_func=forward_step_func,
        data_iterator=iterators if chunks else iterators[0],
        model=model if chunks else model[0],
        num_microbatches=spec.num_microbatches,
        seq_length=spec.seq_len,
        micro_batch_size=spec.micro_batch,
        forward_only=forward_only,
    )
