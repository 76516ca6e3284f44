"""Activation recompute as a job option (JobSpec.recompute_*, Megatron-Core's TransformerConfig names and
defaults), without processes:

* the rules (helpers/job/rules/recompute.py) refuse by name what Megatron-Core's TransformerConfig and
  Megatron-LM's validate_args refuse, what Megatron would silently ignore, and the modules the kit's
  local backend does not build; the command line carries the four fields;
* Megatron's recompute on the kit's layers (its SDPA attention, Megatron's local one, dense MLPs) in the
  session's Megatron child: the recomputed pieces really run twice, and the loss and every gradient
  equal the run without recompute bit for bit (fp32 on CPU, dropout 0: the forward run again is the same
  arithmetic on the same inputs);
* spec -> the worker's TransformerConfig (megatron_calls.planned) -> Megatron-LM's flags, which
  Megatron-LM's parser and validate_args accept -> `--megatron-args` -> the same spec; the Bridge recipe
  puts the fields on its provider, and Bridge's own config check keeps them;
* the memory planner reads the job's fields: method, layer count and modules each change the plan.
A CPU job with full recompute: tests/jobs/test_recompute_job.py."""
from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
import textwrap

import pytest

from helpers.job import rules
from helpers.job.layout import Layout
from helpers.job.models import preset
from helpers.job.rules.environment import Environment
from helpers.job.spec import JobSpec
from helpers.launch import cli, from_megatron, runner
from helpers.memory import Training, plan_memory

FULL = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
WITH_TE = Environment(cuda_devices=1, te_installed=True)
RECOMPUTE = ("recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules")


def names(spec: JobSpec, env: Environment = rules.CPU_ONLY) -> list[str]:
    return [v.name for v in rules.check(rules.resolve(spec, env), env).violations]


# ---- rules --------------------------------------------------------------------------------------
@pytest.mark.parametrize("fields, refused", [
    (dict(recompute_granularity="full"), {"recompute_full_needs_method", "recompute_full_needs_num_layers"}),
    (dict(recompute_granularity="full", recompute_method="block"), {"recompute_full_needs_num_layers"}),
    (dict(FULL, recompute_num_layers=0), {"recompute_num_layers_positive"}),
    (dict(FULL, recompute_modules=["mlp"]), {"recompute_modules_need_selective"}),
    (dict(recompute_granularity="selective", recompute_method="uniform"), {"recompute_selective_with_method"}),
    (dict(recompute_granularity="selective", recompute_num_layers=1), {"recompute_selective_with_num_layers"}),
    (dict(recompute_method="uniform", recompute_num_layers=1), {"recompute_without_granularity"}),
    (dict(recompute_modules=["core_attn"]), {"recompute_without_granularity"}),
    (dict(recompute_granularity="partial"), {"recompute_granularity_choice"}),
    (dict(recompute_granularity="full", recompute_method="every", recompute_num_layers=1),
     {"recompute_method_choice"}),
    (dict(recompute_granularity="selective", recompute_modules=[]), {"recompute_modules_empty"}),
    (dict(recompute_granularity="selective", recompute_modules="core_attn"), {"recompute_modules_not_a_list"}),
    (dict(recompute_granularity="selective", recompute_modules=["mhc"]), {"recompute_module_unknown"}),
    (dict(recompute_granularity="selective", recompute_modules=["moe_act"], model="tiny-moe"),
     {"recompute_module_not_built"}),
    (dict(recompute_granularity="selective", recompute_modules=["layernorm"]), {"recompute_layernorm_needs_te"}),
    (dict(recompute_granularity="selective", recompute_modules=["gdn_norm_out"]), {"recompute_module_not_in_model"}),
    # parts the model does not have: nothing would be recomputed (mla_up_proj: Megatron raises)
    (dict(recompute_granularity="selective", recompute_modules=["moe", "shared_experts", "mla_up_proj"]),
     {"recompute_module_not_in_model"}),
    (dict(recompute_granularity="selective", recompute_modules=["mlp"], model="tiny-moe"),
     {"recompute_module_not_in_model"}),
    # Megatron counts the layers within each model chunk: 4 layers over pp=2 x vpp=2 are 1 per chunk
    (dict(FULL, recompute_num_layers=2, pp=2, vpp=2), {"recompute_num_layers_past_chunk"}),
    (dict(FULL, recompute_method="block", recompute_num_layers=3, pp=2, first_stage_layers=1, last_stage_layers=3),
     set()),
    (dict(FULL, recompute_method="block", recompute_num_layers=4, pp=2, first_stage_layers=1, last_stage_layers=3),
     {"recompute_num_layers_past_chunk"}),
], ids=lambda x: "-".join(f"{k}={v}" for k, v in x.items()) if isinstance(x, dict) else ",".join(sorted(x)) or "ok")
def test_recompute_rules_refuse_by_name(fields, refused):
    found = [n for n in names(JobSpec(device="cpu", **fields)) if "recompute" in n]
    assert set(found) == refused, found


