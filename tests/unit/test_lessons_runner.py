"""`python -m helpers.lessons run` (helpers/lessons/): its arguments become the papermill command the
notebook tests use too, bad input is refused in one line before anything starts (a missing papermill
with the extra that brings it), and the kernel client's stepped wait is made in the child process
only. No notebook runs here (tests/notebooks/ runs them all through the same function)."""
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from queue import Empty

import pytest
import yaml

from helpers.lessons import cli, papermill_cli, parameters, runner
from tests import hidden_packages

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "notebooks" / "02_memory.ipynb"


@pytest.mark.parametrize("text, value", [
    ("8", 8), ("19.3", 19.3), ("1e-5", 1e-5), ("True", True), ("None", None), ("[False, True]", [False, True]),
    ("{'A': None, 'B': 'world_divisible_expert'}", {"A": None, "B": "world_divisible_expert"}), ("A", "A"),
    ("'A'", "A"), ("--use-distributed-optimizer", "--use-distributed-optimizer"),
    ("(n - 1) / n * grad", "(n - 1) / n * grad"), ("(1, 2)", "(1, 2)"),  # a tuple would not survive YAML
])
def test_a_value_is_the_literal_a_learner_would_type(text, value):
    assert parameters.value(text) == value and type(parameters.value(text)) is type(value)


def test_the_parameters_cell_names(tmp_path):
    assert parameters.names(LESSON) == ["device", "iters", "gpu_gib", "llama_dp8_fits"]
    bare = tmp_path / "bare.ipynb"
    bare.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": "x = 1"}]}))
    assert parameters.names(bare) is None


def test_the_command_line_becomes_the_runs_arguments(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(runner, "run_lesson", lambda *a: calls.append(a) or subprocess.CompletedProcess(a, 0))
    out = tmp_path / "executed.ipynb"
    assert cli.main(["run", str(LESSON), "--out", str(out), "-p", "llama_dp8_fits", "[False, True]", "-p", "gpu_gib",
                     "80", "--device", "cpu"]) == 0
    assert calls == [(LESSON, out, {"llama_dp8_fits": [False, True], "gpu_gib": 80}, "cpu", 900)]
    assert capsys.readouterr().out.splitlines()[-1] == str(out)  # the executed copy, last
    monkeypatch.setenv("KIT_RUNS_DIR", str(tmp_path / "runs"))
    assert cli.main(["run", str(LESSON), "--cell-timeout", "60"]) == 0
    assert calls[-1] == (LESSON, tmp_path / "runs" / "lessons" / LESSON.name, {}, None, 60)


def test_a_failing_cell_is_the_exit_status_with_the_copy_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "run_lesson", lambda *a: subprocess.CompletedProcess(a, 1))
    assert cli.main(["run", str(LESSON), "--out", str(tmp_path / "x.ipynb")]) == 1
    err = capsys.readouterr().err
    assert "02_memory.ipynb stopped at a failing cell" in err and str(tmp_path / "x.ipynb") in err


def test_the_papermill_command_is_the_suites(tmp_path):
    """Notebook's folder as the kernel's, python3, device cpu, 900 s per cell, no progress bar, the answers
    as one YAML document of parameters."""
    answers = {"llama_dp8_fits": [False, True], "tp_time_ratio": 19.3, "refused": {"A": None}}
    command = runner.papermill_command(LESSON, tmp_path / "out.ipynb", answers, "cpu")
    assert command[:3] == [sys.executable, "-m", "helpers.lessons.papermill_cli"]
    assert command[3:-2] == [str(LESSON), str(tmp_path / "out.ipynb"), "--cwd", str(LESSON.parent), "-k", "python3",
                             "-p", "device", "cpu", "--execution-timeout", "900", "--no-progress-bar"]
    assert command[-2] == "-y" and yaml.safe_load(command[-1]) == answers
    plain = runner.papermill_command(LESSON, tmp_path / "out.ipynb")
    assert "-p" not in plain and "-y" not in plain  # the lesson's own values stand


@pytest.mark.parametrize("argv, says", [
    (["run", "notebooks/99_none.ipynb"], "no notebook at notebooks/99_none.ipynb: give a lesson's .ipynb file"),
    (["run", "README.md"], "no notebook at README.md"),
    (["run", str(LESSON), "-p", "llama_fits", "1"],
     "02_memory.ipynb's parameters cell has no llama_fits: its parameters are device, iters, gpu_gib, llama_dp8_fits"),
    (["run", str(LESSON), "-p", "device", "cpu", "--device", "cuda"], "device is given twice"),
    (["run", str(LESSON), "-p", "iters", "1", "-p", "iters", "2"], "-p iters given twice"),
])
def test_bad_input_is_one_line_before_anything_starts(argv, says, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a process started"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {says}") and err.count("\n") == 1, err


def test_without_papermill_the_command_names_the_extra(tmp_path):
    hidden = hidden_packages.only_in_extra("lessons")
    out = hidden_packages.run(["python", "-m", "helpers.lessons", "run", "notebooks/02_memory.ipynb"], hidden, tmp_path)
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    assert out.stderr == "error: papermill is not installed, and running a lesson headless needs it: " \
                         "pip install -e '.[lessons]' (in the repository)\n"
    usage = hidden_packages.run(["python", "-m", "helpers.lessons", "run", "--help"], hidden, tmp_path)
    assert usage.returncode == 0 and "--device" in usage.stdout, usage.stderr


def test_the_stepped_wait_is_made_in_the_child_only():
    """Importing the kit's lesson modules leaves jupyter_client's wait as it is; papermill_cli's main, which
    only the child runs, replaces it before papermill's command line starts."""
    from jupyter_client.channels import AsyncZMQSocketChannel
    assert AsyncZMQSocketChannel.get_msg is not papermill_cli.get_msg_polling_in_steps
    probe = ("import sys\nfrom helpers.lessons import papermill_cli\n"
             "from jupyter_client.channels import AsyncZMQSocketChannel as C\n"
             "sys.argv = ['papermill', '--help']\n"
             "try:\n    papermill_cli.main()\nexcept SystemExit:\n    pass\n"
             "print(C.get_msg is papermill_cli.get_msg_polling_in_steps)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and "NOTEBOOK_PATH" in out.stdout and out.stdout.splitlines()[-1] == "True", \
        out.stdout + out.stderr


class Channel:
    """What get_msg uses of a channel: `socket.poll(ms)` (a wait) and `_recv()`; the message is there from
    the `ready`-th poll on."""

    def __init__(self, ready: int | None):
        self.ready, self.polls, self.socket = ready, [], self

    async def poll(self, ms: int) -> int:
        self.polls.append(ms)
        await asyncio.sleep(ms / 1000)
        return int(self.ready is not None and len(self.polls) >= self.ready)

    async def _recv(self) -> dict:
        return {"msg_type": "execute_reply"}


def test_a_message_already_there_is_found_within_a_step():
    channel = Channel(ready=3)
    assert asyncio.run(papermill_cli.get_msg_polling_in_steps(channel, timeout=None)) == {"msg_type": "execute_reply"}
    assert channel.polls == [500, 500, 500]


def test_the_wait_still_ends_at_its_timeout():
    channel, start = Channel(ready=None), time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(papermill_cli.get_msg_polling_in_steps(channel, timeout=1.2))
    assert time.monotonic() - start >= 1.2  # not before the timeout
    assert channel.polls[0] == 500 and max(channel.polls) == 500 and len(channel.polls) >= 2, channel.polls  # in steps
