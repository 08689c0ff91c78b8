"""SenTScore (paper 004): an encoder-decoder model as a tagger that cannot hallucinate.

**SenT' format** (§4.1, Table 1). Words x_1..x_L and sentinel tokens s_0..s_L:

    input   s_0 x_1 s_1 x_2 ... s_{L-1} x_L s_L
    target  s_0 t_1 s_1 t_2 ... s_{L-1} t_L s_L

with t_i in the sBIO tag set T u {I, O} (a type tag starts a span, ``I`` continues one). Sentinels
are the model's own extra ids (``<extra_id_n>``, T5-style) or reserved tokens (``[unusedN]``, BERT
vocabularies); each tag string is tokenized once.

**SenTScore** (Algorithm 1). At step i every beam is extended by every tag t with the string
"t s_i"; its score is the decoder's log-likelihood of those tokens given the beam (eq. 1: the next
sentinel acts as an end-of-tag mark, so a tag that is a prefix of another is not favoured). The
top-K extensions over (beam, tag) are kept, and each kept beam records the scores of all |T̄|
tags at that step: the per-word tag-score distribution used for distillation (eq. 2).

Batched over sentences and beams with the decoder's key/value cache. Each step makes one decoder
call per tag, over every beam of every sentence at once, each call reading the same prefix cache
(the |T̄| calls are cheaper than one call over B·K·|T̄| rows, which would copy the cache |T̄|
times); the output projection is applied only at the positions scored, once a step for every tag
together. Each tag's call feeds the tag's tokens only: the log-likelihood of s_i after them is read
at the tag's last position, and s_i itself is fed once, after the beams have chosen their tags, in
one more call over the kept beams (its state is the next step's first prediction). For one-token
tags this feeds a step |T̄| + 1 tokens per beam instead of 2|T̄|. The cache rows of the kept
candidates are then *right-aligned* (padding rolled to the left and masked out), so every sequence
stays left-padded and gap-free, and sentences that have ended leave the batch. Relative position
biases (T5) see the true distances; decoders with absolute positions (BERT in an
``EncoderDecoderModel``) are given explicit position ids. Invalid sBIO continuations (``I`` first
or after ``O``) get -inf, so every output is a valid tag sequence of the input's length.

**Decoder-only (causal) LMs** (issue 35; paper 004 names GPT-style models as its future work).
The same format in one sequence, decisions named:

* **Where the prompt ends**: the sequence is the model's own prefix (``<bos>``), the SenT' input
  ``s_0 x_1 s_1 ... x_L s_L``, then the SenT' target ``s_0 t_1 s_1 ... t_L s_L`` and the
  end-of-sequence token. The target's ``s_0``, the input's first sentinel seen again after its
  last, marks where the answer starts; fine-tuning puts the LM loss on the target tokens only
  (``s_0`` included, as the seq2seq decoder is trained on it). Scoring starts after it, as the
  seq2seq beam starts after ``[decoder start, s_0]``.
* **Positions**: prompts are left-padded in a batch and every row's positions count its real tokens
  from 0 (explicit ``position_ids``), so padding never shifts a rotary or absolute position; the
  cache rows stay right-aligned as above, and columns that are padding in every row are dropped
  after each step, so the cache is never longer than the longest row.
* **Context**: a sentence whose prompt and target do not fit in one sequence of the model's
  context (its position table, and for sliding-window attention, as Gemma 3's, its window less
  one, so that the cache never slides) is split into consecutive pieces as for encoder-decoders.
* The output projection is skipped inside the model, as above, unless the model caps its logits
  (``final_logit_softcapping``), which the projection alone would leave out.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .shared_prefix import attached

SBIO_INSIDE, SBIO_OUTSIDE = "I", "O"


def sbio_tags(entity_types) -> tuple[str, ...]:
    """T̄ = T u {I, O}, in a fixed order: O, I, then the entity types sorted."""
    return (SBIO_OUTSIDE, SBIO_INSIDE, *sorted(entity_types))


class SentFormat:
    """The SenT' format for one tokenizer and one sBIO tag set."""

    def __init__(self, tokenizer, tags, max_words: int | None = None):
        self.tokenizer, self.tags = tokenizer, tuple(tags)
        self.context: list[int] = []  # a causal LM's demonstrations, special tokens first (set_demonstrations)
        if self.tags[:2] != (SBIO_OUTSIDE, SBIO_INSIDE):
            raise ValueError(f"sBIO tags must start with O, I; got {self.tags}")
        self.sentinels = _sentinel_ids(tokenizer)
        if max_words is not None:
            self.sentinels = self.sentinels[: max_words + 1]
        self.tag_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in self.tags]
        self.prefix, self.suffix = _special_wrap(tokenizer)
        for t, ids in zip(self.tags, self.tag_ids):
            if not ids:
                raise ValueError(f"tag {t!r} tokenizes to nothing with this tokenizer")

    @property
    def max_words(self) -> int:
        return len(self.sentinels) - 1

    def _check(self, words: list[str]) -> None:
        if not 0 < len(words) <= self.max_words:
            raise ValueError(
                f"a sentence of {len(words)} words; SenT' needs 1 to {self.max_words} (one sentinel per word, plus one)"
            )

    def encode_input(self, words: list[str], causal: bool = False) -> list[int]:
        """s_0 x_1 s_1 ... x_L s_L, with the model's special tokens around it; for a causal LM,
        the prompt: the special tokens before it only (the target follows), or the demonstrations
        of an in-context teacher (:meth:`set_demonstrations`), which begin with them."""
        self._check(words)
        ids = [self.sentinels[0]]
        for i, w in enumerate(words, 1):
            ids += self.tokenizer(w, add_special_tokens=False)["input_ids"] or [self.tokenizer.unk_token_id]
            ids.append(self.sentinels[i])
        if causal:
            return (self.context or self.prefix) + ids
        return self.prefix + ids + self.suffix

    def set_demonstrations(self, demonstrations: list[tuple[list[str], list[str]]]) -> None:
        """In-context SenTScore (issue 55): every causal prompt starts with the model's special
        tokens, then each demonstration in SenT' form, its input and its target one after the
        other as a fine-tuned teacher's sequence is, then a newline (not the end-of-sequence token,
        which would tell a base LM that the text is over). None: a prompt as before."""
        if not demonstrations:
            self.context = []
            return
        newline = self.tokenizer("\n", add_special_tokens=False)["input_ids"]
        context = list(self.prefix)
        for words, tags in demonstrations:
            context += self.encode_input(words, causal=True)[len(self.prefix) :] + self._target(tags) + newline
        self.context = context

    def _target(self, tags: list[str]) -> list[int]:
        """s_0 t_1 s_1 ... t_L s_L."""
        self._check(tags)
        index = {t: i for i, t in enumerate(self.tags)}
        ids = [self.sentinels[0]]
        for i, t in enumerate(tags, 1):
            if t not in index:
                raise ValueError(f"tag {t!r} is not in the sBIO tag set {self.tags}")
            ids += self.tag_ids[index[t]] + [self.sentinels[i]]
        return ids

    def encode_target(self, tags: list[str]) -> list[int]:
        """s_0 t_1 s_1 ... t_L s_L, then the end-of-sequence token when the tokenizer has one."""
        ids = self._target(tags)
        eos = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else self.tokenizer.sep_token_id
        return ids + ([eos] if eos is not None else [])

    def word_tokens(self, word: str) -> int:
        """Tokens a word takes in the SenT' input: its subwords (at least one) and its sentinel."""
        return len(self.tokenizer(word, add_special_tokens=False)["input_ids"] or [0]) + 1

    @property
    def tag_block(self) -> int:
        """The most tokens a word takes in the target: the longest tag and its sentinel."""
        return max(len(t) for t in self.tag_ids) + 1

    @property
    def causal_overhead(self) -> int:
        """Tokens of a causal LM's one sequence that no word brings: the model's special tokens (the
        closing ones too, which a causal prompt leaves out: a bound, not a count), the input's and
        the target's ``s_0``, and the end of sequence; the demonstrations of an in-context teacher."""
        return len(self.context or self.prefix) + len(self.suffix) + 3

    def causal_tokens(self, words: list[str]) -> int:
        """The most tokens a causal LM's one sequence holds for ``words``, every word given the
        longest tag: the overhead, then each word's subwords and sentinel and its tag block."""
        return self.causal_overhead + sum(self.word_tokens(w) + self.tag_block for w in words)

    def allowed(self) -> tuple[Tensor, Tensor]:
        """sBIO constraints: ``start [T̄]`` (I may not start) and ``after [T̄, T̄]`` (I may not follow O)."""
        n = len(self.tags)
        start = torch.ones(n, dtype=torch.bool)
        start[1] = False
        after = torch.ones(n, n, dtype=torch.bool)
        after[0, 1] = False
        return start, after


