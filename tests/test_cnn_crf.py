"""Issue 64: the window CNN + CRF student (students/archs/cnn_crf.py)."""

import pytest
import torch
from conftest import toy_cache

from seqdistill.cache_schema import LabelSchema
from seqdistill.students.archs import load_student
from seqdistill.students.archs.cnn_crf import CNNCRF, CNNCRFConfig, WindowLayer
from seqdistill.students.recipes import train as train_student
from seqdistill.students.recipes.mgkd import MGKDConfig
from seqdistill.tokenization import WordBatch

SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))


@pytest.fixture(scope="module")
def cache(tiny_encoder, tmp_path_factory):
    return toy_cache(tiny_encoder, tmp_path_factory.mktemp("cnn"), k=4, shard_size=16)


def test_window_layer_by_hand_and_padding_words_stay_zero():
    """eq.: h_i + LayerNorm(ReLU(W [h_{i-d}; h_i; h_{i+d}] + b)), zero outside the sentence and on
    padding; a sentence's output does not depend on the padding it is batched with."""
    torch.manual_seed(0)
    layer = WindowLayer(4, 2).eval()
    h = torch.randn(1, 5, 4)
    keep = torch.ones(1, 5, 1)
    out = layer(h, keep)
    for i in range(5):
        left = h[0, i - 2] if i >= 2 else torch.zeros(4)
        right = h[0, i + 2] if i + 2 < 5 else torch.zeros(4)
        y = torch.relu(layer.linear(torch.cat([left, h[0, i], right])))
        want = h[0, i] + torch.nn.functional.layer_norm(y, (4,), layer.norm.weight, layer.norm.bias)
        torch.testing.assert_close(out[0, i], want)
    padded = torch.cat([h, torch.randn(1, 3, 4)], 1)  # three padding words of any value after it
    keep8 = torch.tensor([1.0] * 5 + [0.0] * 3).view(1, 8, 1)
    out8 = layer(padded * keep8, keep8)
    torch.testing.assert_close(out8[0, :5], out[0])
    assert torch.equal(out8[0, 5:], torch.zeros(3, 4))


def _model(projection=6, chars=True):
    torch.manual_seed(0)
    cfg = CNNCRFConfig(
        SCHEMA.to_json(),
        20,
        8,
        "random",
        dropout=0.0,
        projection=projection,
        width=8,
        dilations=(1, 3),
        char_dim=3 if chars else 0,
        char_filters=4 if chars else 0,
    )
    return CNNCRF(cfg).eval()


def _batch(ids_per_word: list[list[list[int]]]) -> WordBatch:
    from seqdistill.tokenization import word_bytes

    L = max(len(s) for s in ids_per_word)
    ids, offsets = [], []
    for s in ids_per_word:
        for w in range(L):
            offsets.append(len(ids))
            if w < len(s):
                ids.extend(s[w])
    mask = torch.arange(L)[None] < torch.tensor([len(s) for s in ids_per_word])[:, None]
    words = [[chr(97 + i % 26) * (1 + len(p)) for i, p in enumerate(s)] for s in ids_per_word]
    return WordBatch(torch.tensor(ids), torch.tensor(offsets), mask, word_bytes(words))


def test_a_sentence_scores_the_same_alone_and_batched():
    model = _model()
    a = [[1, 2], [3], [4, 5, 6]]
    b = [[7], [8], [9], [10], [11], [12], [13]]
    alone = model(_batch([a]))[0]
    batched = model(_batch([a, b]))[0, :3]
    torch.testing.assert_close(alone, batched)