@pytest.mark.parametrize("fields", [
    FULL, dict(FULL, recompute_method="block", recompute_num_layers=4), dict(FULL, recompute_num_layers=4),
    dict(FULL, recompute_num_layers=2, pp=2), dict(recompute_granularity="selective"),
    dict(recompute_granularity="selective", recompute_modules=["core_attn", "mlp"]),
    dict(recompute_granularity="selective", recompute_modules=["moe", "core_attn"], model="tiny-moe"),
    dict(FULL, model="tiny-moe", attention="megatron_local"),
], ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
def test_what_megatron_and_the_local_backend_run_is_accepted(fields):
    assert names(JobSpec(device="cpu", **fields)) == []


def test_layernorm_recompute_is_refused_only_without_transformer_engine():
    """Megatron-Core 0.19.2's CheckpointWithoutOutput() reads Transformer Engine's FP8 state even for
    fp8=False (its flag is `fp8 is not None`): it runs where TE is installed, on either backend."""
    spec = JobSpec(device="cuda", recompute_granularity="selective", recompute_modules=["layernorm", "core_attn"])
    assert "recompute_layernorm_needs_te" in names(spec, Environment(cuda_devices=1))
    assert not [n for n in names(spec, WITH_TE) if "recompute" in n]


def test_the_command_line_carries_the_recompute_fields(capsys):
    args = cli.parser().parse_args(["--recompute-granularity", "selective", "--recompute-modules", "core_attn",
                                    "mlp"])
    assert cli.given_fields(args) == {"recompute_granularity": "selective", "recompute_modules": ["core_attn", "mlp"]}
    args = cli.parser().parse_args(["--recompute-granularity", "full", "--recompute-method", "block",
                                    "--recompute-num-layers", "2"])
    assert cli.spec_from_args(args).recompute_num_layers == 2
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["--recompute-granularity", "partial"])  # argparse's choices
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["--help"])
    text = capsys.readouterr().out
    for flag in ("--recompute-granularity {full,selective}", "--recompute-method {uniform,block}",
                 "--recompute-num-layers", "--recompute-modules MODULE"):
        assert flag in text, text


def test_the_workers_config_fields_carry_recompute_for_presets_and_imported_models():
    """build.job_fields: the preset's TransformerConfig and the overrides of an imported model's
    Megatron-Bridge provider (helpers/runtime/hf/config.py) both take them."""
    from helpers.runtime import build

    spec = JobSpec(recompute_granularity="selective", recompute_modules=["core_attn", "mlp"])
    fields = build.job_fields(spec, on_cpu=True, bf16=False)
    assert {k: fields[k] for k in RECOMPUTE} == {k: getattr(spec, k) for k in RECOMPUTE}
    assert fields["recompute_modules"] is not spec.recompute_modules  # Megatron may append to its list
    assert {k: build.job_fields(JobSpec(), on_cpu=True, bf16=False)[k] for k in RECOMPUTE} == dict.fromkeys(RECOMPUTE)


