"""An exported directory (``distill-export``) run by ONNX Runtime.

The directory is self-contained and runs without the student and teacher packages:

* ``export.json`` — what it is (format, source model and its fingerprint, the graph's inputs, the
  decoder, the label schema, entity types, pooling and framing, quantization, parameter counts,
  the graph's sha256);
* ``model.onnx`` — the graph, from words' ids to word scores (or to token scores, pooled here);
* ``decode.safetensors`` — what decoding needs: the CRF's effective transitions, start and end
  scores (``-inf`` where the tag scheme forbids), or the BILOU automaton's;
* ``tokenizer/`` — the tokenizer files;
* ``word_vectors.txt`` — a student's word list, when it was trained with ``--word-vectors``
  (export.json's ``word_vectors``; format 3): a word a line, the graph's table row 1 first.

Nothing of a directory is used unchecked (:func:`check_files`, format 2): export.json records the
sha256 of the graph (``onnx_sha256``) and of every other file (``files``), and the tokenizer's
size; a load refuses, naming the file, a file that is missing, damaged, outside the directory or
without a checksum (an export of format 1, before the files were checksummed, is exported again).

Three kinds of graph inputs (``inputs`` in export.json), all prepared by ``seqdistill.tokenization``
exactly as for the torch model:

* ``bags`` (the BiLSTM-CRF, the CNN-CRF): ``piece_ids [B, L, P]`` each word's subword ids,
  ``piece_mask [B, L, P]``, ``lengths [B]``, and with the student's char feature ``char_ids
  [B, L, C]`` (each word's bytes), with its word vectors ``word_ids [B, L]`` (each word's row of
  the table, ``tokenization.word_vector_rows``) -> emissions ``[B, L, T]``;
* ``subwords`` (the BiLSTM tagger, the CNN + RNN tagger): ``ids [B, S]``, ``lengths [B]`` in
  subwords, ``pool [B, L, S]`` the subword -> word pooling weights -> word scores;
* ``segments`` (teachers, transformer students): ``input_ids [N, Lt]``, ``attention_mask`` of
  framed segments -> token scores ``[N, Lt, T]``, pooled to words here. A teacher's segments are
  its own overlapping windows (``tokenization.WordTokenizer``); a transformer student's are its
  windows of ``window`` subwords framed by [CLS] and [SEP] (as ``TransformerTagger.encode``).

Decision: a model remembers each word's pieces (``tokenization.PieceMemo``, at most
:data:`MEMO_WORDS` words, about 15 MB when full, then cleared) and tokenizes only the words it has
not met: tokenizing is 5-10% of the default student's time (docs/BENCHMARKS.md, "Each word's pieces
remembered"). It is exact: a pre-split word is tokenized on its own, the first
word of a sentence is keyed apart, and a tokenizer that truncates is never memoised
(``tokenization.truncates``). Bags and transformer windows use it; the subword and teacher-framed
inputs tokenize whole sentences and do not.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from ..cache_schema import LabelSchema
from ..decode import Decoder
from .torch_models import Backend

EXPORT_JSON = "export.json"
EXPORT_FORMAT = "seqdistill-export"
EXPORT_VERSION = 5  # 2: the sha256 of every file (``files``) and the tokenizer size; 3: ``word_vectors``;
# 4: ``word_hashing`` (a hashed word table, issue 83: ``word_ids [B, L, K]``); 5: the hashed table fed each
# distinct word of a batch once (``word_ids [U + 1, K]`` and ``word_index [B, L]``); a format-4 hashed
# export is refused by name (export it again), the other format-4 exports are format-3 ones
# decision: an export is written with the oldest format version that describes it (``export_version``),
# so that a runtime of format 2 still opens every export without word vectors, and refuses one with
# them by its version rather than failing on the graph's missing ``word_ids`` input
ONNX_FILE = "model.onnx"
DECODE_FILE = "decode.safetensors"
INPUTS = ("bags", "subwords", "segments")
MEMO_WORDS = 50_000  # words whose pieces a model remembers (the module docstring; about 15 MB when full)


class ExportError(ValueError):
    """An exported directory that cannot be used, naming the file and what to do."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_export_dir(d: Path) -> bool:
    return (d / EXPORT_JSON).is_file()


