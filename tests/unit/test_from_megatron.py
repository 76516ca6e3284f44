"""A Megatron-LM command line and a Megatron-Bridge recipe read into a JobSpec
(helpers/launch/from_megatron.py): the fields each flag sets, every value the kit does not model
named, Bridge's own Llama 3 8B recipe read in its layout and planned on 8 H100s, and the shrunk
job still a valid layout."""
import json
import math
import subprocess
import sys

import pytest

from helpers.errors import InvalidJob
from helpers.job.layout import Layout
from helpers.job.spec import JobSpec
from helpers.launch import from_megatron
from helpers.launch.shrink import shrink

LM = ("torchrun --nproc-per-node 16 pretrain_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
      "--num-virtual-stages-per-pipeline-rank 2 --context-parallel-size 2 --sequence-parallel "
      "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --num-layers 8 --hidden-size 512 "
      "--ffn-hidden-size 1536 --num-attention-heads 8 --group-query-attention --num-query-groups 2 --swiglu "
      "--normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights "
      "--position-embedding-type rope --max-position-embeddings 1024 --vocab-size 32000 --micro-batch-size 2 "
      "--global-batch-size 64 --seq-length 1024 --train-iters 100 --lr 2e-4 --min-lr 2e-5 --lr-decay-style cosine "
      "--lr-warmup-iters 10 --weight-decay 0.1 --adam-beta1 0.8 --adam-beta2 0.95 --adam-eps 1e-6 --clip-grad 0.5 "
      "--bf16 --hidden-dropout 0 --attention-dropout 0 --seed 7 --no-create-attention-mask-in-dataloader")
LLAMA3_8B = "megatron.bridge.recipes.llama.llama3:llama3_8b_pretrain_config"


def test_megatron_lm_flags_become_jobspec_fields():
    reading = from_megatron.read_megatron_args(LM)
    spec = reading.spec(nproc=16)
    assert (spec.tp, spec.pp, spec.vpp, spec.cp, spec.ep, spec.sp, spec.dist_opt) == (2, 2, 2, 2, 1, True, True)
    assert (spec.dp, spec.micro_batch, spec.global_batch_size, spec.num_microbatches) == (2, 2, 64, 16)
    assert (spec.seq_len, spec.iters, spec.lr, spec.min_lr, spec.lr_decay, spec.lr_warmup_iters) == \
        (1024, 100, 2e-4, 2e-5, "cosine", 10)
    assert (spec.weight_decay, spec.adam_beta1, spec.adam_beta2, spec.adam_eps, spec.clip_grad, spec.seed) == \
        (0.1, 0.8, 0.95, 1e-6, 0.5, 7)
    assert (spec.overlap_grad_reduce, spec.overlap_param_gather, spec.precision) == ("on", "on", "bf16")
    m = spec.model_preset()
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups,
            m.kv_channels, m.vocab_size, m.max_seq_len) == (8, 512, 1536, 8, 2, None, 32000, 1024)
    assert (m.normalization, m.activation, m.add_bias_linear, m.tied_embeddings, m.is_moe) == \
        ("RMSNorm", "swiglu", False, False, False)
    assert reading.message() == ""  # every flag of this command is one the kit models


def test_megatron_lm_moe_flags():
    spec = from_megatron.read_megatron_args(
        "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --num-experts 16 --moe-router-topk 4 "
        "--moe-ffn-hidden-size 128 --moe-shared-expert-intermediate-size 256 --moe-layer-freq ([0]*1+[1]*3) "
        "--expert-model-parallel-size 4 --expert-tensor-parallel-size 1 --moe-token-dispatcher-type alltoall "
        "--position-embedding-type rope --hidden-dropout 0 --attention-dropout 0").spec(nproc=4)
    m = spec.model_preset()
    assert (spec.ep, spec.expert_tp, spec.moe_dispatcher) == (4, 1, "alltoall")
    assert (m.num_experts, m.moe_router_topk, m.moe_ffn_hidden_size, m.first_k_dense, m.num_shared_experts,
            m.moe_shared_expert_intermediate_size, m.ffn_hidden_size) == (16, 4, 128, 1, 1, 256, 1024)


