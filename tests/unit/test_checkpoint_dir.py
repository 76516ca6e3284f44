"""Checkpoint folders as files, without processes: consolidating node-local folders checks every
file against the manifest of the node that wrote it."""
import pytest

from helpers.job import checkpoint_dir


def test_consolidate_refuses_a_file_that_changed_in_transit(tmp_path):
    """A copied shard that differs from what its node recorded is named, not loaded."""
    from helpers.errors import CheckpointError
    folders = []
    for node, files in enumerate([{"__0_0.distcp": b"zero", ".metadata": b"index"}, {"__1_0.distcp": b"one"}]):
        it = tmp_path / f"node{node}" / "iter_0000001"
        it.mkdir(parents=True)
        for name, data in files.items():
            (it / name).write_bytes(data)
        checkpoint_dir.node_manifest(it, node)
        folders.append(it.parent)
    (folders[0] / "latest").write_text("iter_0000001\n")
    (folders[1] / "iter_0000001" / "__1_0.distcp").write_bytes(b"One")
    with pytest.raises(CheckpointError, match=r"__1_0.distcp differs from what node 1 wrote"):
        checkpoint_dir.consolidate(folders)
