"""Notebook side, processes: prepare a job, start torchrun, watch it, return its RunDir.

    from helpers import launch
    run = launch.run(tp=2, nproc=4, iters=5)        # one machine
    run = launch.simulate(nnodes=2, tp=2, nproc=4)  # two simulated nodes on one machine

runner.py (checks + run directory + run), torchrun.py (command, environment, watch, kill),
torchrun_main.py (torchrun without the interpreter's teardown), multinode.py (N agents; `prepare`
for real nodes), probe.py (process groups only), cli.py (`python -m helpers` /
`python -m helpers.launch`), envcheck.py (what this machine offers)."""
from helpers.errors import InvalidJob, JobFailed, JobTimeout
from helpers.job.spec import JobSpec
from helpers.launch.multinode import simulate
from helpers.launch.runner import (
    check_checkpoint_request,
    check_data_request,
    cuda_device_count,
    execute,
    model_of,
    prepare,
    resolve,
    run,
    seed_checkpoint,
    validate,
)
from helpers.rundir.reader import RunDir

__all__ = ["run", "simulate", "prepare", "execute", "resolve", "validate", "check_data_request",
           "check_checkpoint_request", "seed_checkpoint", "model_of", "cuda_device_count", "JobSpec", "RunDir",
           "InvalidJob", "JobFailed", "JobTimeout"]
