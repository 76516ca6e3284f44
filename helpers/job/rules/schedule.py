"""The learning-rate fields describe a schedule Megatron's OptimizerParamScheduler accepts (it
asserts where these rules name the problem first). Category "schedule"."""
from __future__ import annotations

from helpers.job.violation import Found, Violation


def check(spec) -> list[Violation]:
    v = Found("schedule")
    if spec.lr < 0 or spec.min_lr < 0 or spec.min_lr > spec.lr:
        v.add("lr_order", f"learning rates must satisfy 0 <= min_lr <= lr, not min_lr={spec.min_lr}, lr={spec.lr}",
              "lower min_lr or raise lr")
    if spec.lr_warmup_iters < 0:
        v.add("lr_warmup_negative", f"lr_warmup_iters must be >= 0, not {spec.lr_warmup_iters}",
              "use 0 for no warm-up")
        return v
    scheduled = spec.lr_warmup_iters > 0 or spec.lr_decay != "constant" or spec.lr_decay_iters is not None
    if scheduled and not spec.eval_only and spec.iters > 0 and spec.lr_warmup_iters >= spec.lr_decay_end:
        what = f"lr_decay_iters={spec.lr_decay_iters}" if spec.lr_decay_iters is not None else f"iters={spec.iters}"
        v.add("lr_warmup_past_decay", f"lr_warmup_iters={spec.lr_warmup_iters} must end before {what} (where the "
              "decay ends)", "shorten the warm-up or lengthen the run")
    return v
