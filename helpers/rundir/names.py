"""Every file name of a run directory, once. The run directory is the only contract between the
notebook side (which prepares and reads it) and the workers (which write it); see
docs/architecture.md for what each file holds."""
from __future__ import annotations

SPEC = "spec.json"  # the job as the workers read it
MANIFEST = "manifest.json"  # spec, layout, model, versions, git revision, command, how to repeat
MODEL = "model.json"  # the model as checked (preset or HF description) and the HF folder's record: workers build it
DATA = "data.json"  # the data source as pinned before start (files, sizes, SHA-256): workers read it
METRICS = "metrics.jsonl"  # rank 0: one line per logged iteration (every log_interval-th, and the last)
MEGATRON = "megatron.json"  # what the job asked of Megatron-Core: its calls' arguments, configs, module trees
MEGATRON_LM_SCRIPT = "megatron-lm.sh"  # the same job as Megatron-LM's pretrain_gpt.py command (GPU, Transformer Engine)
BRIDGE_RECIPE = "bridge_recipe.py"  # the same job as a Megatron-Bridge recipe: config() -> ConfigContainer
GROUPS = "groups.json"  # every rank's process groups from parallel_state
RANKS = "ranks.json"  # per rank: host, device, parameter/gradient/optimizer bytes, local shapes
COMM = "comm.jsonl"  # instruments: every torch.distributed call Megatron made, per rank and iteration
TIMELINE = "timeline.jsonl"  # forward/backward per microbatch and chunk, p2p waits
MOE = "moe.jsonl"  # tokens per expert, aux loss (MoE models)
DEVICE_MEMORY = "device_memory.json"  # every rank's peak allocated/reserved bytes (GPU)
REPORT = "report.json"  # the smoke-test report card (eight checks)
VALIDATION = "validation.jsonl"  # validation/test passes (real data)
EVAL = "eval.json"  # eval_only: each checkpoint's loss in this layout vs the saving job's
HF_PARITY = "hf_parity.json"  # hf_parity_layouts: per layout, logits vs transformers and the export check
LINEAR_TENSORS = "linear_tensors.pt"  # capture_tensors_at=N: layer 0's GEMM operands at iteration N (rank 0)
RESUMED = "resumed.json"  # the checkpoint a resumed job started from
TENSORBOARD_EVENTS = "events.out.tfevents.*"  # rank 0: metrics.jsonl's numbers and the validation/test
# losses for TensorBoard (`tensorboard --logdir runs`: one run per run directory)
CHECKPOINTS = "checkpoints"  # default save_dir
MEGATRON_LM_CHECKPOINTS = "megatron-lm-checkpoints"  # where megatron-lm.sh saves: its own, never the kit's
BRIDGE_CHECKPOINTS = "bridge-checkpoints"  # where bridge_recipe.py saves: its own, never the kit's
LOGS = "logs"
TORCHRUN_LOG = f"{LOGS}/torchrun.log"  # the agent's own output (all agents' in a multi-node simulation)
TORCHELASTIC_LOGS = f"{LOGS}/torchelastic"  # torch's agent: a folder per attempt and rank (its error files);
# without --log-dir it makes one under the system's temp folder per job and never removes it


def rank_log(rank: int) -> str:
    return f"{LOGS}/rank{rank}.log"


def rank_error(rank: int) -> str:
    return f"{LOGS}/rank{rank}.error.json"


def heartbeat(rank: int) -> str:
    return f"{LOGS}/rank{rank}.heartbeat.json"


def node_torchrun_log(node: int) -> str:
    return f"{LOGS}/torchrun.node{node}.log"
