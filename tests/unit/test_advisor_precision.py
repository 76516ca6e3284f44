"""FP8 in the advisor and the rack-scale GPU profiles: with --precision fp8 the transformer layers'
linears run at the GPU's FP8 peak (the same achieved fraction) while the output layer, router and
scan stay 16-bit; the command line plans and times FP8 and says so in its JSON; B300, GB200 and
GB300 load and list with their sources, and an NVL72 rack's 72-GPU NVLink domain is the default
GPUs per node. No processes."""
import json

import pytest

from helpers.advisor import advise, cli, gpus
from helpers.advisor.execution import MEGATRON_CORE, Execution
from helpers.advisor.time import elementwise, layer, step
from helpers.job import models
from helpers.job.layout import Layout
from helpers.job.models import preset
from helpers.memory.static import layer_kind
from helpers.memory.training import Training
from helpers.perf import gemm, layer_gemms, links
from helpers.perf.gemm import Gemm
from helpers.perf.rates import rates

H100 = gpus.PROFILES["h100-80gb"]
FP8 = MEGATRON_CORE.with_(precision="fp8")
NEW = ("b300", "gb200", "gb300")


def run_cli(capsys, *args) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def layer_time(model, lay, execution):
    link = {axis: links.of(lay, axis, 8, H100) for axis in ("tp", "etp", "cp", "ep")}
    return layer.of_kind(model, lay, "dense", H100, link, execution, "none")


def test_a_large_dense_layers_gemms_take_the_fp8_peak():
    assert (H100.peak_bf16_tflops, H100.peak_fp8_tflops) == (989.0, 1979.0)
    lay = Layout(nproc=1, seq_len=8192, micro_batch=1)
    bf16, fp8 = layer_time(preset("llama3-70b"), lay, MEGATRON_CORE), layer_time(preset("llama3-70b"), lay, FP8)
    # every GEMM of the layer is large and compute-bound: the time scales with the peaks alone
    ratio = H100.peak_bf16_tflops / H100.peak_fp8_tflops
    assert fp8.forward["gemm"] == pytest.approx(ratio * bf16.forward["gemm"], rel=1e-9)
    assert fp8.backward["gemm"] == pytest.approx(ratio * bf16.backward["gemm"], rel=1e-9)
    # the attention core does not change; the memory-bound kernels gain the quantisation casts: each
    # linear's input (forward) and output gradient (backward), 4 bytes per value (elementwise.FP8_CAST_BYTES)
    assert fp8.forward["attention"] == bf16.forward["attention"]
    assert fp8.backward["attention"] == bf16.backward["attention"]
    casts = elementwise.fp8_casts(preset("llama3-70b"), lay, H100, "dense")
    h, f, qkv = 8192, 28672, (64 + 2 * 8) * 128
    rate = rates(H100).elementwise_gb_per_s * 1e9
    assert casts[0] == pytest.approx(8192 * (h + h + h + f) * 4 / rate)  # inputs of qkv, proj, fc1, fc2
    assert casts[1] == pytest.approx(8192 * (qkv + h + 2 * f + h) * 4 / rate)  # their output gradients
    assert fp8.forward["elementwise"] == pytest.approx(bf16.forward["elementwise"] + casts[0])
    assert fp8.backward["elementwise"] == pytest.approx(bf16.backward["elementwise"] + casts[1])


def test_fp8_operands_are_one_byte_and_the_result_stays_16_bit():
    g = Gemm("mlp.fc1", 1000, 64, 32)
    assert g.bytes_in("fp8") == 1000 * 64 + 64 * 32 + 2 * 1000 * 32
    assert g.bytes_in("bf16") == g.bytes
    assert Gemm("router", 1000, 64, 32).bytes_in("fp8") == Gemm("router", 1000, 64, 32).bytes


