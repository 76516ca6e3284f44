"""CP picture (views/cp_exchange): the chunks come from Megatron's own split, and the point of the
load balancing holds: every rank computes the same number of visible causal score blocks (the
contiguous split does not); the gathered K/V holds every chunk once."""
import matplotlib
import pytest

matplotlib.use("Agg")

from helpers.views import context_parallel, cp_exchange  # noqa: E402


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_visible_blocks_equal_across_ranks(cp):
    assert cp_exchange.chunks_of(cp) == {r: [r, 2 * cp - 1 - r] for r in range(cp)}
    visible = cp_exchange.visible_blocks(cp)
    assert set(visible.values()) == {2 * cp}  # 2CP-1 full blocks + 2 halves on the diagonal, per rank
    assert sum(visible.values()) == (2 * cp) ** 2 / 2  # together: the lower half of the score matrix
    naive = cp_exchange.visible_blocks(cp, balanced=False)
    assert max(naive.values()) > min(naive.values())


@pytest.mark.parametrize("cp", [2, 4])
def test_blocks_agree_with_token_level_causal_work(cp):
    """Chunk blocks scaled to tokens give the same per-rank work as counting query-key pairs."""
    seq = 2 * cp * 8
    work = context_parallel.causal_work(context_parallel.positions(seq, cp))
    assert len(set(work.values())) == 1
    n = 8  # tokens per chunk: a full block has n*n pairs, a diagonal one n*(n+1)/2
    for r, b in cp_exchange.score_blocks(cp).items():
        assert len(b["full"]) * n * n + len(b["diagonal"]) * n * (n + 1) // 2 == work[r]


def test_gathered_kv_holds_every_chunk_once_and_plot_labels_bytes():
    assert sorted(cp_exchange.gathered_order(4)) == list(range(8))
    assert cp_exchange.gathered_order(2) == [0, 3, 1, 2]  # rank order, as the all-gather concatenates
    fig = cp_exchange.plot(2, kv_bytes=8192)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts] + [ax.get_title() for ax in fig.axes]
    assert any("each rank sends 4,096 B" in t for t in texts)
    assert any("r0: 4, r1: 4" in t for t in texts)
    matplotlib.pyplot.close("all")
