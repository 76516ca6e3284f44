"""Notebook side, prediction: the layout advisor. Every layout of a model on N GPUs that the kit's
rules accept (layouts.py), each one's peak memory per GPU (helpers/memory/plan.py) and step time
(time/: one term per file, composed in time/step.py), ranked (advise.py); GPU and interconnect
profiles with their sources (gpus.py), how the software runs a step (execution.py), the constants
the time model assumes (calibration.py); the command line (cli.py, `python -m helpers.advisor`).
Checked against vTrain's published A100 measurements in docs/results/advisor.md
(benchmarks/advisor/vtrain_check.py).

    from helpers.advisor import advise
    advice = advise(preset("llama3-8b"), gpus=64, gpu="h100-80gb", seq_len=4096, global_batch=512)
    advice.best()
"""
from helpers.advisor.advise import Advice, Row, advise
from helpers.advisor.execution import Execution
from helpers.advisor.gpus import PROFILES, GpuProfile

__all__ = ["advise", "Advice", "Row", "Execution", "GpuProfile", "PROFILES"]