def test_unmodelled_flags_are_named():
    reading = from_megatron.read_megatron_args(
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --rotary-base 500000 --log-interval 7 "
        "--distribute-saved-activations --transformer-impl local --fp16")
    text = reading.message()
    for named in ("--rotary-base=500000", "--log-interval=7", "--distribute-saved-activations=True",
                  "--transformer-impl=local",  # a machine choice, named apart
                  "fp16 -> bf16", "position_embedding_type learned_absolute -> rope", "hidden_dropout 0.1 -> 0.0"):
        assert named in text, (named, text)
    assert reading.spec().precision == "bf16"
    assert "not modelled (changes the model's numbers, not memory or time): --rotary-base=500000" in text
    assert "--rotary-base" not in reading.ignored and reading.numbers == {"--rotary-base": 500000}


def test_grad_reduce_in_bf16_is_read_as_megatron_lm_validates_it():
    """validate_args: --bf16 accumulates and reduces gradients in fp32 unless --grad-reduce-in-bf16;
    an fp32 run's gradients are fp32 whatever the flags."""
    model = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 128 "
    read = from_megatron.read_megatron_args
    assert read(model + "--bf16").spec().grad_reduce_dtype == "fp32"
    bf16 = read(model + "--bf16 --grad-reduce-in-bf16")
    assert bf16.spec().grad_reduce_dtype == "bf16" and "grad-reduce" not in bf16.message()
    assert read(model + "--bf16 --accumulate-allreduce-grads-in-fp32").spec().grad_reduce_dtype == "fp32"
    assert read(model + "--grad-reduce-in-bf16").spec().grad_reduce_dtype == "fp32"  # fp32 run


def test_bf16_gradient_buffers_need_a_bf16_job():
    from helpers.job import rules

    for precision, refused in (("fp32", True), ("bf16", False)):
        spec = JobSpec(device="cpu", precision=precision, grad_reduce_dtype="bf16")
        codes = {v.name for v in rules.check(rules.resolve(spec, rules.CPU_ONLY)).violations}
        assert ("grad_reduce_bf16_needs_bf16" in codes) is refused, codes


def test_flag_megatron_lm_lacks_is_refused():
    with pytest.raises(InvalidJob, match="--no-such-flag"):
        from_megatron.read_megatron_args("--num-layers 2 --no-such-flag 3")


def _sizes_valid(spec: JobSpec) -> None:
    m = spec.model_preset()
    assert m.num_layers % (spec.pp * (spec.vpp or 1)) == 0
    assert m.num_attention_heads % spec.tp == 0 and m.kv_heads % spec.tp == 0
    assert m.num_attention_heads % m.kv_heads == 0
    assert not m.is_moe or m.num_experts % spec.ep == 0
    assert spec.seq_len % (2 * spec.cp) == 0
    assert Layout.of(spec).validate(m) == []


@pytest.mark.parametrize("full", [
    from_megatron.read_megatron_args(LM).spec(nproc=16),
    JobSpec(model="llama3-8b", tp=8, pp=4, sp=True, nproc=64, micro_batch=1, global_batch=64, seq_len=8192),
    JobSpec(model="deepseek-v2-lite", tp=2, sp=True, ep=4, etp=1, pp=3, nproc=24, seq_len=4096, dist_opt=True),
    JobSpec(model="qwen3-30b-a3b", tp=4, sp=True, ep=8, etp=1, cp=2, pp=2, vpp=2, nproc=64, global_batch=64),
], ids=["megatron-lm-tp2-pp2-vpp2-cp2", "llama3-8b-tp8-pp4-sp", "dsv2lite-tp2-ep4-pp3", "qwen3-moe-tp4-ep8-cp2-vpp"])
def test_shrink_keeps_the_layout_valid(full):
    assert Layout.of(full).validate(full.model_preset()) == []
    small, how = shrink(full)
    _sizes_valid(small)
    for axis in ("tp", "pp", "vpp", "cp", "ep", "expert_tp", "sp", "dist_opt"):
        assert getattr(small, axis) == getattr(full, axis), axis
    # the fewest ranks that hold both grids: dense tp x cp x pp and experts etp x ep x pp
    assert small.world_size == math.lcm(full.tp * full.cp * full.pp, full.expert_tp * full.ep * full.pp)
    assert small.device == "cpu" and small.model_preset().hidden_size <= 128
    assert small.model_preset().approx_params() < 5_000_000  # CPU-sized
    assert any(line.startswith("hidden_size ") for line in how), how


