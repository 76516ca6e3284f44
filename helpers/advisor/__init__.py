"""Notebook side, prediction: the layout advisor. Every layout of a model on N GPUs that the kit's
rules accept, with the training choices each is weighed with (candidates.py), each one's peak memory
per GPU (helpers/memory/plan.py) and step time (time/: one term per file, composed in time/step.py),
ranked (advise.py); how the software runs a step (execution.py), a GPU named by its profile's key
or a JSON file (gpus.py); the command line (cli.py, `python -m helpers.advisor`). The GPU profiles,
their achieved rates, links, placement, collectives, GEMMs, the layout enumeration and the assumed
constants are the performance model's (helpers/perf/).
Checked against vTrain's published A100 measurements in docs/results/advisor.md
(benchmarks/advisor/vtrain_check.py).

    from helpers.advisor import advise
    advice = advise(preset("llama3-8b"), gpus=64, gpu="h100-80gb", seq_len=4096, global_batch=512)
    advice.best()
"""
from helpers.advisor.advise import Advice, Row, advise, fastest
from helpers.advisor.execution import Execution
from helpers.perf.gpus import PROFILES, GpuProfile

__all__ = ["advise", "fastest", "Advice", "Row", "Execution", "GpuProfile", "PROFILES"]