def _special_wrap(tokenizer) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text ([CLS] .. [SEP], .. </s>)."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    for i in range(len(full) - len(plain) + 1):
        if full[i : i + len(plain)] == plain:
            return full[:i], full[i + len(plain) :]
    return [], []


def _sentinel_ids(tokenizer) -> list[int]:
    vocab = tokenizer.get_vocab()
    for pattern in ("<extra_id_{}>", "[unused{}]", "<unused{}>"):
        ids = []
        while pattern.format(len(ids)) in vocab:
            ids.append(vocab[pattern.format(len(ids))])
        if len(ids) >= 2:
            return ids
    raise ValueError(
        "the tokenizer has no sentinel tokens: SenT' needs <extra_id_N> (T5-style), [unusedN] (BERT "
        "vocabularies) or <unusedN> (Gemma)"
    )


@dataclass
class SentScoreOutput:
    tags: Tensor  # [B, K, L] tag indices into SentFormat.tags (-1 past the sentence), best beam first
    beam_scores: Tensor  # [B, K] total log-likelihood of each beam (-inf for beams that do not exist)
    tag_scores: Tensor  # [B, K, L, T̄] log-likelihood of "t s_i" at each step of each beam, -inf where t is invalid


def _decoder_start(model) -> int:
    cfg = model.config
    start = getattr(cfg, "decoder_start_token_id", None)
    if start is None and hasattr(model, "generation_config"):
        start = model.generation_config.decoder_start_token_id
    if start is None:
        raise ValueError("the model's config has no decoder_start_token_id")
    return int(start)


