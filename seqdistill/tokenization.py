"""From words to model inputs and back: subword tokenization, windows, pooling to words.

Every model of the project reads words through this module, whatever runs it (torch in training,
ONNX Runtime in an exported directory), so a model sees the same inputs wherever it runs. It needs
torch and a tokenizer, and no teacher or student code. One idea in one module (over 400 lines):
the framing of words for every model, kept together so that the runtimes cannot drift apart.

Teachers (and the ONNX export of a teacher):

A batch of sentences (lists of words) becomes *segments*: each sentence is one segment, or, when
its subwords exceed the encoder's maximum length, several overlapping windows cut at word
boundaries (stride half a window). Every word is *owned* by one segment — the window where it has
the most context, i.e. the largest ``min(subwords before it, subwords after it)`` inside the
window — and takes its outputs from there. Nothing is truncated, except a single word longer than
a whole window, which keeps its first subwords.

:class:`SegmentBatch` carries, besides the encoder inputs, a scatter map from token positions to
word slots, so that pooling (first subword, or mean of the subwords) is one ``index_add`` over the
whole batch, and the flat indices of each sentence's owned subwords for subword-level outputs.

Students: :func:`words_to_bags` (each word a bag of the teacher's subword ids, for the BiLSTM-CRF's
``EmbeddingBag``) and :func:`words_to_subwords` (subword sequences with each word's first subword,
for the subword students), both from :func:`word_pieces`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

POOLINGS = ("first", "mean")


@dataclass
class SegmentBatch:
    input_ids: Tensor  # [S, Lt]
    attention_mask: Tensor  # [S, Lt]
    token_slot: Tensor  # [S * Lt] word slot b * W + w of each token, -1 for none
    token_weight: Tensor  # [S * Lt] pooling weight of each token
    word_mask: Tensor  # [B, W]
    subword_index: Tensor  # [B, Smax] flat token index of each owned subword, -1 padding
    subword_word_ids: Tensor  # [B, Smax] word index of each owned subword, -1 padding
    num_segments_per_sentence: list[int]
    # The tokens that pooling reads (weight > 0: the first subword of each word, or all of them
    # for mean pooling), their word slots and weights, and the shortest sentence's words: derived
    # when the batch is made, on the host, so that pooling on the device is two index ops and no
    # boolean mask, and the CRF need not count the mask (either would wait for the device).
    pool_index: Tensor | None = None
    pool_slot: Tensor | None = None
    pool_weight: Tensor | None = None
    shortest: int | None = None  # words of the shortest sentence: the CRF's steps that need no mask

    def __post_init__(self):
        if self.pool_index is None:
            self.pool_index = torch.nonzero((self.token_slot >= 0) & (self.token_weight > 0)).view(-1)
            self.pool_slot = self.token_slot[self.pool_index]
            self.pool_weight = self.token_weight[self.pool_index]
            self.shortest = int(self.word_mask.sum(1).min())

    def to(self, device, non_blocking: bool = False) -> "SegmentBatch":
        return self._map(lambda v: v.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "SegmentBatch":
        """The same batch in page-locked host memory, so that ``to(cuda, non_blocking=True)`` copies
        it while the device works on the batch before."""
        return self._map(lambda v: v.pin_memory())

    def _map(self, fn) -> "SegmentBatch":
        return SegmentBatch(*(fn(v) if isinstance(v, Tensor) else v for v in self.__dict__.values()))

    def pool(self, hidden: Tensor) -> Tensor:
        """Token states ``[S, Lt, H]`` to word states ``[B, W, H]`` (zeros on padding): the sum of
        each word's pooled tokens times their weights. Tokens of weight 0 (the later subwords under
        first-subword pooling) are left out, which changes no sum (x + 0 = x)."""
        B, W = self.word_mask.shape
        flat = hidden.reshape(-1, hidden.shape[-1])
        out = torch.zeros(B * W, hidden.shape[-1], dtype=hidden.dtype, device=hidden.device)
        weighted = flat.index_select(0, self.pool_index) * self.pool_weight.to(hidden.dtype).unsqueeze(1)
        out.index_add_(0, self.pool_slot, weighted)
        return out.view(B, W, -1)

    def subwords(self, hidden: Tensor) -> Tensor:
        """Token states ``[S, Lt, H]`` to each sentence's owned subwords ``[B, Smax, H]``."""
        flat = hidden.reshape(-1, hidden.shape[-1])
        out = flat[self.subword_index.clamp(min=0)]
        return out * (self.subword_index >= 0).unsqueeze(2).to(out.dtype)


