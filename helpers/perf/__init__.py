"""Notebook side, prediction: the performance model's pieces, which the roofline lesson
(helpers/views/roofline.py), the measured-traffic tables (helpers/views/comm.py), the memory
planner's smallest-fit search (helpers/memory/smallest_fit.py) and the advisor's time model
(helpers/advisor/time/) are built from. Imports only helpers/job/.

  gpus.py         the GPU profiles: datasheet numbers, with their sources
  rates.py        what a GPU achieves: the H200's measured rates, carried to the others
  links.py        the link a group's traffic takes (NVLink, PCIe, the network); the named links
  placement.py    where a layout's groups sit on nodes, from Megatron's RankGenerator
  collectives.py  one collective: the bytes each rank sends, and its time over a link
  gemm.py         one GEMM: its FLOPs and bytes, and its time on a GPU
  layer_gemms.py  the GEMMs of one layer on one rank, split as Megatron-Core splits them
  calibration.py  the constants the time model assumes, and the one it fits
  layouts.py      every layout of a model on N GPUs, each with the rules that refuse it
  roofline.py     a roofline model of one iteration on one rank (the lessons')

A model's FLOP count is helpers/job/flops.py's (the worker writes it into its checkpoints)."""
