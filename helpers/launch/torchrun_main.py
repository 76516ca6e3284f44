"""`python -m helpers.launch.torchrun_main ARGS` is torchrun (`python -m torch.distributed.run
ARGS`): the same main(), arguments, output and exit code, then `os._exit` instead of the
interpreter's teardown.

Why: once torchrun's main() has returned, every rank has exited, the exit barrier is passed and
the rendezvous is shut down; what is left is Python freeing torch's modules, ~0.9 s on the 2-core
machine. The runner waits for the agent's exit code, so that second sat on every job's critical
path (the ranks skip the same teardown: runtime/train.py, exit_without_teardown). torch is
imported with the garbage collector paused and its objects frozen, as the ranks import it
(job/import_phase.py).

`--preload MODULE[,MODULE]` before torchrun's own arguments (with its `--start-method forkserver`,
launch/torchrun.py): the modules the forkserver imports before it forks the ranks, so every rank
starts with torch and Megatron-Core imported (runtime/rank_imports.py)."""
from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.util
import os
import shutil
import sys
import tempfile
import traceback

from helpers.job import import_phase


def main() -> None:
    if sys.argv[1:2] == ["--preload"]:  # the ranks' imports, made once in the forkserver, started
        multiprocessing.set_forkserver_preload(sys.argv[2].split(","))
        del sys.argv[1:3]
        multiprocessing.forkserver.ensure_running()  # now: its imports overlap the agent's own
    with import_phase.without_gc():  # torch's import with the collector paused, its objects then frozen
        import torch.distributed.run  # noqa: F401
    run_torchrun()


def run_torchrun() -> None:
    """torchrun's main() on sys.argv, then os._exit with its exit code (also the warm agent's,
    launch/warm_agent.py)."""
    from torch.distributed.run import main as torchrun

    # torch's agent writes each rank's error file (pytorch-errorfile-*) to the temp folder and, once it
    # has read a failed rank's, leaves it there: they go to torchrun's --log-dir, in the run directory
    if "--log-dir" in sys.argv:
        tempfile.tempdir = sys.argv[sys.argv.index("--log-dir") + 1]
        os.makedirs(tempfile.tempdir, exist_ok=True)
    try:
        torchrun()
        code = 0
    except SystemExit as e:  # argparse and torchrun's own exits
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # what the interpreter does with an uncaught error: traceback, exit code 1
        traceback.print_exc()  # (a failed rank: torchrun's ChildFailedError summary, read by failure_message)
        code = 1
    # the forkserver's socket folder (pymp-*, in the system's temp folder: a socket's path must stay short),
    # which the interpreter's teardown skipped below would remove
    shutil.rmtree(multiprocessing.util.get_temp_dir(), ignore_errors=True)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