# ---- Megatron's recompute on the kit's layers, in the session's Megatron child ---------------------
SCRIPT = """
import json, torch
from helpers.job.spec import JobSpec
from helpers.runtime import build
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

def step(attention, activation, **recompute):
    spec = JobSpec(attention=attention, model_overrides={"activation": activation}, **recompute)
    model = spec.model_preset()
    model_parallel_cuda_manual_seed(0)
    torch.manual_seed(0)
    config = build.transformer_config(model, spec, on_cpu=True, bf16=False)
    gpt = build.model_chunks(config, model, spec)[0]
    calls = {}
    def count(name):
        def hook(module, args, output):
            calls[name] = calls.get(name, 0) + 1
        return hook
    for i, layer in enumerate(gpt.decoder.layers):
        layer.register_forward_hook(count(f"layer{i}"))
        layer.self_attention.core_attention.register_forward_hook(count(f"core{i}"))
        layer.mlp.register_forward_hook(count(f"mlp{i}"))
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, model.vocab_size, (2, 32), generator=g)
    gpt.train()
    loss = gpt(tokens, torch.arange(32).expand(2, 32), None, labels=torch.roll(tokens, -1, 1)).mean()
    loss.backward()  # through Tensor.backward, which torch hands to the CPU layer's function mode
    grads = {n: p.grad for n, p in gpt.named_parameters()}
    return float(loss), grads, calls

out = {}
for attention, activation in (("sdpa", "gelu"), ("megatron_local", "swiglu")):
    loss, grads, calls = step(attention, activation)
    for name, recompute in CASES.items():
        loss2, grads2, calls2 = step(attention, activation, **recompute)
        diff = max(float((grads2[n] - g).abs().max()) for n, g in grads.items())
        out[f"{attention} {name}"] = {"loss": [loss, loss2], "grad_diff": diff, "calls": calls2,
                                      "plain_calls": calls}
print(json.dumps(out))
"""
CASES = {"full uniform 2": dict(FULL, recompute_num_layers=2),
         "full block 1": dict(FULL, recompute_method="block"),
         "selective": dict(recompute_granularity="selective"),
         "selective mlp": dict(recompute_granularity="selective", recompute_modules=["mlp"])}
TWICE = {"full uniform 2": {"layer0", "layer1", "layer2", "layer3", "core0", "core1", "core2", "core3", "mlp0", "mlp1",
                            "mlp2", "mlp3"},
         "full block 1": {"layer0", "core0", "mlp0"},  # the first layer of the chunk only
         "selective": {"core0", "core1", "core2", "core3"},
         "selective mlp": {"mlp0", "mlp1", "mlp2", "mlp3"}}


@pytest.fixture(scope="module")
def recomputed(megatron_cpu):
    script = f"CASES = {CASES!r}\n" + textwrap.dedent(SCRIPT)
    return json.loads(megatron_cpu(script).strip().splitlines()[-1])


@pytest.mark.parametrize("attention", ["sdpa", "megatron_local"])
@pytest.mark.parametrize("case", list(CASES))
def test_recompute_runs_the_pieces_again_and_changes_nothing(recomputed, attention, case):
    """tiny-gpt with the kit's SDPA attention (GeLU) and with Megatron's local attention (SwiGLU),
    which builds its causal mask with a `cuda` literal inside the recomputed forward, in the backward."""
    got = recomputed[f"{attention} {case}"]
    assert got["plain_calls"] and set(got["plain_calls"].values()) == {1}
    assert {k for k, n in got["calls"].items() if n == 2} == TWICE[case], got["calls"]
    assert set(got["calls"].values()) <= {1, 2}
    assert got["loss"][0] == got["loss"][1] and got["grad_diff"] == 0.0, got


