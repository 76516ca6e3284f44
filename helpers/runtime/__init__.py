"""Inside torchrun only: the Megatron-Core worker. train.py (the entry point and the loop),
setup.py (process groups), build.py (config, model chunks, DDP, optimizer), step.py (forward step,
loss, schedule call), evaluation.py (fixed-batch loss, validation/test), checkpoint/ (save, load,
resume), measure/ (communication, timeline, MoE, memory), report.py (the smoke-test card),
preflight.py (multi-node file checks), data.py and synthetic.py (batches), modules.py (the kit's
norm and CP attention), mamba/ (Mamba-2 hybrids without mamba_ssm), cpu_compat.py (Megatron-Core on
CPU), faults.py (injected failures), gather.py (facts to rank 0), te_standin.py and
bridge_import.py (Megatron-Bridge without TE, only the job's architecture). Imports job/, rundir/
and errors only from the kit (the heavy imports go through job/import_phase.py)."""
