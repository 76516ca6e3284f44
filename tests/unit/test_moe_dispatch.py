"""MoE dispatch picture (views/moe_dispatch): the all-to-all send matrix of a routing. Row sums are
each source rank's tokens x top-k (dropless: every copy is sent somewhere, local ones included);
column sums are the copies each EP rank's experts receive; the combine is the transpose."""
import matplotlib
import pytest

matplotlib.use("Agg")

from helpers.views import moe_dispatch  # noqa: E402


@pytest.mark.parametrize("ep,tokens,experts,topk", [(2, 6, 16, 8), (4, 8, 16, 2), (4, 5, 8, 1), (8, 3, 64, 6)])
def test_send_matrix_sums(ep, tokens, experts, topk):
    routing = moe_dispatch.random_routing(ep, tokens, experts, topk, seed=3)
    assert all(len(set(t)) == topk for toks in routing.values() for t in toks)  # k distinct experts
    m = moe_dispatch.send_matrix(moe_dispatch.per_expert(routing, experts), ep)
    assert [sum(row) for row in m] == [tokens * topk] * ep
    per = experts // ep
    received = [sum(1 for toks in routing.values() for t in toks for e in t if d * per <= e < (d + 1) * per)
                for d in range(ep)]
    assert [sum(row[d] for row in m) for d in range(ep)] == received


def test_routing_passed_in_and_the_picture():
    routing = {0: [(0, 3), (2, 3)], 1: [(0, 1), (0, 1)]}  # EP=2, 4 experts: rank 0 holds 0-1, rank 1 2-3
    m = moe_dispatch.send_matrix(moe_dispatch.per_expert(routing, 4), 2)
    assert m == [[1, 3], [4, 0]]
    fig = moe_dispatch.plot(routing, num_experts=4)
    dispatch, combine = fig.axes[1], fig.axes[2]
    assert [t.get_text() for t in dispatch.texts][:2] == ["1", "3"]
    assert "Σ 4" in [t.get_text() for t in dispatch.texts]
    assert [t.get_text() for t in combine.texts][:2] == ["1", "4"]  # combine: the transpose
    matplotlib.pyplot.close("all")
