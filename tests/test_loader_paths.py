"""The stream's fast paths give exactly what the plain ones give: memoised word pieces, rows per shard."""

import numpy as np
from conftest import toy_cache
from transformers import AutoTokenizer

from seqdistill.cache_schema import CacheReader
from seqdistill.tokenization import PieceMemo, word_pieces


def test_memoised_word_pieces_equal_a_fresh_tokenization(tiny_encoder):
    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    rng = np.random.default_rng(0)
    vocab = ["peter", "visits", "paris", "rome", "the", "eu", "xyzzy", "Anna", "ä", "2024", ".", "-"]
    memo = PieceMemo()
    for _ in range(20):  # batches that share words, in first and later positions
        batch = [list(rng.choice(vocab, size=rng.integers(1, 8))) for _ in range(4)]
        assert word_pieces(tok, batch, memo) == word_pieces(tok, batch)
    assert memo.get(["peter", "visits"]) is not None and memo.get(["never-seen"]) is None
    small = PieceMemo(max_words=3)  # bounded: cleared when full, still exact
    for _ in range(5):
        batch = [list(rng.choice(vocab, size=4))]
        assert word_pieces(tok, batch, small) == word_pieces(tok, batch)
        assert len(small._pieces) <= 4 + 3


def test_memo_keys_the_first_word_apart():
    """A tokenizer with a sentence-start rule (Metaspace, prepend_scheme="first"; given words, it
    marks each one), memoised per (word, first) all the same."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "▁a": 1, "a": 2, "▁b": 3, "b": 4}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    memo = PieceMemo()
    for batch in ([["a", "b"]], [["b", "a"]], [["a", "a", "b"]]):
        assert word_pieces(tok, batch, memo) == word_pieces(tok, batch)
    assert memo.get(["a", "b"]) == [[1], [3]]


def test_shard_rows_equal_row_by_row(tiny_encoder, tmp_path):
    reader = CacheReader(toy_cache(tiny_encoder, tmp_path, shard_size=50))
    fields = {"examples": ["words", "tags"], "tiny": ["kbest_paths", "kbest_log_probs", "marginals"]}
    data = reader.read_shard(1, fields)
    keep = [0, 3, 7, 20]

    def plain(r):
        return {**r, "tiny": {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in r["tiny"].items()}}

    assert [plain(r) for r in data.rows(keep)] == [plain(data.row(i)) for i in keep]
    assert len(data.rows()) == len(data)


def test_gold_sentences_keep_the_tags_of_one_fixed_sample(tiny_encoder, tmp_path):
    from seqdistill.students.data import CacheStream, StreamConfig, parse_selection

    reader = CacheReader(toy_cache(tiny_encoder, tmp_path, shard_size=16))
    select = parse_selection(["toy/train", "raw"], reader)
    fields = {"examples": ["words", "tags"], "tiny": ["kbest_paths"]}

    class Rows(list):  # the stream marks each collated batch with its origin
        pass

    def gold_ids(seed, epoch):
        stream = CacheStream(reader, fields, select, Rows, StreamConfig(8, 64, seed, gold_sentences=6))
        stream.set_epoch(epoch)
        rows = [r for batch in stream for r in batch]
        assert len(rows) == 60 + 40  # every row still trains
        return {r["example_id"] for r in rows if r["examples"]["tags"] is not None}

    first = gold_ids(13, 0)
    assert len(first) == 6 and all(i.startswith("toy/train/") for i in first)
    assert gold_ids(13, 1) == first and gold_ids(14, 0) == first  # the same sample every epoch and seed
    only = CacheStream(reader, fields, select, Rows, StreamConfig(8, 64, 13, gold_sentences=6, gold_only=True))
    rows = [r for batch in only for r in batch]
    assert {r["example_id"] for r in rows if r["example_id"].startswith("toy/")} == first  # the others left out
    import pytest

    with pytest.raises(ValueError, match="--gold-sentences 61: the training selection holds 60 labelled"):
        CacheStream(reader, fields, select, Rows, StreamConfig(8, 64, 13, gold_sentences=61))


def test_memo_is_exact_for_a_byte_level_bpe_and_tokenizes_only_new_words():
    """A byte-level BPE (GPT-2/RoBERTa's pre-tokenizer, with and without its prefix space), trained
    here on a few sentences: memoised pieces equal a fresh tokenization's, words new to the memo
    are the only ones tokenized, and a memo cleared at its bound stays exact."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    text = ["Peter Blackburn visits Paris.", "The European Commission said on Thursday", "naïve café 2024 ünïcode"]
    rng = np.random.default_rng(1)
    words = sorted({w for t in text for w in t.split()} | {"Paris,", "unseenword", "ü", "'s"})
    for prefix in (True, False):
        backend = Tokenizer(models.BPE(unk_token=None))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
        backend.decoder = decoders.ByteLevel()
        backend.train_from_iterator(
            text,
            trainers.BpeTrainer(
                vocab_size=300, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
            ),
        )
        tok = PreTrainedTokenizerFast(tokenizer_object=backend)
        memo, calls = PieceMemo(max_words=12), []
        memo._tokenize = _recording(memo._tokenize, calls)
        seen = set()
        for _ in range(30):
            batch = [list(rng.choice(words, size=rng.integers(1, 6))) for _ in range(3)]
            before = set(memo._pieces)
            assert word_pieces(tok, batch, memo) == word_pieces(tok, batch), prefix
            new = {(w, j == 0) for s in batch for j, w in enumerate(s)} - before
            assert sorted(calls.pop() if new else []) == sorted(new)  # only the words it did not hold
            seen |= new
        assert len(seen) > 12  # the bound was passed: cleared, still exact


def _recording(tokenize, calls: list):
    """``tokenize`` that records the keys it is asked for."""

    def wrapped(tokenizer, keys):
        calls.append(list(keys))
        return tokenize(tokenizer, keys)

    return wrapped
