"""The smoke-test contract as a report card: `report.json`, eight checks, each pass|fail|skipped
with its evidence. Every rank contributes (the gathers are collectives); rank 0 writes the file
at the start, after the first iteration, at checkpoints, validations and the last iteration, when
a NaN stops the job, and at the end, so a job that dies leaves a card whose unreached checks say
so. Of the numbers every iteration brings (losses, grad norms) the card keeps a summary (first,
last, lowest, highest, how many), so writing it costs the same at any iteration.

Checks (in the contract's order):
  process_groups   every rank got groups of the layout's sizes, and is a member of each
  model            the model was built with this layout; parameters per rank
  data             data and tokenizer resolved on every node; SHA-256 of the files per node
  forward          the forward pass ran and gave a finite loss
  backward         gradients were computed and synchronised: the grad norm is finite and equal on
                   every rank, and after the optimizer step the parameters are bit-identical
                   across data-parallel replicas (checksum all-gather; experts across EDP)
  no_nan_no_skip   every iteration's loss finite, no skipped optimizer step
  checkpoint       written in the expected layout (Megatron dist_checkpointing + the kit's record)
                   and reloaded into the live model with bit-identical parameters
  validation_test  validation (every eval_interval and after the last iteration) and test ran"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from helpers.job import checkpoint_dir
from helpers.rundir import names
from helpers.rundir.writer import write_json
from helpers.runtime.checkpoint import io as checkpoint_io
from helpers.runtime.checkpoint.policy import save_root
from helpers.runtime.measure.gather import describe_process_groups

CHECKS = {
    "process_groups": "process groups on every rank",
    "model": "model built with the layout; parameters per rank",
    "data": "data and tokenizer resolved on every node",
    "forward": "forward ran (loss)",
    "backward": "backward and gradient sync (grad norm equal; DP replicas identical)",
    "no_nan_no_skip": "no NaN or skipped iteration",
    "checkpoint": "checkpoint written in the expected layout and reloaded",
    "validation_test": "validation and test ran",
}
NOT_REACHED = "not reached: the job stopped before this check"


def _all_gather(obj) -> list:
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def param_checksums(model: list) -> dict:
    """SHA-256 of this rank's dense and expert parameters (their bytes in their own dtype, in name
    order). Expert parameters are the ones Megatron marks `allreduce = False` (reduced over EDP,
    not DP). The raw bytes, not an fp32 copy: equal bytes is what replicas must have, and for bf16
    it hashes half as much without a conversion (an fp32 copy of a 1.4B GPT on GPU: ~13 s per check)."""
    dense, expert = hashlib.sha256(), hashlib.sha256()
    for i, chunk in enumerate(model):
        for name, p in sorted(chunk.named_parameters(), key=lambda kv: kv[0]):
            h = dense if getattr(p, "allreduce", True) else expert
            h.update(f"{i}.{name}".encode())
            h.update(p.detach().contiguous().view(torch.uint8).cpu().numpy())
    return {"dense": dense.hexdigest()[:16], "expert": expert.hexdigest()[:16]}


@dataclass
class Summary:
    """What the card keeps of a number recorded at many iterations."""
    count: int = 0
    first: float | None = None
    first_at: int | None = None
    last: float | None = None
    last_at: int | None = None
    low: float = math.inf
    high: float = -math.inf
    non_finite: int = 0

    def add(self, iteration: int, value: float) -> None:
        if self.count == 0:
            self.first, self.first_at = value, iteration
        self.count += 1
        self.last, self.last_at = value, iteration
        if math.isfinite(value):
            self.low, self.high = min(self.low, value), max(self.high, value)
        else:
            self.non_finite += 1

    def evidence(self) -> dict:
        if not self.count:
            return {"count": 0}
        finite = self.non_finite < self.count
        return {"count": self.count, "first": self.first, "first_iteration": self.first_at, "last": self.last,
                "last_iteration": self.last_at, "min": self.low if finite else None,
                "max": self.high if finite else None}


def _ranks(ranks: list[int]) -> str:
    contiguous = ranks == list(range(ranks[0], ranks[-1] + 1))
    return f"ranks {ranks[0]}-{ranks[-1]}" if contiguous and len(ranks) > 2 else f"ranks {ranks}"


def _short_hashes(hashes: dict) -> str:
    return " ".join(f"{k}={v[:8]}" for k, v in hashes.items())


class Report:
    def __init__(self, run_dir: Path, spec):
        self.path = Path(run_dir) / names.REPORT
        self.spec = spec
        self.rank = dist.get_rank()
        self.checks = {k: {"status": "fail", "title": t, "evidence": NOT_REACHED} for k, t in CHECKS.items()}
        self.losses = Summary()  # logged iterations only (JobSpec.log_interval)
        self.grad_norms = Summary()  # every iteration
        self.skipped: list[int] = []
        self.stopped: str | None = None  # why a non-finite value stopped the job
        self.sync_problems: list[str] = []
        self.sync_checked: list[int] = []
        if spec.data == "synthetic":
            self._set("data", "skipped", "synthetic token source (helpers/runtime/data/synthetic.py): no files, "
                      "no tokenizer")
            self._set("validation_test", "skipped", "synthetic token source has no validation/test split")
        if not getattr(spec, "save_interval", None):
            self._set("checkpoint", "skipped", "save_interval is not set: no checkpoint was asked for")
        self.write()

    # ---- bookkeeping -------------------------------------------------------------------
    def _set(self, name: str, status: str, evidence) -> None:
        self.checks[name].update(status=status, evidence=evidence)

    def write(self) -> None:
        """report.json as the checks stand (rank 0; the others return)."""
        if self.rank != 0:
            return
        statuses = [c["status"] for c in self.checks.values()]
        write_json(self.path, {
            "passed": "fail" not in statuses,
            "summary": {s: statuses.count(s) for s in ("pass", "fail", "skipped")},
            "layout": self.spec.layout_name(), "data": self.spec.data, "tokenizer": self.spec.tokenizer,
            "checks": [{"name": k, **v} for k, v in self.checks.items()],
        })

    # ---- the checks, in the order the loop reaches them --------------------------------
    def groups(self) -> None:
        """Collective."""
        s = self.spec
        want = {"tp": s.tp, "pp": s.pp, "cp": s.cp, "dp": s.dp, "ep": s.ep, "etp": s.expert_tp, "edp": s.edp}
        mine = describe_process_groups()
        problems = [f"{axis} group {mine.get(axis)} (size {len(mine.get(axis) or [])}, expected {n})"
                    for axis, n in want.items() if len(mine.get(axis) or []) != n]
        problems += [f"not a member of its {a} group" for a in want if self.rank not in (mine.get(a) or [self.rank])]
        every = _all_gather(problems)
        bad = {r: p for r, p in enumerate(every) if p}
        sizes = " ".join(f"{k.upper()}{v}" for k, v in want.items())
        self._set("process_groups", "fail" if bad else "pass",
                  {"ranks_reporting": len(every), "group_sizes": sizes, "problems": bad} if bad else
                  f"{len(every)}/{dist.get_world_size()} ranks; every rank's groups have sizes {sizes}")
        self.write()

    def model(self, model: list, model_name: str) -> None:
        """Collective."""
        self.model_name = model_name
        n = sum(p.numel() for chunk in model for p in chunk.parameters())
        counts = _all_gather(n)
        ok = all(c > 0 for c in counts)
        # Which core attention the layers were built with (JobSpec.attention; CP has its own)
        core = next((type(m.core_attention).__name__ for chunk in model for m in chunk.modules()
                     if hasattr(m, "core_attention")), None)
        # precision='fp8' on the local backend: how many linears run the kit's FP8 GEMMs (fp8_linear.py)
        fp8 = sum(1 for chunk in model for m in chunk.modules() if getattr(m, "fp8_recipe", None))
        self._set("model", "pass" if ok else "fail", {
            # the preset's name, or the imported HF folder's (spec.model stays the default then)
            "layout": self.spec.layout_name(), "model": self.model_name, "backend": self.spec.backend,
            "attention": self.spec.attention,
            "core_attention": core,
            "precision": self.spec.precision, "fp8_linears": fp8,
            "parameters_per_rank": {str(r): c for r, c in enumerate(counts)}})
        self.write()

    def data(self, prepared) -> None:
        """Collective (no-op for synthetic data, but every rank must call it the same way)."""
        if prepared is None:
            return
        facts = prepared.facts()
        mine = {"host": prepared.host, "source_sha256": facts["source_sha256"],
                "tokenizer_sha256": facts["tokenizer"]["sha256"], "indexed_sha256": facts["indexed_sha256"],
                "origin": facts["source"]["origin"]}
        every = _all_gather(mine)
        nodes: dict[str, dict] = {}
        for r, f in enumerate(every):
            node = nodes.setdefault(f["host"], {**{k: v for k, v in f.items() if k != "host"}, "ranks": []})
            node["ranks"].append(r)
            if {k: v for k, v in f.items() if k != "host"} != {k: v for k, v in node.items() if k != "ranks"}:
                node.setdefault("inconsistent_ranks", []).append(r)
        views = [{k: v for k, v in n.items() if k not in ("ranks", "inconsistent_ranks")} for n in nodes.values()]
        same = all(v == views[0] for v in views) and not any("inconsistent_ranks" in n for n in nodes.values())
        per_node = "; ".join(
            f"{host}: {_ranks(n['ranks'])}, sources {_short_hashes(n['source_sha256']) or 'generated'}, "
            f"tokenizer {self.spec.tokenizer} {_short_hashes(n['tokenizer_sha256']) or '(no files)'}, "
            f"indexed {_short_hashes(n['indexed_sha256'])}" for host, n in nodes.items())
        self._set("data", "pass" if same else "fail", {
            "per_node": per_node, "data": self.spec.data, "tokenizer": self.spec.tokenizer, "splits": facts["source"]["splits"],
            "tokens": facts["splits"], "nodes": nodes,
            "note": "every node read the same bytes" if same else "nodes (or ranks) read different files"})
        self.write()

    def loss(self, iteration: int, loss: float) -> None:
        """A logged iteration's global loss, before the observer's NaN guard raises: a non-finite
        one fails the card at once, naming the iteration."""
        self.losses.add(iteration, loss)
        if self.losses.count == 1:
            ok = math.isfinite(loss)
            self._set("forward", "pass" if ok else "fail", f"iteration {iteration}: loss {loss:.6f}")
        if not math.isfinite(loss):
            self._stop(f"loss is {loss} at iteration {iteration}")

    def _stop(self, why: str) -> None:
        self.stopped = why
        self._set("no_nan_no_skip", "fail", why)
        self.write()

    def step(self, iteration: int, ok: bool, grad_norm, model: list, check_replicas: bool) -> None:
        """After the optimizer step (collective when check_replicas). A non-finite grad norm fails
        the card at once, naming the iteration."""
        if not ok:
            self.skipped.append(iteration)
        gn = float(grad_norm) if grad_norm is not None else float("nan")
        self.grad_norms.add(iteration, gn)
        if check_replicas:
            self.sync_checked.append(iteration)
            facts = _all_gather({"grad_norm": gn, "sums": param_checksums(model),
                                 "dp_cp": dist.get_process_group_ranks(self._dp_cp()),
                                 "edp": dist.get_process_group_ranks(self._edp())})
            norms = {f["grad_norm"] for f in facts}
            if len(norms) != 1:
                self.sync_problems.append(f"iteration {iteration}: grad norms differ across ranks: {sorted(norms)}")
            for r, f in enumerate(facts):
                for kind, group in (("dense", "dp_cp"), ("expert", "edp")):
                    peers = {facts[q]["sums"][kind] for q in f[group]}
                    if len(peers) != 1:
                        self.sync_problems.append(f"iteration {iteration}: {kind} parameters differ across "
                                                  f"replicas {f[group]} (seen from rank {r})")
            self._replica_groups = {"dp_cp": sorted({tuple(f["dp_cp"]) for f in facts}),
                                    "edp": sorted({tuple(f["edp"]) for f in facts})}
        self._update_training()
        if grad_norm is not None and not math.isfinite(gn):
            self._stop(f"grad norm is {gn} at iteration {iteration}")

    @staticmethod
    def _dp_cp():
        from megatron.core import parallel_state as ps
        return ps.get_data_parallel_group(with_context_parallel=True)

    @staticmethod
    def _edp():
        from megatron.core import parallel_state as ps
        return ps.get_expert_data_parallel_group()

    def _update_training(self) -> None:
        norms = self.grad_norms
        finite = norms.non_finite == 0 and norms.low > 0
        groups = getattr(self, "_replica_groups", {})
        self._set("backward", "pass" if finite and not self.sync_problems and self.sync_checked else "fail", {
            "grad_norm": norms.evidence(),
            "grad_norm_equal_on_every_rank": not any("grad norms" in p for p in self.sync_problems),
            "replicas_identical_after_step_at_iterations": self.sync_checked,
            "dp_replica_groups": [list(g) for g in groups.get("dp_cp", [])],
            "expert_replica_groups": [list(g) for g in groups.get("edp", [])],
            "problems": self.sync_problems[:8]})
        if self.stopped:
            return  # the failure stays as _stop wrote it
        if self.skipped:
            self._set("no_nan_no_skip", "fail", {"skipped_steps": self.skipped[:8], "count": len(self.skipped)})
        else:
            self._set("no_nan_no_skip", "pass", {"iterations": norms.count, "grad_norms_finite": True,
                                                 "skipped_steps": 0, "logged_loss": self.losses.evidence()})

    def checkpoint(self, rank, trainee) -> None:
        """Collective. The latest checkpoint of this run: verified against the kit's layout record
        and Megatron's integrity file, one torch_dist shard file per rank; then the live parameters
        are zeroed and the checkpoint loaded back: they must come back bit-identical (the save
        happened after the last step)."""
        spec, model = rank.spec, trainee.model
        if not getattr(spec, "save_interval", None):
            return
        try:
            root = save_root(rank)
            latest = checkpoint_dir.latest(root)
            if latest is None:
                raise FileNotFoundError(f"no `{checkpoint_dir.TRACKER}` under {root}")
            info = checkpoint_dir.verify(latest, trainee.model_desc.to_dict())
            before = param_checksums(model)
            with torch.no_grad():
                for chunk in model:
                    for p in chunk.parameters():
                        p.zero_()
            # Model only: loading optimizer state into a distributed optimizer that has already
            # stepped fails inside Megatron 0.19 (KeyError 'step' in _set_main_param_and_optimizer_states);
            # a fresh job resuming from it (tests/jobs/test_checkpoint.py) is where the optimizer is checked.
            checkpoint_io.load(latest, model, spec, trainee.model_desc, rank.beat)
            after = param_checksums(model)
            same = _all_gather(before == after)
            files = sorted(p.name for p in Path(latest).iterdir())
            shards = [f for f in files if f.endswith(".distcp")]
            writers = {int(f[2:].split("_")[0]) for f in shards}  # torch_dist names them __<rank>_<n>.distcp
            layout_ok = info["layout"] == spec.layout_record() and writers == set(range(dist.get_world_size()))
            status = "pass" if all(same) and layout_ok and info["iteration"] == spec.iters else "fail"
            evidence = {"path": str(latest), "iteration": info["iteration"], "layout": info["layout"],
                        "layout_matches_job": info["layout"] == spec.layout_record(),
                        "shard_files": f"{len(shards)} .distcp from {len(writers)}/{dist.get_world_size()} ranks",
                        "files": files[:12] + ([f"... {len(files) - 12} more"] if len(files) > 12 else []),
                        "reloaded": f"model weights zeroed, loaded back, bit-identical on {sum(same)}/{len(same)} ranks"}
        except Exception as e:  # the card says what went wrong instead of killing the job
            import traceback
            traceback.print_exc()  # into logs/rank<N>.log
            status, evidence = "fail", f"{type(e).__name__}: {e}"
        self._set("checkpoint", status, evidence)
        self.write()

    def evaluation(self, records: list[dict]) -> None:
        if self.spec.data == "synthetic":
            return
        valid = [r for r in records if r["split"] == "valid"]
        test = [r for r in records if r["split"] == "test"]
        ok = valid and test and all(math.isfinite(r["loss"]) for r in valid + test)
        self._set("validation_test", "pass" if ok else "fail", {
            "validation": {str(r["iteration"]): r["loss"] for r in valid},
            "test": test[-1]["loss"] if test else None,
            "batches_per_pass": self.spec.eval_iters, "global_batch": self.spec.global_batch_size})
        self.write()
