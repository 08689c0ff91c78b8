"""Multi-Grained KD (paper 000): a BiLSTM-CRF student from a CRF (or softmax) teacher's cache.

A softmax teacher's layer holds k-best paths and marginals under its scheme CRF
(``teachers/paths.py``), so every loss takes it; a layer without a loss's fields (built before
softmax layers had paths, or with ``--no-marginals``) is refused by the names of those fields.

The loss is the fixed-weight (eq. 8, the default) or uncertainty-weighted (eq. 9) sum of the chosen parts:
``hard`` (eq. 7), ``seq-ce`` (eq. 4), ``fuzzy`` (eq. 6), ``token-em`` and ``token-pos`` (eq. 10).
Hard labels are the gold tags on labelled rows and the teacher's best path on unlabelled rows;
the sequence losses use the teacher's k-best paths of both (§3.2).

Several teachers (``--teachers A,B``, issue 81): every teacher loss, the hard loss of unlabelled
rows included, is each teacher's, mixed per sentence by the teachers' shares (``teacher_shares``:
paper 002's eq. 2 weights, normalised; uniform; or each teacher's probability of its own best path,
normalised, ``losses.confidence_shares``), so that a row's targets are the mixture of
its teachers' distributions; gold rows keep their gold tags. AdamW, one stage, early
stopping on dev F1 with patience 5 (without a dev split: on the training loss), the best epoch's
student saved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import numpy as np
import torch

from ...cache_schema import EXAMPLES_LAYER, CacheError, LabelSchema
from ...crf import log_partition
from ...tokenization import PieceMemo, WordBatch, WordHashing, words_to_bags
from .. import losses as L
from ..archs import architectures
from ..archs.bilstm_crf import BiLSTMCRF, BiLSTMCRFConfig
from ..archs.cnn_crf import CNNCRFConfig
from ..base import EMBEDDINGS, init_embeddings
from ..common import check_embedding_dim, default_splits, dev_f1, open_cache, read_split, teacher_exports
from ..config import RunConfig, option
from ..data import pad_stack, parse_selection
from ..engine import Context, Plan, Stage
from ..word_vectors import HashedWordVectors, WordVectors, read_word_vectors
from . import Recipe


class Scores:
    """The student's scores of one batch that the losses share: emissions, mask, CRF scores, log Z,
    and the student's log-probabilities of the teacher's k-best paths (computed once, when a loss
    first asks)."""

    def __init__(self, model: BiLSTMCRF, batch: "Batch", device):
        self.batch, self.device = batch, device
        words = batch.words.to(device)
        self.emissions, self.mask = model(words), words.mask
        self.trans, self.start, self.end = model.crf.scores()
        self.log_z = log_partition(self.emissions, self.mask, self.trans, self.start, self.end)
        self._paths: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def kbest(self, i: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(teacher's, student's) log-probabilities of teacher ``i``'s k-best paths."""
        if i not in self._paths:
            target = self.batch.teachers[i]
            t_lp = target.kbest_log_probs.to(self.device)
            paths = target.kbest_paths.to(self.device)
            s_lp = L.student_path_log_probs(
                self.emissions, self.mask, paths, self.trans, self.start, self.end, self.log_z
            )
            self._paths[i] = (t_lp, s_lp)
        return self._paths[i]


def mixed(s: Scores, value: Callable[[int], torch.Tensor], rows: torch.Tensor | None = None) -> torch.Tensor:
    """sum_i a_i * value(i), per sentence: each teacher's loss (``value(i)``, one value per sentence
    of ``rows``, or of the batch) mixed by its share of the sentence (``Batch.shares``, ``[N, B]``);
    with one teacher, its loss as it is."""
    total = value(0)
    if s.batch.shares is None:
        return total
    shares = s.batch.shares.to(s.device)
    shares = shares if rows is None else shares[:, rows]
    total = shares[0] * total
    for i in range(1, len(s.batch.teachers)):
        total = total + shares[i] * value(i)
    return total


def _hard(s: Scores, cfg) -> torch.Tensor | None:
    has = s.batch.teachers[0].tags.to(s.device)[:, 0] >= 0  # every teacher layer covers the same rows
    if not has.any():
        return None  # no row of the batch has gold tags or teacher paths

    emissions, mask = s.emissions[has], s.mask[has]
    log_z = log_partition(emissions, mask, s.trans, s.start, s.end)  # once for every teacher's labels

    def value(i: int) -> torch.Tensor:
        tags = s.batch.teachers[i].tags.to(s.device)  # gold where there is gold: the same for every teacher
        return L.hard_loss(emissions, mask, tags[has], s.trans, s.start, s.end, log_z)

    return mixed(s, value, has).mean()


