"""SenTScore over a static key/value cache (issue 54): the same search as the dynamic one, against
it and against one candidate at a time, on tiny random Llama and Gemma 3 models (against brute-force
enumeration: test_sentscore_causal.py, both searches); and no read of a tensor on the host inside a
beam step."""

import contextlib

import pytest
import torch
from test_in_context import _format
from test_sentscore import _sentences
from test_sentscore_causal import (  # noqa: F401
    MULTI_TOKEN_TYPES,
    _causal_log_likelihood,
    _gemma3,
    _llama,
    tokenizer,
)

from seqdistill.teachers import sentscore_search
from seqdistill.teachers.sentscore_search import SentFormat, sbio_tags, sentscore_one_at_a_time
from seqdistill.teachers.sentscore_static import sentscore

MODELS = pytest.mark.parametrize("make", [_llama, lambda n: _gemma3(n, sliding_window=200)], ids=["llama", "gemma3"])
TAG_SETS = pytest.mark.parametrize("types", [["LOC", "PER"], MULTI_TOKEN_TYPES], ids=["one-token", "multi-token"])


def _same(a, b):
    assert torch.equal(a.tags, b.tags)
    torch.testing.assert_close(a.beam_scores, b.beam_scores, atol=1e-4, rtol=0)
    finite = torch.isfinite(b.tag_scores)
    assert torch.equal(finite, torch.isfinite(a.tag_scores))
    torch.testing.assert_close(a.tag_scores[finite], b.tag_scores[finite], atol=1e-4, rtol=0)


@MODELS
@TAG_SETS
def test_static_search_gives_the_dynamic_searchs_paths_and_scores(tokenizer, make, types):  # noqa: F811
    """Sentences of 1 to 6 words in one batch (rows of ended sentences stay), tags of one and of six
    tokens (gaps in the blocks), K = 3 (beams reordered every step)."""
    k = 3
    model = make(len(tokenizer))
    fmt = SentFormat(tokenizer, sbio_tags(types))
    sents = _sentences(7, 2)
    assert len({len(s) for s in sents}) > 2
    _same(sentscore(model, fmt, sents, k=k, static=True), sentscore(model, fmt, sents, k=k, static=False))


@TAG_SETS
def test_static_greedy_search_equals_one_candidate_at_a_time(tokenizer, types):  # noqa: F811
    model = _gemma3(len(tokenizer), sliding_window=200)
    fmt = SentFormat(tokenizer, sbio_tags(types))
    sents = _sentences(5, 4)
    out = sentscore(model, fmt, sents, k=1, static=True)
    for b, words in enumerate(sents):
        tags, scores = sentscore_one_at_a_time(model, fmt, words)
        assert out.tags[b, 0, : len(words)].tolist() == tags
        torch.testing.assert_close(out.tag_scores[b, 0, : len(words)], torch.tensor(scores), atol=1e-4, rtol=1e-4)


@MODELS
def test_static_search_with_shared_demonstrations(tokenizer, make):  # noqa: F811
    """An in-context teacher's demonstrations attended to apart (shared_prefix.py), over the static
    cache: the scores of the prompts encoded whole."""
    model = make(len(tokenizer))
    fmt = _format(tokenizer)
    sents = _sentences(5, 3)
    _same(sentscore(model, fmt, sents, k=2, static=True), sentscore(model, fmt, sents, k=2, share_context=False))


def test_static_search_under_eager_attention(tokenizer):  # noqa: F811
    """Eager attention takes an additive mask; the same paths and scores."""
    model = _llama(len(tokenizer))
    fmt = SentFormat(tokenizer, sbio_tags(MULTI_TOKEN_TYPES))
    sents = _sentences(5, 6)
    want = sentscore(model, fmt, sents, k=2, static=False)
    model.set_attn_implementation("eager")
    _same(sentscore(model, fmt, sents, k=2, static=True), want)


@contextlib.contextmanager
def _no_host_reads():
    """Every way a tensor's value reaches Python raises (on a GPU each one waits for the device)."""

    def refuse(*_, **__):
        raise AssertionError("a tensor was read on the host inside a beam step")

    names = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "numpy")
    saved = {n: getattr(torch.Tensor, n) for n in names}
    try:
        for n in names:
            setattr(torch.Tensor, n, refuse)
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)


def _steps_without_host_reads(search_class, monkeypatch):
    """Runs every step of the search (``score_tags`` to ``feed_sentinel``) under :func:`_no_host_reads`."""
    for name in ("score_tags", "choose", "keep", "feed_sentinel", "drop_finished"):
        method = getattr(search_class, name)

        def guarded(self, *args, _method=method, **kwargs):
            with _no_host_reads():
                return _method(self, *args, **kwargs)

        monkeypatch.setattr(search_class, name, guarded)


@pytest.mark.parametrize("make", [_llama, lambda n: _gemma3(n, sliding_window=200)], ids=["llama", "gemma3"])
def test_no_tensor_is_read_on_the_host_inside_a_static_step(tokenizer, make, monkeypatch):  # noqa: F811
    """The static search's steps, transformers' forward included, never read a tensor's value on
    the host; the dynamic search does (its cache's width), so the check can fail."""
    from seqdistill.teachers.sentscore_static import StaticBeamSearch

    model = make(len(tokenizer))
    fmt = SentFormat(tokenizer, sbio_tags(MULTI_TOKEN_TYPES))
    sents = _sentences(4, 7)
    want = sentscore(model, fmt, sents, k=2, static=False)
    _steps_without_host_reads(StaticBeamSearch, monkeypatch)
    _same(sentscore(model, fmt, sents, k=2, static=True), want)
    _steps_without_host_reads(sentscore_search._BeamSearch, monkeypatch)
    with pytest.raises(AssertionError, match="read on the host"):
        sentscore(model, fmt, sents, k=2, static=False)


def test_static_search_is_refused_where_it_cannot_run(tokenizer):  # noqa: F811
    """An encoder-decoder keeps the dynamic search; asked for the static one, a clear error."""
    from transformers import BertConfig, EncoderDecoderConfig, EncoderDecoderModel

    bert = BertConfig(
        vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    model = EncoderDecoderModel(EncoderDecoderConfig.from_encoder_decoder_configs(bert, bert))
    with pytest.raises(ValueError, match="static search needs a decoder-only LM"):
        sentscore(model, SentFormat(tokenizer, sbio_tags(["LOC", "PER"])), [["rome"]], static=True)