def test_the_export_graph_folds_the_projection_into_the_table():
    """The graph's table is E P^T ([V, projection]) and its emissions are the model's: the mean of
    projected rows is the projection of the mean."""
    import numpy as np

    from seqdistill.students.archs.cnn_crf import CNNBagsGraph

    model = _model()
    graph = CNNBagsGraph(model)
    assert tuple(graph.embed.weight.shape) == (20, 6)
    sents = [[[1, 2], [3], [4, 5, 6]], [[7], [8]]]
    batch = _batch(sents)
    P = 3
    piece_ids = torch.zeros(2, 3, P, dtype=torch.long)
    piece_mask = torch.zeros(2, 3, P)
    for b, s in enumerate(sents):
        for w, pieces in enumerate(s):
            piece_ids[b, w, : len(pieces)] = torch.tensor(pieces)
            piece_mask[b, w, : len(pieces)] = 1
    got = graph(piece_ids, piece_mask, torch.tensor([3, 2]), batch.char_ids)
    want = model(batch)
    np.testing.assert_allclose(got[0].detach().numpy(), want[0].detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(got[1, :2].detach().numpy(), want[1, :2].detach().numpy(), atol=1e-5)


def test_mgkd_trains_a_cnn_crf_that_exports_with_the_same_tags(cache, tmp_path):
    """The recipe's --arch cnn-crf learns the toy task; its int8 export is smaller than its
    fp32 one and both tag as the torch student does."""
    from seqdistill.deploy.export import export_model
    from seqdistill.inference import Tagger

    summary = train_student(
        cache,
        tmp_path / "s",
        MGKDConfig(
            arch="cnn-crf",
            chars=True,
            char_filters=12,
            projection=8,
            width=16,
            dilations=(1, 2),
            losses=("hard", "seq-ce"),
            k=4,
            epochs=12,
            lr=0.02,
            embedding="random",
            embedding_dim=8,
            batch_size=8,
            dropout=0.1,
            device="cpu",
        ),
        log=lambda *a: None,
    )
    assert summary["best_dev_f1"] > 0.9
    model, _ = load_student(tmp_path / "s")
    assert isinstance(model, CNNCRF) and list(model.config.dilations) == [1, 2]
    assert model.config.char_filters == 12 and model.input.in_features == 8 + 12  # projection + chars
    sents = [["anna", "visits", "the", "rome"], ["Peter", "visits", "PARIS"], ["x"]]
    want = Tagger.load(tmp_path / "s").predict(sents)
    for q in ("none", "int8"):
        out = export_model(tmp_path / "s", tmp_path / f"onnx-{q}", quantize=q)
        assert Tagger.load(out).predict(sents) == want


@pytest.mark.parametrize(
    "options, message",
    [
        ({"arch": "bilstm-crf", "width": 64}, "--width: settings of --arch cnn-crf"),
        ({"arch": "bilstm-crf", "dilations": (1, 2)}, "--dilations: settings of --arch cnn-crf"),
        ({"arch": "cnn-crf", "dilations": (1, 0)}, "must be positive"),
        ({"arch": "cnn-crf", "width": 0}, "must be positive"),
        ({"char_filters": 0}, "char_filters .--char-filters. is 0: give at least 1, or --no-chars"),
    ],
)
def test_cnn_options_are_refused_where_they_cannot_apply(cache, tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        train_student(cache, tmp_path / "x", MGKDConfig(epochs=1, device="cpu", **options), log=lambda *a: None)
    assert not (tmp_path / "x" / "model.safetensors").exists()


@pytest.mark.unit
def test_the_default_student_is_the_cnn_crf_and_the_bilstm_keeps_its_paper_defaults():
    """Issue 72: mgkd with no flags trains the window CNN-CRF with chars and make demo's schedule;
    --arch bilstm-crf brings paper 000's settings back; a setting given is kept."""
    cfg = MGKDConfig()
    assert (cfg.arch, cfg.chars, cfg.lr, cfg.dropout, cfg.lr_plateau) == ("cnn-crf", True, 3e-3, 0.2, True)
    cfg = MGKDConfig(arch="bilstm-crf")
    assert (cfg.chars, cfg.lr, cfg.dropout, cfg.lr_plateau) == (False, 1e-3, 0.5, False)
    assert MGKDConfig(arch="bilstm-crf", chars=True, lr=5e-4).lr == 5e-4
    assert MGKDConfig(chars=False).chars is False


def test_the_default_student_names_what_a_cache_lacks(cache, tmp_path, monkeypatch):
    """A cache without the words the char feature reads is refused by name, with the flag that
    trains without it; never another architecture in silence."""
    from seqdistill.cache_schema.errors import CacheError
    from seqdistill.cache_schema.manifest import LayerInfo

    real = LayerInfo.field_names
    monkeypatch.setattr(LayerInfo, "field_names", lambda self: [n for n in real(self) if n != "words"])
    with pytest.raises(CacheError, match="the char feature .* train without it: --no-chars"):
        train_student(cache, tmp_path / "x", MGKDConfig(epochs=1, device="cpu"), log=lambda *a: None)
    assert not (tmp_path / "x" / "model.safetensors").exists()
