"""What the kit records (and, for the failure lesson, injects) around Megatron's loop; the loop
sees one object, observer.py's Observer:
  observer.py       the Observer: begin/loss/end of an iteration, finish
  report_card.py    the smoke-test report card (report.json)
  instruments.py    comm log and timeline together; comm_log.py (every torch.distributed call
                    Megatron makes), timeline.py (forward/backward per microbatch and chunk),
                    clock.py (their stamps: CUDA events on GPU, settled once per iteration)
  moe_stats.py      tokens per expert, aux loss       memory_stats.py   static bytes, device peaks
  gather.py         collectives to rank 0 (groups.json, host facts)
  torch_profile.py  JobSpec.torch_profile (+ gpu_idle.py)  linear_tensors.py JobSpec.capture_tensors_at
  faults.py         JobSpec.faults: failures injected on purpose, through hooks
JobSpec.instruments turns comm/timeline/router recording on or off (auto: on on cpu, off on cuda)."""
