"""``distill-export``: a trained student or teacher as a self-contained ONNX directory
(``seqdistill.inference.onnx_runtime`` describes the directory and runs it).

Decisions, named here:

* Each model builds its own graph (``export_graph()`` of a student architecture or a teacher,
  docs/ARCHITECTURE.md): this module knows no architecture and no teacher kind. It traces the
  graph on ``EXAMPLE``, fed as the runtime feeds it (``onnx_runtime.graph_feed``).
* The graph stops at word scores (token scores for encoders, pooled in numpy); decoding (CRF
  Viterbi, the per-type BILOU Viterbi, argmax) is the one numpy decoder of
  ``seqdistill.decode``, shared by every runtime. A Viterbi in ONNX would be a Loop
  whose per-step overhead in ONNX Runtime exceeds numpy's; docs/BENCHMARKS.md measures decoding.
* The exporter is torch's TorchScript-based one (``dynamo=False``): it exports a model in about a
  second where the dynamo exporter takes several, and lets the SRU recurrence (a loop over the
  sentence's own length) be written as one placeholder node that becomes an ONNX ``Scan`` whose
  body is the 13 operations of one step (``students.sru.SRUScan``, ``replace_sru_scans``).
* A bidirectional LSTM is exported without packing, exactly (``onnx_graphs.PaddedBiLSTM``).
* ``--quantize int8`` stores the MatMul, Gemm and LSTM weights and the embedding tables as int8
  with per-channel (per-row) scales and keeps activations in fp32 (:func:`weight_only_int8`), so
  that a sentence's tags never depend on the sentences batched with it. Static int8 (calibrated
  activation scales) is not offered: on CoNLL-2003 it is known to collapse a BERT tagger's F1.
  ``--check`` scores the export against the torch model on a labelled corpus and fails beyond
  ``--max-f1-drop``.
* ``--table-bits 4`` (with ``--quantize int8``) stores the embedding tables at 4 bits, one scale a
  row (``int4_table``): on CoNLL-2003 it took 36-39% off a student's export for 0.09-0.19 F1
  (docs/RESULTS.md, "Four bits a number in the tables"), so 8 stays the default.
* A student's pretrained word vectors (``--word-vectors``) are a table in the graph (int8 with the
  others) read through a ``word_ids [B, L]`` input; their words are a text file beside it
  (``word_vectors.txt``, a word a line), and each runtime looks a word up itself, as
  ``tokenization.word_vector_rows`` does: as written, else lowercased, else row 0. Not a string
  input looked up inside the graph (``ai.onnx.ml``'s ``LabelEncoder`` after ``StringNormalizer``):
  the graph stays numeric, fed int64 arrays like its other inputs, and the lookup stays the torch
  student's one rule; ``StringNormalizer`` lowercases by a locale, not by Unicode's mapping.
  ``--word-vectors-rows N`` keeps the table's first N words (its commonest), a size knob for a
  student trained with more (docs/RESULTS.md, "The export with word vectors", measures it against
  training with N).
* SenTScore teachers (an encoder-decoder read by beam search) are not exported: distil one into a
  student and export the student.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from ..inference.onnx_runtime import (
    DECODE_FILE,
    EXPORT_FORMAT,
    EXPORT_JSON,
    ONNX_FILE,
    ExportError,
    export_version,
    graph_feed,
    is_export_dir,
    sha256_file,
)
from ..inference.tagger import CALIBRATION_FILE, Tagger
from ..inference.torch_models import TorchStudent, TorchTeacher, is_student_dir
from ..version import __version__
from ..vocabulary import save_tokenizer

OPSET = 17
QUANTIZE = ("none", "int8")
TABLE_BITS = (8, 4)  # --table-bits: the embedding tables' bits under --quantize int8


EXAMPLE = [["the", "quick", "brown", "fox", "jumps"], ["over", "the"], ["dog"]]  # traced shapes; any words do
AXES = {
    "bags": {
        "piece_ids": ["batch", "words", "pieces"],
        "piece_mask": ["batch", "words", "pieces"],
        "lengths": ["batch"],
        "scores": ["batch", "words"],
    },
    "subwords": {
        "ids": ["batch", "subwords"],
        "lengths": ["batch"],
        "pool": ["batch", "words", "subwords"],
        "scores": ["batch", "words"],
    },
    "segments": {
        "input_ids": ["segments", "tokens"],
        "attention_mask": ["segments", "tokens"],
        "scores": ["segments", "tokens"],
    },
}


def weight_only_int8(src: Path, dst: Path, *, table_bits: int = 8) -> int:
    """``--quantize int8``: the weights of every MatMul, Gemm and LSTM stored as int8 with one
    symmetric scale per output channel, each read through a ``DequantizeLinear`` node; activations
    stay fp32. Returns the number of weights quantized.

    Decision (issue 34): weight-only, not ONNX Runtime's dynamic quantization. Dynamic quantization
    scales a node's activations by the maximum over the whole batch tensor, so a sentence's tags
    depended on the sentences batched with it (10 of 1,280 CoNLL-2003 test sentences changed
    between batch 1 and 32); with fp32 activations every sentence is computed alone, whatever its
    company. The cost is the speed int8 arithmetic gave (docs/BENCHMARKS.md measures both); the
    graph stays about 4x smaller in its weights. Written here because ONNX Runtime's weight-only
    quantizer (``MatMulNBits``) covers MatMul alone, not the LSTM that holds a BiLSTM's weights.
    Embedding tables (a Gather's float data) are stored int8 too, one scale per row (issue 36: a
    multilingual teacher's rows are most of a student's bytes); ONNX Runtime folds every
    DequantizeLinear of a constant once, at load (``onnx_runtime.session_options``), so a run reads
    fp32 tables and pays nothing per call. Biases (one dimension) stay fp32; the CRF's tables are
    not in the graph. ``table_bits=4`` (``--table-bits 4``, issue 83; checked by ``export_model``)
    stores the embedding tables at 4 bits instead (:func:`int4_table`)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    axes: dict[str, int] = {}  # the output-channel axis of each weight
    tables: set[str] = set()  # the embedding tables among them
    for node in graph.node:
        if node.op_type == "MatMul" and node.input[1] in weights:
            axes[node.input[1]] = -1  # B [K, N]: a scale per output column
        elif node.op_type == "Gemm" and node.input[1] in weights:
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            axes[node.input[1]] = 0 if trans_b else 1
        elif node.op_type == "LSTM":
            for name in node.input[1:3]:  # W [dirs, 4H, input], R [dirs, 4H, H]
                if name in weights:
                    axes[name] = 1
        elif node.op_type == "Gather" and node.input[0] in weights:
            if weights[node.input[0]].data_type == onnx.TensorProto.FLOAT:  # not an id map (vocabulary.RowIndex)
                axes[node.input[0]] = 0  # an embedding table [V, D]: a scale per row
                tables.add(node.input[0])
    dequantize = []
    for name, axis in axes.items():
        w = numpy_helper.to_array(weights[name]).astype(np.float32)
        if w.ndim < 2:
            continue
        graph.initializer.remove(weights[name])
        if table_bits == 4 and name in tables and w.ndim == 2:
            initializers, nodes = int4_table(w, name)
            graph.initializer.extend(initializers)
            dequantize.extend(nodes)
            continue
        axis = axis % w.ndim
        other = tuple(i for i in range(w.ndim) if i != axis)
        scale = np.abs(w).max(axis=other) / 127.0
        scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
        graph.initializer.extend(
            [numpy_helper.from_array(q, f"{name}_int8"), numpy_helper.from_array(scale, f"{name}_scale")]
        )
        dequantize.append(helper.make_node("DequantizeLinear", [f"{name}_int8", f"{name}_scale"], [name], axis=axis))
    nodes = dequantize + list(graph.node)  # the weights' consumers read the dequantized tensor by its old name
    graph.ClearField("node")
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return len(dequantize)


