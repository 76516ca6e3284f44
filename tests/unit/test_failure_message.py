"""How the runner names a failure, from the files a job leaves (no processes): a rank's own error
is the cause; errors that only say a peer was lost or stopped answering are consequences, and then
the rank that wrote nothing is the one named, with the collective its peers waited in."""
import json

from helpers.job.spec import JobSpec
from helpers.launch.torchrun import failure_message
from helpers.rundir import names
from helpers.rundir.reader import RunDir
from helpers.rundir.writer import Heartbeat, write_json


def _run(tmp_path, errors: dict, beats: dict, world: int = 2) -> RunDir:
    (tmp_path / names.LOGS).mkdir()
    JobSpec(tp=world).write(tmp_path / names.SPEC)
    for rank, err in errors.items():
        write_json(tmp_path / names.rank_error(rank), {"rank": rank, "traceback": "", **err})
    for rank, phases in beats.items():
        beat = Heartbeat(tmp_path, rank)
        for phase, iteration in phases:
            beat(phase, iteration)
        beat.flush()
    return RunDir(tmp_path)


def test_a_rank_that_raises_is_the_cause(tmp_path):
    run = _run(tmp_path, {1: {"type": "RuntimeError", "message": "injected failure on rank 1"},
                          0: {"type": "RuntimeError", "message": "Connection closed by peer [127.0.0.1]:1234"}}, {})
    msg, ranks = failure_message(run, "job failed")
    assert ranks == [1] and "rank 1: RuntimeError: injected failure" in msg
    assert "ranks [0] stopped because a peer failed" in msg


def test_a_collective_timeout_names_the_silent_rank_and_the_collective(tmp_path):
    wait = {"op": "all_reduce", "axis": "tp", "group": [0, 1], "bytes": 16384, "iteration": 2}
    run = _run(tmp_path, {0: {"type": "RuntimeError", "in_collective": wait,
                              "message": "[gloo] Timed out waiting 10000ms for recv operation to complete"}},
               {0: [("forward/backward", 1), ("optimizer step", 1), ("forward/backward", 2)],
                1: [("forward/backward", 1), ("optimizer step", 1)]})
    msg, ranks = failure_message(run, "job failed")
    assert ranks == [1], msg
    assert "stalled rank(s): [1]" in msg and "rank 1: last reached 'optimizer step' (iteration 1)" in msg
    assert "rank 0 (waiting in all_reduce over the tp group [0, 1], iteration 2): [gloo] Timed out" in msg


def test_a_hang_without_errors_names_the_rank_furthest_behind(tmp_path):
    run = _run(tmp_path, {}, {0: [("a", 1), ("b", 1), ("c", 2)], 1: [("a", 1)]})
    msg, ranks = failure_message(run, "job timed out after 40 s")
    assert ranks == [1] and "stalled rank(s): [1]" in msg and "last reached 'a'" in msg
    json.loads((tmp_path / names.heartbeat(0)).read_text())  # heartbeats are plain JSON
