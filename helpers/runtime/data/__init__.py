"""What the workers train on (the decision where it comes from is helpers/job/data_source.py):
  synthetic.py  the deterministic synthetic token source (no files)
  indexed.py    real text -> tokens -> Megatron's indexed dataset, per node, before torch.distributed;
                Megatron's GPTDataset over it
  sft.py        SFTDataset: prompt/response pairs, padded, loss on the response only
  batches.py    one iteration's microbatches for this DP rank: the same global batch in every layout"""
