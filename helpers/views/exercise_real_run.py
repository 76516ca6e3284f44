"""The exercises of a real run's parts: the `--data-path` of a blend and the torchrun line of each
node (lesson 19), the diagnosis of real Megatron-LM logs (lesson 19), the continued-pretraining
learning rate that learns new text without forgetting the old (lesson 18). The mechanism:
helpers/views/exercise_verdicts.py."""
from __future__ import annotations

from helpers.views.exercise_verdicts import judge, tell


def check_data_path(answer: str | None, root, target: dict[str, float], tokenizer, samples: int = 1000,
                    seq_len: int = 256) -> bool:
    """19: a Megatron-LM `--data-path` value blending the lesson's corpora by `target` ({prefix: weight},
    prefixes in `root`), read by Megatron-Core's `get_blend_from_list`, built by its
    BlendedMegatronDatasetBuilder (`samples` samples) and graded on the shares measured in the built
    blend: each within 1/len(blend) of its target, the most BlendedDataset's assignment leaves
    (helpers/runtime/data/blend.py)."""
    from pathlib import Path

    from helpers.errors import InvalidJob
    from helpers.runtime.data import blend

    if answer is None:
        return judge(None, None, "")
    try:
        prefixes, weights = blend.from_data_path(answer, root)
        built = blend.build(prefixes, weights, samples, seq_len, tokenizer, Path(root) / "index-cache")
    except InvalidJob as e:
        return judge(False, True, f"Megatron-LM could not use it: {e}", shown=answer)
    measured: dict[str, float] = {}
    for prefix, share in zip(prefixes, blend.shares(built)):
        measured[Path(prefix).name] = measured.get(Path(prefix).name, 0.0) + share
    off = {name: measured.get(name, 0.0) - w for name, w in target.items()}
    passed = set(measured) <= set(target) and all(abs(v) <= 1 / len(built) for v in off.values())
    print("drawn from each corpus in the built blend: " + ", ".join(f"{k} {v:.1%}" for k, v in measured.items()))
    hint = ("The weights are the shares of samples, one before each prefix; Megatron normalises them to sum "
            "to 1. Which corpus should give 70% of the samples?")
    return judge(passed, True, hint, shown=answer)


def check_two_node_launch(answer: list[str] | None, world_size: int, nnodes: int, script: str = "pretrain_gpt.py"
                          ) -> bool:
    """19: the torchrun command of each node (a list, node 0's first) for Megatron-LM's `script` on
    `nnodes` nodes and `world_size` processes, each read by torch's own torchrun parser
    (helpers/launch/torchrun_args.py) and judged in parts: one line per node, the script, nodes x
    processes = the world size, one rendezvous for all (c10d: the same endpoint and id; static: the same
    master address and port) and, where the rendezvous does not number the nodes itself (static), a
    distinct --node-rank per node. One line per part, then the verdict."""
    from helpers.errors import InvalidJob
    from helpers.launch import torchrun_args

    if answer is None:
        return judge(None, None, "")
    if isinstance(answer, str) or not isinstance(answer, (list, tuple)) or len(answer) != nnodes:
        return judge(False, True, f"Write {nnodes} commands, one per node, as a list of strings: "
                      "[node 0's line, node 1's line].", shown=answer)
    try:
        parsed = [torchrun_args.parse(c) for c in answer]
        counts = [torchrun_args.node_counts(a) for a in parsed]
    except InvalidJob as e:
        return judge(False, True, str(e), shown=answer)
    backends = {a.rdzv_backend for a in parsed}
    c10d = backends == {"c10d"}
    if c10d:
        meeting = {(a.rdzv_endpoint, a.rdzv_id) for a in parsed}
        one_meeting = len(meeting) == 1 and all(e and i != "none" for e, i in meeting)
    else:
        meeting = {(a.master_addr, a.master_port) for a in parsed}
        one_meeting = backends == {"static"} and len(meeting) == 1
    parts = {
        "script": all(a.training_script.endswith(script) for a in parsed),
        "not standalone": not any(a.standalone for a in parsed),
        "nodes x processes": all(n == nnodes and n * p == world_size for n, p in counts),
        "one rendezvous": one_meeting,
        "node ranks": c10d or sorted(a.node_rank for a in parsed) == list(range(nnodes)),
    }
    hints = {
        "script": f"each node runs Megatron-LM's {script}, after torchrun's own options",
        "not standalone": "--standalone starts a rendezvous on this node alone; the other node never joins it",
        "nodes x processes": f"--nnodes counts the machines, --nproc-per-node the processes on one: {world_size} "
                             f"processes on {nnodes} nodes",
        "one rendezvous": "every node must meet at the same place: the same --rdzv-backend, --rdzv-endpoint "
                          "HOST:PORT and --rdzv-id (c10d), or the same --master-addr and --master-port (static)",
        "node ranks": "with --master-addr/--master-port (static rendezvous) each node gives its own --node-rank, "
                      "0 on the master's node",
    }
    for part, ok in parts.items():
        print(f"{'ok ' if ok else 'no '} {part}" + ("" if ok else f": {hints[part]}"))
    passed = all(parts.values())
    failing = [hints[p] for p, ok in parts.items() if not ok]
    return judge(passed, True, "; ".join(failing), shown=answer)