def read_export_json(d: Path) -> dict:
    path = d / EXPORT_JSON
    if not path.is_file():
        raise ExportError(
            f"{d}: no {EXPORT_JSON}; not an exported directory (make one with "
            f"`distill-export --model MODEL_DIR --out {d}`)"
        )
    try:
        meta = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExportError(f"{path}: not valid JSON ({e}); export the model again") from None
    if not isinstance(meta, dict) or meta.get("format") != EXPORT_FORMAT:
        raise ExportError(
            f"{path}: not a seqdistill export (format {meta.get('format') if isinstance(meta, dict) else None!r})"
        )
    if meta.get("format_version", 0) > EXPORT_VERSION:
        raise ExportError(
            f"{path}: format version {meta['format_version']} is newer than this seqdistill "
            f"reads ({EXPORT_VERSION}); upgrade seqdistill"
        )
    for key in ("onnx", "onnx_sha256", "inputs", "decoder", "label_schema", "kind", "model"):
        if key not in meta:
            raise ExportError(f"{path}: field {key!r} is missing; export the model again")
    if meta["inputs"] not in INPUTS:
        raise ExportError(f"{path}: inputs {meta['inputs']!r} is not one of {', '.join(INPUTS)}")
    return meta


def check_files(d: Path, meta: dict) -> None:
    """Refuse an export whose files are not the ones export.json records: the graph named outside
    the directory or without its sha256, a listed file missing, damaged or outside the directory,
    or no checksums at all (format 1). The graph's own sha256 is checked when it is opened."""
    path, root = d / EXPORT_JSON, d.resolve()

    def inside(rel, field: str) -> Path:
        target = d / str(rel)
        if not isinstance(rel, str) or Path(rel).is_absolute() or not target.resolve().is_relative_to(root):
            raise ExportError(f"{path}: {field} {rel!r} names a file outside {d}; export the model again")
        return target

    inside(meta["onnx"], "onnx")
    digest = meta["onnx_sha256"]
    if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
        raise ExportError(
            f"{path}: onnx_sha256 is {digest!r}, not a sha256, so the graph cannot be checked; export the model again"
        )
    files = meta.get("files")
    if not isinstance(files, dict) or not any(str(k).startswith("tokenizer/") for k in files):
        raise ExportError(
            f"{path}: no checksums of the tokenizer files (format {meta.get('format_version', 1)}, before "
            "exports checksummed every file), so they cannot be checked; export the model again"
        )
    if meta["decoder"] in ("crf", "bilou") and DECODE_FILE not in files:
        raise ExportError(f"{path}: no checksum of {DECODE_FILE}, which a {meta['decoder']} decoder needs")
    for rel, expected in files.items():
        target = inside(rel, "files")
        if not target.is_file():
            raise ExportError(f"{target}: missing; export the model again")
        if sha256_file(target) != expected:
            raise ExportError(
                f"{target}: damaged (its sha256 is not the one {EXPORT_JSON} records); export the model again"
            )


def export_version(fields: dict) -> int:
    """The format version an export with these export.json ``fields`` is written with: the oldest
    that describes it (``EXPORT_VERSION``'s decision)."""
    return 5 if fields.get("word_hashing") else 3 if fields.get("word_vectors") else 2


