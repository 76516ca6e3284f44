"""Corpora written as Megatron indexed datasets and blended by weight (helpers/runtime/data/blend.py),
through Megatron-Core's own IndexedDatasetBuilder, get_blend_from_list and
BlendedMegatronDatasetBuilder: every document ends with the end-of-document token and nowhere else,
a `--data-path` value reads as Megatron-LM reads it (or is refused with what is wrong), and the blend
draws each corpus within one sample of its weight."""
import pytest
from megatron.core.datasets.indexed_dataset import IndexedDataset

from helpers.errors import InvalidJob
from helpers.job.data.tokenizers import ByteTokenizer
from helpers.runtime.data import blend

TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    a = [f"Article {i} of corpus A. " * (40 + i) for i in range(30)]
    b = [f"Corpus B, piece {i}: " * (25 + 2 * i) for i in range(30)]
    return root, blend.write_documents(root / "a", a, TOK), blend.write_documents(root / "b", b, TOK), a


def test_each_document_ends_with_eod_and_holds_no_other(corpora):
    root, written, _, texts = corpora
    ds = IndexedDataset(str(root / "a"))
    assert len(ds) == written["documents"] == 30 and ds.document_indices.size == 31
    assert int(ds.sequence_lengths.sum()) == written["tokens"] == sum(len(t.encode()) + 1 for t in texts)
    for i in range(len(ds)):
        assert int(ds[i][-1]) == TOK.eod and not (ds[i][:-1] == TOK.eod).any()
        assert TOK.decode(ds[i][:-1]) == texts[i]


def test_a_data_path_reads_as_megatron_lm_reads_it(corpora):
    root = corpora[0]
    assert blend.from_data_path("0.7 a 0.3 b", root) == ([str(root / "a"), str(root / "b")], [0.7, 0.3])
    assert blend.from_data_path("--data-path 70 a 30 b", root)[1] == [70.0, 30.0]
    assert blend.from_data_path(f"1 {root / 'a'}", None) == ([str(root / "a")], [1.0])


@pytest.mark.parametrize("value, says", [
    ("a b", "no weights"), ("0.7 a 0.3", "come in pairs"), ("0.7 a 0.3 c", "no indexed dataset at c"),
    ("0 a 1 b", "must be above 0"), ("", "takes a string"), (None, "takes a string"),
    ("0.7 a.bin 0.3 b.bin", "without the suffix"),
])
def test_a_wrong_data_path_is_refused_with_what_is_wrong(corpora, value, says):
    with pytest.raises(InvalidJob, match=says):
        blend.from_data_path(value, corpora[0])


@pytest.mark.parametrize("weights, samples", [([0.7, 0.3], 1000), ([70, 30], 1000), ([0.2, 0.8], 333), ([1, 1], 50)])
def test_a_blend_draws_each_corpus_within_one_sample_of_its_weight(corpora, tmp_path, weights, samples):
    root = corpora[0]
    built = blend.build([str(root / "a"), str(root / "b")], weights, samples, 64, TOK, tmp_path)
    assert type(built).__name__ == "BlendedDataset" and len(built) >= samples
    want = [w / sum(weights) for w in weights]
    got = blend.shares(built)
    assert all(abs(g - w) <= 1 / len(built) for g, w in zip(got, want)), (got, want)
    assert abs(sum(got) - 1) < 1e-12


def test_one_prefix_without_weights_is_a_plain_gpt_dataset(corpora, tmp_path):
    built = blend.build([str(corpora[0] / "a")], None, 20, 64, TOK, tmp_path)
    assert type(built).__name__ == "GPTDataset" and len(built) >= 20
    assert built[0]["tokens"].shape[0] == 64
