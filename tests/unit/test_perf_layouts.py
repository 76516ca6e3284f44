"""The one layout enumeration (helpers/perf/layouts.py): the advisor searches all of it, the memory
planner's smallest-fit search a narrower Space of it, in the same order. No processes."""
from helpers.job.models import preset
from helpers.memory import smallest_fit
from helpers.perf.layouts import Space, layouts

MOE = preset("tiny-moe")  # 4 heads, 2 KV groups, 8 experts, 4 layers


def sizes(lay):
    return (lay.tp, lay.cp, lay.pp, lay.vpp, lay.ep, lay.etp, lay.sp, lay.first_stage_layers, lay.last_stage_layers)


def test_each_layout_comes_with_the_rules_that_refuse_it():
    found = list(layouts(MOE, 16, 8, seq_len=256, global_batch=32, max_micro_batch=2))
    assert all(refused == tuple(sorted({v.name for v in lay.validate(MOE)})) for lay, refused in found)
    assert any(refused for _, refused in found) and any(not refused for _, refused in found)
    assert {lay.micro_batch for lay, _ in found} == {1, 2}
    assert any(lay.tp == 16 for lay, _ in found)  # wider than a node: kept, for the time model to rank


def test_the_smallest_fit_search_is_a_narrower_space_in_the_same_order():
    whole = [sizes(lay) for lay, refused in layouts(MOE, 16, 8, seq_len=256, micro_batch=1) if not refused]
    narrow = [sizes(lay) for lay in smallest_fit.layouts(MOE, 16, 8, seq_len=256, micro_batch=1)]
    assert narrow and len(narrow) < len(whole)
    assert [s for s in whole if s in narrow] == narrow
    assert all(tp in (1, 2, 4, 8) and cp == 1 and vpp is None and etp == 1 and sp == (tp > 1)
               for tp, cp, pp, vpp, ep, etp, sp, *_ in narrow)


def test_a_space_without_tp_beyond_the_node_keeps_tp_to_the_nodes_divisors():
    space = Space(tp_beyond_node=False)
    tps = {lay.tp for lay, _ in layouts(preset("tiny-gpt"), 24, 6, seq_len=256, micro_batch=1, space=space)}
    assert tps == {1, 2, 3, 6}