class WordTokenizer:
    """Turns batches of words into :class:`SegmentBatch` for one tokenizer and maximum length."""

    def __init__(self, tokenizer, max_length: int, pooling: str = "first", stride: float = 0.5):
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r} is not one of {POOLINGS}")
        self.tokenizer, self.pooling = tokenizer, pooling
        probe = tokenizer([["x"]], is_split_into_words=True, add_special_tokens=True)
        ids, wids = probe["input_ids"][0], probe.word_ids(0)
        first = wids.index(0)
        last = len(wids) - 1 - wids[::-1].index(0)
        self.prefix, self.suffix = ids[:first], ids[last + 1 :]
        self.window = max_length - len(self.prefix) - len(self.suffix)
        if self.window < 2:
            raise ValueError(f"max_length {max_length} leaves no room for words beside special tokens")
        self.stride = max(1, int(self.window * stride))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def __call__(self, batch_words: list[list[str]]) -> SegmentBatch:
        if not batch_words or any(len(w) == 0 for w in batch_words):
            raise ValueError("every sentence needs at least one word")
        enc = self.tokenizer(batch_words, is_split_into_words=True, add_special_tokens=False)
        token_ids, word_ids = [], []
        for b, words in enumerate(batch_words):
            ids, wids = enc["input_ids"][b], enc.word_ids(b)
            if len({w for w in wids if w is not None}) < len(words):  # the tokenizer dropped a word
                ids, wids = self._encode_with_unk(words, set(wids))
            token_ids.append(ids), word_ids.append(wids)
        if all(len(ids) <= self.window for ids in token_ids):
            return self._one_window_each(batch_words, token_ids, word_ids)
        B, W = len(batch_words), max(len(w) for w in batch_words)
        segments: list[list[int]] = []
        slots: list[list[int]] = []
        weights: list[list[float]] = []
        sub_index: list[list[int]] = []
        sub_words: list[list[int]] = []
        per_sentence = []
        for b, words in enumerate(batch_words):
            ids, wids = token_ids[b], word_ids[b]
            spans = _word_spans(wids, len(words))
            windows = self._windows(spans, len(ids))
            owner = _owners(spans, windows)
            per_sentence.append(len(windows))
            owned_tokens: dict[int, list[int]] = {}
            for wi, (ws, we) in enumerate(windows):
                seg = len(segments)
                tokens = self.prefix + ids[ws:we] + self.suffix
                slot = [-1] * len(tokens)
                weight = [0.0] * len(tokens)
                for w in range(len(words)):
                    if owner[w] != wi:
                        continue
                    s, e = spans[w]
                    s, e = max(s, ws), min(e, we)
                    positions = list(range(len(self.prefix) + s - ws, len(self.prefix) + e - ws))
                    owned_tokens[w] = [(seg, p) for p in positions]
                    for j, p in enumerate(positions):
                        slot[p] = b * W + w
                        weight[p] = (1.0 if j == 0 else 0.0) if self.pooling == "first" else 1.0 / len(positions)
                segments.append(tokens), slots.append(slot), weights.append(weight)
            sub_index.append([(seg, p) for w in range(len(words)) for seg, p in owned_tokens[w]])
            sub_words.append([w for w in range(len(words)) for _ in owned_tokens[w]])
        Lt = max(len(s) for s in segments)
        S = len(segments)
        input_ids = torch.full((S, Lt), self.pad_id, dtype=torch.long)
        attention = torch.zeros(S, Lt, dtype=torch.long)
        token_slot = torch.full((S, Lt), -1, dtype=torch.long)
        token_weight = torch.zeros(S, Lt)
        for i, (tokens, slot, weight) in enumerate(zip(segments, slots, weights)):
            n = len(tokens)
            input_ids[i, :n] = torch.tensor(tokens)
            attention[i, :n] = 1
            token_slot[i, :n] = torch.tensor(slot)
            token_weight[i, :n] = torch.tensor(weight)
        smax = max(len(s) for s in sub_index)
        subword_index = torch.full((B, smax), -1, dtype=torch.long)
        subword_word_ids = torch.full((B, smax), -1, dtype=torch.long)
        for b, (idx, wid) in enumerate(zip(sub_index, sub_words)):
            subword_index[b, : len(idx)] = torch.tensor([seg * Lt + p for seg, p in idx])
            subword_word_ids[b, : len(wid)] = torch.tensor(wid)
        word_mask = torch.arange(W)[None] < torch.tensor([len(w) for w in batch_words])[:, None]
        return SegmentBatch(
            input_ids,
            attention,
            token_slot.view(-1),
            token_weight.view(-1),
            word_mask,
            subword_index,
            subword_word_ids,
            per_sentence,
        )

    def _one_window_each(self, batch_words, token_ids, word_ids) -> SegmentBatch:
        """The common case, every sentence within one window: the same maps, built with numpy."""
        B, W = len(batch_words), max(len(w) for w in batch_words)
        P, lens = len(self.prefix), [len(ids) for ids in token_ids]
        Lt = max(lens) + P + len(self.suffix)
        input_ids = np.full((B, Lt), self.pad_id, dtype=np.int64)
        attention = np.zeros((B, Lt), dtype=np.int64)
        token_slot = np.full((B, Lt), -1, dtype=np.int64)
        token_weight = np.zeros((B, Lt), dtype=np.float32)
        smax = max(lens)
        subword_index = np.full((B, smax), -1, dtype=np.int64)
        subword_word_ids = np.full((B, smax), -1, dtype=np.int64)
        for b, (ids, n) in enumerate(zip(token_ids, lens)):
            row = self.prefix + ids + self.suffix
            input_ids[b, : len(row)] = row
            attention[b, : len(row)] = 1
            w = np.asarray(word_ids[b], dtype=np.int64)
            token_slot[b, P : P + n] = b * W + w
            if self.pooling == "first":
                token_weight[b, P : P + n] = np.concatenate(([True], w[1:] != w[:-1]))
            else:
                token_weight[b, P : P + n] = 1.0 / np.bincount(w)[w]
            subword_index[b, :n] = b * Lt + P + np.arange(n)
            subword_word_ids[b, :n] = w
        word_mask = torch.arange(W)[None] < torch.tensor([len(w) for w in batch_words])[:, None]
        t = torch.from_numpy
        return SegmentBatch(
            t(input_ids),
            t(attention),
            t(token_slot).view(-1),
            t(token_weight).view(-1),
            word_mask,
            t(subword_index),
            t(subword_word_ids),
            [1] * B,
        )

    def _encode_with_unk(self, words: list[str], present: set) -> tuple[list[int], list]:
        """Words that tokenize to nothing (control characters, zero-width spaces) become UNK."""
        unk = self.tokenizer.unk_token or "[UNK]"
        fixed = [w if i in present else unk for i, w in enumerate(words)]
        enc = self.tokenizer([fixed], is_split_into_words=True, add_special_tokens=False)
        return enc["input_ids"][0], enc.word_ids(0)

    def _windows(self, spans: list[tuple[int, int]], n_tokens: int) -> list[tuple[int, int]]:
        """Token ranges of overlapping windows cut at word starts; one range when it all fits."""
        if n_tokens <= self.window:
            return [(0, n_tokens)]
        starts = [s for s, _ in spans]
        windows, start = [], 0
        while True:
            end = min(start + self.window, n_tokens)
            if end < n_tokens:  # cut at the last word start that keeps the window full
                cut = max((s for s in starts if start < s <= end), default=end)
                end = cut
            windows.append((start, end))
            if end >= n_tokens:
                return windows
            nxt = max((s for s in starts if s <= start + self.stride), default=start)
            start = nxt if nxt > start else end


