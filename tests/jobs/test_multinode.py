"""Multi-node on one machine (issue 6): two torchrun agents with --nnodes 2 and c10d rendezvous,
each with its own node-local directory. Resume through a shared checkpoint folder; node-local
checkpoint folders and files that differ between nodes are refused before training with the
node and file named; a peer that hangs in a checkpoint save or load ends the job at the timeout
with the stalled rank named and no process left."""
import json
import shutil

import psutil
import pytest

from helpers import launch
from helpers.launch import multinode

BATCH = dict(micro_batch=2, global_batch=4, seq_len=32, device="cpu", progress=False)
TWO_NODES = dict(**{k: v for k, v in BATCH.items() if k != "progress"}, tp=2, nproc=4, timeout_s=600)


def _leftovers(run_dir) -> list:
    return [p for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A 2-node run that saved at iteration 2 into a folder both nodes see."""
    base = tmp_path_factory.mktemp("mn")
    run = multinode.simulate(**TWO_NODES, out=str(base), iters=2, save_interval=2, save_dir=str(base / "ckpt"))
    return base, run


def test_two_node_resume_from_a_shared_checkpoint_is_exact(shared):
    base, first = shared
    assert {r["host"] for r in first.ranks.values()}  # ranks.json written by the 2-node job
    resumed = multinode.simulate(**TWO_NODES, out=str(base), iters=3, load_dir=str(base / "ckpt"))
    straight = launch.run(**BATCH, tp=2, nproc=4, out=str(base), iters=3)
    assert first.losses == straight.losses[:2]
    assert resumed.losses == straight.losses[2:]  # exact: same layout, same ranks, same data
    assert json.loads((resumed.path / "resumed.json").read_text())["iteration"] == 2


def test_node_local_checkpoints_are_refused_before_training(tmp_path):
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    local = "$KIT_NODE_DIR/checkpoints"
    multinode.simulate(**TWO_NODES, out=str(tmp_path), iters=1, save_interval=1, save_dir=local, node_dirs=nodes)
    assert (nodes[0] / "checkpoints" / "latest").exists() and not (nodes[1] / "checkpoints" / "latest").exists()
    with pytest.raises(launch.JobFailed) as err:
        multinode.simulate(**TWO_NODES, out=str(tmp_path), iters=2, load_dir=local, node_dirs=nodes)
    msg = str(err.value)
    assert "preflight failed" in msg and "node 1 (node1" in msg and "checkpoint file latest" in msg
    assert "node-local" in msg and "every node mounts" in msg
    assert not err.value.run.metrics  # refused before any iteration
    assert not _leftovers(err.value.run.path)


def test_preflight_names_the_node_and_the_file(tmp_path):
    spec = launch.resolve(launch.JobSpec(**{k: v for k, v in TWO_NODES.items() if k != "timeout_s"}))
    seed = launch.seed_checkpoint(spec)
    nodes, data = [tmp_path / "node0", tmp_path / "node1"], []
    for i, node in enumerate(nodes):
        shutil.copytree(seed, node / "seed-checkpoint")
        (node / "data").mkdir()
        (node / "data" / "tokenizer.json").write_text('{"vocab": 512}' if i == 0 else '{"vocab": 513}')
        data.append({"KIT_DATA_DIR": str(node / "data")})
    shard = nodes[1] / "seed-checkpoint" / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-10])  # node 1's cached seed checkpoint is truncated
    with pytest.raises(launch.JobFailed) as err:
        multinode.simulate(**TWO_NODES, out=str(tmp_path), iters=1, node_dirs=nodes, node_env=data)
    msg = str(err.value)
    assert "node 1 (node1" in msg and "seed checkpoint file __0_0.distcp" in msg and "bytes, node 0 has" in msg
    assert "data (KIT_DATA_DIR) file tokenizer.json" in msg and "differs from node 0's" in msg
    assert not err.value.run.metrics
    assert not _leftovers(err.value.run.path)


# A hang is caught by the stall watchdog (stall_timeout_s: no rank's heartbeat moved for that long),
# so these tests wait ~25 s after the hang instead of a whole timeout; timeout_s stays as the
# backstop (an idle 2-core machine reaches the hang in ~10 s on one node, ~30 s on two).
STALL = 25


def test_a_peer_hanging_in_a_save_is_named_at_the_timeout(tmp_path):
    with pytest.raises(launch.JobTimeout) as err:
        launch.run(**BATCH, tp=2, out=str(tmp_path), iters=2, save_interval=1, timeout_s=300, stall_timeout_s=STALL,
                   env={"KIT_FAULT": "hang_during_save@1:rank1"})
    assert f"made no progress for {STALL} s" in str(err.value)
    assert err.value.ranks == [1]
    assert "checkpoint save" in err.value.run.heartbeats[0]["phase"]
    assert not _leftovers(err.value.run.path)


def test_a_peer_hanging_in_a_two_node_load_is_named_at_the_timeout(shared):
    base, _ = shared
    with pytest.raises(launch.JobTimeout) as err:
        multinode.simulate(**{**TWO_NODES, "timeout_s": 300}, stall_timeout_s=STALL, out=str(base), iters=3,
                           load_dir=str(base / "ckpt"), env={"KIT_FAULT": "hang_during_load@2:rank3"})
    assert f"made no progress for {STALL} s" in str(err.value)
    assert err.value.ranks == [3]
    assert "stalled rank(s): [3]" in str(err.value)
    assert not _leftovers(err.value.run.path)
