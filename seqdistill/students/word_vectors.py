"""Pretrained word vectors as a student's word feature (``distill-train mgkd --word-vectors``, issue 72).

The teacher's input embeddings give a student each word as the mean of its subwords' vectors. A
name the training text never shows is then the mean of pieces (``tsvangirai``: ``ts``, ``##vang``,
``##ira``, ``##i``), which says little of what the word is. Word vectors trained on billions of
words (GloVe; Lample et al. 2016 and Ma & Hovy 2016 reach 90.9-91.2 on CoNLL-2003 with such vectors
and a char feature) hold one vector for each of hundreds of thousands of whole words, names among
them. On CoNLL-2003 test, 93% of the words of the names unseen in train are in GloVe 6B's 400k
words and 53% are a single MPNet subword (docs/RESULTS.md, "Seen and unseen names").

Decisions:
* **Frozen**, as the teacher's embeddings are (paper 000 §5.2): the student keeps what the vectors
  know of words its training text lacks.
* **Lookup**: the word as written, else lowercased (Lample et al., 2016; GloVe 6B is lowercase); a
  word in neither is row 0, a zero vector, as padding words are.
* **The words travel in the student's weights**: ``model.safetensors`` holds the vector table and the
  words as one UTF-8 byte buffer (newline-separated), so a student directory stays
  ``config.json`` + ``model.safetensors`` + tokenizer and needs no file of its own. An export
  (``distill-export``) puts the table in the graph, read through a ``word_ids`` input, and the words
  in ``word_vectors.txt`` beside it; each runtime looks words up by the one rule of
  ``tokenization.word_vector_rows`` (deploy/export.py names the decision).
* **Files read** (``read_word_vectors``): GloVe's and word2vec's text format (a word and its numbers
  on each line; word2vec's ``count dim`` header skipped), or a directory holding one ``.npy`` matrix
  and the words in order in one ``.parquet`` (its first column) or ``.txt`` (a word a line) file,
  as DATA.md's GloVe package has them. ``rows`` keeps the first N words: these files are sorted by
  frequency, so the first N are the commonest.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from ..tokenization import WordHashing, word_list_rows, word_vector_rows


class WordVectorsError(ValueError):
    """A word vector file that cannot be read, naming the file, the line and what to do."""


def read_word_vectors(path, rows: int = 0) -> tuple[list[str], np.ndarray]:
    """The words and their vectors ``[N, D]`` (float32) of a word vector file or directory (module
    docstring), the first ``rows`` of them when ``rows`` > 0."""
    p = Path(path)
    if p.is_dir():
        words, vectors = _read_npy_dir(p)
    elif p.is_file():
        words, vectors = _read_text(p, rows)
    else:
        raise WordVectorsError(f"{p}: no such file or directory (--word-vectors: a GloVe text file or a directory)")
    if rows > 0:
        words, vectors = words[:rows], vectors[:rows]
    if not words:
        raise WordVectorsError(f"{p}: holds no word vectors")
    seen: set[str] = set()
    for w in words:
        if w in seen:
            raise WordVectorsError(f"{p}: the word {w!r} is listed twice; give each word one vector")
        seen.add(w)
    if any("\n" in w for w in words):
        raise WordVectorsError(f"{p}: a word holds a newline, which no tokenized word can")
    return words, np.array(vectors, dtype=np.float32)  # a copy: a .npy source is a read-only memory map


def _read_npy_dir(d: Path) -> tuple[list[str], np.ndarray]:
    npys = sorted(d.rglob("*.npy"))
    lists = sorted(d.rglob("*.parquet")) + sorted(d.rglob("*.txt"))
    if len(npys) != 1 or len(lists) != 1:
        raise WordVectorsError(
            f"{d}: a word vector directory holds exactly one .npy matrix and one .parquet or .txt list of its "
            f"words; found {len(npys)} .npy and {len(lists)} word lists"
        )
    vectors = np.load(npys[0], allow_pickle=False, mmap_mode="r")
    if lists[0].suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(lists[0])
        words = [str(w) for w in table.column(0).to_pylist()]
    else:
        words = lists[0].read_text(encoding="utf-8").split("\n")
        words = words[:-1] if words and words[-1] == "" else words
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise WordVectorsError(
            f"{npys[0]}: a matrix of shape {vectors.shape} for the {len(words):,} words of {lists[0]}; "
            "the matrix must have one row per word"
        )
    return words, np.asarray(vectors)


def _read_text(f: Path, rows: int) -> tuple[list[str], np.ndarray]:
    words: list[str] = []
    vectors: list[np.ndarray] = []
    dim = None
    with open(f, encoding="utf-8") as lines:
        for n, line in enumerate(lines, 1):
            parts = line.rstrip("\n").rstrip(" ").split(" ")
            if n == 1 and len(parts) == 2 and all(x.isdigit() for x in parts):
                continue  # word2vec's header: count and dimension
            try:
                vector = np.array(parts[1:], dtype=np.float32)
            except ValueError:
                raise WordVectorsError(f"{f}, line {n}: expected a word and its numbers, separated by spaces") from None
            if dim is None:
                dim = len(vector)
            if len(vector) != dim or dim == 0:
                raise WordVectorsError(f"{f}, line {n}: {len(vector)} numbers where the first line has {dim}")
            words.append(parts[0])
            vectors.append(vector)
            if rows and len(words) == rows:
                break
    return words, np.stack(vectors) if vectors else np.zeros((0, 0), np.float32)


class WordVectors(nn.Module):
    """A frozen table ``[N + 1, D]`` (row 0: the zero vector of unknown and padding words) and its
    ``N`` words, as a byte buffer (``words``); :meth:`rows` maps a batch's words to rows."""

    def __init__(self, rows: int, dim: int, nbytes: int):
        super().__init__()
        self.embed = nn.Embedding(rows + 1, dim)
        self.embed.weight.requires_grad_(False)
        self.register_buffer("words", torch.zeros(nbytes, dtype=torch.uint8))
        self._row_of: dict[str, int] | None = None

    @staticmethod
    def sizes(words: list[str], vectors: np.ndarray) -> dict:
        """The student config fields that build a table for ``words`` and ``vectors``."""
        return {
            "word_vectors_rows": len(words),
            "word_vectors_dim": int(vectors.shape[1]),
            "word_vectors_bytes": len(_joined(words)),
        }

    def fill(self, words: list[str], vectors: np.ndarray) -> None:
        joined = _joined(words)
        if (len(words), vectors.shape[1], len(joined)) != (
            self.embed.num_embeddings - 1,
            self.embed.embedding_dim,
            self.words.numel(),
        ):
            raise ValueError("word vectors do not fit the table the student config describes")
        with torch.no_grad():
            self.embed.weight[0].zero_()
            self.embed.weight[1:].copy_(torch.from_numpy(vectors))
            self.words.copy_(torch.frombuffer(bytearray(joined), dtype=torch.uint8))
        self._row_of = None

    def first(self, rows: int) -> "WordVectors":
        """A table of this one's first ``rows`` words (``distill-export --word-vectors-rows``)."""
        words, vectors = self.word_list()[:rows], self.embed.weight.detach()[1 : rows + 1].cpu().numpy()
        table = WordVectors(*WordVectors.sizes(words, vectors).values())
        table.fill(words, vectors)
        return table

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._row_of = None  # the words changed: build the lookup again when next asked

    def word_list(self) -> list[str]:
        """The table's words, row 1 first."""
        return bytes(self.words.cpu().numpy()).decode("utf-8").split("\n")

    def row_of(self) -> dict[str, int]:
        if self._row_of is None:
            self._row_of = word_list_rows(self.word_list())
        return self._row_of

    def rows(self, batch_words: list[list[str]]) -> Tensor:
        """``[B, L]``: each word's row (as written, else lowercased, else 0; ``tokenization.word_vector_rows``)."""
        return torch.from_numpy(word_vector_rows(self.row_of(), batch_words))

    def forward(self, rows: Tensor) -> Tensor:
        return self.embed(rows)


