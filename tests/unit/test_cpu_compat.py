"""The CPU compatibility layer, unit by unit. It patches torch globally and for good, so never in
the pytest process: the checks of the active layer run in the session's Megatron child
(tests/unit/conftest.py: megatron_cpu, where it is active as in a CPU worker), the checks of what
happens before it is activated each in a fresh interpreter."""
import subprocess
import sys
import textwrap


def _run(megatron_cpu, code: str) -> str:
    return megatron_cpu("import torch\n" + textwrap.dedent(code)).strip()


def test_cuda_device_literals_land_on_cpu(megatron_cpu):
    assert _run(megatron_cpu, """
        print(torch.zeros(2, device="cuda").device, torch.tensor([1.0], device="cuda:0").device,
              torch.empty(3, device=torch.cuda.current_device()).device)
    """) == "cpu cpu cpu"


def test_dot_cuda_and_pinned_memory_are_no_ops(megatron_cpu):
    assert _run(megatron_cpu, """
        x = torch.ones(2)
        y = torch.tensor([0, 1], device="cpu", pin_memory=True).cuda(non_blocking=True)
        print(x.cuda() is x, x.pin_memory() is x, y.tolist())
    """) == "True True [0, 1]"


def test_type_strings_accept_cpu_tensors(megatron_cpu):
    assert _run(megatron_cpu, """
        print(torch.ones(1).type(), torch.ones(1, dtype=torch.bfloat16).type(),
              torch.ones(1).type(torch.float64).dtype)
    """) == "torch.cuda.FloatTensor torch.cuda.BFloat16Tensor torch.float64"


def test_streams_and_events_are_harmless(megatron_cpu):
    assert _run(megatron_cpu, """
        s = torch.cuda.Stream(); e = torch.cuda.Event()
        s.wait_stream(torch.cuda.current_stream()); e.record(); torch.cuda.synchronize()
        with torch.cuda.stream(s):
            y = torch.ones(1) + 1
        print(float(y))
    """) == "2.0"


def test_rng_tracker_forks_the_cpu_generator_and_restores_it(megatron_cpu):
    out = _run(megatron_cpu, """
        from megatron.core.tensor_parallel.random import get_cuda_rng_tracker
        tracker = get_cuda_rng_tracker()
        tracker.reset()  # the child seeded it for every script; this check adds its own seed
        tracker.add("model-parallel-rng", 1234)
        torch.manual_seed(1)
        before = torch.get_rng_state().clone()
        with tracker.fork():
            a = torch.rand(3)
        after = torch.get_rng_state()
        with tracker.fork():
            b = torch.rand(3)
        torch.manual_seed(1234); expected = torch.rand(6)
        print(bool(torch.equal(before, after)), bool(torch.equal(torch.cat([a, b]), expected)))
    """)
    assert out == "True True"


def test_cuda_literals_in_a_recomputed_forward_land_on_cpu(megatron_cpu):
    """Activation recompute runs forward code inside the backward (Megatron's checkpoint); torch runs
    an overridable backward call (`loss.backward()`, `torch.autograd.backward`) with the function
    mode popped, so the layer puts it back on for the autograd engine."""
    assert _run(megatron_cpu, """
        from megatron.core import tensor_parallel
        def forward(x):
            return x * torch.ones(3, device="cuda")  # as Megatron's default causal mask is made
        x = torch.ones(3, requires_grad=True)
        tensor_parallel.checkpoint(forward, False, x).sum().backward()
        y = torch.ones(3, requires_grad=True)
        torch.autograd.backward(tensor_parallel.checkpoint(forward, False, y).sum())
        print(x.grad.tolist(), y.grad.tolist())
    """) == "[1.0, 1.0, 1.0] [1.0, 1.0, 1.0]"


def test_alltoall_split_sizes_become_numpy(megatron_cpu):
    assert _run(megatron_cpu, """
        from megatron.core.transformer.moe import token_dispatcher
        t = torch.tensor([1, 2, 3])
        print(type(token_dispatcher.maybe_move_tensor_to_cpu(t, as_numpy=True)).__name__,
              token_dispatcher.maybe_move_tensor_to_cpu(t) is t)
    """) == "ndarray True"


def test_not_active_unless_activated():
    out = subprocess.run([sys.executable, "-c", "import megatron.core, torch\n"
                          "from helpers.runtime.compat import cpu as cpu_compat\n"
                          "print(torch.cuda.manual_seed is torch.manual_seed, torch.Tensor.type(torch.ones(1)))"],
                         capture_output=True, text=True, env={"PYTHONWARNINGS": "ignore", "PATH": ""})
    assert out.stdout.split() == ["False", "torch.FloatTensor"]


def test_megatron_imported_eagerly_skips_torch_compile():
    """On CPU the worker imports megatron.core with its JIT fuser as a no-op: torch._dynamo and
    torch._inductor are never loaded (about 2 s of every process's start), torch.compile itself is
    restored afterwards, and Megatron's fused helpers still compute the same values."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys, torch
        real = torch.compile
        from helpers.runtime.compat import cpu as cpu_compat
        cpu_compat.import_megatron_eagerly()
        from megatron.core import jit
        from megatron.core.fusions.fused_bias_gelu import bias_gelu
        x, b = torch.randn(4, 8), torch.randn(8)
        eager = x + b
        eager = eager * 0.5 * (1.0 + torch.tanh(0.79788456 * eager * (1 + 0.044715 * eager * eager)))
        print("torch._dynamo" in sys.modules, "torch._inductor" in sys.modules, torch.compile is real,
              jit.jit_fuser(len) is len, torch.allclose(bias_gelu(b, x), eager))
    """)], capture_output=True, text=True, env={"PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": "", "PATH": ""})
    assert out.stdout.split() == ["False", "False", "True", "True", "True"], out.stderr[-2000:]