def is_causal(model) -> bool:
    """Whether ``model`` is a decoder-only LM (no encoder half)."""
    return not getattr(model.config, "is_encoder_decoder", False)


def context_limit(model) -> int | None:
    """Tokens a causal LM's one sequence may hold: its position table and, with sliding-window
    attention (Gemma 3), its window less one. A sliding-window layer of the key/value cache keeps only
    its last window - 1 tokens, and SenTScore's cache surgery (cutting a tag's block off, aligning
    rows) needs every token it fed, so the cache must never slide. A model whose ``layer_types``
    has no sliding layer left (an in-context teacher's, ``in_context.py``) has no window. None for
    models that are not causal."""
    if not is_causal(model):
        return None
    cfg = model.config
    limits = [getattr(cfg, "max_position_embeddings", None) or 1 << 30]
    layer_types = getattr(cfg, "layer_types", None)
    slides = "sliding_attention" in layer_types if layer_types else True  # no layer_types: every layer slides
    if getattr(cfg, "sliding_window", None) and slides:
        limits.append(cfg.sliding_window - 1)
    return min(limits)


def without_sliding_window(config):
    """``config`` with every sliding-window layer made a full-attention layer (Gemma 3's
    ``layer_types``; a model that slides in every layer, as Mistral, loses its ``sliding_window``)."""
    config = copy.deepcopy(config)
    if getattr(config, "layer_types", None):
        config.layer_types = ["full_attention" if t == "sliding_attention" else t for t in config.layer_types]
    elif getattr(config, "sliding_window", None):
        config.sliding_window = None
    return config


def pad_rows(seqs: list[list[int]], pad: int, left: bool = False) -> tuple[Tensor, Tensor]:
    """``ids, mask [B, S]`` of token lists padded with ``pad`` to the longest (on the left with
    ``left``)."""
    S = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), S), pad, dtype=torch.long)
    mask = torch.zeros(len(seqs), S, dtype=torch.long)
    for b, s in enumerate(seqs):
        cols = slice(S - len(s), S) if left else slice(0, len(s))
        ids[b, cols], mask[b, cols] = torch.tensor(s, dtype=torch.long), 1
    return ids, mask


def encode_prompts(
    fmt: SentFormat, batch_words: list[list[str]], device, after_context: bool = False
) -> tuple[Tensor, Tensor]:
    """Causal LMs: each prompt and the target's ``s_0``, left-padded (``ids, mask [B, P]``);
    with ``after_context``, without the demonstrations they start with (their cache is shared)."""
    cut = len(fmt.context) if after_context else 0
    seqs = [fmt.encode_input(w, causal=True)[cut:] + [fmt.sentinels[0]] for w in batch_words]
    ids, mask = pad_rows(seqs, fmt.tokenizer.pad_token_id or 0, left=True)
    return ids.to(device), mask.to(device)


