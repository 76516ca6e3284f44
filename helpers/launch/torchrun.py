"""Starting, watching and stopping torchrun: the one copy of the command line, the environment
every rank gets, the poll/timeout/kill loop, and the failure summary. Used by the runner (one
node), the multi-node simulation (N agents) and `launch/multinode.sh` (real nodes):

    python -m helpers.launch.torchrun agent --nnodes N --nproc-per-node G --endpoint HOST:PORT RUN_DIR

runs one node's agent of a prepared run directory in the foreground (what multinode.sh does)."""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers.errors import JobFailed, JobTimeout
from helpers.job import paths
from helpers.job.spec import JobSpec
from helpers.rundir import names
from helpers.rundir.reader import RunDir

WORKER = "helpers.runtime.train"
WORKER_SCRIPT = paths.REPO_ROOT / "helpers" / "runtime" / "train.py"
TORCHRUN = "helpers.launch.torchrun_main"  # = python -m torch.distributed.run, minus ~0.9 s of teardown


RANK_IMPORTS = "helpers.runtime.rank_imports"  # torch, Megatron-Core and the worker
HF_RANK_IMPORTS = "helpers.runtime.rank_imports_hf"  # + Megatron-Bridge's AutoBridge and transformers


def rank_preload(spec: JobSpec) -> list[str]:
    """The modules torchrun's forkserver imports once before it forks this job's ranks (see
    `command`); empty: one interpreter per rank. CPU jobs are forked, except those with injected
    faults: with `--start-method forkserver` torch's agent reports only the first rank it finds
    failed, while with one interpreter each it lists every dead rank with its exit code, which is
    what a fault job is there to show. GPU jobs start as Megatron-LM's do: Megatron-Core binds
    torch.compile at import there, and CUDA must not be touched before a fork."""
    if spec.device != "cpu" or spec.faults:
        return []
    return [RANK_IMPORTS] + ([HF_RANK_IMPORTS] if spec.hf_model else [])


def command(run_dir: Path, spec: JobSpec, nproc_per_node: int | None = None, nnodes: int = 1,
            endpoint: str | None = None, extra: list[str] = ()) -> list[str]:
    """torchrun for one node of `spec`'s job (`nproc_per_node`: its world size over `nnodes` unless
    given): standalone on a single node, else an elastic agent joining a c10d rendezvous of `nnodes`
    agents at `endpoint` (id = the run directory's name). It runs as `helpers.launch.torchrun_main`:
    torchrun's own main() without the interpreter's teardown.

    How the ranks start (`rank_preload(spec)`): one interpreter each (`-m helpers.runtime.train`),
    as Megatron-LM runs; or, given modules to preload, with torchrun's own `--start-method
    forkserver --run-path`: torch's agent forks each rank from one server process that imported
    those modules once for the job, which saves ~2.5 s of CPU per rank on a small machine."""
    nproc_per_node = nproc_per_node or spec.world_size // nnodes
    preload = rank_preload(spec)
    if nnodes == 1 and endpoint is None:
        where = ["--standalone", "--nnodes", "1"]
    else:
        where = ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                 "--rdzv-id", Path(run_dir).name]
    if preload:
        ranks = ["--start-method", "forkserver", "--run-path", str(WORKER_SCRIPT)]
        where = ["--preload", ",".join(preload), *where]
    else:
        ranks = ["-m", WORKER]
    return [sys.executable, "-m", TORCHRUN, *where, "--nproc-per-node", str(nproc_per_node),
            "--log-dir", str(Path(run_dir) / names.TORCHELASTIC_LOGS), *ranks, str(run_dir), *extra]


def environment(spec: JobSpec, base: dict | None = None) -> dict:
    """The environment of every rank: unbuffered output, one OpenMP thread (many ranks share few
    cores), NVLink multicast off, Megatron's TP/SP ordering switch, the kit on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    env.update({
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
        "NCCL_NVLS_ENABLE": "0",  # NVLink multicast stays off on shared machines
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",  # Megatron's TP/SP comm-compute ordering expects it
        "PYTHONPATH": os.pathsep.join([str(paths.REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "PYTHONWARNINGS": "ignore",
    })
    if spec.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # CPU jobs never touch a GPU, even where one exists
    env.update({k: str(v) for k, v in spec.env.items()})
    return env


def start(cmd: list[str], env: dict, log_path: Path, warm: bool = False) -> subprocess.Popen:
    """One agent in its own process group (one kill stops every rank it started). `warm`: a command
    with preloaded ranks is forked from a warm process instead (launch/warm_agent.py)."""
    from helpers.launch import warm_agent

    if warm and cmd[3:4] == ["--preload"] and warm_agent.enabled():
        proc = warm_agent.start([m for m in cmd[4].split(",") if m], cmd[5:], env, log_path)
    else:
        log = open(log_path, "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=paths.REPO_ROOT, start_new_session=True)
        proc.log = log
    # the agent's session, for leftover_processes: a warm agent's command line is its warm process's
    log_path.with_name(log_path.name + AGENT_SESSION_SUFFIX).write_text(f"{proc.pid}\n")
    return proc


def _end_stragglers(group: int, timeout_s: float = 5.0) -> None:
    """SIGKILL to what is left of an exited agent's process group, then wait until it is gone."""
    import psutil

    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = []
        for q in psutil.process_iter(["status"]):
            try:
                if q.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(q.pid) == group:
                    left.append(q)
            except (psutil.NoSuchProcess, ProcessLookupError):
                continue
        if not left:
            return
        time.sleep(0.02)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL, to the agent's whole process group."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _progress_bar(total: int, desc: str, enabled: bool):
    if not enabled or total <= 0:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, unit="it", leave=True)