ROUTED = """
import json, torch
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
from megatron.core.transformer.moe.moe_logging import get_moe_metrics_tracker
from helpers.job.spec import JobSpec
from helpers.runtime import build
from helpers.runtime.measure.moe_stats import RouterLog

out = {}
for name, recompute in CASES.items():
    get_moe_metrics_tracker().metrics.clear()  # Megatron's per-layer aux-loss entries, sized by the last model
    spec = JobSpec(model="tiny-moe", **recompute)
    model = spec.model_preset()
    model_parallel_cuda_manual_seed(0)
    config = build.transformer_config(model, spec, on_cpu=True, bf16=False)
    gpt = build.model_chunks(config, model, spec)[0]
    log = RouterLog([gpt], enabled=True)
    log.begin(1)
    tokens = torch.randint(0, model.vocab_size, (2, 32), generator=torch.Generator().manual_seed(1))
    gpt.train()
    gpt(tokens, torch.arange(32).expand(2, 32), None, labels=torch.roll(tokens, -1, 1)).mean().backward()
    out[name] = {layer: int(c.sum()) for layer, c in log._counts.items()}
get_moe_metrics_tracker().metrics.clear()
print(json.dumps(out))
"""


def test_the_router_log_counts_each_token_once_when_the_router_is_recomputed(megatron_cpu):
    """moe.jsonl's tokens per expert: a recomputed MoE layer routes every token twice (the no-grad
    forward, then the replay in the backward); the log counts the replay only, as Megatron's router
    records its aux loss."""
    cases = {"none": {}, "full": FULL, "selective moe": dict(recompute_granularity="selective",
                                                             recompute_modules=["moe"])}
    got = json.loads(megatron_cpu(f"CASES = {cases!r}\n" + textwrap.dedent(ROUTED)).strip().splitlines()[-1])
    for name, counts in got.items():
        assert counts == {str(layer): 2 * 32 * 2 for layer in range(1, 5)}, (name, counts)  # tokens x top-2


# ---- Megatron-LM's flags and Bridge's recipe, there and back ------------------------------------------
ROUND_TRIP = {
    "full uniform": dict(FULL, tp=2, pp=2),
    "full block": dict(recompute_granularity="full", recompute_method="block", recompute_num_layers=2, pp=2),
    "selective default": dict(recompute_granularity="selective", tp=2),
    "selective moe": dict(recompute_granularity="selective", recompute_modules=["moe", "core_attn"], model="tiny-moe",
                          ep=2, nproc=2),
    "none": dict(),
}


@pytest.fixture(scope="module")
def records():
    from helpers.runtime.measure import megatron_calls

    out = {}
    for name, fields in ROUND_TRIP.items():
        spec = runner.checked(JobSpec(device="cpu", seq_len=32, iters=2, **fields)).spec
        out[name] = (spec, megatron_calls.planned(spec))
    return out


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_megatron_lm_flags_carry_recompute_and_read_back_to_the_spec(name, records):
    from helpers.rundir import megatron_flags

    spec, calls = records[name]
    assert calls["TransformerConfig"]["fields"].get("recompute_granularity") == spec.recompute_granularity
    flags = megatron_flags.flags(calls)
    made = {f.split(" ", 1)[0] for f in flags if f.startswith("--recompute")}
    want = {f"--{k.replace('_', '-')}" for k in RECOMPUTE if getattr(spec, k) is not None}
    assert made == want, flags
    args = megatron_flags.parse(flags)  # Megatron-LM's parser: the values the spec holds
    assert {k: getattr(args, k) for k in RECOMPUTE} == {k: getattr(spec, k) for k in RECOMPUTE}
    command = " ".join(shlex.quote(w) for f in flags for w in megatron_flags.words(f))
    reading = from_megatron.read_megatron_args(command)
    back = reading.spec(nproc=spec.world_size)
    assert {k: getattr(back, k) for k in RECOMPUTE} == {k: getattr(spec, k) for k in RECOMPUTE}
    assert not any("recompute" in part for part in reading.message().split(";")), reading.message()


