"""TensorBoard event files beside metrics.jsonl, so that `tensorboard --logdir runs` shows every run
directory as one run and compares them side by side. metrics.jsonl stays the kit's record; this writes
the same numbers, through torch's own SummaryWriter, under Megatron-LM's tag names (its training
log's `lm loss`, `learning-rate`, `grad-norm`, `iteration-time`, `mem-*-bytes`, `lm loss validation`).

Written by the rank that writes metrics.jsonl, when JobSpec.tensorboard resolved to "on"; on every
other rank, and when off, nothing is imported and nothing is written."""
from __future__ import annotations

from pathlib import Path

# metrics.jsonl key -> TensorBoard tag (Megatron-LM's where it has one)
ITERATION_TAGS = {"loss": "lm loss", "lr": "learning-rate", "grad_norm": "grad-norm",
                  "step_time_s": "iteration-time", "tokens_per_s": "tokens-per-second"}
# validation.jsonl split -> tag
EVALUATION_TAGS = {"valid": "lm loss validation", "test": "lm loss test"}


def memory_tag(key: str) -> str:
    """metrics.jsonl's mem_allocated_bytes -> mem-allocated-bytes (Megatron-LM's memory tags)."""
    return key.replace("_", "-")


class TensorBoard:
    def __init__(self, run_dir: Path, enabled: bool):
        self._writer = None
        if enabled:
            from torch.utils.tensorboard import SummaryWriter
            self._writer = SummaryWriter(log_dir=str(run_dir), flush_secs=10)

    def iteration(self, record: dict) -> None:
        """One metrics.jsonl line: its losses, lr, grad norm, step time, tokens/s and memory."""
        if self._writer is None:
            return
        step = record["iteration"]
        for key, tag in ITERATION_TAGS.items():
            if key in record:
                self._writer.add_scalar(tag, record[key], step)
        for key, value in record.items():
            if key.startswith("mem_"):
                self._writer.add_scalar(memory_tag(key), value, step)

    def evaluation(self, records: list[dict]) -> None:
        """The validation and test passes (validation.jsonl's lines), then the file is closed."""
        if self._writer is None:
            return
        for r in records:
            self._writer.add_scalar(EVALUATION_TAGS[r["split"]], r["loss"], r["iteration"])
        self._writer.close()
        self._writer = None
