"""helpers/launch/pretrained.py: a shipped model's folder is made once when several processes ask at
once (a lesson beside a test, two lessons); the second waits for the first's folder instead of making
its own. The conversion itself is replaced by a slow stand-in (the real one takes ~35 s)."""
import json
import multiprocessing
import time

from helpers.job import paths
from helpers.launch import pretrained

MODEL = pretrained.Shipped("Stand-in", "no-package", "0", "none.gguf", "0" * 64)


def fake_build(model, folder):
    """What build() leaves behind (weights and a marker with their hash), slowly, counting each build."""
    with open(folder.parent / "builds.log", "a") as log:
        log.write("build\n")
    time.sleep(1.0)
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / pretrained.MARKER).write_text(json.dumps(
        {"gguf_sha256": model.sha256, "weights_sha256": paths.sha256(folder / "model.safetensors")}))


def ask(folder):
    pretrained.build = fake_build  # in the child process only
    pretrained.make(MODEL, folder)


def test_two_processes_asking_at_once_make_the_folder_once(tmp_path):
    folder = tmp_path / "Stand-in"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=ask, args=(folder,)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0]
    assert (tmp_path / "builds.log").read_text().splitlines() == ["build"]  # one build; the other waited
    assert pretrained.is_made(MODEL, folder)


def test_a_folder_whose_weights_changed_is_not_taken_as_made(tmp_path):
    folder = tmp_path / "Stand-in"
    folder.parent.mkdir(exist_ok=True)
    fake_build(MODEL, folder)
    assert pretrained.is_made(MODEL, folder)
    (folder / "model.safetensors").write_bytes(b"changed")
    assert not pretrained.is_made(MODEL, folder)
