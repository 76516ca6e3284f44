"""An HF folder's tensor shapes against the model the worker builds from its config.json, before
any process starts. transformers lets a config's fields disagree with each other (GLM-4.7-Flash's
config class takes head_dim as another name for qk_rope_head_dim, after it has sized the query
projection from the first value), so a folder can hold tensors of other shapes than the model its
config.json describes; the worker would then stop on rank 0 in Megatron-Bridge's weight loading.

The comparison is Megatron-Bridge's own (helpers/runtime/hf/shape_check.py: the kit's model on the
meta device, each planned parameter against what Bridge's conversion makes of the header's
shapes); it needs Megatron-Core and Bridge, so it runs in one checking process, started on first
use and reused by the checks after it, which ends on its own when idle. Its answers are kept per
folder content (config.json's SHA-256 and the headers' tensors), so a folder is compared once per
notebook whatever its path. The headers are the ones helpers/job/hf_model.read read.

Two rules come of it: hf_shape_mismatch (a tensor of another shape than its parameter's, or one
Bridge's conversion cannot fit to it) and hf_weights_missing (a parameter Bridge finds no tensor
for, which weights.load refuses after start). Each names the tensors and parameters, the shapes,
and the config.json fields the tensor's shape comes from, with their values (hf_fields.py). A folder whose tensors
are all empty (helpers/launch/tiny_hf.config_only: the names without the data) has no shapes to
compare; a comparison that could not run refuses nothing and says why in a warning."""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import select
import subprocess
import sys
import tempfile
import threading
import warnings

from helpers.errors import InvalidJob
from helpers.job import families, hf_fields, hf_model, paths
from helpers.job.spec import attention_of
from helpers.job.violation import Found, Violation

MODULE = "helpers.runtime.hf.shape_check"
TIMEOUT_S = 600.0  # one folder: the imports (~5 s of CPU) and a model on the meta device
SHOWN = 4  # kinds of mismatch a message spells out


class Checker:
    """The checking process (helpers/runtime/hf/shape_check.py): one JSON line in, one out."""

    def __init__(self):
        self.log = tempfile.TemporaryFile("w+")  # its stderr, read back when it fails
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env, cwd=paths.REPO_ROOT,
                                     # outside the caller's process group: a Jupyter kernel signals its group's
                                     # processes at shutdown and waits ~30 s for those it never reaps; this one
                                     # ends by itself when the caller's end closes its input
                                     start_new_session=True)

    def ask(self, items: list[dict], timeout: float) -> list[dict] | str:
        """The answers, or why there are none (the process ended, or gave no answer in time)."""
        self.log.seek(0)
        self.log.truncate()  # this request's stderr only
        try:
            self.proc.stdin.write(json.dumps(items) + "\n")
            self.proc.stdin.flush()
            ready = select.select([self.proc.stdout], [], [], timeout)[0]
            line = self.proc.stdout.readline() if ready else ""
        except (BrokenPipeError, OSError):
            line = ""
        if line:
            return json.loads(line)
        what = f"gave no answer within {timeout:.0f} s" if self.alive() else f"ended (exit {self.proc.returncode})"
        self.proc.kill()
        self.proc.wait()
        self.log.seek(0)
        tail = self.log.read()[-2000:].strip()
        return f"the shape check process {what}" + (f": {tail}" if tail else "")

    def alive(self) -> bool:
        return self.proc.poll() is None


_lock = threading.Lock()
_checker: Checker | None = None
_answers: dict[str, dict] = {}  # content key -> the checking process's answer


def key(folder) -> str:
    """The folder's content as the comparison sees it: config.json, the tensors and their spelling."""
    tensors = sorted((n, t.dtype, list(t.shape)) for n, t in folder.tensors.items())
    content = json.dumps([folder.config_sha256, tensors, folder.record()["renames"]])
    return hashlib.sha256(content.encode()).hexdigest()


def weightless(folder) -> bool:
    """Every tensor empty: names without data (tiny_hf.config_only), nothing whose shape means anything."""
    return all(math.prod(t.shape) == 0 for t in folder.tensors.values())


def compared(folder) -> dict:
    """The checking process's answer for `folder` (an hf_model.Folder without problems, whose
    config.json describes a model): compared, mismatches, skipped, unplanned; or {"error": why it
    could not compare}."""
    k = key(folder)
    with _lock:
        if k not in _answers:
            sinks = families.of_model_type(folder.config.get("model_type")).attention_sinks
            item = {"record": folder.record(), "model": hf_model.describe(folder.path, folder.config).to_dict(),
                    "attention": attention_of("auto", "local", sinks),  # the local backend's, at TP=1
                    "tensors": {n: [t.dtype, list(t.shape)] for n, t in folder.tensors.items()}}
            _answers[k] = _ask(item)
        return _answers[k]


