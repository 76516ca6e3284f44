"""Megatron-Core in one screen: a GPT trained by Megatron-Core's own calls and nothing else, in the
order of Megatron-LM's examples/run_simple_mcore_train_loop.py. Run it with torchrun:

    torchrun --nproc-per-node 2 megatron_in_one_screen.py --tp 2 --save ckpt              # on GPUs
    torchrun --nproc-per-node 2 megatron_in_one_screen.py --load ckpt --iters 0           # TP=1 x DP=2
    launch.run_script("scripts/megatron_in_one_screen.py", nproc=2, args=["--tp", "2"])  # CPU, the kit

The processes left over by TP x PP are data-parallel (DP) ranks. It writes the losses, the loss of a
held-out batch and rank 0's local weight shapes as JSON (--out); --save and --load are checkpoints."""
import argparse
import json
import os

import torch
import torch.distributed as dist
from megatron.core import dist_checkpointing, parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
from megatron.core.transformer import TransformerConfig

VOCAB, SEQ, MICRO_BATCH, GLOBAL_BATCH = 128, 32, 2, 4
HELD_OUT = -1  # the seed of the held-out batch (iterations use 0, 1, 2, ...)


def initialize(tp: int, pp: int, on_gpu: bool) -> None:
    """1. Process groups: torch.distributed, then Megatron's TP/PP/DP groups over it."""
    if on_gpu:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if on_gpu else "gloo")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    torch.manual_seed(1234)
    model_parallel_cuda_manual_seed(1234)


def model_provider(tp: int, pp: int) -> tuple[TransformerConfig, GPTModel]:
    """2. The model: one TransformerConfig, and a GPTModel built from Megatron's local layer spec."""
    config = TransformerConfig(
        num_layers=2, hidden_size=64, num_attention_heads=4,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, pipeline_dtype=torch.float32,
        use_cpu_initialization=True,  # full weights made once, then split: every layout starts equal
        hidden_dropout=0.0, attention_dropout=0.0,  # so that every layout computes the same thing
    )
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=VOCAB,
                     max_sequence_length=SEQ, pre_process=parallel_state.is_pipeline_first_stage(),
                     post_process=parallel_state.is_pipeline_last_stage())
    return config, model


def batches(seed: int, device):
    """The data step 7 is given: a global batch of GLOBAL_BATCH counting sequences (each token is the previous one
    + 1) from random starts, the same on every rank for a given seed; a pattern the model can learn in a few
    steps. Each DP rank takes its own slice, in microbatches. A real job reads a dataset (Megatron's GPTDataset)."""
    starts = torch.randint(0, VOCAB, (GLOBAL_BATCH, 1), generator=torch.Generator().manual_seed(seed))
    tokens = (starts + torch.arange(SEQ + 1)) % VOCAB
    mine = tokens.chunk(parallel_state.get_data_parallel_world_size())[parallel_state.get_data_parallel_rank()]
    for micro in mine.split(MICRO_BATCH):
        yield {"tokens": micro[:, :-1].to(device), "labels": micro[:, 1:].to(device),
               "position_ids": torch.arange(SEQ, device=device).expand(MICRO_BATCH, SEQ)}


def forward_step(data_iterator, model):
    """What step 7 runs for every microbatch: the forward and the loss function (Megatron's
    schedule calls it and runs the backward itself)."""
    batch = next(data_iterator)
    per_token_loss = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])

    def loss_func(output):
        loss = output.float().mean()
        # A copy for the report: Megatron's schedule scales the returned loss in place (x CP size,
        # / number of microbatches), and a detached tensor shares that storage.
        return loss, {"loss": loss.detach().clone()}
    return per_token_loss, loss_func


def global_loss(per_microbatch) -> float:
    """The global batch's loss: this rank's microbatches averaged, then averaged over the DP ranks."""
    loss = torch.stack([m["loss"] for m in per_microbatch]).mean()
    dist.all_reduce(loss, group=parallel_state.get_data_parallel_group())
    return loss.item() / parallel_state.get_data_parallel_world_size()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--save", help="after training, save the model here (a new or empty folder)")
    parser.add_argument("--load", help="before training, load the model saved here, at any TP/PP/DP")
    parser.add_argument("--out", default="one_screen.json")
    args = parser.parse_args()
    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda") if on_gpu else torch.device("cpu")

    initialize(args.tp, args.pp, on_gpu)
    dp = parallel_state.get_data_parallel_world_size()  # world size / (TP x PP)
    if GLOBAL_BATCH % (MICRO_BATCH * dp):
        raise SystemExit(f"DP={dp} leaves no whole microbatch of {MICRO_BATCH} sequences per DP rank in a global "
                         f"batch of {GLOBAL_BATCH}: use at most {GLOBAL_BATCH // MICRO_BATCH} DP ranks "
                         "(processes / (TP x PP))")
    config, gpt = model_provider(args.tp, args.pp)  # gpt: the GPTModel; model, below: gpt wrapped for DP
    gpt.to(device)
    if args.load:  # 2b. each rank reads its own slices of the saved full tensors: any layout loads any other's
        gpt.load_state_dict(dist_checkpointing.load(gpt.sharded_state_dict(), args.load))
    model = DistributedDataParallel(config, DistributedDataParallelConfig(), gpt)  # 3. DP wrapper
    optimizer = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=args.lr), [model])  # 4. optimizer
    # The schedule calls this after the last microbatch's backward: it all-reduces the gradients across DP
    # and, at PP > 1, the tied embedding's gradient between the first and last stage (norm gradients go
    # over TP only with sequence_parallel or qk_layernorm, neither of which this model uses).
    config.finalize_model_grads_func = finalize_model_grads
    forward_backward = get_forward_backward_func()  # 5. the schedule: no pipelining, 1F1B or interleaved
    step = dict(forward_step_func=forward_step, model=[model], seq_length=SEQ, micro_batch_size=MICRO_BATCH,
                num_microbatches=GLOBAL_BATCH // (MICRO_BATCH * dp))

    losses = []
    for iteration in range(args.iters):  # 6.-8. the loop
        model.zero_grad_buffer()  # 6. zero the gradient buffers
        optimizer.zero_grad()
        per_microbatch = forward_backward(data_iterator=batches(iteration, device), forward_only=False, **step)  # 7.
        optimizer.step()  # 8. clip the gradients (reduced in step 7) and Adam; no communication but the norm
        if parallel_state.is_pipeline_last_stage():  # only the last stage computes the loss
            losses.append(global_loss(per_microbatch))
    with torch.no_grad():  # 9. the held-out batch, forward only
        per_microbatch = forward_backward(data_iterator=batches(HELD_OUT, device), forward_only=True, **step)
    held_out = global_loss(per_microbatch) if parallel_state.is_pipeline_last_stage() else None
    if args.save:  # 10. each rank writes its own slices, placed in the full tensors by name (DP replicas: once)
        os.makedirs(args.save, exist_ok=True)
        dist_checkpointing.save(gpt.sharded_state_dict(), args.save)

    is_writer = parallel_state.is_pipeline_last_stage() and parallel_state.get_tensor_model_parallel_rank() == 0
    if is_writer and parallel_state.get_data_parallel_rank() == 0:
        shapes = {name: list(p.shape) for name, p in gpt.named_parameters()}
        with open(args.out, "w") as f:
            json.dump({"losses": losses, "held_out_loss": held_out, "tp": args.tp, "pp": args.pp,
                       "dp": dp, "world_size": dist.get_world_size(),
                       "shapes_on_this_rank": shapes}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
