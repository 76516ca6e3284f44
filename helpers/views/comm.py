"""What each rank sent and received, measured (`comm.jsonl`, written by helpers/runtime/measure/comm_log.py),
next to the formula for each parallel axis; bytes on the wire are helpers/perf/collectives.py's ring
bytes. Notebook side only.

Every row of comm.jsonl is one torch.distributed call made by Megatron on one rank during one
iteration: op, axis (tp, dp, pp, ...), the group's ranks, bytes of the whole buffer. Groups of one
rank move nothing (Megatron still calls e.g. the vocab-parallel cross entropy's all-reduces at
TP=1), so they are left out unless asked for."""
from __future__ import annotations

import json
from collections import Counter, defaultdict

from helpers.perf.collectives import ring_bytes
from helpers.rundir import names
from helpers.rundir.reader import RunDir
from helpers.views.table import Table

# torch.distributed's calls, as comm.jsonl names them -> the collective they run (collectives.KINDS);
# all-to-alls are every call whose name starts with all_to_all; receiving calls send nothing
KINDS = {"all_reduce": "all_reduce", "reduce_scatter_tensor": "reduce_scatter",
         "_reduce_scatter_base": "reduce_scatter", "reduce_scatter": "reduce_scatter",
         "all_gather_into_tensor": "all_gather", "_all_gather_base": "all_gather", "all_gather": "all_gather",
         "isend": "send", "send": "send", "broadcast": "send"}


def records(run: RunDir, include_trivial: bool = False) -> list[dict]:
    path = run.path / names.COMM
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the job ran without instruments (instruments='off'; auto "
                                "is off on cuda) or stopped before its last iteration; run it with instruments='on'")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows if include_trivial else [r for r in rows if len(r["group"]) > 1]


def wire_bytes(op: str, nbytes: int, n: int) -> float:
    """Bytes one rank sends in the call `op` (torch.distributed's name) for a buffer of `nbytes` in a
    group of n (collectives.ring_bytes)."""
    kind = "all_to_all" if op.startswith("all_to_all") else KINDS.get(op)
    return 0.0 if kind is None else ring_bytes(kind, nbytes, n)


def summary(run: RunDir, iteration: int | None = None, ranks: list[int] | None = None) -> Table:
    """Per rank, axis, phase and op: number of calls, bytes per call and what the rank put on the
    wire in one iteration (default: the last one)."""
    rows = records(run)
    iteration = iteration or run.spec.iters
    agg: dict[tuple, list] = defaultdict(lambda: [0, 0.0])
    for r in rows:
        if r["iteration"] != iteration or (ranks is not None and r["rank"] not in ranks):
            continue
        key = (r["rank"], r["axis"], r["phase"], r["op"], len(r["group"]), r["bytes"])
        agg[key][0] += 1
        agg[key][1] += wire_bytes(r["op"], r["bytes"], len(r["group"]))
    return Table({"rank": k[0], "axis": k[1], "phase": k[2], "op": k[3], "group size": k[4],
                  "bytes per call": k[5], "calls": v[0], "sent bytes (ring)": v[1]}
                 for k, v in sorted(agg.items()))


def counts(run: RunDir, rank: int, axis: str, iteration: int | None = None, nbytes: int | None = None) -> Counter:
    """{op: calls} one rank made on one axis in one iteration (optionally only buffers of `nbytes`)."""
    rows = records(run)
    iteration = iteration or run.spec.iters
    return Counter(r["op"] for r in rows if r["rank"] == rank and r["axis"] == axis
                   and r["iteration"] == iteration and (nbytes is None or r["bytes"] == nbytes))


def bytes_by_op(run: RunDir, rank: int, axis: str, iteration: int | None = None) -> dict[str, int]:
    rows = records(run)
    iteration = iteration or run.spec.iters
    out: dict[str, int] = defaultdict(int)
    for r in rows:
        if r["rank"] == rank and r["axis"] == axis and r["iteration"] == iteration:
            out[r["op"]] += r["bytes"]
    return dict(out)


# ---- formulas, one per axis -------------------------------------------------------------
def activation_bytes(run: RunDir) -> int:
    """One microbatch's hidden states [seq, micro_batch, hidden] in the pipeline dtype."""
    spec, model = run.spec, run.manifest["model"]
    elem = 2 if spec.bf16 else 4
    return spec.seq_len * spec.micro_batch * model["hidden_size"] * elem


def param_element_size(run: RunDir) -> int:
    return 2 if run.spec.bf16 else 4


def expected_dp(run: RunDir, rank: int = 0) -> dict[str, int]:
    """Data parallel, per iteration: one reduction of the whole gradient buffer (kept in fp32:
    grad_reduce_in_fp32) over the DP group. DDP: all-reduce; distributed optimizer: reduce-scatter,
    then an all-gather of the updated parameters (parameter dtype)."""
    info = run.ranks[rank]
    if run.spec.dp == 1:
        return {}
    if run.spec.dist_opt:  # the parameter buffer: as many (padded) elements as the fp32 grad buffer
        return {"reduce_scatter_tensor": info["grad_bytes"],
                "all_gather_into_tensor": info["grad_bytes"] * param_element_size(run) // 4}
    return {"all_reduce": info["grad_bytes"]}


def expected_tp(run: RunDir, stage_layers: int | None = None, first_stage: bool = True,
                last_stage: bool = True) -> Counter:
    """Tensor parallel, activation-sized collectives of one rank per iteration (m microbatches,
    L layers on this stage). Without SP, all-reduces: 2 per layer forward (after the row-parallel
    attention projection and MLP fc2), 2 per layer backward (input gradients of the column-parallel
    qkv and fc1), 1 for the vocab-parallel embedding (first stage, forward) and 1 for the
    column-parallel output layer (last stage, backward).
    With SP, per layer forward: all-gather before qkv and fc1, reduce-scatter after proj and fc2;
    backward: the mirror image (reduce-scatter <-> all-gather) plus one more all-gather per
    column-parallel linear, which saved only its sequence shard and gathers it again for its weight
    gradient: 6 all-gathers + 4 reduce-scatters per layer; embedding +1/+1, output layer +2/+1."""
    spec, model = run.spec, run.manifest["model"]
    layers = stage_layers if stage_layers is not None else model["num_layers"]
    m = spec.num_microbatches
    if spec.tp == 1:
        return Counter()
    if not spec.sp:
        return Counter({"all_reduce": m * (4 * layers + first_stage + last_stage)})
    return Counter({"all_gather_into_tensor": m * (6 * layers + first_stage + 2 * last_stage),
                    "reduce_scatter_tensor": m * (4 * layers + first_stage + last_stage)})


def expected_pp(run: RunDir, rank: int) -> Counter:
    """Pipeline parallel, per iteration: each of the m microbatches (times VPP chunks) crosses every
    stage boundary twice: the activation forward, its gradient backward."""
    spec = run.spec
    stage = run.groups[rank]["pp"].index(rank)
    chunks = spec.vpp or 1
    m = spec.num_microbatches
    # Sends: forward to the next stage (all but the last virtual stage), backward to the previous.
    sends = m * (chunks - (stage == spec.pp - 1)) + m * (chunks - (stage == 0))
    return Counter({"isend": sends, "irecv": sends})