def _seq_ce(s: Scores, cfg) -> torch.Tensor:
    seq_ce = L.seq_ce_loss if cfg.residual else L.seq_ce_renormalised_loss

    def value(i: int) -> torch.Tensor:
        t_lp, s_lp = s.kbest(i)
        return seq_ce(L.tempered_kbest(t_lp, cfg.seq_temperature), s_lp)

    return mixed(s, value).mean()


def _fuzzy(s: Scores, cfg) -> torch.Tensor:
    return mixed(s, lambda i: L.seq_fuzzy_loss(*s.kbest(i))).mean()


def _token_em(s: Scores, cfg) -> torch.Tensor:
    def value(i: int) -> torch.Tensor:
        p_t = L.teacher_softmax(s.batch.teachers[i].teacher_emissions.to(s.device), cfg.temperature)
        return L.token_kl_loss(s.emissions, p_t, s.mask, cfg.temperature)

    return mixed(s, value).mean()


def _token_pos(s: Scores, cfg) -> torch.Tensor:
    def value(i: int) -> torch.Tensor:
        p_t = s.batch.teachers[i].teacher_marginals.to(s.device)
        return L.token_kl_loss(s.emissions, p_t, s.mask, cfg.temperature)

    return mixed(s, value).mean()


@dataclass(frozen=True)
class LossPart:
    """One loss of the recipe, declared once: its name, what it reads from the cache (``kbest``:
    the teacher's k-best paths; ``dense``: batch attribute -> cache field, by teacher kind), and how
    it is computed (a mean over the batch's sentences)."""

    name: str
    compute: Callable[[Scores, object], torch.Tensor | None]
    kbest: bool = False
    dense: Callable[[str], dict[str, str]] = lambda kind: {}

    def reads(self, kind: str) -> list[str]:
        """The teacher layer's fields this loss reads."""
        return (list(KBEST_FIELDS) if self.kbest else []) + list(self.dense(kind).values())


KBEST_FIELDS = ("kbest_paths", "kbest_log_probs")
PATH_KINDS = ("crf", "softmax", "span")  # the kinds whose layers hold global path probabilities and marginals
TAG_FIELDS = ("emissions", "logits", "marginals")  # per-word fields with one value per tag of the label schema
TEACHER_SHARES = ("mt", "uniform", "confidence")
SHARES_READ = {  # --teacher-shares -> the field of every teacher layer it reads, and what that field is to it
    "mt": ("gold_nll", "eq. 2's CE(y, y_i)"),
    "confidence": ("kbest_log_probs", "the probability of its best path"),
}


LOSS_TABLE = (  # in the order the losses are computed
    LossPart("hard", _hard),  # eq. 7: gold tags, or the teacher's best path on unlabelled rows
    LossPart("seq-ce", _seq_ce, kbest=True),  # eq. 4
    LossPart("fuzzy", _fuzzy, kbest=True),  # eq. 6
    LossPart(  # eq. 10 over the teacher's emissions (a softmax teacher: its logits)
        "token-em", _token_em, dense=lambda kind: {"teacher_emissions": "emissions" if kind == "crf" else "logits"}
    ),
    LossPart("token-pos", _token_pos, dense=lambda kind: {"teacher_marginals": "marginals"}),  # eq. 10
)
LOSSES = tuple(part.name for part in LOSS_TABLE)


def chosen(losses) -> list[LossPart]:
    """The table's entries of the chosen losses, in the table's order."""
    return [part for part in LOSS_TABLE if part.name in losses]