def test_shrunk_text_names_each_change():
    _, small, lines = from_megatron.job(
        "--tensor-model-parallel-size 2 --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
        "--group-query-attention --num-query-groups 8 --seq-length 4096 --vocab-size 128256 "
        "--position-embedding-type rope --hidden-dropout 0 --attention-dropout 0", shrunk=True, nproc=8, iters=2)
    assert small.iters == 2 and small.world_size == 2 and small.tp == 2
    assert "hidden_size 4096 -> 64" in lines[-1] and "num_layers 32 -> 4" in lines[-1]
    assert "num_attention_heads 32 -> 4" in lines[-1] and "num_query_groups 8 -> 2" in lines[-1]


@pytest.mark.slow
def test_bridge_llama3_8b_recipe_read_planned_and_shrunk():
    """Bridge's own recipe, called in a fresh interpreter (Bridge's training config imports, with the
    kit's stand-ins), read into its layout and model, planned on 8 x H100-80GB, and shrunk into a job
    every rule accepts on this CPU (nothing starts); the caller's process keeps no patch; a recipe
    whose model's config.json cannot be fetched is one clear error."""
    script = (
        "import json, dataclasses\n"
        "from helpers.launch import from_megatron as fm, runner\n"
        f"LLAMA3_70B = {LLAMA3_8B.replace('8b', '70b')!r}\n"
        f"full, small, lines = fm.job(bridge_recipe={LLAMA3_8B!r}, shrunk=True, nproc=8, iters=2)\n"
        "checked = runner.validate(small)\n"
        # what reading a recipe leaves in the caller's process: nothing it patched
        "import sys, torch\n"
        "from megatron.bridge.models.conversion.auto_bridge import AutoBridge\n"
        "left = {'from_hf_pretrained': AutoBridge.__dict__['from_hf_pretrained'].__func__.__qualname__,\n"
        "        'recipes_package': 'megatron.bridge.recipes' in sys.modules,\n"
        "        'te_modules': sorted(m for m in sys.modules if m.startswith('transformer_engine')),\n"
        "        'tensor_cuda': torch.Tensor.cuda.__qualname__}\n"
        # a recipe whose model's config.json is neither published here nor cached, on a machine without the Hub
        "import huggingface_hub\n"
        "from huggingface_hub.errors import LocalEntryNotFoundError\n"
        "huggingface_hub.try_to_load_from_cache = lambda *a, **k: None\n"
        "def offline(*a, **k): raise LocalEntryNotFoundError('no connection')\n"
        "huggingface_hub.hf_hub_download = offline\n"
        "try: fm.job(bridge_recipe=LLAMA3_70B); refused = None\n"
        "except Exception as e: refused = f'{type(e).__name__}: {e}'\n"
        "print(json.dumps({'full': full.to_dict(), 'dp': full.dp, 'lines': lines, 'plan': fm.plan_text(full, 'h100-80gb'),\n"
        "                  'small': checked.to_dict(), 'small_world': checked.world_size, 'left': left,\n"
        "                  'refused': refused}))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    f, m = got["full"], got["full"]["model_overrides"]
    # Bridge's llama3_8b_pretrain_config (h100/llama3.py): TP1 PP1 CP2, distributed optimizer, overlap on
    assert (f["tp"], f["pp"], f["cp"], f["sp"], f["dist_opt"], got["dp"]) == (1, 1, 2, False, True, 4)
    assert (f["overlap_grad_reduce"], f["overlap_param_gather"], f["precision"]) == ("on", "on", "bf16")
    assert (f["micro_batch"], f["global_batch"], f["seq_len"], f["lr"], f["min_lr"], f["lr_decay"],
            f["lr_warmup_iters"], f["adam_beta2"]) == (1, 512, 8192, 3e-4, 3e-5, "cosine", 2000, 0.95)
    assert f["weight_decay"] == 0.033  # the scheduler's constant decay, which Megatron's scheduler applies
    # Meta-Llama-3-8B's published shape, through Bridge's provider
    assert (m["num_layers"], m["hidden_size"], m["ffn_hidden_size"], m["num_attention_heads"],
            m["num_query_groups"], m["vocab_size"]) == (32, 4096, 14336, 32, 8, 128256)
    assert (m["normalization"], m["activation"], m["tied_embeddings"], m["add_bias_linear"]) == \
        ("RMSNorm", "swiglu", False, False)
    assert "model.rotary_base=500000.0" in got["lines"][1]  # not modelled: named
    assert got["plan"].startswith("memory plan on 8 x NVIDIA H100 SXM 80GB (8 ranks on 1 node(s): dense TP1 CP2 DP4 PP1")
    small = got["small"]
    assert (small["cp"], small["dist_opt"], small["device"], small["iters"], got["small_world"]) == (2, True, "cpu", 2, 2)
    assert "hidden_size 4096 -> 64" in got["lines"][-1] and "num_layers 32 -> 4" in got["lines"][-1]
    # reading the recipe left Bridge's loader, Bridge's recipes package, torch and TE's names as they were
    assert got["left"] == {"from_hf_pretrained": "AutoBridge.from_hf_pretrained", "recipes_package": False,
                           "te_modules": [], "tensor_cuda": "TensorBase.cuda"}, got["left"]
    # a model whose config.json the machine cannot fetch: one error naming it and how to get it, not
    # two minutes of Bridge's retries and a traceback from its loader
    assert got["refused"].startswith("InvalidJob: [bridge_recipe]"), got["refused"]
    assert "meta-llama/Meta-Llama-3-70B" in got["refused"] and "hf download" in got["refused"]


@pytest.mark.slow
def test_cli_plans_a_megatron_lm_command_without_starting_it(tmp_path):
    out = subprocess.run([sys.executable, "-m", "helpers", "--megatron-args", LM + " --log-interval 5",
                          "--nproc", "16", "--plan-on", "h100-80gb", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("read a Megatron-LM command line: model 8 layers, hidden 512")
    assert "ignored (the kit does not model them): --log-interval=5" in lines[1]
    assert lines[-1].startswith("memory plan on 16 x NVIDIA H100 SXM 80GB") and "fits" in lines[-1]
    assert not any(tmp_path.iterdir())  # nothing started


def test_a_schedule_in_samples_is_read_as_iterations():
    """Megatron-LM's update_train_iters: --train-samples // global batch (no ramp-up); the warm-up and
    decay samples are as many global batches; --lr-warmup-fraction is that share of the decay."""
    model = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 128 --global-batch-size 128 "
    reading = from_megatron.read_megatron_args(
        model + "--train-samples 1953125000 --lr-warmup-samples 3906252 --lr-decay-samples 1949218748")
    spec = reading.spec()
    assert (spec.iters, spec.lr_warmup_iters, spec.lr_decay_iters) == (15258789, 30517, 15228271)
    assert "train_samples 1953125000 -> 15258789 iterations of 128 sequences" in reading.message()
    assert "--train-samples" not in reading.ignored and "--lr-warmup-samples" not in reading.ignored
    fraction = from_megatron.read_megatron_args(model + "--train-iters 500 --lr-decay-iters 320 --lr-warmup-fraction 0.01")
    assert (fraction.spec().iters, fraction.spec().lr_warmup_iters, fraction.spec().lr_decay_iters) == (500, 3, 320)
    assert "lr_warmup_fraction 0.01 -> lr_warmup_iters 3" in fraction.message()
    assert from_megatron.read_megatron_args(model + "--train-iters 100 --lr-warmup-fraction 0.29").spec() \
        .lr_warmup_iters == 29  # of the decay over all 100 iterations


def test_sequence_parallel_at_tp1_is_turned_off_as_megatron_lm_does():
    model = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 128 --sequence-parallel "
    reading = from_megatron.read_megatron_args(model)
    assert reading.spec().sp is False
    assert "sequence_parallel True -> False at tensor_model_parallel_size 1" in reading.message()
    tp2 = from_megatron.read_megatron_args(model + "--tensor-model-parallel-size 2")
    assert tp2.spec().sp is True and "sequence_parallel" not in tp2.message()


def test_the_models_numbers_are_named_not_modelled():
    reading = from_megatron.read_megatron_args(
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 128 --rotary-base 1000000 "
        "--init-method-std 0.0134 --apply-layernorm-1p")
    assert reading.numbers == {"--rotary-base": 1000000, "--init-method-std": 0.0134, "--apply-layernorm-1p": True}
    assert not set(reading.numbers) & set(reading.ignored)
    assert "ignored" not in reading.message() and "not modelled" in reading.message()