def _word_spans(word_ids: list[int | None], n_words: int) -> list[tuple[int, int]]:
    spans = [[-1, -1] for _ in range(n_words)]
    for i, w in enumerate(word_ids):
        if w is None:
            continue
        if spans[w][0] < 0:
            spans[w][0] = i
        spans[w][1] = i + 1
    for w, (s, _) in enumerate(spans):
        if s < 0:
            raise ValueError(f"word {w} produced no subword tokens; the tokenizer dropped it")
    return [tuple(s) for s in spans]


def _owners(spans: list[tuple[int, int]], windows: list[tuple[int, int]]) -> list[int]:
    """For each word, the window where it has the most context on its poorer side."""
    owners = []
    for s, e in spans:
        best, best_ctx = 0, None
        for i, (ws, we) in enumerate(windows):
            if s < ws or s >= we:
                continue
            ctx = min(s - ws, we - e)
            if best_ctx is None or ctx > best_ctx:
                best, best_ctx = i, ctx
        owners.append(best)
    return owners


# -- students' inputs: words as bags of the teacher's subword ids, or as subword sequences --------


def subword_windows(n: int, window: int) -> tuple[np.ndarray, np.ndarray]:
    """A transformer student's windows over a sentence of ``n`` subwords: ``(starts, owner)``.

    One window when it fits; else windows of ``window`` subwords at a stride of half a window, the
    last one ending at the sentence's end (so every window is full), cut anywhere (a student pools a
    word from its first subword, which one window owns whole). Each subword is owned by the window
    where it has the most context on its poorer side, ``min(p - start, start + window - 1 - p)``,
    the earlier window on ties: the teachers' rule (``_owners``), on subwords."""
    if n <= window:
        return np.zeros(1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    starts = np.array(sorted({*range(0, n - window, max(1, window // 2)), n - window}), dtype=np.int64)
    p = np.arange(n)
    context = np.minimum(p[None] - starts[:, None], starts[:, None] + window - 1 - p[None])  # < 0: outside
    return starts, context.argmax(0)


@dataclass
class WordBatch:
    """Words as bags of subword ids: ``bag_ids`` concatenated, ``bag_offsets [B * L]`` where each
    word's bag starts (padding words are empty bags), ``mask [B, L]``."""

    bag_ids: Tensor
    bag_offsets: Tensor
    mask: Tensor
    char_ids: Tensor | None = None  # [B, L, C]: each word's bytes (``word_bytes``), for a char feature
    word_ids: Tensor | None = None  # [B, L]: each word's row of a word vector table (students/word_vectors.py)

    def to(self, device) -> "WordBatch":
        chars = None if self.char_ids is None else self.char_ids.to(device)
        word_ids = None if self.word_ids is None else self.word_ids.to(device)
        return WordBatch(self.bag_ids.to(device), self.bag_offsets.to(device), self.mask.to(device), chars, word_ids)


MAX_WORD_BYTES = 20


def word_bytes(batch_words: list[list[str]], max_bytes: int = MAX_WORD_BYTES) -> Tensor:
    """``[B, L, C]``: each word's UTF-8 bytes plus one (0 pads short words and padding words), C
    the longest word's bytes up to ``max_bytes``. Decisions: bytes rather than characters, so the
    char feature needs no vocabulary of its own (a non-ASCII letter is two or three bytes); a word
    longer than ``max_bytes`` keeps its first ``max_bytes`` (prefixes carry most of the shape)."""
    L = max(len(w) for w in batch_words)
    encoded = [w.encode("utf-8")[:max_bytes] for sent in batch_words for w in sent]  # every real word, in order
    n = np.array([len(b) for b in encoded], dtype=np.int64)
    C = max(1, int(n.max(initial=1)))
    out = np.zeros((len(batch_words), L, C), dtype=np.int64)
    if n.sum():  # one scatter of every byte: a word's j-th byte at [sentence, word, j]
        sentence = np.repeat(np.arange(len(batch_words)), [len(sent) for sent in batch_words])
        word = np.concatenate([np.arange(len(sent)) for sent in batch_words if sent])
        j = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
        out[np.repeat(sentence, n), np.repeat(word, n), j] = (
            np.frombuffer(b"".join(encoded), np.uint8).astype(np.int64) + 1
        )
    return torch.from_numpy(out)


WORD_VECTORS_FILE = "word_vectors.txt"  # an export's word list: UTF-8, one word a line, row 1 first


def word_list_rows(words: list[str]) -> dict[str, int]:
    """A word vector table's lookup: each of its ``words`` to its row, the first word row 1 (row 0 is
    the zero vector of unknown and padding words; students/word_vectors.py)."""
    return {w: i for i, w in enumerate(words, 1)}


def word_vector_rows(row_of: dict[str, int], batch_words: list[list[str]]) -> np.ndarray:
    """``[B, L]`` int64: each word's row of a word vector table (``word_list_rows``): the word as
    written, else lowercased (Python's ``str.lower``, Unicode's full lowercase mapping, as
    JavaScript's ``toLowerCase``), else 0; 0 for padding words. The one lookup of the torch student
    and of every runtime of its export (``onnx_runtime.bag_inputs``, js/src/inputs.js)."""
    out = np.zeros((len(batch_words), max(len(w) for w in batch_words)), dtype=np.int64)
    for b, sent in enumerate(batch_words):
        out[b, : len(sent)] = [row_of.get(w) or row_of.get(w.lower(), 0) for w in sent]
    return out


def word_pieces(tokenizer, batch_words: list[list[str]], memo: "PieceMemo | None" = None) -> list[list[list[int]]]:
    """The teacher tokenizer's ids of every word (no special tokens); a word with none gets the
    unknown token, so every word has at least one. A fast tokenizer is called through its Rust
    backend directly (the same encodings, without the Python wrapper's per-call cost, which
    dominates at batch 1). With a ``memo``, only the words it has not met are tokenized (training
    streams the same sentences every epoch; a runtime meets the same words again); it is left
    unused for a tokenizer that truncates (:func:`truncates`), whose pieces of a word depend on
    where the word stands."""
    if memo is not None and not truncates(tokenizer):
        return memo.pieces(tokenizer, batch_words)
    return _pieces(tokenizer, batch_words)


def _pieces(tokenizer, batch_words: list[list[str]]) -> list[list[list[int]]]:
    """Each sentence's pieces per word, the unknown token for a word that got none (one the
    tokenizer's normaliser emptied, or one past its truncation)."""
    unk = tokenizer.unk_token_id if tokenizer.unk_token_id is not None else 0
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is not None:
        encodings = backend.encode_batch(batch_words, is_pretokenized=True, add_special_tokens=False)
        pairs = [(e.ids, e.word_ids) for e in encodings]
    else:
        enc = tokenizer(batch_words, is_split_into_words=True, add_special_tokens=False)
        pairs = [(enc["input_ids"][b], enc.word_ids(b)) for b in range(len(batch_words))]
    out = []
    for words, (ids, word_ids) in zip(batch_words, pairs):
        per_word: list[list[int]] = [[] for _ in words]
        for tok, w in zip(ids, word_ids):
            if w is not None:
                per_word[w].append(tok)
        out.append([p or [unk] for p in per_word])
    return out


def truncates(tokenizer) -> bool:
    """Whether ``tokenizer`` cuts its encodings (a fast tokenizer whose backend has truncation set, as
    some Hub tokenizer.json files do): then a word past the cut gets no pieces of its own, and its
    pieces depend on the sentence, which a :class:`PieceMemo` cannot know."""
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    return backend is not None and backend.truncation is not None


class PieceMemo:
    """Each word's subword ids, remembered by ``(word, is first word)``: a tokenizer given words
    (pre-tokenized input) normalises, pre-tokenizes and encodes each one on its own, so a word's
    pieces do not depend on its neighbours; the first is keyed apart as a precaution for rules about
    the sentence start. Bounded: cleared when it would pass ``max_words`` entries (a vocabulary of
    that many distinct words is far past CoNLL's 30k; a runtime keeps fewer,
    ``inference.onnx_runtime.MEMO_WORDS``)."""

    chunk = 256  # words not met before, tokenized as one pre-split sequence of at most this many

    def __init__(self, max_words: int = 2_000_000):
        self.max_words = max_words
        self._pieces: dict[tuple[str, bool], list[int]] = {}

    def get(self, words: list[str]) -> list[list[int]] | None:
        """A sentence's pieces per word, or None if one of its words was not met in its place."""
        pieces = self._pieces
        out = []
        for j, w in enumerate(words):
            p = pieces.get((w, j == 0))
            if p is None:
                return None
            out.append(p)
        return out

    def pieces(self, tokenizer, batch_words: list[list[str]]) -> list[list[list[int]]]:
        """Each sentence's pieces per word (:func:`word_pieces`), the words not met before tokenized
        at once and remembered."""
        known = self._pieces
        missing = {(w, j == 0): None for words in batch_words for j, w in enumerate(words)}
        missing = [k for k in missing if k not in known]
        fresh = self._tokenize(tokenizer, missing) if missing else {}
        out = [[known.get((w, j == 0)) or fresh[w, j == 0] for j, w in enumerate(words)] for words in batch_words]
        if len(known) + len(fresh) > self.max_words:  # a new dict: a thread reading the old one reads on
            self._pieces = fresh
        else:
            known.update(fresh)
        return out

    def _tokenize(self, tokenizer, keys: list[tuple[str, bool]]) -> dict[tuple[str, bool], list[int]]:
        """The pieces of ``keys``' words: a first word as a sentence of its own; later words after a
        copy of the first of their chunk, so that each stands in a later place."""
        firsts = [w for w, first in keys if first]
        later = [w for w, first in keys if not first]
        chunks = [later[i : i + self.chunk] for i in range(0, len(later), self.chunk)]
        encoded = _pieces(tokenizer, [[w] for w in firsts] + [[c[0], *c] for c in chunks])  # one call
        out = {(w, True): pieces[0] for w, pieces in zip(firsts, encoded)}
        for chunk, pieces in zip(chunks, encoded[len(firsts) :]):
            out.update(((w, False), p) for w, p in zip(chunk, pieces[1:]))
        return out


def words_to_bags(
    tokenizer, batch_words: list[list[str]], chars: bool = False, memo: PieceMemo | None = None
) -> WordBatch:
    """Tokenize words with the teacher's tokenizer into an ``EmbeddingBag`` input (with each word's
    bytes when ``chars``)."""
    L = max(len(w) for w in batch_words)
    ids, offsets = [], []
    for pieces in word_pieces(tokenizer, batch_words, memo):
        for w in range(L):
            offsets.append(len(ids))
            if w < len(pieces):
                ids.extend(pieces[w])
    mask = torch.arange(L)[None] < torch.tensor([len(w) for w in batch_words])[:, None]
    return WordBatch(
        torch.tensor(ids, dtype=torch.long),
        torch.tensor(offsets, dtype=torch.long),
        mask,
        word_bytes(batch_words) if chars else None,
    )


@dataclass
class SubwordBatch:
    """Sentences as subword ids ``[B, S]`` (0-padded, ``mask``), with ``word_ids [B, S]`` (the
    word of each subword, -1 on padding), ``first [B, L]`` (each word's first subword) and
    ``word_mask [B, L]``."""

    ids: Tensor
    mask: Tensor
    word_ids: Tensor
    first: Tensor
    word_mask: Tensor

    def to(self, device) -> "SubwordBatch":
        return SubwordBatch(*(t.to(device) for t in (self.ids, self.mask, self.word_ids, self.first, self.word_mask)))

    def first_subword(self, h: Tensor) -> Tensor:
        """Word states ``[B, L, D]`` from subword states ``[B, S, D]``: each word's first subword."""
        return h.gather(1, self.first.unsqueeze(-1).expand(-1, -1, h.shape[-1]))


def words_to_subwords(tokenizer, batch_words: list[list[str]]) -> SubwordBatch:
    """Tokenize words with the teacher's tokenizer (see ``word_pieces``) into subword sequences."""
    seqs, owners = [], []
    for pieces in word_pieces(tokenizer, batch_words):
        seqs.append([t for p in pieces for t in p])
        owners.append([w for w, p in enumerate(pieces) for _ in p])
    B, S, L = len(batch_words), max(len(s) for s in seqs), max(len(w) for w in batch_words)
    ids = torch.zeros(B, S, dtype=torch.long)
    word_ids = torch.full((B, S), -1, dtype=torch.long)
    first = torch.zeros(B, L, dtype=torch.long)
    for b, (seq, own) in enumerate(zip(seqs, owners)):
        ids[b, : len(seq)] = torch.tensor(seq)
        word_ids[b, : len(own)] = torch.tensor(own)
        starts = [i for i, w in enumerate(own) if i == 0 or own[i - 1] != w]
        first[b, : len(starts)] = torch.tensor(starts)
    word_mask = torch.arange(L)[None] < torch.tensor([len(w) for w in batch_words])[:, None]
    return SubwordBatch(ids, word_ids >= 0, word_ids, first, word_mask)


# Hashed word tables (issue 83): a word's vector is the mean of the rows its keys hash to, so the
# table holds no word list and a word no source had still gets the vector of its character n-grams
# (Bloom embeddings: spaCy's floret, after fastText's subword vectors; Svenstrup et al., 2017). The
# one specification, which every runtime implements alike (Python here; a runtime that cannot read
# it refuses the export by its format version):
#   keys(word) = "<" + lowercase(word) + ">" itself, then its n-grams of minn..maxn code points in
#                order of n, then of position (the whole key once); lowercase: Python's str.lower,
#                Unicode's full mapping, as JavaScript's toLowerCase
#   rows(word) = 1 + FNV-1a-32(bytes([k]) + utf8(key)) mod rows, for each key and k = 0..hashes-1
# (row 0 is the zero vector of padding). FNV-1a, not MurmurHash as floret: a few lines in any
# language with 32-bit integer arithmetic, and the keys are short. An exported graph is fed each
# distinct word of a batch once (``WordHashing.distinct_rows``, format 5): a word's rows number 21 on
# average over CoNLL-2003 test's words, and padding every word of a batch of 32 to the longest
# word's count and the longest sentence gathered 11x the rows there are (docs/BENCHMARKS.md,
# "Where an export's time goes").
FNV_OFFSET, FNV_PRIME = 2166136261, 16777619


def fnv1a32(data: bytes) -> int:
    """The 32-bit FNV-1a hash of ``data``."""
    h = FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFF
    return h


@dataclass(frozen=True)
class WordHashing:
    """How a hashed word table finds a word's rows (the specification above)."""

    rows: int
    minn: int = 3
    maxn: int = 5
    hashes: int = 2
    # each word's rows, computed once (training streams the same words every epoch); bounded as PieceMemo
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.rows < 1 or self.hashes < 1 or not 1 <= self.minn <= self.maxn:
            raise ValueError(f"word hashing {self}: rows and hashes at least 1, 1 <= minn <= maxn")

    def keys(self, word: str) -> list[str]:
        whole = "<" + word.lower() + ">"
        grams = [whole[i : i + n] for n in range(self.minn, self.maxn + 1) for i in range(len(whole) - n + 1)]
        return [whole] + [g for g in grams if g != whole]

    def word_rows(self, word: str) -> list[int]:
        rows = self._memo.get(word)
        if rows is None:
            keys = self.keys(word)
            rows = [
                1 + fnv1a32(bytes([k]) + key.encode("utf-8")) % self.rows for key in keys for k in range(self.hashes)
            ]
            if len(self._memo) >= 100_000:
                self._memo.clear()
            self._memo[word] = rows
        return rows

    def batch_rows(self, batch_words: list[list[str]]) -> np.ndarray:
        """``[B, L, K]`` int64: each word's rows, 0 past them and for padding words (the torch
        student's input: :meth:`distinct_rows` spread back over every word)."""
        rows, index = self.distinct_rows(batch_words)
        return rows[index]

    def distinct_rows(self, batch_words: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
        """An exported graph's inputs: ``word_ids [U + 1, K]`` int64, the rows of each distinct word
        of the batch in the order of first appearance (row 0 of it all zeros: the padding word; 0
        past a word's rows), and ``word_index [B, L]`` int64, each word's row of ``word_ids`` (0 for
        padding words)."""
        distinct: dict[str, int] = {}
        index = np.zeros((len(batch_words), max(len(w) for w in batch_words)), dtype=np.int64)
        for b, sent in enumerate(batch_words):
            index[b, : len(sent)] = [distinct.setdefault(w, len(distinct) + 1) for w in sent]
        rows = [self.word_rows(w) for w in distinct]
        out = np.zeros((len(rows) + 1, max((len(r) for r in rows), default=1)), dtype=np.int64)
        for u, r in enumerate(rows, 1):
            out[u, : len(r)] = r
        return out, index

    def to_json(self) -> dict:
        return {
            "hash": "fnv1a-32",
            "keys": "<lowercased word> and its character n-grams",
            "rows": self.rows,
            "minn": self.minn,
            "maxn": self.maxn,
            "hashes": self.hashes,
            "fingerprint": self.fingerprint(),
        }

    def fingerprint(self) -> str:
        """sha256 of the rows of ``HASH_PROBE``: an export records it, and a runtime whose hashing gives
        other rows for these words is refused at load."""
        import hashlib

        return hashlib.sha256(json_rows([self.word_rows(w) for w in HASH_PROBE])).hexdigest()


HASH_PROBE = ("Paris", "tsvangirai", "É", "Straße", "İstanbul", "日本語", "x", "don't", "2026")


def json_rows(rows: list[list[int]]) -> bytes:
    return ";".join(",".join(map(str, r)) for r in rows).encode()
