"""Every error the kit raises on purpose. Each message names the problem and the fix; each class
keeps the structured facts (violations, failing ranks, checkpoint problem kind) so callers can
act on them without matching text. Imports nothing: both sides (notebook and worker) use it.

    KitError
    ├── InvalidLayout     a layout breaks named constraints (.violations, .names)
    ├── InvalidJob        the request cannot run; nothing was started (.violations when the layout is why)
    ├── CheckpointError   a checkpoint cannot be loaded (.kind: missing|partial|corrupt|model|layout|node-local)
    ├── DataNotFound      data or tokenizer files are not where the job looks
    ├── PreflightError    nodes of a multi-node job do not see the same files
    ├── HFImportError     a Hugging Face model's weights do not fit the built model (.names: the parameters)
    ├── MegatronRefused   Megatron-LM's or Megatron-Bridge's own checks refuse a command or recipe the kit wrote
    └── JobFailed         a started job failed (.run, .ranks: the root-cause ranks)
        └── JobTimeout    ... by running past its timeout (.ranks: the stalled ones)
"""
from __future__ import annotations


class KitError(Exception):
    """Base class: the kit found a problem and says what to do about it."""


class InvalidLayout(KitError, ValueError):
    def __init__(self, violations: list):
        self.violations = list(violations)
        lines = "\n".join(f"  - {v}" for v in self.violations)
        super().__init__(f"invalid layout ({len(self.violations)} problem(s)):\n{lines}")

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.violations]


class InvalidJob(KitError, ValueError):
    """The request cannot run; nothing was started. `.violations` holds the layout's violated
    constraints when those are the reason (empty otherwise)."""

    def __init__(self, message: str, violations: list | None = None):
        super().__init__(message)
        self.violations = list(violations or [])

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.violations]


class CheckpointError(KitError, RuntimeError):
    """A checkpoint cannot be loaded; the message names the path, the problem and the fix.
    `kind` is one word: missing | partial | corrupt | model | layout | node-local."""

    def __init__(self, message: str, kind: str = "missing"):
        super().__init__(message)
        self.kind = kind


class DataNotFound(KitError, FileNotFoundError):
    """Data or tokenizer files are missing; the message says where the kit looked and how to get them."""


class PreflightError(KitError, RuntimeError):
    """The nodes of a multi-node job do not see the same data/tokenizer/checkpoint files."""


class HFImportError(KitError, RuntimeError):
    """Importing or exporting a Hugging Face model through Megatron-Bridge would leave parameters
    unwritten; `.names` lists them (Megatron names)."""

    def __init__(self, message: str, names: list[str] | None = None):
        super().__init__(message)
        self.names = list(names or [])


class MegatronRefused(KitError, ValueError):
    """Megatron-LM's or Megatron-Bridge's own code refused a command or recipe the kit wrote for a
    job (helpers/rundir/megatron_lm_check.py, bridge_recipe.py); the message is theirs, with the
    file or flags it refused."""


class ScriptFailed(KitError, RuntimeError):
    """A learner's own torchrun script (launch.run_script) exited with an error or timed out; the
    message holds its last output lines."""


class JobFailed(KitError, RuntimeError):
    def __init__(self, message: str, run, ranks: list[int]):
        super().__init__(message)
        self.run, self.ranks = run, ranks


class JobTimeout(JobFailed):
    """The job ran past its timeout; `.ranks` are the stalled ranks (furthest behind)."""


class MemoryPlanWarning(UserWarning):
    """The memory plan says the job will not fit in device memory (a warning: plans can be wrong)."""