@pytest.mark.slow
def test_megatron_lm_accepts_the_recompute_flags(records):
    """parse_args + validate_args as on a Hopper GPU, at each job's world size."""
    from helpers.rundir import megatron_flags, megatron_lm_check

    todo = []
    for spec, calls in records.values():
        argv = [w for f in megatron_flags.flags(calls) for w in megatron_flags.words(f)]
        todo.append((argv + ["--seq-length", "32", "--micro-batch-size", "1", "--train-iters", "2", "--lr", "1e-3",
                             "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "255", "--bf16"],
                     spec.world_size))
    for (spec, _), args in zip(records.values(), megatron_lm_check.check_many(todo)):
        assert not isinstance(args, Exception), args
        assert {k: getattr(args, k) for k in RECOMPUTE} == {k: getattr(spec, k) for k in RECOMPUTE}


def test_megatron_lm_only_spellings_read_as_megatron_acts_on_them():
    base = ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 512 --position-embedding-type rope "
            "--hidden-dropout 0 --attention-dropout 0 --no-create-attention-mask-in-dataloader ")
    reading = from_megatron.read_megatron_args(base + "--recompute-activations")  # validate_args: selective
    assert reading.spec().recompute_granularity == "selective" and reading.message() == ""
    reading = from_megatron.read_megatron_args(base + "--recompute-method uniform --recompute-num-layers 2")
    assert reading.spec().recompute_method is None and reading.spec().recompute_num_layers is None
    assert "recompute_method uniform -> none (without recompute_granularity" in reading.message()
    reading = from_megatron.read_megatron_args(base + "--recompute-granularity selective --recompute-modules "
                                                      "moe_act core_attn")
    assert reading.spec().recompute_modules == ["core_attn"]
    assert "left out moe_act (the kit builds no grouped-GEMM experts)" in reading.message()
    full, small, _ = from_megatron.job(base + "--recompute-granularity full --recompute-method block "
                                              "--recompute-num-layers 4 --pipeline-model-parallel-size 2",
                                       shrunk=True, nproc=2)
    assert (full.recompute_num_layers, small.recompute_num_layers) == (4, 2)  # 2 layers per stage when shrunk


@pytest.mark.slow
def test_the_bridge_recipe_puts_recompute_on_its_provider_and_reads_back(records, tmp_path):
    """The recipe's provider carries the fields; Bridge's config check (runtime_config_update: the
    provider finalized, Megatron-Core's TransformerConfig checks) keeps them, and `--bridge-recipe`
    reads them back into the job."""
    from helpers.rundir import bridge_recipe

    recipes = {}
    for name in ("full uniform", "selective moe", "none"):
        spec, calls = records[name]
        folder = tmp_path / name.replace(" ", "_")
        folder.mkdir()
        recipes[name] = (spec, bridge_recipe.write(folder, calls, spec))
    body, _, _ = bridge_recipe._provider(records["selective moe"][1], records["selective moe"][0])
    assert "recompute_granularity='selective'" in body and "recompute_modules=['moe', 'core_attn']" in body
    assert "recompute" not in recipes["none"][1].read_text()
    spec, calls = records["full uniform"]  # an imported model: the fields set on Bridge's provider from the HF folder
    body, _, _ = bridge_recipe._provider(calls, dataclasses.replace(spec, hf_model="/models/llama"))
    for line in ("provider.recompute_granularity = 'full'", "provider.recompute_method = 'uniform'",
                 "provider.recompute_num_layers = 1"):
        assert line in body, body
    checked = bridge_recipe.check_bridge_recipes([(path, spec.world_size) for spec, path in recipes.values()])
    for (spec, _), cfg in zip(recipes.values(), checked):
        assert not isinstance(cfg, Exception), cfg
        modules = spec.recompute_modules or ["core_attn"]  # finalized: Megatron-Core's default filled in
        assert [cfg[k] for k in RECOMPUTE] == [spec.recompute_granularity, spec.recompute_method,
                                               spec.recompute_num_layers, modules]
    script = ("import json, sys\n"
              "from helpers.launch import from_megatron\n"
              "out = {}\n"
              "for name, folder in json.loads(sys.argv[1]).items():\n"
              "    sys.path.insert(0, folder)\n"
              "    sys.modules.pop('bridge_recipe', None)\n"
              "    spec = from_megatron.read_bridge_recipe('bridge_recipe:config').spec()\n"
              f"    out[name] = [getattr(spec, k) for k in {RECOMPUTE!r}]\n"
              "    sys.path.remove(folder)\n"
              "print(json.dumps(out))\n")
    folders = {name: str(path.parent) for name, (_, path) in recipes.items()}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(folders)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    for name, (spec, _) in recipes.items():
        assert read[name] == [getattr(spec, k) for k in RECOMPUTE], (name, read[name])