def test_the_output_layer_router_and_scan_stay_16_bit():
    model, lay = preset("llama3-8b"), Layout(nproc=8, tp=1, seq_len=4096, micro_batch=1, global_batch=8)
    out = layer_gemms.output_layer(model, lay)
    assert not out.fp8_linear
    assert gemm.seconds(out, H100, "fp8") == gemm.seconds(out, H100, "bf16")
    training = Training(precision="fp8", dist_opt=True)
    bf16, fp8 = (step.predict(model, lay, training, H100, 8, e) for e in (MEGATRON_CORE, FP8))
    assert fp8.terms["output_layer"] == bf16.terms["output_layer"]
    assert fp8.terms["gemm"] < 0.6 * bf16.terms["gemm"]
    for name in ("router", "ssd.cb", "ssd.intra", "scores", "values", "output_layer"):
        g = Gemm(name, 4096, 4096, 4096)
        assert not g.fp8_linear and all(not b.fp8_linear for b in g.backward())
    for name in ("qkv", "proj", "experts.fc1", "shared_experts.fc2", "kv_up", "in_proj", "out_proj"):
        assert Gemm(name, 8, 8, 8).fp8_linear and all(b.fp8_linear for b in Gemm(name, 8, 8, 8).backward())


@pytest.mark.parametrize("name", models.names())
def test_every_gemm_the_time_model_builds_is_classified(name):
    """A GEMM added to helpers/perf/layer_gemms.py must be named in gemm.py's FP8 or 16-bit lists."""
    model = preset(name)
    lay = Layout(nproc=1, seq_len=min(4096, model.max_seq_len), micro_batch=1)
    built = [g for kind in {layer_kind(model, i) for i in range(model.num_layers)}
             for g in layer_gemms.of_kind(model, lay, kind)] + [layer_gemms.output_layer(model, lay)]
    for g in built:
        bf16 = g.name in gemm.BF16_GEMMS or g.name.startswith(gemm.BF16_PREFIXES)
        assert g.fp8_linear != bf16, g.name


def test_a_gpu_without_fp8_refuses_it_and_precision_is_checked():
    with pytest.raises(ValueError, match="no FP8 tensor cores"):
        advise(preset("tiny-gpt"), gpus=2, gpu="a100-80gb", seq_len=256, precision="fp8")
    with pytest.raises(ValueError, match="precision must be"):
        Execution("x", precision="int8")
    with pytest.raises(ValueError, match="no fp4"):
        advise(preset("tiny-gpt"), gpus=2, gpu="b200", seq_len=256, precision="fp4")
    with pytest.raises(ValueError, match="no FP4 tensor cores"):
        H100.peak_tflops("fp4")


def test_fp8_on_the_command_line_plans_times_and_says_so(capsys):
    best = {}
    for precision in ("bf16", "fp8"):
        rc, out, _ = run_cli(capsys, "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--precision",
                             precision, "--json")
        assert rc == 0
        rows = json.loads(out)
        assert rows and all(r["precision"] == precision for r in rows)
        best[precision] = next(r for r in rows if r["fits"])
    assert best["fp8"]["tokens_per_s_per_gpu"] > 1.2 * best["bf16"]["tokens_per_s_per_gpu"]
    assert best["fp8"]["terms_s"]["gemm"] < best["bf16"]["terms_s"]["gemm"]
    rc, out, _ = run_cli(capsys, "--model", "tiny-gpt", "--gpus", "2", "--gpu", "h100-80gb", "--seq-len", "256",
                         "--global-batch", "4", "--max-micro-batch", "1", "--precision", "fp8")
    assert rc == 0 and "FP8 GEMMs" in out


def test_fp8_plans_memory_with_transformer_engines_fp8():
    advice = advise(preset("llama3-8b"), gpus=8, gpu="h100-80gb", seq_len=4096, global_batch=16,
                    max_micro_batch=1, precision="fp8")
    assert advice.execution.precision == "fp8"
    assert all(r.training.precision == "fp8" and r.layout.backend == "te" for r in advice.rows)


def test_the_new_profiles_load_and_list_with_sources(capsys):
    for key in NEW:
        g = gpus.PROFILES[key]
        assert g.peak_fp8_tflops == 2 * g.peak_bf16_tflops and g.peak_fp4_tflops > g.peak_fp8_tflops
        assert "datasheet" in g.source and g.memory_gib > 180 and g.intra_node_gb_per_s == 900.0
    assert [gpus.PROFILES[k].nvlink_domain for k in NEW] == [8, 72, 72]
    assert all(g.nvlink_domain == 8 for k, g in gpus.PROFILES.items() if k not in ("gb200", "gb300"))
    assert gpus.PROFILES["a100-80gb"].peak_fp8_tflops is None
    rc, out, _ = run_cli(capsys, "--list-gpus")
    assert rc == 0
    for key in NEW:
        line = next(x for x in out.splitlines() if x.startswith(f"{key}: "))
        assert "FP8" in line and "FP4" in line and f"NVLink domain of {gpus.PROFILES[key].nvlink_domain}" in line
    rc, out, _ = run_cli(capsys, "--list-gpus", "--json")
    listed = json.loads(out)
    assert all(listed[k]["source"] and listed[k]["peak_fp8_tflops"] and listed[k]["nvlink_domain"] for k in NEW)