def quantize_int4_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A table ``[V, D]`` as symmetric 4-bit integers with one scale a row: ``q = round(w / s)`` in
    [-7, 7], ``s = max |w_row| / 7`` (uniform quantization of an embedding table, May et al.,
    NeurIPS 2019, as issue 83 asks). Returns ``(q int8 [V, D], s float32 [V])``; ``q * s[:, None]``
    is the table the graph reads."""
    scale = np.abs(w).max(axis=1) / 7.0
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    return np.clip(np.rint(w / scale[:, None]), -7, 7).astype(np.int8), scale


def pack_int4(q: np.ndarray) -> np.ndarray:
    """Two 4-bit numbers a byte: ``q[:, 2j] + 8`` in the low nibble, ``q[:, 2j + 1] + 8`` in the high
    one (an odd width padded with one zero column). ``uint8 [V, ceil(D / 2)]``."""
    u = (q.astype(np.int16) + 8).astype(np.uint8)
    if u.shape[1] % 2:
        u = np.concatenate([u, np.full((u.shape[0], 1), 8, np.uint8)], axis=1)
    return (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8)


def int4_table(w: np.ndarray, name: str):
    """``--table-bits 4``: the initializers and nodes that rebuild the table ``name`` from its packed
    nibbles (:func:`pack_int4`) and row scales, as ``(initializers, nodes)``.

    Decision: the nibbles are unpacked by plain opset-17 arithmetic (Cast, Div, Mod, Concat, Reshape,
    Slice, Sub, Mul) rather than an opset-21 ``DequantizeLinear`` of ``int4``: the export keeps the one
    opset every runtime reads (Python, the spaCy component, onnxruntime-web and -node), and every node
    has constant inputs, so ONNX Runtime folds the whole chain into the fp32 table once at load, as it
    folds int8's ``DequantizeLinear`` (``onnx_runtime.session_options``): nothing is paid per call."""
    from onnx import TensorProto, helper, numpy_helper

    q, scale = quantize_int4_rows(w)
    packed = pack_int4(q)
    rows, dim = w.shape
    n = lambda suffix: f"{name}_int4_{suffix}"  # noqa: E731
    initializers = [
        numpy_helper.from_array(packed, n("packed")),
        numpy_helper.from_array(scale.reshape(-1, 1), n("scale")),
        numpy_helper.from_array(np.array(16, np.int32), n("sixteen")),
        numpy_helper.from_array(np.array(8.0, np.float32), n("eight")),
        numpy_helper.from_array(np.array([rows, packed.shape[1] * 2], np.int64), n("shape")),
        numpy_helper.from_array(np.array([0], np.int64), n("start")),
        numpy_helper.from_array(np.array([dim], np.int64), n("end")),
        numpy_helper.from_array(np.array([1], np.int64), n("axis")),
        numpy_helper.from_array(np.array([-1], np.int64), n("last")),
    ]
    nodes = [
        helper.make_node("Cast", [n("packed")], [n("i32")], to=TensorProto.INT32),
        helper.make_node("Mod", [n("i32"), n("sixteen")], [n("low")]),
        helper.make_node("Div", [n("i32"), n("sixteen")], [n("high")]),
        helper.make_node("Unsqueeze", [n("low"), n("last")], [n("low3")]),
        helper.make_node("Unsqueeze", [n("high"), n("last")], [n("high3")]),
        helper.make_node("Concat", [n("low3"), n("high3")], [n("pairs")], axis=-1),  # [V, D/2, 2]: in column order
        helper.make_node("Reshape", [n("pairs"), n("shape")], [n("even")]),
        helper.make_node("Slice", [n("even"), n("start"), n("end"), n("axis")], [n("u")]),
        helper.make_node("Cast", [n("u")], [n("f")], to=TensorProto.FLOAT),
        helper.make_node("Sub", [n("f"), n("eight")], [n("q")]),
        helper.make_node("Mul", [n("q"), n("scale")], [name]),
    ]
    return initializers, nodes