# ---- the memory planner ---------------------------------------------------------------------------
def _activations(spec: JobSpec, stage: str = "first") -> int:
    return plan_memory(spec.model_preset(), Layout.of(spec), Training.of(spec)).stage(stage).terms["activations"]


def test_the_plan_of_a_job_follows_its_recompute_fields():
    base = JobSpec(model="llama3-8b", device="cuda", tp=4, sp=True, pp=2, nproc=8, seq_len=4096, micro_batch=1,
                   global_batch=16)
    tr = Training.of(dataclasses.replace(base, recompute_granularity="selective", recompute_modules=["core_attn",
                                                                                                       "mlp"]))
    assert (tr.recompute, tr.recompute_modules) == ("selective", ("core_attn", "mlp"))
    every = dataclasses.replace(base, **FULL)
    assert Training.of(every).recompute == "full"
    # uniform, one layer at a time, is what the planner's "full" always meant (the advisor's)
    assert plan_memory(base.model_preset(), Layout.of(base), Training(recompute="full")).stage("first").terms == \
        plan_memory(base.model_preset(), Layout.of(base), Training.of(every)).stage("first").terms
    acts = {
        "none": _activations(base),
        "selective": _activations(dataclasses.replace(base, recompute_granularity="selective")),
        "selective+mlp": _activations(dataclasses.replace(base, recompute_granularity="selective",
                                                          recompute_modules=["core_attn", "mlp"])),
        "block 8": _activations(dataclasses.replace(base, **dict(FULL, recompute_method="block",
                                                                  recompute_num_layers=8))),
        "block 16": _activations(dataclasses.replace(base, **dict(FULL, recompute_method="block",
                                                                   recompute_num_layers=16))),
        "uniform 1": _activations(every),
        "uniform 4": _activations(dataclasses.replace(base, **dict(FULL, recompute_num_layers=4))),
    }
    assert acts["none"] > acts["selective"] > acts["selective+mlp"] > acts["uniform 1"]
    assert acts["none"] > acts["block 8"] > acts["block 16"] == acts["uniform 1"]  # 16 layers per stage
    assert acts["uniform 4"] < acts["uniform 1"]  # a quarter of the inputs kept...
    workspace = {n: plan_memory(s.model_preset(), Layout.of(s), Training.of(s)).stage("first").terms["workspace"]
                 for n, s in (("uniform 1", every),
                              ("uniform 4", dataclasses.replace(base, **dict(FULL, recompute_num_layers=4))))}
    assert workspace["uniform 4"] > workspace["uniform 1"]  # ...but four layers recomputed at once
    text = from_megatron.plan_text(every, "h100-80gb")
    assert text != from_megatron.plan_text(base, "h100-80gb")


def test_selective_modules_drop_the_pieces_they_recompute():
    moe = preset("qwen3-30b-a3b")
    lay = Layout(tp=2, sp=True, ep=8, etp=1, nproc=16, seq_len=4096)
    plain = plan_memory(moe, lay, Training()).stage("first").terms["activations"]
    for modules in (("moe",), ("layernorm",), ("core_attn", "moe")):
        tr = Training(recompute="selective", recompute_modules=modules)
        assert plan_memory(moe, lay, tr).stage("first").terms["activations"] < plain, modules