def encode_sequences(fmt: SentFormat, batch_words: list[list[str]], batch_tags: list[list[str]]):
    """Causal LMs, teacher forcing: prompt + target per sentence, right-padded (``ids, mask,
    labels [B, S]``, labels -100 on the prompt and on padding: the loss is on the target only)."""
    seqs, labels = [], []
    for words, tags in zip(batch_words, batch_tags):
        prompt, target = fmt.encode_input(words, causal=True), fmt.encode_target(tags)
        seqs.append(prompt + target)
        labels.append([-100] * len(prompt) + target)
    ids, mask = pad_rows(seqs, fmt.tokenizer.pad_token_id or 0)
    return ids, mask, pad_rows(labels, -100)[0]


def encode_batch(fmt: SentFormat, batch_words: list[list[str]], device) -> tuple[Tensor, Tensor]:
    ids, mask = pad_rows([fmt.encode_input(w) for w in batch_words], fmt.tokenizer.pad_token_id or 0)
    return ids.to(device), mask.to(device)


def output_head(model) -> nn.Linear | None:
    """The model's output layer when it is a plain linear map that may be applied apart, at the
    scored positions only (T5's ``lm_head``, BERT's ``cls.predictions.decoder``, a causal LM's
    ``lm_head``); None when the model does more to its logits (``final_logit_softcapping``) or
    its output layer is not linear."""
    head = model.get_output_embeddings()
    capped = getattr(model.config, "final_logit_softcapping", None) is not None
    return head if isinstance(head, nn.Linear) and not capped else None


def project(head: nn.Linear | None, h: Tensor) -> Tensor:
    """Logits (float32) from states through ``head``, or ``h`` itself when it holds logits already."""
    return (nn.functional.linear(h, head.weight, head.bias) if head is not None else h).float()


class _Decoder:
    """The decoder over left-padded, gap-free rows with a key/value cache.

    A call returns the states *before* the output projection when the model's output layer is a
    plain linear map (T5's ``lm_head``, BERT's ``cls.predictions.decoder``): :meth:`project` then
    applies it to the positions that are scored only, which on a CPU is most of the cost (a
    30k-word projection per position). Other models return logits and ``project`` is the identity.

    Decision: the head's ``forward`` is replaced for the call rather than asking transformers'
    ``logits_to_keep``. That argument (causal LMs only; T5 and ``EncoderDecoderModel`` lack it)
    would still project inside every tag's call, reading the vocabulary matrix |T̄| times a step,
    where :meth:`project` reads it once a step for every tag's positions together.
    """

    def __init__(self, model, enc_h: Tensor | None = None, enc_mask: Tensor | None = None):
        self.model, self.enc_h, self.enc_mask = model, enc_h, enc_mask
        self.causal = enc_h is None  # a decoder-only LM: no encoder states, explicit positions
        self.absolute = model.config.model_type == "encoder-decoder"  # BERT-style decoder: explicit positions
        self._rows, self._enc = None, None
        # the key/value cache's argument: ``cache`` in transformers 5's newer models (``past_key_values``
        # is deprecated there, and removed in 5.40), ``past_key_values`` before and elsewhere
        self.cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self.head = output_head(model)

    def project(self, h: Tensor) -> Tensor:
        """Logits (float32) from what a call returned."""
        return project(self.head, h)

    @contextlib.contextmanager
    def without_head(self):
        """For the block, the model's output projection is skipped (:meth:`project` applies it)."""
        if self.head is not None:
            self.head.forward = _identity
        try:
            yield
        finally:
            if self.head is not None:
                del self.head.forward

    def __call__(self, rows: Tensor, ids: Tensor, mask: Tensor, cache, n_real: Tensor):
        """States for ``ids [R, C]`` after ``cache`` (rows ``R``, of sentences ``rows``);
        ``mask [R, past + C]``; ``n_real [R]`` real tokens before ``ids``."""
        if self.causal:  # positions count each row's real tokens (left padding included in mask)
            positions = n_real[:, None] + (mask[:, -ids.shape[1] :].cumsum(1) - 1).clamp(min=0)
            kwargs = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        else:
            from transformers.modeling_outputs import BaseModelOutput

            if rows is not self._rows:  # the encoder states of the rows, gathered once per set of rows
                self._rows, self._enc = rows, (self.enc_h[rows], self.enc_mask[rows])
            kwargs = {
                "encoder_outputs": BaseModelOutput(last_hidden_state=self._enc[0]),
                "attention_mask": self._enc[1],
                "decoder_input_ids": ids,
                "decoder_attention_mask": mask,
            }
            if self.absolute:
                kwargs["decoder_position_ids"] = n_real[:, None] + torch.arange(ids.shape[1], device=ids.device)
        with self.without_head():
            out = self.model(**{self.cache_arg: cache}, use_cache=True, **kwargs)
        cache = getattr(out, "cache", None)
        return out.logits, cache if cache is not None else out.past_key_values