def _progress(run: RunDir) -> tuple:
    """What changes while a job makes progress: every rank's heartbeat step."""
    return tuple(sorted((r, b.get("step", 0)) for r, b in run.heartbeats.items()))


def watch(procs: list[subprocess.Popen], run: RunDir, timeout_s: float, what: str = "job",
          progress: bool = False, on_exit=None, stall_timeout_s: float | None = None) -> None:
    """Wait for every agent; follow metrics.jsonl with a progress bar. Past `timeout_s`, or after
    `stall_timeout_s` without any rank's heartbeat moving (once the first one arrived), every agent's group is killed and
    JobTimeout names the stalled ranks; a failed agent gets a moment for its peers to stop, then
    JobFailed names the root-cause ranks. `on_exit()` runs after the agents are gone and before
    the failure is summarised (the multi-node simulation merges logs)."""
    bar = _progress_bar(run.spec.iters, run.path.name, progress)
    start = time.monotonic()
    deadline = start + timeout_s
    seen, last_beat, last_change, polls = 0, None, start, 0
    try:
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            polls += 1
            if stall_timeout_s and polls % 5 == 0:  # heartbeats about once a second
                beat = _progress(run)
                if beat != last_beat:
                    last_beat, last_change = beat, now
            # counted from the first heartbeat: a job still starting (imports) is timeout_s's to judge
            stalled = bool(stall_timeout_s) and bool(last_beat) and now - last_change > stall_timeout_s
            if now > deadline or stalled:
                for p in procs:
                    kill_group(p)
                if on_exit:
                    on_exit()
                why = (f"made no progress for {stall_timeout_s:.0f} s (stall_timeout_s; {now - start:.0f} s after "
                       f"the start)" if stalled else f"timed out after {timeout_s:.0f} s")
                msg, ranks = failure_message(run, f"{what} {why}", killed=True)
                raise JobTimeout(msg, run, ranks)
            if len(procs) > 1 and any(p.poll() not in (None, 0) for p in procs):
                try:  # one agent failed: give the others a moment to stop on their own
                    for p in procs:
                        p.wait(timeout=max(1.0, min(30.0, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    pass
                break
            try:  # 0.2 s between polls, cut short when an agent exits (Popen.wait notices within 50 ms)
                next(p for p in procs if p.poll() is None).wait(timeout=0.2)
            except (subprocess.TimeoutExpired, StopIteration):
                pass
            if bar is not None:
                metrics = run.metrics  # a line every log_interval iterations
                done = metrics[-1]["iteration"] if metrics else 0
                if done > seen:
                    bar.update(done - seen)
                    bar.set_postfix(loss=f"{metrics[-1]['loss']:.4f}")
                    seen = done
    except BaseException:
        for p in procs:
            kill_group(p)  # KeyboardInterrupt in a notebook also ends the job
        raise
    finally:
        if bar is not None:
            bar.close()
        for p in procs:
            if p.poll() is None:
                kill_group(p)
            else:  # an agent that exited can leave its forkserver exiting behind it: nothing outlives the job
                _end_stragglers(p.pid)
            getattr(p, "log", None) and p.log.close()
    if on_exit:
        on_exit()
    codes = [p.returncode for p in procs]
    if any(codes):
        shown = codes[0] if len(codes) == 1 else codes
        msg, ranks = failure_message(run, f"{what} failed (torchrun exit code{'s' if len(codes) > 1 else ''} {shown})")
        raise JobFailed(msg, run, ranks)


AGENT_SESSION_SUFFIX = ".session"  # beside each agent's log: the session its agent leads


def leftover_processes(run_dir) -> list:
    """Processes still alive of this run: in the session an agent of it led (the agent, its
    forkserver and ranks: warm or cold, each agent starts a session of its own), or whose command
    line names the run directory. After any failure the runner has killed the job's whole process
    group, so: []."""
    import psutil
    key = str(run_dir)
    sessions = {int(f.read_text()) for f in Path(run_dir).rglob(f"*{AGENT_SESSION_SUFFIX}")}
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue  # dead, waiting for its parent to read its exit code
            if key in " ".join(p.info["cmdline"] or []) or os.getsid(p.pid) in sessions:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError, PermissionError):
            continue
    return out


# ---- why a job failed ---------------------------------------------------------------------------
def crashed_ranks(run: RunDir) -> dict[int, int]:
    """{rank: exit code} from torchrun's failure summary (ranks that died without a Python error)."""
    log = run.path / names.TORCHRUN_LOG
    text = log.read_text(errors="replace") if log.exists() else ""
    found = re.findall(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", text)
    return {int(r): int(code) for r, code in found}


# A rank whose peer died fails too, with one of these; it is a consequence, not the cause.
PEER_LOST = re.compile(r"Connection closed by peer|Connection reset|Broken pipe|communicator was aborted"
                       r"|NCCL error|Timed out|timed out|Socket Timeout", re.I)


def _collective(e: dict) -> str:
    c = e.get("in_collective")
    return f" (waiting in {c['op']} over the {c['axis']} group {c['group']}, iteration {c['iteration']})" if c else ""


def failure_message(run: RunDir, what: str, killed: bool = False) -> tuple[str, list[int]]:
    """The summary a failed job raises: root-cause ranks with their error. When every error is a
    consequence (a peer died, or stopped answering until the collective timed out), the ranks that
    wrote no error are the cause: named with the last phase they reached and their log tail.
    `killed`: the runner stopped the job itself (a timeout), so torchrun's own last words are only
    its reaction to that and are left out."""
    errors = run.errors
    primary = {r: e for r, e in errors.items() if not PEER_LOST.search(e["message"])}
    for r, code in crashed_ranks(run).items():
        if r not in errors and code != -signal.SIGTERM:  # SIGTERM: torchrun's own teardown
            primary[r] = {"type": "ProcessDied", "message": f"exit code {code} without a Python error "
                          f"(killed, out of memory, or a crash in native code); last log lines:\n"
                          f"{run.log_tail(r, 6)}"}
    silent = [r for r in range(run.spec.world_size) if r not in errors]
    if primary:
        ranks = sorted(primary)
    elif errors:  # only consequences: the cause is a rank that said nothing (stuck, or killed)
        ranks = [r for r in run.stalled_ranks() if r in silent] or silent or sorted(errors)
    else:
        ranks = run.stalled_ranks()
    beats = run.heartbeats
    lines = [f"{what} (run directory: {run.path})"]
    if not primary:
        lines.append(f"stalled rank(s): {ranks} (furthest behind; the others wait for them)")
    for r in ranks[:4]:
        if r in primary or r in errors:
            e = primary.get(r) or errors[r]
            lines.append(f"rank {r}: {e['type']}: {e['message']}{_collective(e)}")
        else:
            where = beats.get(r, {})
            lines.append(f"rank {r}: last reached '{where.get('phase', 'process start')}'"
                         f" (iteration {where.get('iteration', 0)}); last log lines:\n{run.log_tail(r, 6)}")
    lost = sorted(set(errors) - set(ranks))
    if lost:
        waiting = [f"rank {r}{_collective(errors[r])}: {errors[r]['message'].splitlines()[0][:160]}"
                   for r in lost[:4]]
        lines.append(f"ranks {lost} stopped because a peer failed or stopped answering:\n  " + "\n  ".join(waiting))
    if not errors and not primary and not killed:
        launcher = run.path / names.TORCHRUN_LOG
        if launcher.exists():
            lines.append("torchrun: " + "\n".join(launcher.read_text(errors="replace").splitlines()[-6:]))
    return "\n".join(lines), ranks


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m helpers.launch.torchrun",
                                description="Run one node's torchrun agent of a prepared run directory.")
    p.add_argument("action", choices=["agent"])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--nnodes", type=int, required=True)
    p.add_argument("--nproc-per-node", type=int, required=True)
    p.add_argument("--endpoint", required=True, help="MASTER_ADDR:MASTER_PORT of the c10d rendezvous")
    a = p.parse_args(argv)
    spec_path = a.run_dir / names.SPEC
    if not spec_path.is_file():
        sys.exit(f"error: {spec_path} not found: prepare the run directory on a file system every node "
                 f"mounts first (python -m helpers.launch.multinode prepare ...)")
    spec = JobSpec.read(spec_path)
    cmd = command(a.run_dir, spec, a.nproc_per_node, a.nnodes, a.endpoint)
    os.chdir(paths.REPO_ROOT)
    os.execvpe(cmd[0], cmd, environment(spec))


if __name__ == "__main__":
    main()
