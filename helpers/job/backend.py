"""Which layer implementation a job builds: the kit's local backend (Megatron-Core's local layer
spec with the kit's modules, no Transformer Engine) or Megatron-Core's Transformer Engine spec.

JobSpec.backend is "auto" (TE when `transformer_engine` is installed and the job runs on GPU),
"local" or "te". The runner decides it once (helpers/launch/runner.resolve) so spec.json and the
manifest hold the backend the worker builds. The TE path is a thin switch onto Megatron's own
spec: this workplace cannot install TE, so it has never run here (README, "Transformer Engine")."""
from __future__ import annotations

import importlib.util

BACKENDS = ("auto", "local", "te")


def te_installed() -> bool:
    """Whether `transformer_engine` can be found (not imported: its import needs a GPU driver)."""
    return importlib.util.find_spec("transformer_engine") is not None


def resolve(backend: str, device: str) -> str:
    """'local' or 'te' for a job on `device` ('cpu' or 'cuda'). Raises ValueError (message with
    the fix) when 'te' cannot be honoured."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend == "auto":
        return "te" if device == "cuda" and te_installed() else "local"
    if backend == "te" and device != "cuda":
        raise ValueError("backend='te' needs a GPU (Transformer Engine has no CPU kernels); "
                         "use backend='local' or 'auto' on CPU")
    if backend == "te" and not te_installed():
        raise ValueError("backend='te' asks for Transformer Engine, but `transformer_engine` is not installed "
                         "here; install it (transformer-engine[pytorch]) or use backend='local' or 'auto'")
    return backend