def read_word_hashing(d: Path, meta: dict):
    """The hashing of an export's hashed word table (``word_hashing``, format 5), as
    ``tokenization.WordHashing``; refused, by name, when this runtime's hashing gives other rows for
    the probe words than the exporter's did (its fingerprint), or when the graph takes format 4's
    ``[B, L, K]`` rows."""
    from ..tokenization import WordHashing

    spec = meta["word_hashing"]
    if meta.get("format_version", 0) < 5:
        raise ExportError(
            f"{d / EXPORT_JSON}: a hashed word table of format {meta.get('format_version')}, whose graph takes "
            "every word's rows padded to [B, L, K]; this runtime feeds each distinct word once (format 5): "
            "export the model again with this version"
        )
    try:
        hashing = WordHashing(int(spec["rows"]), int(spec["minn"]), int(spec["maxn"]), int(spec["hashes"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ExportError(
            f"{d / EXPORT_JSON}: word_hashing {spec!r} is not a hashing this runtime reads ({e})"
        ) from None
    if spec.get("hash") != "fnv1a-32" or hashing.fingerprint() != spec.get("fingerprint"):
        raise ExportError(
            f"{d / EXPORT_JSON}: word_hashing's fingerprint is not this runtime's: the export's words would find "
            "other rows than in training; export the model again with this version"
        )
    return hashing


def read_word_list(d: Path, meta: dict) -> dict[str, int]:
    """The lookup of an export's word vector table: ``word_vectors.file`` (checked by
    :func:`check_files`), a word a line, row 1 first; refused, by name, when its words are not the
    table's rows."""
    from ..tokenization import word_list_rows

    spec = meta["word_vectors"]
    path = d / str(spec.get("file"))
    if spec.get("file") not in meta.get("files", {}):
        raise ExportError(f"{d / EXPORT_JSON}: word_vectors.file {spec.get('file')!r} is not among its checked files")
    try:
        words = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise ExportError(f"{path}: not UTF-8 ({e}); export the model again") from None
    rows = word_list_rows(words)
    if len(words) != spec.get("rows") or len(rows) != len(words):
        raise ExportError(
            f"{path}: {len(words):,} lines ({len(rows):,} distinct words) for a table of {spec.get('rows')} rows; "
            "export the model again"
        )
    return rows


def session_options(threads: int | None):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.inter_op_num_threads = 1
    if threads:
        opts.intra_op_num_threads = threads
    # decision: worker threads sleep between runs instead of spinning; a tagger shares the CPU with
    # tokenization, decoding and the rest of its process, which spinning workers would starve
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # decision: DequantizeLinear over constant weights (the weight-only int8 of distill-export) is
    # folded into float32 weights once, when the session loads, instead of on every run: the int8
    # file stays small, and it runs as fast as the fp32 graph (docs/BENCHMARKS.md, issue 34). Graphs
    # without such nodes are unchanged.
    opts.add_session_config_entry("session.disable_quant_qdq", "1")
    return opts


def open_session(path: Path, expected_sha256: str | None, threads: int | None):
    """An ONNX Runtime session over ``path``, refusing a file that is missing, damaged (its sha256
    is not the one export.json records) or not a graph ONNX Runtime can load."""
    import onnxruntime as ort

    if not path.is_file():
        raise ExportError(f"{path}: missing; export the model again")
    if expected_sha256 is not None and sha256_file(path) != expected_sha256:
        raise ExportError(f"{path}: damaged (its sha256 is not the one {EXPORT_JSON} records); export the model again")
    try:
        return ort.InferenceSession(str(path), session_options(threads), providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types for unreadable graphs
        raise ExportError(
            f"{path}: ONNX Runtime cannot load it ({str(e).splitlines()[0][:200]}); export the model again"
        ) from None


def pool_tokens(token_scores: np.ndarray, slot: np.ndarray, weight: np.ndarray, batch: int, words: int) -> np.ndarray:
    """Token scores ``[N, Lt, T]`` to word scores ``[B, W, T]``: each word the weighted sum of its
    tokens (``slot``: the word slot ``b * W + w`` of each token or -1, ``weight``: its weight),
    as ``SegmentBatch.pool`` (the head is linear, so pooling after it equals pooling before)."""
    flat = token_scores.reshape(-1, token_scores.shape[-1])
    keep = (slot >= 0) & (weight != 0)
    out = np.zeros((batch * words, flat.shape[1]), dtype=np.float32)
    np.add.at(out, slot[keep], flat[keep] * weight[keep, None])
    return out.reshape(batch, words, -1)


def bag_inputs(
    tokenizer, words: list[list[str]], chars: bool = False, word_rows: dict | None = None, memo=None
) -> dict:
    """``bags`` inputs: each word's subword ids (``tokenization.word_pieces``) padded to ``[B, L, P]``;
    with ``chars``, each word's bytes ``char_ids [B, L, C]`` (``encoding.word_bytes``); with
    ``word_rows`` (a word vector table's lookup), each word's row ``word_ids [B, L]``
    (``tokenization.word_vector_rows``); with a hashed table's ``WordHashing``, each distinct word's
    rows ``word_ids [U + 1, K]`` and each word's row of them ``word_index [B, L]``
    (``WordHashing.distinct_rows``). ``memo``: a ``tokenization.PieceMemo`` of the words seen before."""
    from ..tokenization import WordHashing, word_bytes, word_pieces, word_vector_rows

    pieces = word_pieces(tokenizer, words, memo)
    L = max(len(w) for w in words)
    P = max(len(p) for sent in pieces for p in sent)
    pad_word = [0] * P
    ids = np.array(
        [[p + [0] * (P - len(p)) for p in sent] + [pad_word] * (L - len(sent)) for sent in pieces], dtype=np.int64
    )
    mask = np.array(
        [[[1.0] * len(p) + [0.0] * (P - len(p)) for p in sent] + [[0.0] * P] * (L - len(sent)) for sent in pieces],
        dtype=np.float32,
    )
    feed = {"piece_ids": ids, "piece_mask": mask, "lengths": np.array([len(w) for w in words], dtype=np.int64)}
    if chars:
        feed["char_ids"] = word_bytes(words).numpy()
    if isinstance(word_rows, WordHashing):  # a hashed table (format 5): each distinct word's rows once
        feed["word_ids"], feed["word_index"] = word_rows.distinct_rows(words)
    elif word_rows is not None:  # a word list's lookup
        feed["word_ids"] = word_vector_rows(word_rows, words)
    return feed


def subword_inputs(tokenizer, words: list[list[str]], pooling: str = "first") -> dict:
    """``subwords`` inputs (``tokenization.words_to_subwords``) with the pooling weights ``[B, L, S]``:
    1 on each word's first subword, or 1/n on each of its n subwords (``mean``)."""
    from ..tokenization import words_to_subwords

    x = words_to_subwords(tokenizer, words)
    ids, word_ids, first = x.ids.numpy(), x.word_ids.numpy(), x.first.numpy()
    B, S = ids.shape
    pool = np.zeros((B, first.shape[1], S), dtype=np.float32)
    if pooling == "mean":
        b, s = np.nonzero(word_ids >= 0)
        pool[b, word_ids[b, s], s] = 1.0
        pool /= np.maximum(pool.sum(2, keepdims=True), 1.0)
    else:
        for b, n in enumerate(len(w) for w in words):
            pool[b, np.arange(n), first[b, :n]] = 1.0
    return {"ids": ids, "lengths": x.mask.sum(1).numpy().astype(np.int64), "pool": pool}


def window_inputs(
    tokenizer, words: list[list[str]], window: int, cls: int, sep: int, memo=None
) -> tuple[dict, np.ndarray]:
    """``segments`` inputs of a transformer student, as ``TransformerTagger.encode`` frames them:
    each sentence's subwords in one window when the longest sentence fits, else in overlapping
    windows of ``window`` subwords (``encoding.subword_windows``), each framed by [CLS] and [SEP];
    and the word slot ``b * L + w`` of each token that is word w's first subword in the window that
    owns it (-1 elsewhere), flat."""
    from ..tokenization import subword_windows, word_pieces

    pieces = word_pieces(tokenizer, words, memo)
    w = min(window, max(sum(len(p) for p in sent) for sent in pieces))
    L = max(len(x) for x in words)
    rows, slots = [], []
    for b, sent in enumerate(pieces):
        seq = [t for p in sent for t in p]
        firsts = np.cumsum([0] + [len(p) for p in sent[:-1]])
        owner = np.full(len(seq), -1, dtype=np.int64)
        owner[firsts] = b * L + np.arange(len(sent))
        starts, owning = subword_windows(len(seq), w)
        for r, j in enumerate(starts.tolist()):
            mine = np.where(owning[j : j + w] == r, owner[j : j + w], -1)  # slots of the subwords it owns
            rows.append([cls, *seq[j : j + w], sep])
            slots.append([-1, *mine, -1])
    Lt = max(len(r) for r in rows)
    input_ids = np.zeros((len(rows), Lt), dtype=np.int64)
    attention = np.zeros((len(rows), Lt), dtype=np.int64)
    slot = np.full((len(rows), Lt), -1, dtype=np.int64)
    for i, (r, s) in enumerate(zip(rows, slots)):
        input_ids[i, : len(r)], attention[i, : len(r)], slot[i, : len(s)] = r, 1, s
    return {"input_ids": input_ids, "attention_mask": attention}, slot.reshape(-1)


def graph_feed(inputs: str, fields: dict, tokenizer, words: list[list[str]], segmenter=None, word_rows=None, memo=None):
    """The feed of a graph with ``inputs`` (bags, subwords, segments) and export.json ``fields`` for
    ``words``, and for segments the word slot and weight of each token (None otherwise): what
    :class:`OnnxModel` runs and what ``distill-export`` traces a graph on. ``segmenter``: a
    teacher's ``WordTokenizer``, built from ``fields`` when not given; ``word_rows``: the lookup of
    a graph with word vectors (``fields["word_vectors"]``); ``memo``: the words' pieces seen before."""
    if inputs == "bags":
        if (fields.get("word_vectors") or fields.get("word_hashing")) and word_rows is None:
            raise ValueError("a graph with word vectors needs their lookup or hashing (word_rows)")
        return bag_inputs(tokenizer, words, bool(fields.get("chars")), word_rows, memo), None, None
    if inputs == "subwords":
        return subword_inputs(tokenizer, words, fields.get("pooling", "first")), None, None
    if fields.get("framing") == "teacher":
        if segmenter is None:
            from ..tokenization import WordTokenizer

            segmenter = WordTokenizer(tokenizer, int(fields["max_length"]), fields.get("pooling", "first"))
        seg = segmenter(words)
        feed = {"input_ids": seg.input_ids.numpy(), "attention_mask": seg.attention_mask.numpy()}
        return feed, seg.token_slot.numpy(), seg.token_weight.numpy()
    feed, slot = window_inputs(
        tokenizer, words, int(fields["window"]), int(fields["cls_token_id"]), int(fields["sep_token_id"]), memo
    )
    return feed, slot, (slot >= 0).astype(np.float32)


class OnnxModel(Backend):
    runtime = "onnx"

    def __init__(self, directory: Path, threads: int | None = None):
        from safetensors.numpy import load_file
        from transformers import AutoTokenizer

        d = Path(directory)
        self.directory = d
        self.meta = meta = read_export_json(d)
        self.name, self.kind, self.what = d.name, meta["kind"], meta["model"]
        self.words = meta.get("words", "default")
        self.vocabulary = meta.get("vocabulary")
        self.embedding_rows = meta.get("embedding_rows")  # absent from exports made before issue 53
        self.quantize = meta.get("quantize", "none")
        self.params = int(meta.get("params", 0))
        self.params_without_embeddings = int(meta.get("params_without_embeddings", 0))
        self.inputs = meta["inputs"]
        check_files(d, meta)
        self.session = open_session(d / meta["onnx"], meta["onnx_sha256"], threads)
        schema = LabelSchema.from_json(meta["label_schema"])
        transitions = None
        if meta["decoder"] in ("crf", "bilou"):
            path = d / DECODE_FILE
            if not path.is_file():
                raise ExportError(f"{path}: missing; a {meta['decoder']} decoder needs its transitions")
            try:
                t = load_file(str(path))
                transitions = (t["transitions"], t["start"], t["end"])
            except Exception as e:
                raise ExportError(f"{path}: unreadable ({e}); export the model again") from None
            n = 5 if meta["decoder"] == "bilou" else schema.num_tags
            if transitions[0].shape != (n, n) or transitions[1].shape != (n,) or transitions[2].shape != (n,):
                raise ExportError(f"{path}: transitions of shape {transitions[0].shape} do not fit {n} tags")
        try:
            self.decoder = Decoder(meta["decoder"], schema, transitions, tuple(meta.get("entity_types", ())))
        except ValueError as e:
            raise ExportError(f"{d / EXPORT_JSON}: {e}") from None
        if not (d / "tokenizer").is_dir():
            raise ExportError(f"{d / 'tokenizer'}: missing; export the model again")
        self.tokenizer = AutoTokenizer.from_pretrained(d / "tokenizer")
        if len(self.tokenizer) != meta.get("tokenizer_size"):
            raise ExportError(
                f"{d / 'tokenizer'}: loads as a tokenizer of {len(self.tokenizer):,} entries, the exported one had "
                f"{meta.get('tokenizer_size')}; export the model again"
            )
        self.word_rows = (
            read_word_list(d, meta)
            if meta.get("word_vectors")
            else read_word_hashing(d, meta)
            if meta.get("word_hashing")
            else None
        )
        from ..tokenization import PieceMemo

        self.memo = PieceMemo(MEMO_WORDS)
        if self.inputs == "segments" and meta.get("framing") == "teacher":
            from ..tokenization import WordTokenizer

            self.segmenter = WordTokenizer(self.tokenizer, int(meta["max_length"]), meta.get("pooling", "first"))

    # -- scores ----------------------------------------------------------------------------------
    def row_of_id(self) -> np.ndarray | None:
        """The id map of a trimmed vocabulary, read from the graph: the one int64 table (an id
        map, not an embedding) with a row per teacher subword (``vocabulary.RowIndex``)."""
        import onnx
        from onnx import numpy_helper

        graph = onnx.load(str(self.directory / self.meta["onnx"])).graph
        rows = int(self.vocabulary["teacher"])
        for t in graph.initializer:
            if t.data_type == onnx.TensorProto.INT64 and list(t.dims) == [rows]:
                return numpy_helper.to_array(t)
        raise ExportError(
            f"{self.directory}: export.json names a trimmed vocabulary, and the graph has no id map of {rows} rows"
        )

    def scores(self, words: list[list[str]]) -> np.ndarray:
        feed, slot, weight = graph_feed(
            self.inputs, self.meta, self.tokenizer, words, getattr(self, "segmenter", None), self.word_rows, self.memo
        )
        out = self.session.run(None, feed)[0]
        if slot is not None:  # token scores of segments, pooled to words
            out = pool_tokens(out, slot, weight, len(words), max(len(w) for w in words))
        if self.decoder.kind == "bilou":
            out = out.reshape(*out.shape[:2], len(self.decoder.entity_types), 5)
        return out
