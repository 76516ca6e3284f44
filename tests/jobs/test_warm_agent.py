"""Warm torchrun agents (helpers/launch/warm_agent.py): a job forked from the warm process trains
exactly what a cold torchrun trains, a failing agent reports torchrun's exit code, and one kill of
its process group stops the agent and every rank it started."""
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from helpers import launch
from helpers.launch import torchrun, warm_agent

JOB = dict(tp=2, iters=3, micro_batch=2, global_batch=4)


def test_a_warm_job_trains_what_a_cold_one_trains(runs, monkeypatch):
    monkeypatch.setenv(warm_agent.ENABLED_ENV, "0")
    cold = launch.run(**runs, **JOB)
    monkeypatch.setenv(warm_agent.ENABLED_ENV, "1")
    warm = [launch.run(**runs, **JOB) for _ in range(2)]  # the first starts the warm process, the second forks
    assert warm_agent._zygotes, "no warm process was started"
    # fp32 on CPU, the same ranks and batches: bit-equal, not merely close
    assert warm[0].losses == cold.losses and warm[1].losses == cold.losses
    assert "Megatron" in (warm[1].path / "megatron-lm.sh").read_text()  # the whole run directory was written


@pytest.fixture
def short_tmp():
    """A temp folder with a short path (the forkserver's socket lives there: at most 107 characters)."""
    folder = Path(tempfile.mkdtemp(prefix="agent-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _agent(tmp_path, short_tmp, script: str):
    path = tmp_path / "rank.py"
    path.write_text(script)
    # the agent's folders out of /tmp's top: --log-dir as torchrun.command gives a job; TMPDIR for the
    # forkserver's own temp folder, which a killed agent cannot remove
    args = ["--standalone", "--nnodes", "1", "--nproc-per-node", "2", "--start-method", "forkserver",
            "--log-dir", str(short_tmp / "torchelastic"), "--run-path", str(path)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(short_tmp))
    cmd = [sys.executable, "-m", torchrun.TORCHRUN, "--preload", "", *args]  # as torchrun.command writes it
    return torchrun.start(cmd, env, tmp_path / "torchrun.log", warm=True)


def test_a_failing_warm_agent_reports_its_exit_code(tmp_path, short_tmp):
    agent = _agent(tmp_path, short_tmp, "import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    assert agent.wait(timeout=120) == 1  # torchrun's own exit code when a rank fails
    log = (tmp_path / "torchrun.log").read_text()
    assert "exitcode  : 3" in log and "rank      : 1" in log, log[-2000:]


def test_one_kill_stops_the_agent_and_its_ranks(tmp_path, short_tmp):
    agent = _agent(tmp_path, short_tmp, "import time\ntime.sleep(120)\n")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # both ranks started
        group = [p for p in psutil.process_iter() if _pgid(p) == agent.pid]
        if len(group) >= 4:  # agent, its forkserver, two ranks
            break
        time.sleep(0.2)
    else:
        pytest.fail("the agent's ranks did not start")
    assert isinstance(agent, warm_agent.WarmAgent)
    # a warm agent's command line is its warm process's: the run's processes are found by session
    assert {p.pid for p in group} <= {p.pid for p in torchrun.leftover_processes(tmp_path)}
    os.killpg(agent.pid, signal.SIGKILL)
    assert agent.wait(timeout=10) == -signal.SIGKILL
    time.sleep(0.5)
    assert [p for p in psutil.process_iter() if _pgid(p) == agent.pid and p.status() != psutil.STATUS_ZOMBIE] == []
    assert torchrun.leftover_processes(tmp_path) == []


def _pgid(p) -> int | None:
    try:
        return os.getpgid(p.pid)
    except (ProcessLookupError, psutil.NoSuchProcess):
        return None