def _identity(x: Tensor) -> Tensor:
    return x


def _self_attention_layers(cache):
    return getattr(cache, "self_attention_cache", cache).layers


def _set_states(layer, keys: Tensor, values: Tensor) -> None:
    """A cache layer's keys and values, replaced; a sliding-window layer's count of tokens seen
    follows them (it sizes the attention mask; the window itself is never reached, module docstring)."""
    layer.keys, layer.values = keys, values
    if hasattr(layer, "cumulative_length"):
        layer.cumulative_length = keys.shape[-2]


@torch.inference_mode()
def sentscore(
    model,
    fmt: SentFormat,
    batch_words: list[list[str]],
    k: int = 1,
    share_context: bool = True,
    search_class=None,
) -> SentScoreOutput:
    """Algorithm 1 over a batch of sentences, batched over sentences and beams; the |T̄| tags are
    scored by one decoder call each over all beams, every call reading the same prefix cache.
    An in-context teacher's demonstrations (``fmt.context``) are encoded once and their keys and
    values shared by every sentence and beam (``shared_prefix.py``; ``share_context=False``:
    encoded again before every prompt, the reference the sharing is checked and timed against).

    ``search_class``: the class that holds the search's state and runs its steps, :class:`_BeamSearch`
    when None; ``sentscore_static.sentscore`` passes its static search (and picks it on a GPU)."""
    B = len(batch_words)
    if not B or any(not w for w in batch_words):
        raise ValueError("SenTScore needs a non-empty batch of non-empty sentences")
    order = sorted(range(B), key=lambda b: -len(batch_words[b]))  # longest first: live sentences are a prefix
    words = [batch_words[b] for b in order]
    lengths = [len(w) for w in words]
    shared = share_context and bool(fmt.context) and is_causal(model)
    states = _context_states(model, fmt, next(model.parameters()).device) if shared else None
    with attached(model, states) if shared else contextlib.nullcontext():
        search = (search_class or _BeamSearch)(model, fmt, words, k, shared)
        for i in range(1, lengths[0] + 1):
            search.drop_finished(sum(1 for x in lengths if x >= i))
            step, blocks = search.score_tags(i)  # eq. 1, every tag after every beam
            src, tag = search.choose(step, i)
            search.keep(src, tag, blocks)
            if i < lengths[0]:
                search.feed_sentinel(i)
    _refuse_nan(search.first_nan, words)
    device = search.device
    inverse = torch.empty(B, dtype=torch.long, device=device)
    inverse[torch.tensor(order, device=device)] = torch.arange(B, device=device)
    return SentScoreOutput(search.tags[inverse], search.beam[inverse], search.scores[inverse])