@dataclass
class MGKDConfig(RunConfig):
    teacher: str | None = option(None, "Teacher layer to learn from (default: the cache's only one).")
    # Issue 81: two teachers that disagree (on Wikipedia's MISC spans, MPNet and Gemma agree on 56-67%)
    teachers: tuple[str, ...] = option(
        (),
        "Several teacher layers of the cache at once, comma-separated, instead of --teacher: each teacher loss is "
        "every teacher's, mixed per sentence by --teacher-shares; the input table and tokenizer are "
        "--embeddings-teacher's, or the first teacher's.",
    )
    teacher_shares: str = option(
        "mt",
        "With --teachers: each sentence's teachers weighted as MT-Dis weights them, 1 / (1 + the teacher's gold "
        "cross-entropy per word) (paper 002, eq. 2; 1 on unlabelled rows), normalised to sum to 1; uniformly; or by "
        "confidence, each teacher's probability of its own best path, normalised (on every row, unlabelled ones too).",
        choices=TEACHER_SHARES,
    )
    # Issue 72: a cased 303M-weight teacher (EmbeddingGemma) labels better than MPNet-base, but its
    # 262,144-piece tokenizer alone is twice spaCy's size, so its student reads MPNet's table instead.
    embeddings_teacher: str | None = option(
        None,
        "Teacher layer whose input embeddings and tokenizer the student reads (default: --teacher's): another "
        "teacher of the same cache, e.g. a small teacher's table under a large teacher's paths, when the large "
        "one's tokenizer would not fit the student's size.",
    )
    losses: tuple[str, ...] = option(("hard", "seq-ce", "fuzzy"), "Loss parts, comma-separated.", choices=LOSSES)
    k: int = option(5, "k-best paths used by seq-ce and fuzzy (at most the K the cache holds).")
    # Fixed weights by default, not the paper's eq. 9: over 3 seeds they scored higher at both
    # scales measured (docs/RESULTS.md, issue 22: +0.26 ± 0.13 on full CoNLL-2003, +1.2 at 10% gold).
    weighting: str = option(
        "fixed",
        "Fixed (eq. 8) or learned (eq. 9, the paper's choice) loss weights.",
        choices=("fixed", "uncertainty"),
    )
    weights: tuple[float, ...] = option((), "Fixed weights, comma-separated, one per loss (default 1).")
    temperature: float = option(1.0, "Temperature of the token-level losses.")
    seq_temperature: float = option(
        1.0,
        "T of the teacher's k-best distribution in seq-ce: p_j^(1/T) renormalised over the K paths to their "
        "mass (1: eq. 4 as in the paper; > 1 spreads it, < 1 sharpens it).",
    )
    residual: bool = option(
        True,
        "Seq-CE with eq. 4's residual term; --no-residual: both distributions renormalised over the K paths.",
    )
    embedding: str = option(
        "teacher", "Input embeddings: the teacher's (TE), their SVD reduction, or random.", choices=EMBEDDINGS
    )
    embedding_dim: int | None = option(None, "E for svd and random (default 100); teacher: the teacher's width.")
    train_embeddings: bool = option(
        False, "TE: fine-tune the teacher's embeddings instead of keeping them frozen (paper 000 §5.2 freezes them)."
    )
    arch: str = option(
        "cnn-crf",
        "The student: a window CNN + CRF (students/archs/cnn_crf.py; the default since issue 72, measured against "
        "spaCy and the int8 teacher: docs/recipes/mgkd.md), parallel over a sentence's words, with a projected "
        "embedding table that makes its export small; or paper 000's BiLSTM-CRF (the default before issue 72), "
        "which brings its own paper defaults with it (--lr 1e-3 --dropout 0.5, no --chars, no --lr-plateau).",
        choices=("cnn-crf", "bilstm-crf"),
    )
    chars: bool | None = option(
        None,
        "A char CNN word feature beside the teacher's embeddings (Ma & Hovy 2016: 30-dim byte embeddings, 30 "
        "filters of width 3, max-pooled): the case and shape of words, which uncased teachers cannot give "
        "(default: on for cnn-crf since issue 72, off for bilstm-crf).",
    )
    char_filters: int = option(30, "With --chars: the char CNN's filters, the feature's width (Ma & Hovy 2016: 30).")
    word_vectors: str | None = option(
        None,
        "Pretrained word vectors as a word feature beside the teacher's embeddings, frozen (students/word_vectors.py): "
        "a GloVe/word2vec text file, or a directory with one .npy matrix and its words in one .parquet or .txt file "
        "(DATA.md's GloVe package). Looked up as written, else lowercased; other words get a zero vector. The "
        "table travels in the student and in its export (int8 with the others), its words beside the graph.",
        metavar="PATH",
    )
    word_vectors_rows: int = option(
        0, "With --word-vectors: keep the file's first N words (its commonest; 0: all).", metavar="N"
    )
    # Issue 83: under spaCy's size a word list leaves no room for its vectors (400k GloVe words are 3.4 MB)
    hash_rows: int | None = option(
        None,
        "With --word-vectors: the source's vectors as a table of N hashed rows with no word list (Bloom "
        "embeddings, as spaCy's floret): a word is the mean of the rows its lowercased form and its character "
        "n-grams hash to (tokenization.WordHashing), the rows fitted to the source's vectors before training "
        "and frozen; a word the source never had gets its n-grams' vector. With --word-vectors-rows, the table is "
        "fitted to the source's first words only.",
        metavar="N",
    )
    hash_ngrams: tuple[int, ...] = option((3, 5), "With --hash-rows: the n-grams' shortest and longest, in characters.")
    hash_count: int = option(2, "With --hash-rows: rows a key hashes to (Bloom embeddings' hash functions).")
    word_vectors_dropout: float = option(
        0.0,
        "With --word-vectors: in training, zero each word's vector with this probability, so that the student "
        "meets words the table lacks, as test words are when the table was read from the training text "
        "(distill-cache word-table); 0: off.",
        metavar="P",
    )
    train_word_vectors: bool = option(
        False,
        "With --word-vectors: train the table with the student from the source's vectors (or their hashed fit), "
        "instead of keeping it frozen (issue 83: Svenstrup et al. 2017 train hash embeddings with the task). "
        "A word the training text shows moves toward what the task needs, and with --hash-rows so do the "
        "n-gram rows it shares with words the text never shows.",
    )
    hidden_size: int = option(300, "bilstm-crf: LSTM units per direction (paper 000, Table 6).")
    projection: int | None = option(
        None,
        "cnn-crf: the width the teacher's embeddings are projected to by a learned matrix, folded into the "
        f"exported table (default {CNNCRFConfig.projection}; 0: none).",
    )
    width: int | None = option(None, f"cnn-crf: the window encoder's channels (default {CNNCRFConfig.width}).")
    dilations: tuple[int, ...] = option(
        (),
        "cnn-crf: one window layer per entry, reading words d apart, comma-separated "
        f"(default {','.join(map(str, CNNCRFConfig.dilations))}).",
    )
    dropout: float | None = option(
        None,
        "On the embeddings and the encoder's output (default: 0.2 for cnn-crf, make demo's since issue 72; 0.5 for "
        "bilstm-crf, paper 000, Table 6).",
    )
    lr: float | None = option(
        None,
        "AdamW learning rate (default: 3e-3 for cnn-crf, make demo's since issue 72; 1e-3 for bilstm-crf, paper "
        "000, Table 6: student grid 1e-3, 5e-4).",
    )
    weight_decay: float = option(0.0, "AdamW weight decay.")
    lr_plateau: bool | None = option(
        None,
        "Halve the learning rate after each epoch that does not improve the metric (ReduceLROnPlateau, "
        "patience 0): dev F1 settles instead of swinging at a high rate (measured for cnn-crf: docs/recipes/mgkd.md; "
        "default: on for cnn-crf since issue 72, off for bilstm-crf).",
    )
    epochs: int = option(50, "Most epochs.")
    patience: int = option(5, "Epochs without a better dev F1 that stop (paper 000 §5.3).")
    batch_size: int = option(32, "Sentences per batch (paper 000, Table 6).")

    def __post_init__(self) -> None:
        """The settings left unset take the chosen architecture's defaults (``ARCH_DEFAULTS``), so
        that the config a run records, and its student, say what was trained."""
        for name, value in ARCH_DEFAULTS.get(self.arch, {}).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.word_vectors_rows < 0:
            raise ValueError(
                f"word_vectors_rows (--word-vectors-rows) is {self.word_vectors_rows}: give 0 (all) or more"
            )
        if not 0 <= self.word_vectors_dropout < 1 or (self.word_vectors_dropout and not self.word_vectors):
            raise ValueError(
                f"--word-vectors-dropout {self.word_vectors_dropout}: a probability in [0, 1), with --word-vectors"
            )
        if self.train_word_vectors and not self.word_vectors:
            raise ValueError("--train-word-vectors trains the table of --word-vectors: give --word-vectors too")
        if self.char_filters < 1:
            raise ValueError(f"char_filters (--char-filters) is {self.char_filters}: give at least 1, or --no-chars")
        if self.hash_rows is not None:
            if self.hash_rows < 1:
                raise ValueError(f"--hash-rows {self.hash_rows}: give 1 or more rows, or leave --hash-rows out")
            if not self.word_vectors:
                raise ValueError("--hash-rows hashes a source's word vectors: give --word-vectors too")
            if len(self.hash_ngrams) != 2 or not 1 <= self.hash_ngrams[0] <= self.hash_ngrams[1] or self.hash_count < 1:
                raise ValueError(f"--hash-ngrams {self.hash_ngrams} --hash-count {self.hash_count}: MIN,MAX with "
                                 "1 <= MIN <= MAX, and 1 or more rows a key")  # fmt: skip
        if self.teacher and self.teachers:
            raise ValueError(f"--teacher {self.teacher} and --teachers {','.join(self.teachers)}: give one of them")
        twice = sorted({t for t in self.teachers if self.teachers.count(t) > 1})
        if twice:
            raise ValueError(f"--teachers names {', '.join(map(repr, twice))} more than once: name each teacher once")