def check_log_diagnosis(answer: dict | None, truth: dict[str, str]) -> bool:
    """19: the symptom each lettered Megatron-LM log shows ({letter: symptom}, `truth` holding the
    letters whose logs are there: helpers/rundir/log_symptoms.py), graded per letter; the hint names
    the letters that are not right yet, not their symptoms."""
    from helpers.rundir.log_symptoms import SYMPTOMS

    if not truth:
        tell("check_log_diagnosis", "not answered", "no log to diagnose: data/megatron_lm_logs/ holds none of the "
              "lettered logs yet")
        return False
    if answer is None:
        return judge(None, None, "")
    names = {s.lower(): s for s in SYMPTOMS}
    given = ({str(k).strip().upper(): names.get(str(v).strip().lower(), v) for k, v in answer.items()}
             if isinstance(answer, dict) else {})
    wrong = sorted(k for k in truth if given.get(k) != truth[k])
    unknown = sorted({str(v) for v in given.values()} - set(SYMPTOMS))
    hint = (f"Not right: {', '.join(wrong) or 'the letters'}" + (f" ({', '.join(map(repr, unknown))} is none of "
            f"{', '.join(map(repr, SYMPTOMS))})" if unknown else "")
            + ". Read each log's columns: loss, grad norm, loss scale, the skipped and nan counts, ms per iteration.")
    return judge({k: given.get(k) for k in truth}, dict(truth), hint, shown=answer)


def check_cpt_choice(answer: float | None, iters: int, held_out: tuple[float, float], general: tuple[float, float],
                     budget: int, target: float = 0.5, bound: float = 0.02) -> bool:
    """18: a continued-pretraining job's learning rate `answer` and `iters`, judged on what it did:
    the held-out loss of the new text (before, after) must fall to `target` of its start or below (the
    form is learned) and the general text's loss (before, after) rise by at most `bound`, relative
    (what the model knew is kept), within `budget` iterations. The hint names the side that failed
    and which way to move; the range that passes is the lesson's reveal, after the attempt."""
    if answer is None:
        return judge(None, None, "")
    learned = held_out[1] <= target * held_out[0]
    rose = (general[1] - general[0]) / general[0]
    kept = rose <= bound
    hints = []
    within = 1 <= iters <= budget
    if not within:
        hints.append(f"{iters} iterations is outside the budget of 1 to {budget} (the job ran "
                     f"{max(1, min(iters, budget))}).")
    if not learned:
        hints.append(f"The held-out logs' loss fell {1 - held_out[1] / held_out[0]:.0%} "
                     f"({held_out[0]:.3f} -> {held_out[1]:.3f}); it must fall {1 - target:.0%}: the form is "
                     "not learned yet. Too little training: a higher learning rate or more iterations.")
    if not kept:
        hints.append(f"The WikiText-2 loss rose {rose:.1%} ({general[0]:.3f} -> {general[1]:.3f}), more than "
                     f"{bound:.0%}: the model forgot general text while it learned the logbook. Too much "
                     "training: a lower learning rate or fewer iterations.")
    passed = learned and kept and within
    if passed:
        print(f"lr {answer:g}, {iters} iterations: held-out logs {1 - held_out[1] / held_out[0]:.0%} lower, "
              f"WikiText-2 {rose:+.1%}")
    return judge(passed, True, " ".join(hints), shown={"cpt_lr": answer, "cpt_iters": iters})
