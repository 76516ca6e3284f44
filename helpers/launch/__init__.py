"""Notebook side, processes: check a job, start torchrun, watch it, return its RunDir.

    from helpers import launch
    run = launch.run(tp=2, nproc=4, iters=5)        # one machine
    run = launch.simulate(nnodes=2, tp=2, nproc=4)  # two simulated nodes on one machine
    launch.validate(JobSpec(tp=3))                  # InvalidJob listing every problem; nothing starts

runner.py (checks + run directory + run), environment.py (what this machine offers), torchrun.py
(command, environment, watch, kill), torchrun_main.py (torchrun without the interpreter's
teardown), multinode.py (N agents; `prepare` for real nodes), probe.py (process groups only),
cli.py (`python -m helpers` / `python -m helpers.launch`), tiny_hf.py and hf_check.py (Hugging Face
models made offline, and their logits checked against transformers)."""
from helpers.errors import InvalidJob, JobFailed, JobTimeout
from helpers.job.spec import JobSpec
from helpers.launch.environment import cuda_device_count
from helpers.launch.multinode import simulate
from helpers.launch.runner import check, execute, prepare, run, seed_checkpoint, validate
from helpers.launch.script import run_script
from helpers.rundir.reader import RunDir

__all__ = ["run", "run_script", "simulate", "prepare", "execute", "check", "validate", "seed_checkpoint",
           "cuda_device_count", "JobSpec", "RunDir", "InvalidJob", "JobFailed", "JobTimeout"]