def _fingerprint(d: Path, backend) -> dict:
    if backend.kind == "teacher":
        from ..teachers import teacher_fingerprints

        return teacher_fingerprints(d)
    return {"weights": sha256_file(d / "model.safetensors")}


def export_model(
    model_dir,
    out_dir,
    *,
    quantize: str = "none",
    trust_remote_code: bool = False,
    word_vectors_rows: int = 0,
    table_bits: int = 8,
) -> Path:
    """Export a student or teacher directory to ``out_dir`` (a new directory, written whole or
    not at all: built under a temporary name beside it and renamed). ``word_vectors_rows``: keep
    only the first N words of a student's word vector table (0: all; ``keep_word_vectors``).
    ``table_bits``: the embedding tables' bits under ``quantize="int8"`` (8 or 4)."""
    src, out = Path(model_dir), Path(out_dir)
    if quantize not in QUANTIZE:
        raise ExportError(f"--quantize {quantize!r} is not one of {', '.join(QUANTIZE)}")
    if table_bits not in TABLE_BITS:
        raise ExportError(f"--table-bits {table_bits}: not one of {', '.join(map(str, TABLE_BITS))}")
    if table_bits != 8 and quantize != "int8":
        raise ExportError(f"--table-bits {table_bits} quantizes the tables of an int8 export: add --quantize int8")
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such model directory")
    if is_export_dir(src):
        raise ExportError(f"{src}: already an exported directory; export the student or teacher it came from")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out}: exists and is not empty; choose a new directory or remove it")
    backend = TorchStudent(src) if is_student_dir(src) else TorchTeacher(src, trust_remote_code=trust_remote_code)
    trained_rows = None
    if word_vectors_rows:
        if not hasattr(backend.module, "keep_word_vectors"):
            raise ExportError(f"{src}: --word-vectors-rows: a {backend.what} has no word vectors")
        trained_rows = backend.module.keep_word_vectors(word_vectors_rows)
        from ..students.sizes import parameter_counts

        backend.params, backend.params_without_embeddings = parameter_counts(backend.module)
    graph, inputs, fields = backend.module.export_graph()  # the architecture's or teacher kind's own
    if trained_rows is not None:
        fields["word_vectors"]["trained_rows"] = trained_rows  # the export keeps the first "rows" of them
    table = getattr(backend.module, "word_vectors", None)  # a student's word vectors (students/word_vectors.py)
    rows = getattr(table, "hashing", None) or (table.row_of() if table is not None else None)
    feed = graph_feed(inputs, fields, backend.tokenizer, EXAMPLE, word_rows=rows)[0]
    check_bilou_tables(src, backend.decoder, graph, feed)
    axes = dict(AXES[inputs])
    if fields.get("chars"):
        axes["char_ids"] = ["batch", "words", "bytes"]
    if fields.get("word_vectors"):
        axes["word_ids"] = ["batch", "words"]
    if fields.get("word_hashing"):
        axes["word_ids"] = ["distinct_words", "keys"]
        axes["word_index"] = ["batch", "words"]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        fp32 = tmp / ("model.fp32.onnx" if quantize == "int8" else ONNX_FILE)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
            torch.onnx.export(
                graph.eval(),
                tuple(torch.from_numpy(v) for v in feed.values()),
                str(fp32),
                dynamo=False,
                opset_version=OPSET,
                input_names=list(feed),
                output_names=["scores"],
                dynamic_axes={k: dict(enumerate(v)) for k, v in axes.items()},
                custom_opsets=getattr(graph, "custom_opsets", None),
            )
        if hasattr(graph, "finish_onnx"):
            graph.finish_onnx(fp32)  # e.g. the SRU recurrence's placeholder node becomes a Scan
        if quantize == "int8":
            weight_only_int8(fp32, tmp / ONNX_FILE, table_bits=table_bits)
            fp32.unlink()
        decoder = backend.decoder
        if decoder.transitions is not None:
            from safetensors.numpy import save_file

            save_file(
                dict(zip(("transitions", "start", "end"), (np.ascontiguousarray(a) for a in decoder.transitions))),
                str(tmp / DECODE_FILE),
            )
        save_tokenizer(backend.tokenizer, tmp / "tokenizer")
        if fields.get("word_vectors"):  # the table's words, looked up by every runtime (decision in the docstring)
            (tmp / fields["word_vectors"]["file"]).write_text("\n".join(table.word_list()), encoding="utf-8")
        if (src / CALIBRATION_FILE).is_file():  # the span-confidence temperature travels with the model
            shutil.copyfile(src / CALIBRATION_FILE, tmp / CALIBRATION_FILE)
        meta = {
            "format": EXPORT_FORMAT,
            "format_version": export_version(fields),
            "tool_version": __version__,
            "kind": backend.kind,
            "model": backend.what,
            "words": backend.words,
            "vocabulary": backend.vocabulary,
            "embedding_rows": backend.embedding_rows,
            "source": {"path": str(src), **_fingerprint(src, backend)},
            "inputs": inputs,
            "decoder": decoder.kind,
            "label_schema": decoder.schema.to_json(),
            "entity_types": list(decoder.entity_types),
            "quantize": quantize,
            **({"table_bits": table_bits} if table_bits != 8 else {}),  # absent: 8 (exports before issue 83)
            "opset": OPSET,
            "params": backend.params,
            "params_without_embeddings": backend.params_without_embeddings,
            "onnx": ONNX_FILE,
            "onnx_sha256": sha256_file(tmp / ONNX_FILE),
            # every other file a load needs, checked at load (onnx_runtime.check_files)
            "files": {
                p.relative_to(tmp).as_posix(): sha256_file(p)
                for p in sorted(tmp.rglob("*"))
                if p.is_file() and p.name != ONNX_FILE
            },
            "tokenizer_size": len(backend.tokenizer),
            **fields,
        }
        (tmp / EXPORT_JSON).write_text(json.dumps(meta, indent=1) + "\n")
        if (src / "training.json").exists():  # provenance for the model card (distill-eval --card)
            shutil.copyfile(src / "training.json", tmp / "training.json")
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def check_bilou_tables(src: Path, decoder, graph, feed: dict) -> None:
    """Refuse, before anything is written, a per-type (BILOU) model whose heads do not match its
    entity types (issue 82): a type named twice, a type its label schema does not have (its spans
    could not become tags), or a graph whose output is not 5 BILOU tags for each type (a
    hand-edited config that renamed, added or dropped a type)."""
    if decoder is None or decoder.kind != "bilou":
        return
    types, schema_types = list(decoder.entity_types), list(decoder.schema.entity_types)
    twice = sorted({t for t in types if types.count(t) > 1})
    if twice:
        raise ExportError(f"{src}: entity type {', '.join(map(repr, twice))} has two BILOU heads; one head a type")
    unknown = [t for t in types if t not in schema_types]
    if unknown:
        raise ExportError(
            f"{src}: the BILOU heads' types {', '.join(map(repr, unknown))} are not types of the model's label "
            f"schema ({', '.join(schema_types)}): its spans would have no tags"
        )
    with torch.no_grad():
        scores = graph.eval()(*(torch.from_numpy(v) for v in feed.values()))
    if scores.shape[-1] != 5 * len(types):
        raise ExportError(
            f"{src}: the graph gives {scores.shape[-1]} scores a word, where {len(types)} entity types "
            f"({', '.join(types)}) need {5 * len(types)} (5 BILOU tags each): its heads and its types differ"
        )


def check_export(
    model_dir, export_dir, data: str, *, fmt: str = "auto", tag_names: tuple[str, ...] | None = None
) -> tuple[float, float]:
    """Micro F1 of the torch model and of its export on a labelled corpus (every span of a
    nested corpus); ``tag_names`` names integer tag ids of a Parquet or ``hf:`` corpus."""
    from ..corpora import read_corpus
    from .evaluate import score_tagger

    corpus = read_corpus(data, "check", "test", format=fmt, tag_names=tag_names)
    return (score_tagger(Tagger.load(model_dir), corpus)["f1"], score_tagger(Tagger.load(export_dir), corpus)["f1"])