class _BeamSearch:
    """The state of Algorithm 1 over a batch of sentences sorted longest first, K beams each, and
    its steps: :meth:`score_tags` (eq. 1), :meth:`choose` (the top K of beam x tag), :meth:`keep`
    (the kept beams' cache), :meth:`feed_sentinel`. Rows are sentence-major (``live * k``); the
    sentences that have ended leave the batch (:meth:`drop_finished`) and keep their results."""

    def __init__(self, model, fmt: SentFormat, words: list[list[str]], k: int, after_context: bool = False):
        device = self.device = next(model.parameters()).device
        self.fmt, self.k = fmt, k
        B, L = len(words), len(words[0])
        self.causal = is_causal(model)
        cache, before = None, torch.zeros(B, dtype=torch.long, device=device)
        if self.causal:  # the prompts and the target's s_0, left-padded, in one call
            _refuse_too_long(fmt, words, context_limit(model))
            self.dec = _Decoder(model)
            prefix, first_mask = encode_prompts(fmt, words, device, after_context=after_context)
            if after_context:  # the demonstrations are attended to apart (shared_prefix.py): positions after them
                before = before + len(fmt.context)
        else:  # the encoder, then the decoder prefix [decoder start, s_0] of every sentence
            enc_ids, enc_mask = encode_batch(fmt, words, device)
            enc_h = model.get_encoder()(input_ids=enc_ids, attention_mask=enc_mask).last_hidden_state
            self.dec = _Decoder(model, enc_h, enc_mask)
            prefix = torch.tensor([_decoder_start(model), fmt.sentinels[0]], device=device).expand(B, 2)
            first_mask = torch.ones(B, 2, dtype=torch.long, device=device)
        self._start(B, L)

        # the prefix of every sentence, then K beams per sentence (sentence-major rows)
        logits, cache = self.dec(torch.arange(B, device=device), prefix, first_mask, cache, before)
        self.last = torch.log_softmax(self.dec.project(logits[:, -1]), -1).repeat_interleave(k, 0)  # [R, V]
        cache.batch_repeat_interleave(k)
        self.cache = cache
        self.rows = torch.arange(B, device=device).repeat_interleave(k)  # the sentence of each row
        self.mask = first_mask.repeat_interleave(k, 0)
        self.n_real = self.mask.sum(1) + before.repeat_interleave(k)  # real tokens, the shared prefix's too

    def _start(self, B: int, L: int) -> None:
        """The tags' tokens and constraints, and the search's results before its first step."""
        device, fmt, k, n_t = self.device, self.fmt, self.k, len(self.fmt.tags)
        self.tag_tokens = [torch.tensor(t, device=device) for t in fmt.tag_ids]
        self.tag_lens = [len(t) for t in fmt.tag_ids]  # the blocks of tag tokens, on the host: reading them is free
        self.tag_len = torch.tensor(self.tag_lens, device=device)
        self.C = max(self.tag_lens)
        self.start_ok, self.after_ok = (x.to(device) for x in fmt.allowed())
        self.beam = torch.full((B, k), float("-inf"), device=device)
        self.beam[:, 0] = 0.0  # at the start all beams are the same: keep one
        self.prev_tag = torch.full((B, k), -1, dtype=torch.long, device=device)
        self.tags = torch.full((B, k, L), -1, dtype=torch.long, device=device)
        self.scores = torch.full((B, k, L, n_t), float("-inf"), device=device)
        self.first_nan = torch.zeros(B, dtype=torch.long, device=device)  # the first word a NaN came at (0: none)
        self.live = B

    def drop_finished(self, n: int) -> None:
        """Keep the first ``n`` sentences (the others have ended: their results are recorded)."""
        if n < self.live:
            keep = torch.arange(n * self.k, device=self.device)
            self.cache.batch_select_indices(keep)
            self.rows, self.mask, self.n_real, self.last = (
                x[keep] for x in (self.rows, self.mask, self.n_real, self.last)
            )
            self.live = n

    def score_tags(self, i: int) -> tuple[Tensor, list]:
        """eq. 1: log L("t s_i" | beam) for every beam and tag ``[R, |T̄|]``, and each tag's block of
        the cache (its keys and values, per layer), the cache itself back to the prefix."""
        R, fmt, dec = self.live * self.k, self.fmt, self.dec
        step = torch.empty(R, len(fmt.tags), device=self.device)
        blocks, scored, targets = [], [], []
        for t, tokens in enumerate(self.tag_tokens):
            ids = tokens.expand(R, -1)  # the tag's tokens; s_i is scored, not fed
            m = ids.shape[1]
            states, self.cache = dec(
                self.rows, ids, torch.cat([self.mask, self.mask.new_ones(R, m)], 1), self.cache, self.n_real
            )
            self._scored(step, t, ids, states, i, scored, targets)
            layers = _self_attention_layers(self.cache)
            blocks.append(
                [(layer.keys[..., -m:, :].clone(), layer.values[..., -m:, :].clone()) for layer in layers]
            )  # small: free the rest
            for layer in layers:  # back to the prefix (views; the next call copies)
                _set_states(layer, layer.keys[..., :-m, :], layer.values[..., :-m, :])
        self._project_scored(step, scored, targets)
        return _note_nan(step, self.first_nan, self.live, self.k, i), blocks

    def _scored(self, step: Tensor, t: int, ids: Tensor, states: Tensor, i: int, scored: list, targets: list) -> None:
        """Tag ``t``'s first token scored from the prefix's last prediction into ``step[:, t]``; the
        states of its call (the positions that predict tokens 2..m, then s_i) and their targets kept
        for :meth:`_project_scored`."""
        R = ids.shape[0]
        scored.append(states.reshape(R * ids.shape[1], -1))
        targets.append(torch.cat([ids[:, 1:], ids.new_full((R, 1), self.fmt.sentinels[i])], 1).reshape(-1))
        step[:, t] = self.last.gather(1, ids[:, :1]).squeeze(1)

    def _project_scored(self, step: Tensor, scored: list, targets: list) -> None:
        """eq. 1's remaining terms added to ``step``: one output projection over every tag's scored
        positions, so the vocabulary matrix is read once a step, not once a tag (Gemma 3's is
        262k x 640, and reading it is most of a step's cost)."""
        logits = self.dec.project(torch.cat(scored))
        logp = logits.gather(1, torch.cat(targets)[:, None]).squeeze(1) - logits.logsumexp(-1)
        for t, part in enumerate(logp.split([len(x) for x in targets])):
            step[:, t] += part.view(step.shape[0], -1).sum(1)

    def _chosen_blocks(self, blocks: list, j: int, which: int, chosen: Tensor, take: Tensor) -> Tensor:
        """Layer ``j``'s keys (``which`` 0) or values (1) of each kept row's chosen tag: every tag's
        block padded to C and stacked ``[T̄, R, H, C, D]``, each row taking its tag's."""
        C = self.C
        padded = [nn.functional.pad(b[j][which], (0, 0, 0, C - n)) for b, n in zip(blocks, self.tag_lens)]
        return torch.stack(padded)[chosen, take]

    def choose(self, step: Tensor, i: int) -> tuple[Tensor, Tensor]:
        """The top K extensions over (beam, tag) of every sentence, constrained (an invalid sBIO
        continuation scores -inf); records their tags, scores and beam scores. Returns ``[live, K]``:
        the beam each new beam extends, and with which tag."""
        live, k, n_t = self.live, self.k, len(self.fmt.tags)
        step = step.view(live, k, n_t)
        prev = self.prev_tag[:live]
        ok = torch.where(prev[:, :, None] < 0, self.start_ok.expand(live, k, n_t), self.after_ok[prev.clamp(min=0)])
        step = step.masked_fill(~ok, float("-inf"))
        total = self.beam[:live, :, None] + step
        top, arg = total.view(live, k * n_t).topk(k, dim=1)
        src, tag = arg // n_t, arg % n_t
        L = self.tags.shape[2]
        self.tags[:live] = self.tags[:live].gather(1, src[..., None].expand(-1, -1, L))
        self.tags[:live, :, i - 1] = tag
        self.scores[:live] = self.scores[:live].gather(1, src[..., None, None].expand(-1, -1, L, n_t))
        self.scores[:live, :, i - 1] = step.gather(1, src[..., None].expand(-1, -1, n_t))
        self.beam[:live], self.prev_tag[:live] = top, tag
        return src, tag

    def keep(self, src: Tensor, tag: Tensor, blocks: list) -> None:
        """The new cache: each kept beam's prefix and its chosen tag's block, right-aligned (padding
        rolled left); for causal LMs the columns that are padding in every row are dropped (module
        docstring): counting them is the search's one host synchronisation a step
        (``sentscore_static.py`` has none: its cache is of the batch's final width). The cross-attention cache needs no
        selection: beams of one sentence share it."""
        device, C = self.device, self.C
        take = (torch.arange(self.live, device=device)[:, None] * self.k + src).reshape(-1)
        chosen = tag.reshape(-1)
        used = self.tag_len[chosen]
        width = self.mask.shape[1] + C
        index = (torch.arange(width, device=device)[None] - (C - used)[:, None]) % width
        new_mask = torch.cat([self.mask[take], (torch.arange(C, device=device)[None] < used[:, None]).long()], 1)
        mask = new_mask.gather(1, index)
        lead = int((mask == 0).all(0).long().cumprod(0).sum()) if self.causal else 0
        self.mask = mask[:, lead:]
        for j, layer in enumerate(_self_attention_layers(self.cache)):
            states = []
            for attr, which in (("keys", 0), ("values", 1)):
                block = self._chosen_blocks(blocks, j, which, chosen, take)
                full = torch.cat([getattr(layer, attr)[take], block], 2)
                aligned = full.gather(2, index[:, None, :, None].expand(-1, full.shape[1], -1, full.shape[-1]))
                states.append(aligned[:, :, lead:])
            _set_states(layer, *states)
        self.n_real = self.n_real[take] + used

    def feed_sentinel(self, i: int) -> None:
        """s_i, fed once after the chosen tag of every beam: the next step's prefix ends with it."""
        R = self.live * self.k
        ids = torch.full((R, 1), self.fmt.sentinels[i], dtype=torch.long, device=self.device)
        self.mask = torch.cat([self.mask, self.mask.new_ones(R, 1)], 1)
        states, self.cache = self.dec(self.rows, ids, self.mask, self.cache, self.n_real)
        self.last = torch.log_softmax(self.dec.project(states[:, -1]), -1)
        self.n_real = self.n_real + 1