# Each student's own defaults of the settings that MGKDConfig leaves unset (issue 72): the CNN-CRF
# with make demo's schedule and the char feature (measured: docs/recipes/mgkd.md, docs/RESULTS.md),
# the BiLSTM-CRF with paper 000's (Table 6), as it trained before issue 72 made the CNN-CRF the default.
ARCH_DEFAULTS = {
    "cnn-crf": {"chars": True, "lr": 3e-3, "dropout": 0.2, "lr_plateau": True},
    "bilstm-crf": {"chars": False, "lr": 1e-3, "dropout": 0.5, "lr_plateau": False},
}


class Collate:
    """Example rows -> tensors for the student and the chosen losses: one ``Targets`` per teacher
    layer (``teachers``, with their ``kinds``; a name and a kind for one teacher, None for none),
    and with several teachers their shares of each row (``losses.teacher_shares`` or
    ``losses.confidence_shares``)."""

    def __init__(self, tokenizer, schema: LabelSchema, teachers, cfg: MGKDConfig, kinds, word_vectors=None):
        self.tokenizer, self.schema, self.cfg = tokenizer, schema, cfg
        self.teachers = [teachers] if isinstance(teachers, str) else list(teachers or ())
        self.kinds = [kinds] * len(self.teachers) if isinstance(kinds, str) else list(kinds)
        self.word_vectors = word_vectors  # the student's WordVectors (--word-vectors), or None
        self.memo = PieceMemo()  # every epoch streams the same sentences: tokenize each word once

    def __call__(self, rows: list[dict]) -> "Batch":
        words = [r[EXAMPLES_LAYER]["words"] for r in rows]
        gold = [r[EXAMPLES_LAYER].get("tags") for r in rows]
        batch = Batch(words_to_bags(self.tokenizer, words, chars=self.cfg.chars, memo=self.memo), words, gold)
        if self.word_vectors is not None:
            batch.words.word_ids = self.word_vectors.rows(words)
        batch.labelled = torch.tensor([g is not None for g in gold])
        layers = [[r[t] for r in rows] for t in self.teachers]
        batch.teachers = [self.targets(t, kind, gold, words) for t, kind in zip(layers, self.kinds)] or [
            self.targets(None, None, gold, words)
        ]
        if len(self.teachers) > 1:
            batch.shares = self.shares(layers, words, batch.labelled)
        return batch

    def shares(self, layers: list[list[dict]], words: list[list[str]], labelled: torch.Tensor) -> torch.Tensor:
        """Each teacher's share of each row, ``[N, B]``, as --teacher-shares chooses."""
        if self.cfg.teacher_shares == "confidence":
            best = torch.tensor([[float(x["kbest_log_probs"][0]) for x in t] for t in layers], dtype=torch.float32)
            return L.confidence_shares(best)
        n_words = torch.tensor([max(1, len(w)) for w in words], dtype=torch.float32)
        gold_ce = torch.stack(  # eq. 2's CE(y, y_i) per word; unlabelled rows weigh 1 whatever it is
            [torch.tensor([x.get("gold_nll") or 0.0 for x in t], dtype=torch.float32) / n_words for t in layers]
        )
        return L.teacher_shares(gold_ce, labelled, self.cfg.teacher_shares)

    def targets(self, t: list[dict] | None, kind: str | None, gold, words) -> "Targets":
        """One teacher layer's rows ``t`` (None: no teacher) as the losses read them."""
        lengths = [len(w) for w in words]
        Lmax = max(lengths)
        tags = np.full((len(words), Lmax), -1, dtype=np.int64)  # numpy per row, one tensor per batch
        for b in range(len(words)):
            if gold[b] is not None:
                tags[b, : lengths[b]] = self.schema.encode(gold[b])
            elif t is not None and "kbest_paths" in t[b]:
                tags[b, : lengths[b]] = t[b]["kbest_paths"][0]  # teacher top-1 (§3.2)
        out = Targets(torch.from_numpy(tags))
        if t and "kbest_paths" in t[0]:
            K = self.cfg.k
            paths = np.full((len(words), K, Lmax), -1, dtype=np.int64)
            logp = np.full((len(words), K), -np.inf, dtype=np.float32)
            for b in range(len(words)):
                p, lp = t[b]["kbest_paths"][:K], t[b]["kbest_log_probs"][:K]
                if p:
                    paths[b, : len(p), : lengths[b]] = p
                    logp[b, : len(lp)] = lp
            out.kbest_paths, out.kbest_log_probs = torch.from_numpy(paths), torch.from_numpy(logp)
        for part in chosen(self.cfg.losses) if t else ():
            for attr, field_name in part.dense(kind).items():
                setattr(out, attr, pad_stack([x[field_name] for x in t], Lmax))
        return out


