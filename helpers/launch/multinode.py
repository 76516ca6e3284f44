"""Multi-node runs: prepare a run directory for `launch/multinode.sh` (real nodes), and simulate
N nodes on one machine: N torchrun agents with `--nnodes N` and c10d rendezvous on localhost,
each with its own node-local directory (KIT_NODE_DIR) holding its copy of the seed checkpoint
(as each real node holds its own cache). Paths in the spec may name $KIT_NODE_DIR; each node
expands them itself, so save_dir="$KIT_NODE_DIR/checkpoints" is a node-local checkpoint folder.
Every node reads the one run directory `prepare` wrote (spec.json, model.json, data.json): no node
works out the model or the data source again; each checks the data files are the pinned ones before
it tokenizes, and the preflight compares what the nodes see (helpers/runtime/preflight.py).

    python -m helpers.launch.multinode prepare --out /shared/runs [helpers flags]   # prints RUN_DIR
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import sys
from pathlib import Path

from helpers.errors import InvalidJob
from helpers.job.spec import JobSpec
from helpers.launch import runner, torchrun
from helpers.rundir import names, prepared
from helpers.rundir.reader import RunDir

NODE_SEED = "$KIT_NODE_DIR/seed-checkpoint"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def simulate(spec: JobSpec | None = None, nnodes: int = 2, node_dirs: list | None = None,
             node_env: list[dict] | None = None, copy_seed: bool = True, progress: bool = False,
             **kwargs) -> RunDir:
    """Run a job as `nnodes` simulated nodes on this machine; returns the RunDir or raises
    JobFailed/JobTimeout like helpers.launch.run (every agent's process group is killed).
    nproc (the job's world size) is split evenly over the nodes."""
    spec = dataclasses.replace(spec or JobSpec(), **kwargs)
    if spec.world_size % nnodes:
        raise InvalidJob(f"world size {spec.world_size} does not split over {nnodes} nodes; "
                         f"use an nproc that is a multiple of {nnodes}")
    spec, run_dir = runner.prepare(spec, seed_path=NODE_SEED)
    node_dirs = [Path(d) for d in (node_dirs or [run_dir / "nodes" / f"node{i}" for i in range(nnodes)])]
    for d in node_dirs:
        d.mkdir(parents=True, exist_ok=True)
        seed = d / "seed-checkpoint"
        if spec.seed_checkpoint and copy_seed and not seed.exists():  # each node's own cache
            shutil.copytree(runner.seed_checkpoint(spec, prepared.model(run_dir)[0]), seed)
    endpoint = f"127.0.0.1:{_free_port()}"
    base_env = torchrun.environment(spec)
    procs = []
    for i in range(nnodes):
        env = {**base_env, "KIT_NODE_DIR": str(node_dirs[i]), "KIT_NODE_NAME": f"node{i}",
               **{k: str(v) for k, v in ((node_env or [{}] * nnodes)[i]).items()}}
        cmd = torchrun.command(run_dir, spec, nnodes=nnodes, endpoint=endpoint)
        procs.append(torchrun.start(cmd, env, run_dir / names.node_torchrun_log(i)))
    torchrun.watch(procs, RunDir(run_dir), spec.timeout_s, f"{nnodes}-node job", progress=progress,
                   on_exit=lambda: _merge_logs(run_dir, nnodes), stall_timeout_s=spec.stall_timeout_s)
    return RunDir(run_dir)


def _merge_logs(run_dir: Path, nnodes: int) -> None:
    """logs/torchrun.log = every agent's log (the failure summary reads it)."""
    parts = [(run_dir / names.node_torchrun_log(i)).read_text(errors="replace") for i in range(nnodes)]
    (run_dir / names.TORCHRUN_LOG).write_text("\n".join(parts))


def main(argv=None) -> None:
    from helpers.launch.cli import parser, spec_from_args

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "prepare":
        sys.exit("usage: python -m helpers.launch.multinode prepare [python -m helpers flags]")
    args = parser().parse_args(argv[1:])
    try:
        _, run_dir = runner.prepare(spec_from_args(args))
    except InvalidJob as e:
        sys.exit(f"error: {e}")
    print(os.path.abspath(run_dir))


if __name__ == "__main__":
    main()
