"""What a job is, as plain data that both sides import (no torch, no Megatron at import time):
sizes.py (ParallelSizes: the one copy of the parallel sizes and what derives from them),
spec.py (JobSpec: everything a run needs), layout.py (Layout: sizes on nodes, validation, rank
grids), rules.py (the named constraints), models.py (presets), data_source.py and tokenizer.py
(where text comes from), paths.py (where the kit keeps things); and import_phase.py (heavy imports
with the garbage collector paused, then frozen: the ranks' and torchrun's, so here, where both
sides may import it)."""