@dataclass
class Targets:
    """What one teacher gives a batch: hard tags (gold, or on unlabelled rows its best path; -1 on
    padding), and as the chosen losses read them its k-best paths and their log-probabilities, its
    emissions and its marginals."""

    tags: torch.Tensor
    kbest_paths: torch.Tensor | None = None
    kbest_log_probs: torch.Tensor | None = None
    teacher_emissions: torch.Tensor | None = None
    teacher_marginals: torch.Tensor | None = None


@dataclass
class Batch:
    words: WordBatch
    texts: list[list[str]]
    gold: list[list[str] | None]
    labelled: torch.Tensor | None = None
    teachers: list[Targets] = field(default_factory=list)  # one per teacher (one, gold only, without a teacher)
    shares: torch.Tensor | None = None  # [N, B] each teacher's share of each row, with several teachers
    origin: tuple[int, int] | None = None

    @property
    def tags(self) -> torch.Tensor:
        """The first teacher's hard tags (gold where there is gold)."""
        return self.teachers[0].tags


def loss_parts(model: BiLSTMCRF, batch: Batch, cfg: MGKDConfig, device) -> dict[str, torch.Tensor]:
    """The chosen losses of one batch (``LOSS_TABLE``), each averaged over its sentences."""
    scores = Scores(model, batch, device)
    parts = {}
    for part in chosen(cfg.losses):
        value = part.compute(scores, cfg)
        if value is not None:
            parts[part.name] = value
    return parts


