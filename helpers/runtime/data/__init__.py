"""What the workers train on (the decision where it comes from is helpers/job/data/):
  synthetic.py  the deterministic synthetic token source (no files)
  indexed.py    documents -> tokens -> Megatron's indexed dataset, per node, before
                torch.distributed (a user's indexed dataset as it is); Megatron's GPTDataset over it
  sft.py        SFTDataset: chat examples, padded, loss on the answers only
  batches.py    one iteration's microbatches for this DP rank: the same global batch in every layout"""