def _context_states(model, fmt: SentFormat, device) -> list:
    """Each layer's keys and values of an in-context teacher's demonstrations (``fmt.context``),
    computed once per model, device and autocast precision and kept on ``fmt``
    (``shared_prefix.py`` attends to them without copying them into the rows' cache)."""
    from .shared_prefix import prefix_states

    dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None
    key = (id(model), str(device), dtype, tuple(fmt.context))
    kept = getattr(fmt, "_context_states", None)
    if kept is None or kept[0] != key:
        fmt._context_states = kept = (key, prefix_states(model, torch.tensor([fmt.context], device=device)))
    return kept[1]


def _refuse_too_long(fmt: SentFormat, words: list[list[str]], limit: int) -> None:
    """A sentence whose one sequence could outgrow the causal LM's context would make the cache
    slide or run past the positions (:func:`context_limit`); it is refused, naming it. The
    teacher (``kinds/sentscore.py``) splits such sentences into pieces before they come here."""
    for w in words:
        n = fmt.causal_tokens(w)
        if n > limit:
            raise ValueError(
                f"SenTScore: the sentence {' '.join(w[:12])!r} ({len(w)} words) can take {n} tokens as prompt and "
                f"target, over the {limit} this causal LM's context allows: split it into pieces first "
                "(SentScoreTeacher.decode_batch does)"
            )


