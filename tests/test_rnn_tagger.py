"""Paper 003's CNN + LSTM/SRU/SRU++ students with one BILOU head per entity type."""

import pytest
import torch

from seqdistill.bilou import is_valid
from seqdistill.cache_schema import LabelSchema
from seqdistill.students.archs.rnn_tagger import RNNTagger
from seqdistill.students.base import StudentConfig
from seqdistill.tokenization import SubwordBatch

TYPES = ["LOC", "ORG", "PER"]


def _model(cell, layers=2, width=12, hidden=6):
    torch.manual_seed(0)
    return RNNTagger(_config(cell, layers, width, hidden))


def _config(cell, layers=2, width=12, hidden=6, **extra):
    return StudentConfig(
        LabelSchema("BILOU", TYPES).to_json(),
        40,
        width,
        "random",
        False,
        hidden,
        layers,
        0.1,
        arch="rnn-tagger",
        extra={"entity_types": TYPES, "cell": cell, **extra},
    )


def _batch(lengths, S=None):
    S = S or max(lengths)
    B = len(lengths)
    ids = torch.randint(1, 40, (B, S), generator=torch.Generator().manual_seed(1))
    mask = torch.arange(S)[None] < torch.tensor(lengths)[:, None]
    word_ids = torch.where(mask, torch.arange(S)[None].expand(B, S), torch.full((B, S), -1))
    first = torch.arange(S)[None].expand(B, S).clone()
    return SubwordBatch(ids * mask, mask, word_ids, first, mask.clone())


@pytest.mark.parametrize("cell", ["lstm", "sru", "sru++"])
def test_shapes_padding_and_valid_layers(cell):
    model = _model(cell).eval()
    x = _batch([5, 3])
    with torch.no_grad():
        logits = model(x)
        alone = model(SubwordBatch(*(t[1:, :3] for t in (x.ids, x.mask, x.word_ids, x.first, x.word_mask))))
    assert logits.shape == (2, 5, 3, 5)
    torch.testing.assert_close(logits[1:, :3], alone, rtol=1e-5, atol=1e-5)  # padding changes nothing
    tags = model.decode_layers(x)
    assert (tags[1, 3:] == -1).all()
    for b, n in enumerate([5, 3]):
        for e in range(3):
            assert is_valid(tags[b, :n, e].tolist())


def test_conv_block_halves_the_width_and_heads_are_per_type():
    model = _model("sru++", width=12)
    assert [sum(c.out_channels for c in layer.convs) for layer in model.conv] == [12, 6]
    assert [c.kernel_size[0] for c in model.conv[0].convs] == [1, 3, 5]
    assert model.heads.out_features == 5 * len(TYPES)
    counts = model.parameter_counts()
    assert counts["all"] - counts["without_embeddings"] == 40 * 12


def test_a_5000_word_sentence_in_one_pass():
    model = _model("sru++", layers=1).eval()
    with torch.no_grad():
        out = model(_batch([5000]))
    assert out.shape == (1, 5000, 3, 5) and torch.isfinite(out).all()


def test_a_projection_narrows_the_conv_block_and_is_counted_folded():
    """--projection P: the conv block at P and P / 2, the recurrent layers unchanged, and the
    parameters counted as the export ships them (the table V x P, no projection matrix)."""
    plain, projected = _model("sru++", width=12), RNNTagger(_config("sru++", projection=6))
    assert [sum(c.out_channels for c in layer.convs) for layer in projected.conv] == [6, 3]
    assert projected.project.weight.shape == (6, 12)
    counts = projected.parameter_counts()
    torch_total = sum(p.numel() for p in projected.parameters())
    assert counts["all"] == torch_total - 40 * 12 - 6 * 12 + 40 * 6
    assert counts["without_embeddings"] == counts["all"] - 40 * 6
    assert plain.parameter_counts()["all"] == sum(p.numel() for p in plain.parameters())
    with torch.no_grad():
        assert projected(_batch([4, 2])).shape == (2, 4, 3, 5)
