"""Notebook side, pictures and tables: the only package that imports matplotlib or ipywidgets.
table.py (the generic Table), rank_grids.py, curves.py, comm.py, moe.py, schedule.py,
context_parallel.py, memory_bars.py, rank_memory.py, report_card.py, layout_lab.py (widgets).
Conceptual pictures, drawn from a layout's numbers rather than a run: schedule.plot_ideal,
dp_buckets.py, cp_exchange.py, moe_dispatch.py, shards.py.
Each reads a RunDir (helpers/rundir/), a plan (helpers/memory/) or a layout; none starts a
process except the layout lab's run button, which calls helpers.launch."""
