"""Multi-node runs: prepare a run directory for `launch/multinode.sh` (real nodes), and simulate
N nodes on one machine: N torchrun agents with `--nnodes N` and c10d rendezvous on localhost,
each with its own node-local directory (KIT_NODE_DIR) holding its copy of the seed checkpoint
(as each real node holds its own cache). Paths in the spec may name $KIT_NODE_DIR; each node
expands them itself, so save_dir="$KIT_NODE_DIR/checkpoints" is a node-local checkpoint folder.

    python -m helpers.multinode prepare --out /shared/runs [helpers.launch flags]   # prints RUN_DIR
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from helpers import launch, paths
from helpers.results import RunDir
from helpers.spec import JobSpec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent_command(run_dir: Path, nnodes: int, nproc_per_node: int, endpoint: str, job_id: str) -> list[str]:
    """One node's torchrun: elastic agent joining a c10d rendezvous of `nnodes` agents."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
            "--nproc-per-node", str(nproc_per_node), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", endpoint, "--rdzv-id", job_id,
            "-m", "helpers.runtime.train", str(run_dir)]


def prepare(spec: JobSpec, seed_path: str | None = None) -> tuple[JobSpec, Path]:
    """Validate the job and write its run directory (spec.json); nothing starts. `seed_path`
    overrides where workers find the seed checkpoint (e.g. "$KIT_NODE_DIR/seed")."""
    if spec.out == "runs":
        spec = dataclasses.replace(spec, out=str(paths.runs_dir()))
    spec = launch.resolve(spec)
    launch.validate(spec)
    env = dict(spec.env)
    if spec.seed_checkpoint:
        env["KIT_SEED_CHECKPOINT"] = seed_path or str(launch.seed_checkpoint(spec))
    spec = dataclasses.replace(spec, env=env)
    run_dir = launch._new_run_dir(spec)
    spec.write(run_dir / "spec.json")
    return spec, run_dir


def simulate(spec: JobSpec | None = None, nnodes: int = 2, node_dirs: list | None = None,
             node_env: list[dict] | None = None, copy_seed: bool = True, **kwargs) -> RunDir:
    """Run a job as `nnodes` simulated nodes on this machine; returns the RunDir or raises
    JobFailed/JobTimeout like helpers.launch.run (every agent's process group is killed).
    nproc (the job's world size) is split evenly over the nodes."""
    spec = dataclasses.replace(spec or JobSpec(), **kwargs)
    if spec.world_size % nnodes:
        raise launch.InvalidJob(f"world size {spec.world_size} does not split over {nnodes} nodes")
    spec, run_dir = prepare(spec, seed_path="$KIT_NODE_DIR/seed-checkpoint")
    node_dirs = [Path(d) for d in (node_dirs or [run_dir / "nodes" / f"node{i}" for i in range(nnodes)])]
    for i, d in enumerate(node_dirs):
        d.mkdir(parents=True, exist_ok=True)
        seed = d / "seed-checkpoint"
        if spec.seed_checkpoint and copy_seed and not seed.exists():  # each node's own cache
            shutil.copytree(launch.seed_checkpoint(spec), seed)
    endpoint, job_id = f"127.0.0.1:{_free_port()}", run_dir.name
    procs, logs = [], []
    base_env = launch._env(spec)
    for i in range(nnodes):
        env = {**base_env, "KIT_NODE_DIR": str(node_dirs[i]), "KIT_NODE_NAME": f"node{i}",
               **{k: str(v) for k, v in ((node_env or [{}] * nnodes)[i]).items()}}
        log = open(run_dir / "logs" / f"torchrun.node{i}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen(agent_command(run_dir, nnodes, spec.world_size // nnodes, endpoint, job_id),
                                      stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                      cwd=paths.REPO_ROOT, start_new_session=True))
    run = RunDir(run_dir)
    deadline = time.monotonic() + spec.timeout_s
    try:
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                for p in procs:
                    launch._kill_group(p)
                _merge_logs(run_dir, nnodes)
                msg, ranks = launch._failure_message(run, f"{nnodes}-node job timed out after {spec.timeout_s:.0f} s")
                raise launch.JobTimeout(msg, run, ranks)
            if any(p.poll() not in (None, 0) for p in procs):  # one node failed: give the other a moment
                try:
                    for p in procs:
                        p.wait(timeout=max(1.0, min(30.0, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    pass
                break
            time.sleep(0.2)
    except BaseException:
        for p in procs:
            launch._kill_group(p)
        raise
    finally:
        for log in logs:
            log.close()
    for p in procs:
        if p.poll() is None:
            launch._kill_group(p)
    _merge_logs(run_dir, nnodes)
    codes = [p.returncode for p in procs]
    if any(codes):
        msg, ranks = launch._failure_message(run, f"{nnodes}-node job failed (torchrun exit codes {codes})")
        raise launch.JobFailed(msg, run, ranks)
    return run


def _merge_logs(run_dir: Path, nnodes: int) -> None:
    """logs/torchrun.log = every agent's log (the runner's failure summary reads it)."""
    parts = [(run_dir / "logs" / f"torchrun.node{i}.log").read_text(errors="replace") for i in range(nnodes)]
    (run_dir / "logs" / "torchrun.log").write_text("\n".join(parts))


def main(argv=None) -> None:
    from helpers.cli import parser, spec_from_args

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "prepare":
        sys.exit("usage: python -m helpers.multinode prepare [helpers.launch flags]")
    args = parser().parse_args(argv[1:])
    try:
        _, run_dir = prepare(spec_from_args(args))
    except launch.InvalidJob as e:
        sys.exit(f"error: {e}")
    print(os.path.abspath(run_dir))


if __name__ == "__main__":
    main()
