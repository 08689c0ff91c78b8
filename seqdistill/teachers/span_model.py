"""GLiNER-family span models read through their own package (issue 71): loading a model directory,
and the full span-by-type logit tensor of pre-split words, whatever the number of types and the
length of the sentence.

Decisions, named here:

* **The package.** ``gliner-py`` (the ``gliner`` module; ``pip install 'seqdistill[gliner]'``), a
  maintained fork of urchade/GLiNER with the same API that installs beside transformers 5: the
  reference ``gliner`` 0.2.29 caps ``transformers<5.17``, below the version this project runs. Either
  provides the ``gliner`` module this code imports.
* **What is called.** ``GLiNER.from_pretrained(DIR, local_files_only=True)`` loads a directory (the
  package reads ``model.safetensors`` where it exists, else ``pytorch_model.bin`` through
  ``torch.load(..., weights_only=True)``: no full unpickle). Scores come from the package's batch
  methods, never from ``predict_entities``' thresholded output: ``prepare_base_input`` (the words as
  given), ``collate_batch`` (its tokenizer and span indices) and ``run_batch`` (the forward pass),
  whose ``logits`` are ``[B, L, W, C]`` for a span-level model (``markerV0`` and the other span
  modes) and ``[B, L, C, 3]`` (start, end, inside) for a token-level one (NuNER Zero style).
* **A token-level model's span score** is the package's own (``TokenDecoder._calculate_span_score``):
  the minimum of the start, end and every inside probability, i.e. in logits
  ``l(i, w, c) = min(start[i, c], end[i + w, c], min_{i <= t <= i + w} inside[t, c])`` (sigmoid is
  monotone); spans of at most ``max_width`` words (the model's config, else 12, GLiNER's default).
* **More types than ``max_types``** (the model's config, 25 by default) go in groups of at most that
  many, one pass each, and their scores are concatenated along the type axis.
* **Sentences longer than ``max_len`` words** (the model's config; 384 by default) go in windows of
  ``max_len`` words that overlap by half; each span takes its scores from the window where it sits
  furthest from an edge (the most context on both sides). A sentence that fits is one pass.
* **Spans past a sentence's end** have logit -inf: no such span.
* **Remote code.** The package builds the backbone with ``trust_remote_code=True`` from the config
  that the directory holds; a config whose backbone names code of its own (``auto_map``) is refused
  unless the user passes ``--trust-remote-code``.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .base import GLINER_CONFIG, GLINER_WEIGHTS, TeacherError

DEFAULT_MAX_WIDTH = 12  # GLiNER's own default span width, for token-level models that have none
INSTALL = "pip install 'seqdistill[gliner]'"


def gliner_config(d, trust_remote_code: bool = False) -> dict:
    """A GLiNER directory's ``gliner_config.json``, refused by name where its backbone would run
    code of its own without ``trust_remote_code``."""
    path = Path(d) / GLINER_CONFIG
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise TeacherError(f"{path}: not a readable GLiNER config ({e})") from None
    for key in ("encoder_config", "labels_encoder_config"):
        if isinstance(config.get(key), dict) and config[key].get("auto_map") and not trust_remote_code:
            raise TeacherError(
                f"{path}: its {key} names Python code of its own (auto_map); pass --trust-remote-code to allow it"
            )
    if not any((Path(d) / name).is_file() for name in GLINER_WEIGHTS):
        raise TeacherError(f"{d}: a GLiNER config without weights ({' or '.join(GLINER_WEIGHTS)})")
    return config


def span_geometry(config: dict) -> tuple[int, int, int, bool]:
    """``(max_width, max_len, max_types, token_level)`` of a GLiNER config."""
    token_level = config.get("span_mode") == "token_level"
    width = int(config.get("max_width") or DEFAULT_MAX_WIDTH)
    return width, int(config.get("max_len") or 384), int(config.get("max_types") or 25), token_level


def load_gliner(d, trust_remote_code: bool = False):
    """The GLiNER model a directory holds, through the package, in eval mode on the CPU."""
    gliner_config(d, trust_remote_code)
    if importlib.util.find_spec("gliner") is None:
        raise TeacherError(f"{d}: a GLiNER span model needs the gliner package: {INSTALL}")
    import warnings

    from gliner import GLiNER

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the package warns about truncation and variants we do not use
        model = GLiNER.from_pretrained(str(d), local_files_only=True, load_tokenizer=True)
    model.eval()
    return model


@dataclass(frozen=True)
class Piece:
    """One pass's words: sentence ``sentence``'s words ``offset .. offset + len(words) - 1``."""

    sentence: int
    offset: int
    words: list[str]


def windows(batch_words: list[list[str]], max_len: int) -> list[Piece]:
    """Every sentence whole where it fits in ``max_len`` words, else in windows of ``max_len``
    words whose starts are ``max_len // 2`` apart, the last one ending at the sentence's end."""
    pieces = []
    for s, words in enumerate(batch_words):
        n = len(words)
        if n <= max_len:
            pieces.append(Piece(s, 0, list(words)))
            continue
        stride = max(1, max_len // 2)
        starts = list(range(0, n - max_len, stride)) + [n - max_len]
        pieces += [Piece(s, o, list(words[o : o + max_len])) for o in starts]
    return pieces


def type_groups(names: list[str], max_types: int) -> list[list[str]]:
    """The type names in groups of at most ``max_types``, in order."""
    return [names[i : i + max_types] for i in range(0, len(names), max_types)]


def token_span_logits(scores: Tensor, width: int) -> Tensor:
    """Span logits ``[B, L, W, C]`` of a token-level model's ``[B, L, C, 3]`` (start, end, inside)
    logits: the minimum over the span's start, end and inside logits (module docstring)."""
    start, end, inside = scores.unbind(-1)  # [B, L, C] each
    B, L, C = start.shape
    out = scores.new_full((B, L, width, C), float("-inf"))
    running = inside.clone()  # min of inside over words i .. i + w
    for w in range(min(width, L)):
        if w:
            running = torch.minimum(running[:, : L - w], inside[:, w:])
        out[:, : L - w, w] = torch.minimum(torch.minimum(start[:, : L - w], end[:, w:]), running[:, : L - w])
    return out


class SpanScorer:
    """The full span-by-type logits of a GLiNER model for batches of pre-split words."""

    def __init__(self, model, names: list[str]):
        self.model, self.names = model, list(names)
        config = model.config.to_dict() if hasattr(model.config, "to_dict") else dict(vars(model.config))
        self.max_width, self.max_len, self.max_types, self.token_level = span_geometry(config)

    def prepare(self, batch_words: list[list[str]]) -> tuple[list[Piece], list[dict]]:
        """The host side of a batch: its pieces and, for each type group, the package's collated
        inputs (its tokenizer runs here)."""
        pieces = windows(batch_words, self.max_len)
        inputs = self.model.prepare_base_input([p.words for p in pieces])
        return pieces, [self.model.collate_batch(inputs, group) for group in type_groups(self.names, self.max_types)]

    def logits(self, batch_words: list[list[str]], prepared=None) -> Tensor:
        """``[B, L, W, C]`` span logits (``L``: the longest sentence; types in ``names`` order)."""
        pieces, batches = prepared if prepared is not None else self.prepare(batch_words)
        per_group = [
            self._piece_logits(batch, len(group))
            for batch, group in zip(batches, type_groups(self.names, self.max_types))
        ]
        piece_logits = torch.cat(per_group, dim=-1)  # [P, Lp, W, C]
        return self._join(batch_words, pieces, piece_logits)

    def _piece_logits(self, batch: dict, types: int) -> Tensor:
        out = self.model.run_batch(batch)
        scores = out.logits if isinstance(out.logits, Tensor) else torch.from_numpy(out.logits)
        scores = scores.float()
        if self.token_level:
            scores = token_span_logits(scores[:, :, :types], self.max_width)
        return scores[..., :types]

    def _join(self, batch_words, pieces: list[Piece], piece_logits: Tensor) -> Tensor:
        B, L = len(batch_words), max(len(w) for w in batch_words)
        W, C = self.max_width, piece_logits.shape[-1]
        out = piece_logits.new_full((B, L, W, C), float("-inf"))
        best = torch.full((B, L, W), -1, dtype=torch.long)  # margin of the window a span is taken from
        for p, piece in enumerate(pieces):
            m, n = len(piece.words), len(batch_words[piece.sentence])
            for w in range(min(W, m)):
                starts = torch.arange(m - w)
                # distance to the nearer edge of the window; a window edge at the sentence's edge is no edge
                far = torch.full_like(starts, 1 << 20)
                left = far if piece.offset == 0 else starts
                right = far if piece.offset + m == n else m - 1 - (starts + w)
                margin = torch.minimum(left, right)
                words = starts + piece.offset
                better = margin > best[piece.sentence, words, w]
                sel = words[better]
                best[piece.sentence, sel, w] = margin[better]
                out[piece.sentence, sel, w] = piece_logits[p, starts[better], w]
        for s, words in enumerate(batch_words):  # spans that run past the end: none
            n = len(words)
            for w in range(W):
                out[s, max(0, n - w) :, w] = float("-inf")
        return out

    def greedy(self, batch_words: list[list[str]], threshold: float = 0.5, prepared=None) -> list[list[tuple]]:
        """The model's own decoding of each sentence, as its users get it from ``predict_entities``
        with ``flat_ner=True``, over the same windows and type groups as :meth:`logits`
        (:meth:`greedy_spans` of its logits)."""
        return self.greedy_spans(self.logits(batch_words, prepared), threshold)

    def greedy_spans(self, logits: Tensor, threshold: float = 0.5) -> list[list[tuple]]:
        """Every span of ``logits`` (``[B, L, W, C]``, -inf past a sentence's end) whose probability
        passes ``threshold``, through the package's ``greedy_search`` (the best first, dropping any
        that overlaps one kept): ``(start, end_exclusive, type index)`` spans of each sentence."""
        from gliner.decoding.decoder import Span

        probs = torch.sigmoid(logits.float().cpu())  # 0 past a sentence's end
        out = []
        for s in range(probs.shape[0]):
            found = torch.nonzero(probs[s] > threshold).tolist()
            spans = [Span(i, i + w, str(c), float(probs[s, i, w, c])) for i, w, c in found]
            kept = self.model.decoder.greedy_search(spans, flat_ner=True, multi_label=False)
            out.append(sorted((sp.start, sp.end + 1, int(sp.entity_type)) for sp in kept))
        return out