def _note_nan(step: Tensor, first_nan: Tensor, live: int, k: int, i: int) -> Tensor:
    """A NaN log-likelihood must not reach ``topk``, whose indices would then be meaningless (on a
    GPU, out of bounds: a device-side assert far from the cause). It is made -inf here and the
    first word it came at is noted per sentence, on the device: checking it at every step would
    stop the host for the device once a step. :func:`_refuse_nan` reads the notes once, at the end."""
    bad = torch.isnan(step)
    hit = bad.view(live, k, -1).any(2).any(1) & (first_nan[:live] == 0)
    first_nan[:live] = torch.where(hit, i, first_nan[:live])
    return step.masked_fill(bad, float("-inf"))


def _refuse_nan(first_nan: Tensor, words: list[list[str]]) -> None:
    """Refuse a batch in which the model gave NaN scores (:func:`_note_nan`), naming the first
    such sentence and word."""
    if bool((first_nan > 0).any()):
        row = int((first_nan > 0).nonzero()[0, 0])
        raise ValueError(
            f"SenTScore: the model gave NaN log-likelihoods at word {int(first_nan[row])} of the sentence "
            f"{' '.join(words[row][:12])!r}: its outputs cannot be scored (check its weights and the precision "
            "it runs in)"
        )


@torch.inference_mode()
def sentscore_one_at_a_time(model, fmt: SentFormat, words: list[str]) -> tuple[list[int], list[list[float]]]:
    """Greedy SenTScore for one sentence, scoring each candidate "t s_i" by a full decoder pass over
    prefix + candidate (no cache, no batching): the reference for tests and the baseline of the
    benchmark. Returns the tag indices and the per-step scores of every tag."""
    device = next(model.parameters()).device
    if is_causal(model):
        prefix = fmt.encode_input(words, causal=True) + [fmt.sentinels[0]]

        def run(seq: list[int]) -> Tensor:
            return model(input_ids=torch.tensor([seq], device=device)).logits

    else:
        from transformers.modeling_outputs import BaseModelOutput

        enc_ids, enc_mask = encode_batch(fmt, [words], device)
        enc_h = model.get_encoder()(input_ids=enc_ids, attention_mask=enc_mask).last_hidden_state
        prefix = [_decoder_start(model), fmt.sentinels[0]]

        def run(seq: list[int]) -> Tensor:
            ids = torch.tensor([seq], device=device)
            return model(
                encoder_outputs=BaseModelOutput(last_hidden_state=enc_h), attention_mask=enc_mask, decoder_input_ids=ids
            ).logits

    start_ok, after_ok = fmt.allowed()
    chosen, all_scores = [], []
    for i in range(1, len(words) + 1):
        step = []
        for t, tag_ids in enumerate(fmt.tag_ids):
            ok = bool(start_ok[t]) if not chosen else bool(after_ok[chosen[-1], t])
            cont = tag_ids + [fmt.sentinels[i]]
            logp = torch.log_softmax(run(prefix + cont).float(), dim=-1)[0]
            s = sum(logp[len(prefix) - 1 + j, tok].item() for j, tok in enumerate(cont))
            step.append(s if ok else float("-inf"))
        best = max(range(len(step)), key=step.__getitem__)
        chosen.append(best)
        all_scores.append(step)
        prefix += fmt.tag_ids[best] + [fmt.sentinels[i]]
    return chosen, all_scores