def hashed_table(cfg: MGKDConfig, vectors) -> WordHashing | None:
    """--hash-rows' table for the source ``vectors`` (words, matrix), refused where hashing gains
    nothing: as many rows as the source has words, or more."""
    if cfg.hash_rows is None:
        return None
    words, matrix = vectors
    if cfg.hash_rows >= len(words):
        raise ValueError(
            f"--hash-rows {cfg.hash_rows:,}: {cfg.word_vectors} gives {len(words):,} words"
            + (" (--word-vectors-rows)" if cfg.word_vectors_rows else "")
            + ", so a table of their own is as small; hashing gains nothing there (give fewer rows, or leave "
            "--hash-rows out)"
        )
    return WordHashing(cfg.hash_rows, *cfg.hash_ngrams, cfg.hash_count)


class SharesSeen:
    """The teachers' mean shares of the rows trained on since the last ``epoch()``, for the run's
    records: ``teacher_shares`` over the labelled rows (how eq. 2 split the gold) and
    ``teacher_shares_unlabelled`` over the others (even under eq. 2; --teacher-shares confidence
    splits them too)."""

    KEYS = ("teacher_shares", "teacher_shares_unlabelled")

    def __init__(self, teachers: list[str]):
        self.teachers = teachers
        self.total = torch.zeros(2, len(teachers), dtype=torch.float64)  # labelled, unlabelled
        self.rows = [0, 0]

    def add(self, batch: "Batch") -> None:
        for i, rows in enumerate((batch.labelled, ~batch.labelled)):
            self.total[i] += batch.shares[:, rows].sum(1).double()
            self.rows[i] += int(rows.sum())

    def epoch(self) -> dict[str, dict[str, float]]:
        out = {
            key: dict(zip(self.teachers, (total / n).tolist()))
            for key, total, n in zip(self.KEYS, self.total, self.rows)
            if n
        }
        self.total.zero_()
        self.rows = [0, 0]
        return out


def check_teacher_layer(reader, teacher: str, parts: list[LossPart], cfg: MGKDConfig) -> None:
    """Refuse, by name, a teacher layer the chosen losses cannot learn from: a kind without paths,
    a field a loss reads that the layer lacks, fewer paths than --k, or tags other than the cache's
    label schema (a layer whose per-tag fields or scheme differ cannot teach one student beside another)."""
    info, layer = reader.manifest.teachers[teacher], reader.manifest.layers[teacher]
    kind, schema = info.kind, reader.manifest.label_schema
    if kind not in PATH_KINDS and any(part.name != "hard" for part in parts):
        raise CacheError(
            f"teacher {teacher!r} is a {kind} teacher: mgkd's teacher losses read crf, softmax and span layers; "
            "train with --losses hard, or use the recipe of its kind"
        )
    for f in layer.fields:
        if f.name in TAG_FIELDS and f.level == "word" and tuple(f.shape) != (schema.num_tags,):
            raise CacheError(
                f"teacher {teacher!r}: its field {f.name} has {tuple(f.shape)} values a word where the cache's "
                f"label schema has {schema.num_tags} tags ({', '.join(schema.tags)}); its layer's tags are not the "
                "cache's, so it cannot teach this student"
            )
    scheme = info.decoding.get("scheme")
    if scheme is not None and scheme != schema.scheme:
        raise CacheError(
            f"teacher {teacher!r} decoded its paths in the {scheme} scheme, the cache's label schema is "
            f"{schema.scheme}: its paths are not over the cache's tags"
        )
    have = set(layer.field_names())
    lacking = {part.name: [f for f in part.reads(kind) if f not in have] for part in parts}
    lacking = {name: fields for name, fields in lacking.items() if fields}
    if lacking:
        said = "; ".join(f"{name} reads {', '.join(fields)}" for name, fields in lacking.items())
        raise CacheError(
            f"teacher {teacher!r} ({kind}) does not store what these losses read: {said}. Rebuild its layer "
            "with this version's `distill-cache build` (softmax layers hold k-best paths and marginals since "
            "issue 65; marginals need no --no-marginals), or leave those losses out"
        )
    stored_k = info.decoding.get("k")
    if any(part.kbest for part in parts) and stored_k is not None and cfg.k > stored_k:
        raise CacheError(
            f"--k {cfg.k} is more than the {stored_k} paths per sentence the cache holds"
            + (f" for teacher {teacher!r}" if cfg.teachers else "")
        )