def _joined(words: list[str]) -> bytes:
    return "\n".join(words).encode("utf-8")


class HashedWordVectors(nn.Module):
    """A frozen table ``[rows + 1, D]`` with no word list (issue 83, ``--hash-rows``): a word's vector
    is the mean of the rows its keys hash to (``tokenization.WordHashing``), row 0 the zero vector of
    padding. The rows are fitted to a source's word vectors (:meth:`fit`), and a word the source never
    had gets the mean of its character n-grams' rows.

    Row 0 stays zero (``padding_idx``: no gradient reaches it, and :meth:`fit` writes it 0), so the
    mean is a plain sum over the ``[B, L, K]`` rows divided by the count of real ones: no mask over
    the ``[B, L, K, D]`` gathered rows, whose multiply took a sixth of a hashed student's exported
    time at batch 32 (docs/BENCHMARKS.md, "Where an export's time goes")."""

    def __init__(self, hashing: WordHashing, dim: int):
        super().__init__()
        self.hashing = hashing
        self.embed = nn.Embedding(hashing.rows + 1, dim, padding_idx=0)
        self.embed.weight.requires_grad_(False)
        self.register_load_state_dict_post_hook(self._zero_padding)

    @staticmethod
    def _zero_padding(module: "HashedWordVectors", _incompatible) -> None:
        with torch.no_grad():
            module.embed.weight[0] = 0.0  # padding, whatever a saved table holds there

    @staticmethod
    def sizes(hashing: WordHashing, dim: int) -> dict:
        """The student config fields that build a hashed table of ``hashing`` and width ``dim``."""
        return {
            "word_vectors_dim": int(dim),
            "word_hash_rows": hashing.rows,
            "word_hash_minn": hashing.minn,
            "word_hash_maxn": hashing.maxn,
            "word_hash_count": hashing.hashes,
        }

    def rows(self, batch_words: list[list[str]]) -> Tensor:
        """``[B, L, K]``: each word's rows (0 past them and for padding words)."""
        return torch.from_numpy(self.hashing.batch_rows(batch_words))

    def forward(self, rows: Tensor) -> Tensor:
        """``[B, L, D]``: the mean of each word's rows (0 for a padding word)."""
        real = (rows > 0).sum(-1, keepdim=True).clamp(min=1).to(self.embed.weight.dtype)  # [B, L, 1]
        return self.embed(rows).sum(-2) / real

    def fit(self, words: list[str], vectors: np.ndarray, iterations: int = 200, ridge: float = 1e-3) -> float:
        """Fill the table by weighted least squares: min_T sum_w f_w ||mean_{r in rows(w)} T_r - v_w||^2
        + ridge ||T||^2, by conjugate gradients on the normal equations. ``words`` in the source's
        order, which is by frequency for GloVe and word2vec files: f_w = 1 / sqrt(rank), so that the
        commonest words are fitted best where rows collide, and rare names still count. A word listed
        twice in different case (after lowercasing, the keys are one) is fitted to the mean of its
        vectors. Returns the weighted relative error ``sum f ||A T - V||^2 / sum f ||V||^2``."""
        ids = [self.hashing.word_rows(w) for w in words]
        nnz = [len(r) for r in ids]
        rows = torch.repeat_interleave(torch.arange(len(words)), torch.tensor(nnz))
        cols = torch.tensor([c for r in ids for c in r])
        vals = torch.repeat_interleave(1.0 / torch.tensor(nnz, dtype=torch.float64), torch.tensor(nnz))
        A = torch.sparse_coo_tensor(
            torch.stack([rows, cols]), vals, (len(words), self.hashing.rows + 1), check_invariants=False
        ).coalesce()
        At = A.t().coalesce()
        f = (1.0 / torch.arange(1, len(words) + 1, dtype=torch.float64).sqrt()).unsqueeze(1)
        V = torch.from_numpy(np.asarray(vectors, dtype=np.float64))

        def normal(X: Tensor) -> Tensor:  # (A^T F A + ridge I) X
            return torch.sparse.mm(At, f * torch.sparse.mm(A, X)) + ridge * X

        b = torch.sparse.mm(At, f * V)
        X = torch.zeros_like(b)
        r = b - normal(X)
        p, rs = r.clone(), (r * r).sum(0)
        for _ in range(iterations):  # one CG per dimension, all at once
            Ap = normal(p)
            alpha = rs / (p * Ap).sum(0).clamp(min=1e-300)
            X += alpha * p
            r -= alpha * Ap
            new = (r * r).sum(0)
            if bool((new.sqrt() <= 1e-6 * b.norm(dim=0).clamp(min=1e-300)).all()):
                break
            p, rs = r + (new / rs.clamp(min=1e-300)) * p, new
        X[0] = 0.0  # padding
        with torch.no_grad():
            self.embed.weight.copy_(X.to(self.embed.weight.dtype))
        err = (f * (torch.sparse.mm(A, X) - V).pow(2)).sum() / (f * V.pow(2)).sum()
        return float(err)
