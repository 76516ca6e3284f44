"""The run a learner builds from lesson 03 on: the training settings each lesson's decision adds
(batch, optimizer sharding, overlap, recompute), kept as Megatron-LM flags in one small JSON file,
so that the next lesson places the same run on its own layout. The parallel sizes stay each
lesson's own; what travels is what makes it the same run (the global batch) and what the learner
chose for it. The checks that read and extend it: helpers/views/exercise_chain.py."""
from __future__ import annotations

import json
from pathlib import Path

# The options that belong to the run rather than to a lesson's layout, as Megatron-LM spells them.
RECOMPUTE_OPTIONS = ("--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--recompute-modules")
TRAINING_OPTIONS = ("--micro-batch-size", "--global-batch-size", "--use-distributed-optimizer",
                    "--overlap-grad-reduce", "--overlap-param-gather", *RECOMPUTE_OPTIONS)
# Where a lesson starts when no decision of the learner's is saved (or the lesson runs without a file):
# lesson 03's worked decision, the run on 4 processes.
STARTING_POINT = ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
                  "--micro-batch-size", "2", "--global-batch-size", "16"]


def path_of(file) -> Path | None:
    """The record's file: None keeps nothing (each lesson starts from STARTING_POINT); a relative
    path lives in the kit's runs folder, next to the jobs."""
    if file is None:
        return None
    from helpers.job.paths import runs_dir

    file = Path(file)
    return file if file.is_absolute() else runs_dir() / file


def load(file) -> tuple[list[str], str]:
    """(the run's flags as command-line words, where they come from)."""
    path = path_of(file)
    if path is None or not path.exists():
        return list(STARTING_POINT), "lesson 03's worked decision; yours replaces it once lesson 03's check passes"
    try:
        saved = json.loads(path.read_text())
        flags, lesson = saved["flags"], saved["lesson"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not a saved run ({e}) -> delete it, and lesson 03's check writes it again") from None
    return list(flags), f"your decisions up to lesson {lesson} ({path.name})"


def save(file, words: list[str], lesson: str) -> Path | None:
    """Keep the run's training flags among `words` (a job's whole command line) for the next lesson."""
    path = path_of(file)
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_suffix(".tmp")  # written whole, then renamed: a lesson reading it never sees half
    fresh.write_text(json.dumps({"lesson": lesson, "flags": only(words, TRAINING_OPTIONS)}, indent=1) + "\n")
    fresh.replace(path)
    return path


def _split(words: list[str]) -> list[list[str]]:
    """Command-line words grouped per option: each `--option` with the values that follow it."""
    groups: list[list[str]] = []
    for w in words:
        if w.startswith("--") or not groups:
            groups.append([w])
        else:
            groups[-1].append(w)
    return groups


def only(words: list[str], options) -> list[str]:
    """The options among `words` (with their values), each as last given (Megatron-LM's parser keeps
    the last of a repeated option)."""
    last = {g[0]: g for g in _split(words) if g[0] in options}
    return [w for g in last.values() for w in g]


def without(words: list[str], options) -> list[str]:
    """`words` less the options named (and their values)."""
    return [w for g in _split(words) if g[0] not in options for w in g]


def value(words: list[str], option: str):
    """The last value given for `option` (True for a switch), or None."""
    found = None
    for g in _split(words):
        if g[0] == option:
            found = g[1] if len(g) == 2 else (g[1:] or True)
    return found