def _ask(item: dict) -> dict:
    global _checker
    for _ in range(2):
        fresh = _checker is None or not _checker.alive()
        if fresh:
            _checker = Checker()
        answer = _checker.ask([item], TIMEOUT_S)
        if isinstance(answer, list):
            return answer[0]
        if fresh or "ended" not in answer:  # only a process that ended while idle is started again, once
            break
    return {"error": answer}


def problems(folder) -> list[Violation]:
    """hf_shape_mismatch and hf_weights_missing for an hf_model.Folder that `read` found usable."""
    if folder.problems or not folder.tensors or weightless(folder):
        return []
    try:
        hf_model.describe(folder.path, folder.config)
    except InvalidJob:  # config.json lacks a value the model needs: the job's model rule says which
        return []
    answer = compared(folder)
    if "error" in answer:
        warnings.warn(f"hf_model {folder.path}: the tensor shapes were not compared with the model before start "
                      f"({answer['error'].splitlines()[0] if answer['error'] else 'no reason given'})", stacklevel=2)
        return []
    v = Found("hf")
    where = f"hf_model folder {folder.path!r} ({folder.record()['architecture']})"
    config = folder.config
    if answer["mismatches"]:
        found = answer["mismatches"]
        groups = grouped(found)
        shown = "; ".join(mismatch_words(config, g[0], len(g)) for g in groups[:SHOWN])
        more = f"; and {len(groups) - SHOWN} more kinds" if len(groups) > SHOWN else ""
        notes = hf_fields.notes(config)
        v.add("hf_shape_mismatch", f"{where}: {len(found)} of the {answer['compared'] + len(found)} parameters "
              f"Megatron-Bridge loads do not fit the tensors the safetensors hold: {shown}{more}"
              + (f". {notes}" if notes else ""), hf_fields.fix(config))
    if answer["unplanned"]:
        found = answer["unplanned"]
        groups = grouped(found)
        shown = "; ".join(missing_words(g[0], len(g)) for g in groups[:SHOWN])
        more = f"; and {len(groups) - SHOWN} more kinds" if len(groups) > SHOWN else ""
        notes = hf_fields.q_lora_note(config, folder.names)
        v.add("hf_weights_missing", f"{where}: Megatron-Bridge finds no tensor for {len(found)} parameter(s) of the "
              f"model config.json describes: {shown}{more}" + (f". {notes}" if notes else ""),
              "give config.json the values the safetensors were saved with (the fields named above), or save config "
              "and weights again together with save_pretrained()")
    return v


# ---- the words ---------------------------------------------------------------------------------
def generic(name: str) -> str:
    """A name with its layer and expert numbers left out."""
    return re.sub(r"\.\d+\.", ".*.", name)


def grouped(found: list[dict]) -> list[list[dict]]:
    """The findings grouped by parameter and tensors (numbers left out) and by shapes."""
    groups: dict[str, list[dict]] = {}
    for f in found:
        k = json.dumps([generic(f["param"]), [[role, generic(name), s] for role, name, s in f["hf"]],
                        f.get("expected"), f.get("got")])
        groups.setdefault(k, []).append(f)
    return list(groups.values())


def shape(s) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]" if s is not None else "(not in the safetensors)"


def others(count: int) -> str:
    return f" (and {count - 1} more like it)" if count > 1 else ""


def mismatch_words(config: dict, f: dict, count: int) -> str:
    """One kind of mismatch: the tensors and their shapes, the parameter and its shape, why."""
    tensors = ", ".join(f"{name} {shape(s)}" for _, name, s in f["hf"])
    head = f"{tensors}{others(count)} for Megatron's {f['param']} {shape(f['expected'])}"
    if f["error"]:
        head += f": Bridge's {f['kind']} cannot fit them ({f['error'].splitlines()[0][:200]})"
    elif len(f["hf"]) > 1 or f["hf"][0][2] != f["got"]:
        head += f" (Bridge's {f['kind']} makes {shape(f['got'])} of them)"
    said = [d for _, name, s in f["hf"] if s is not None for d in hf_fields.disagreements(config, name, s)]
    return head + (" - config.json: " + ", ".join(said) if said else "")


def missing_words(f: dict, count: int) -> str:
    if not f["hf"]:
        return f"{f['param']}{others(count)} (Bridge maps no tensor to it)"
    absent = [name for _, name, s in f["hf"] if s is None]
    return f"{f['param']}{others(count)}, which Bridge reads from {', '.join(absent or [n for _, n, _ in f['hf']])}"
