"""For a CPU job that imports a Hugging Face model: Megatron-Bridge's AutoBridge (with the TE
stand-in, te_standin.py) and transformers, imported once per job by the forkserver torchrun forks
the ranks from, after rank_imports.py (Bridge needs Megatron-Core first). About 1.7 s of
CPU per rank on a 2-core machine; each rank still imports its model's own bridge (~0.2 s) when it
opens the folder (config.open_bridge)."""
from __future__ import annotations

from helpers.runtime import rank_imports  # noqa: F401  (Megatron-Core before Bridge)
from helpers.runtime.hf import te_standin

te_standin.import_auto_bridge(core_only=True)

from helpers.runtime.hf import config, weights  # noqa: E402,F401