def test_an_nvl72_rack_is_one_node_for_collectives_unless_told_otherwise(capsys):
    model = preset("tiny-gpt")
    rack = advise(model, gpus=16, gpu="gb200", seq_len=256, global_batch=16, max_micro_batch=1)
    board = advise(model, gpus=16, gpu="b200", seq_len=256, global_batch=16, max_micro_batch=1)
    assert (rack.gpus_per_node, board.gpus_per_node) == (16, 8)
    assert all(r.layout.gpus_per_node == 16 for r in rack.rows)
    told = advise(model, gpus=16, gpu="gb200", gpus_per_node=4, seq_len=256, global_batch=16, max_micro_batch=1)
    assert told.gpus_per_node == 4
    # DP 16 inside the rack's NVLink, across two boards' network
    dp16 = [r for r in rack.rows if r.layout.dp == 16][0]
    assert links.of(dp16.layout, "dp", rack.gpus_per_node, rack.gpu).inter_node is False
    assert links.of(dp16.layout, "dp", board.gpus_per_node, board.gpu).inter_node is True
    rc, _, err = run_cli(capsys, "--model", "tiny-gpt", "--gpus", "128", "--gpu", "gb300")
    assert rc == 2 and "not whole nodes of 72" in err and "--gpus-per-node" in err
    rc, out, _ = run_cli(capsys, "--model", "tiny-gpt", "--gpus", "128", "--gpu", "gb300", "--gpus-per-node", "64",
                         "--seq-len", "256", "--global-batch", "128", "--max-micro-batch", "1")
    assert rc == 0 and "(64 per node)" in out


def test_a_users_profile_may_give_fp8_and_its_nvlink_domain(tmp_path):
    path = tmp_path / "mine.json"
    base = {k: v for k, v in gpus.PROFILES["h100-80gb"].to_dict().items() if k in gpus.REQUIRED}
    path.write_text(json.dumps(base))
    plain = gpus.load(path)
    assert (plain.peak_fp8_tflops, plain.nvlink_domain) == (None, 8)
    path.write_text(json.dumps({**base, "peak_fp8_tflops": 1979.0, "nvlink_domain": 16}))
    assert (gpus.load(path).peak_fp8_tflops, gpus.load(path).nvlink_domain) == (1979.0, 16)
    path.write_text(json.dumps({**base, "nvlink_domain": 2.5}))
    with pytest.raises(ValueError, match="nvlink_domain must be a whole number"):
        gpus.load(path)


def test_nvfp4_gemms_take_the_datasheet_fp4_peak_and_half_byte_operands():
    """precision fp4 (Transformer Engine's NVFP4): the FP8 linears at the GPU's dense FP4 peak (its
    datasheet), the same achieved fraction, half-byte operands; the rest stays 16-bit."""
    b200 = gpus.PROFILES["b200"]
    assert b200.peak_tflops("fp4") == 9000.0 == 2 * b200.peak_tflops("fp8")
    g = Gemm("mlp.fc1", 8192, 8192, 28672)
    assert g.bytes_in("fp4") == 0.5 * (8192 * 8192 + 8192 * 28672) + 2 * 8192 * 28672
    r = rates(b200)
    rate = 9000e12 * r.gemm_fraction * gemm.size_fraction(g.flops * gemm.MEASURED_PEAK_TFLOPS / 9000.0)
    assert gemm.seconds(g, b200, "fp4") == pytest.approx(g.flops / rate)
    router = Gemm("router", 8192, 8192, 128)
    assert gemm.seconds(router, b200, "fp4") == gemm.seconds(router, b200, "bf16")