CNN_OPTIONS = ("projection", "width", "dilations")


def architecture_config(cfg: MGKDConfig) -> Callable[..., BiLSTMCRFConfig]:
    """The student's config class with the chosen architecture's own settings bound; a cnn-crf
    option given to the BiLSTM-CRF is refused by name, not ignored."""
    if cfg.arch == "bilstm-crf":
        given = [f"--{name}" for name in CNN_OPTIONS if getattr(cfg, name) not in (None, ())]
        if given:
            raise ValueError(f"{', '.join(given)}: settings of --arch cnn-crf, not of the bilstm-crf student")
        return BiLSTMCRFConfig
    own = {name: getattr(cfg, name) for name in CNN_OPTIONS if getattr(cfg, name) not in (None, ())}
    if own.get("projection", 0) < 0 or own.get("width", 1) < 1 or any(d < 1 for d in own.get("dilations", ())):
        raise ValueError(f"--projection, --width, --dilations: {own} must be positive (--projection 0: none)")
    return partial(CNNCRFConfig, **own)


def plan(ctx: Context) -> Plan:
    cfg: MGKDConfig = ctx.cfg
    if not cfg.losses:
        raise ValueError(f"no losses: choose from {', '.join(LOSSES)}")
    if cfg.seq_temperature <= 0:
        raise ValueError(f"--seq-temperature {cfg.seq_temperature}: a temperature must be above 0")
    if cfg.weights and len(cfg.weights) != len(cfg.losses):
        raise ValueError(f"weights: {len(cfg.weights)} weights for {len(cfg.losses)} losses")
    student_config = architecture_config(cfg)
    reader = ctx.reader
    teachers = [open_cache(reader, t, cfg.embedding)[1] for t in (cfg.teachers or [cfg.teacher])]
    if cfg.chars and "words" not in reader.manifest.examples.field_names():
        raise CacheError(
            f"{reader.store.url}: the char feature (on by default for --arch {cfg.arch} since issue 72) reads each "
            "example's words, and this cache's examples layer stores none; train without it: --no-chars"
        )
    schema = reader.manifest.label_schema
    kinds = [reader.manifest.teachers[t].kind for t in teachers]
    parts = chosen(cfg.losses)
    for teacher in teachers:
        check_teacher_layer(reader, teacher, parts, cfg)
    several = len(teachers) > 1
    shares_read = SHARES_READ.get(cfg.teacher_shares) if several else None
    if shares_read:
        name, what = shares_read
        for teacher in teachers:
            if name not in reader.manifest.layers[teacher].field_names():
                raise CacheError(
                    f"teacher {teacher!r} stores no {name}, which --teacher-shares {cfg.teacher_shares} reads "
                    f"({what}); rebuild its layer with `distill-cache build`, or share the teachers with "
                    "--teacher-shares uniform"
                )
    train_names, dev_names = default_splits(reader, cfg)
    selected = parse_selection(train_names, reader)
    unlabelled_rows = (cfg.gold_sentences is not None and cfg.unlabelled) or any(
        not c.labelled for c in reader.manifest.corpora if (c.name, c.split) in selected
    )
    has_paths = [
        kind in PATH_KINDS and set(KBEST_FIELDS) <= set(reader.manifest.layers[t].field_names())
        for t, kind in zip(teachers, kinds)
    ]
    for teacher, kind, paths in zip(teachers, kinds, has_paths):
        if unlabelled_rows and not paths:
            raise CacheError(
                f"teacher {teacher!r} ({kind}) stores no k-best paths to use as hard labels for the unlabelled "
                "corpora; rebuild its layer with this version's `distill-cache build`, or train with --no-unlabelled"
            )
    teacher = teachers[0]
    source = open_cache(reader, cfg.embeddings_teacher, cfg.embedding)[1] if cfg.embeddings_teacher else teacher
    exports = teacher_exports(reader, source)
    tokenizer, weight = exports.tokenizer, exports.student_weight()
    dim = weight.shape[1] if cfg.embedding == "teacher" else (cfg.embedding_dim or 100)
    check_embedding_dim(cfg.embedding, dim, weight)
    vectors = read_word_vectors(cfg.word_vectors, cfg.word_vectors_rows) if cfg.word_vectors else None
    hashing = hashed_table(cfg, vectors)
    scfg = student_config(
        label_schema=schema.to_json(),
        vocab_size=weight.shape[0],
        embedding_dim=dim,
        embedding=cfg.embedding,
        freeze_embeddings=not cfg.train_embeddings,
        hidden_size=cfg.hidden_size,
        num_layers=1,
        dropout=cfg.dropout,
        extra=({"teachers": teachers, "teacher_shares": cfg.teacher_shares} if several else {"teacher": teacher})
        | {"cache": reader.store.url, "recipe": "mgkd"}
        | ({"embeddings_teacher": source} if several or source != teacher else {}),
        char_dim=30 if cfg.chars else 0,
        char_filters=cfg.char_filters if cfg.chars else 0,
        teacher_vocab_size=exports.rows,
        **(
            HashedWordVectors.sizes(hashing, vectors[1].shape[1])
            if hashing
            else WordVectors.sizes(*vectors)
            if vectors
            else {}
        ),
    )
    model = architectures()[cfg.arch](scfg)
    init_embeddings(model, exports)
    if hashing:
        err = model.word_vectors.fit(*vectors)
        ctx.log(f"word vectors of {len(vectors[0]):,} words fitted into {cfg.hash_rows:,} hashed rows: error {err:.3f}")
    elif vectors:
        model.word_vectors.fill(*vectors)
    if vectors and cfg.train_word_vectors:
        model.word_vectors.embed.weight.requires_grad_(True)
    model.word_vectors_dropout = cfg.word_vectors_dropout
    model.to(ctx.device)

    # the teacher's k-best paths: for the sequence losses, and as hard labels of unlabelled rows (§3.2)
    needs_kbest = any(part.kbest for part in parts) or unlabelled_rows
    fields = {EXAMPLES_LAYER: ["words", "tags"]}
    for t, kind, paths in zip(teachers, kinds, has_paths):
        fields[t] = (list(KBEST_FIELDS) if needs_kbest and paths else []) + [
            name for part in parts for name in part.dense(kind).values()
        ]
        if shares_read and shares_read[0] not in fields[t]:
            fields[t].append(shares_read[0])
    stream = ctx.stream(fields, selected, Collate(tokenizer, schema, teachers, cfg, kinds, model.word_vectors))
    dev_words, dev_tags = read_split(reader, dev_names) if dev_names else ([], [])
    weighting = L.UncertaintyWeighting(len(cfg.losses)).to(ctx.device) if cfg.weighting == "uncertainty" else None
    fixed = torch.tensor(cfg.weights or [1.0] * len(cfg.losses), device=ctx.device)

    def combine(parts: dict[str, torch.Tensor]) -> torch.Tensor:  # eq. 9 or eq. 8
        stacked = torch.stack([parts.get(name, torch.zeros((), device=ctx.device)) for name in cfg.losses])
        return weighting(stacked) if weighting else (fixed * stacked).sum()

    shares = SharesSeen(teachers) if several else None

    def evaluate() -> dict:
        out = {"weights": dict(zip(cfg.losses, weighting.weights.tolist()))} if weighting else {}
        if shares is not None:
            out |= shares.epoch()
        if dev_words:
            out["dev_f1"] = dev_f1(model, tokenizer, dev_words, dev_tags, schema.scheme)
        return out

    def loss(batch: Batch) -> dict[str, torch.Tensor]:
        if shares is not None:
            shares.add(batch)
        return loss_parts(model, batch, cfg, ctx.device)

    params = [p for p in model.parameters() if p.requires_grad] + (list(weighting.parameters()) if weighting else [])
    stage = Stage(
        name="train",
        batches=stream,
        loss=loss,
        params=lambda: params,
        optimizer=lambda ps: torch.optim.AdamW(ps, lr=cfg.lr, weight_decay=cfg.weight_decay),
        evaluate=evaluate,
        metric="dev_f1" if dev_words else "loss",
        mode="max" if dev_words else "min",
        epochs=cfg.epochs,
        patience=cfg.patience,
        combine=combine,
        plateau={"factor": 0.5, "patience": 0} if cfg.lr_plateau else None,
    )
    n_all = sum(p.numel() for p in model.parameters())
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return Plan(
        model,
        tokenizer,
        [stage],
        modules={"weighting": weighting} if weighting else {},
        describe=f"training {scfg.arch} ({n_all:,} parameters, {n_train:,} trainable) on "
        f"{', '.join(train_names)}; losses {', '.join(cfg.losses)}",
        train=train_names,
        dev=dev_names,
    )


RECIPE = Recipe(
    "mgkd",
    MGKDConfig,
    plan,
    "Multi-Grained KD (paper 000): a window CNN-CRF student (or paper 000's BiLSTM-CRF) on the teacher's k-best paths (seq-ce, "
    "fuzzy), emissions and marginals (token-em, token-pos) and hard labels, with fixed loss weights (eq. 8) "
    "by default or learned ones (--weighting uncertainty, eq. 9).",
)
