"""``distill-export``: a trained student or teacher as a self-contained ONNX directory
(``seqdistill.inference.onnx_runtime`` describes the directory and runs it).

Decisions, named here:

* The graph stops at word scores (token scores for encoders, pooled in numpy); decoding (CRF
  Viterbi, the per-type BILOU Viterbi, argmax) is the one numpy decoder of
  ``seqdistill.inference.decode``, shared by every runtime. A Viterbi in ONNX would be a Loop
  whose per-step overhead in ONNX Runtime exceeds numpy's; docs/BENCHMARKS.md measures decoding.
* The exporter is torch's TorchScript-based one (``dynamo=False``): it exports a model in about a
  second where the dynamo exporter takes several, and lets the SRU recurrence (a loop over the
  sentence's own length) be written as one placeholder node that becomes an ONNX ``Scan`` whose
  body is the 13 operations of one step (``SRUScan``, ``replace_sru_scans``).
* A bidirectional LSTM is exported without packing, exactly: each direction is a unidirectional
  ONNX ``LSTM``, the backward one run over each sentence reversed within its own length, so that
  padding never reaches a real word (ONNX Runtime's fused LSTM kernel, quantizable to int8).
* ``--quantize int8`` is ONNX Runtime's dynamic quantization (int8 weights, activations quantized
  on the fly) of the MatMul, Gemm and LSTM weights; the word embedding matrix stays fp32. Static
  int8 is not offered: on CoNLL-2003 it is known to collapse a BERT tagger's F1. ``--check``
  scores the export against the torch model on a labelled corpus and fails beyond
  ``--max-f1-drop``.
* SenTScore teachers (an encoder-decoder read by beam search) are not exported: distil one into a
  student and export the student.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from pathlib import Path

import click
import numpy as np
import torch
from torch import Tensor, nn

from .. import __version__
from ..inference.onnx_runtime import (
    DECODE_FILE,
    EXPORT_FORMAT,
    EXPORT_JSON,
    EXPORT_VERSION,
    ONNX_FILE,
    ExportError,
    bag_inputs,
    is_export_dir,
    sha256_file,
    subword_inputs,
    window_inputs,
)
from ..inference.tagger import Tagger
from ..inference.torch_models import TorchStudent, TorchTeacher, is_student_dir
from ..students.models import BiLSTMCRF
from ..students.sru import sru_recurrence
from .options import tag_names_option

OPSET = 17
QUANTIZE = ("none", "int8")


# -- exact, exportable versions of the recurrent layers ---------------------------------------------
def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Each sentence of ``x [B, T, D]`` reversed within its first ``lengths[b]`` steps (padding stays)."""
    t = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
    n = lengths.unsqueeze(1)
    index = torch.where(t < n, n - 1 - t, t)
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[2]))


class PaddedBiLSTM(nn.Module):
    """A (multi-layer) bidirectional ``nn.LSTM`` as unidirectional LSTMs over padded batches: the
    forward direction as is (padding comes after every real word), the backward one over each
    sentence reversed within its length. Same outputs as the packed LSTM on real words."""

    def __init__(self, lstm: nn.LSTM):
        super().__init__()
        self.layers = nn.ModuleList()
        for layer in range(lstm.num_layers):
            pair = nn.ModuleList()
            for suffix in ("", "_reverse"):
                one = nn.LSTM(
                    lstm.input_size if layer == 0 else 2 * lstm.hidden_size,
                    lstm.hidden_size,
                    batch_first=True,
                    bias=lstm.bias,
                )
                for name in ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if lstm.bias else ()):
                    getattr(one, f"{name}_l0").data.copy_(getattr(lstm, f"{name}_l{layer}{suffix}").data)
                pair.append(one)
            self.layers.append(pair)

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        for fwd, bwd in self.layers:
            back = reverse_padded(bwd(reverse_padded(x, lengths))[0], lengths)
            x = torch.cat([fwd(x)[0], back], -1)
        return x


class SRUScan(torch.autograd.Function):
    """The SRU recurrence (``students.sru.sru_recurrence``) time-major (``[T, N, H]``, ``keep
    [T, N, 1]``, the biases already in f^ and r^) as one node of the exported graph: the TorchScript exporter writes it as a
    ``seqdistill::SRUScan`` placeholder, which :func:`replace_sru_scans` turns into an ONNX ``Scan``
    whose body is the 13 operations of one step (a scripted loop would export as a ``Loop`` of
    about 25 operations a step, writing its output with a ``ScatterND`` that copies it whole)."""

    @staticmethod
    def forward(ctx, xs, fs, rs, highway, keep, v_f, v_r):
        zero = torch.zeros_like(v_f)
        u = torch.stack([xs, fs, rs], 2).transpose(0, 1)  # [N, T, 3, H]
        return sru_recurrence(u, highway.transpose(0, 1), keep[..., 0].transpose(0, 1), v_f, v_r, zero, zero).transpose(
            0, 1
        )

    @staticmethod
    def symbolic(g, xs, fs, rs, highway, keep, v_f, v_r):
        out = g.op("seqdistill::SRUScan", xs, fs, rs, highway, keep, v_f, v_r)
        out.setType(xs.type())
        return out


def sru_scan_body(v_f: str, v_r: str):
    """One SRU step as an ONNX graph (state ``c``; scan inputs x~, f^, r^, x', keep; ``v_f`` and
    ``v_r`` read from the outer graph): outputs the new state and h_t."""
    from onnx import TensorProto, helper

    n = helper.make_node
    nodes = [
        n("Mul", [v_f, "c"], ["fc"]),
        n("Add", ["f_in", "fc"], ["f_pre"]),
        n("Sigmoid", ["f_pre"], ["f"]),
        n("Mul", [v_r, "c"], ["rc"]),
        n("Add", ["r_in", "rc"], ["r_pre"]),
        n("Sigmoid", ["r_pre"], ["r"]),
        n("Sub", ["c", "x"], ["cx"]),
        n("Mul", ["f", "cx"], ["fcx"]),
        n("Add", ["x", "fcx"], ["c_new"]),
        n("Sub", ["c_new", "hw"], ["ch"]),
        n("Mul", ["r", "ch"], ["rch"]),
        n("Add", ["hw", "rch"], ["h"]),
        n("Where", ["keep", "c_new", "c"], ["c_out"]),
    ]
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(name, f32, None) for name in ("c", "x", "f_in", "r_in", "hw")]
    inputs.append(helper.make_tensor_value_info("keep", TensorProto.BOOL, None))
    outputs = [helper.make_tensor_value_info("c_out", f32, None), helper.make_tensor_value_info("h", f32, None)]
    return helper.make_graph(nodes, "sru_step", inputs, outputs)


def replace_sru_scans(path: Path) -> None:
    """Turn every ``seqdistill::SRUScan`` placeholder of the ONNX file into a standard ``Scan``
    over time (its initial state zeros of one step's shape), in place."""
    import onnx
    from onnx import helper

    model = onnx.load(str(path))
    graph = model.graph
    nodes = []
    replaced = set()
    for i, node in enumerate(graph.node):
        if node.domain != "seqdistill":
            nodes.append(node)
            continue
        xs, fs, rs, hw, keep, v_f, v_r = node.input
        step_shape, c0 = f"sru{i}_step_shape", f"sru{i}_c0"
        nodes.append(helper.make_node("Shape", [xs], [step_shape], start=1))
        nodes.append(
            helper.make_node(
                "ConstantOfShape",
                [step_shape],
                [c0],
                value=helper.make_tensor("zero", onnx.TensorProto.FLOAT, [1], [0.0]),
            )
        )
        nodes.append(
            helper.make_node(
                "Scan",
                [c0, xs, fs, rs, hw, keep],
                [f"sru{i}_c_last", node.output[0]],
                body=sru_scan_body(v_f, v_r),
                num_scan_inputs=5,
            )
        )
        replaced.add(node.output[0])
    graph.ClearField("node")
    graph.node.extend(nodes)
    kept = [v for v in graph.value_info if v.name not in replaced]  # shapes the tracer fixed for one example
    graph.ClearField("value_info")
    graph.value_info.extend(kept)
    opsets = [o for o in model.opset_import if o.domain != "seqdistill"]
    model.ClearField("opset_import")
    model.opset_import.extend(opsets)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


class ExportSRU(nn.Module):
    """A ``BiSRU``/``BiSRUpp`` layer's forward with the recurrence as one ``SRUScan`` (both directions
    stacked on the batch, the backward one time-reversed, as ``BiSRU.forward``)."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        layer = self.layer
        B, T, H = x.shape[0], x.shape[1], layer.hidden
        u = layer.projections(x, mask).view(B, T, 2, 3, H)
        hx = layer.highway(x)
        u = torch.cat([u[:, :, 0], u[:, :, 1].flip(1)])  # [2B, T, 3, H]
        both_mask = torch.cat([mask, mask.flip(1)])
        params = {
            k: torch.stack([getattr(layer.fwd, k), getattr(layer.bwd, k)]).repeat_interleave(B, 0)
            for k in ("v_f", "v_r", "b_f", "b_r")
        }
        fs = u[:, :, 1] + params["b_f"].unsqueeze(1)
        rs = u[:, :, 2] + params["b_r"].unsqueeze(1)
        h = SRUScan.apply(
            u[:, :, 0].transpose(0, 1),
            fs.transpose(0, 1),
            rs.transpose(0, 1),
            torch.cat([hx, hx.flip(1)]).transpose(0, 1),
            both_mask.transpose(0, 1).unsqueeze(-1),
            params["v_f"],
            params["v_r"],
        ).transpose(0, 1)
        h = h * both_mask.unsqueeze(-1).to(h.dtype)
        return torch.cat([h[:B], h[B:].flip(1)], -1)


# -- one graph per kind of input ----------------------------------------------------------------------
class BagsGraph(nn.Module):
    """The BiLSTM-CRF (paper 000): mean of each word's subword embeddings (the ``EmbeddingBag``),
    BiLSTM, linear: emissions ``[B, L, T]``."""

    def __init__(self, model):
        super().__init__()
        self.embed, self.lstm, self.out = model.embed, PaddedBiLSTM(model.lstm), model.out

    def forward(self, piece_ids: Tensor, piece_mask: Tensor, lengths: Tensor) -> Tensor:
        weights = piece_mask / piece_mask.sum(2, keepdim=True).clamp(min=1.0)  # [B, L, P]: 1/n on a word's n pieces
        e = nn.functional.embedding(piece_ids, self.embed.weight)  # [B, L, P, D]
        x = (weights.unsqueeze(2) @ e).squeeze(2)  # the mean as one product
        return self.out(self.lstm(x, lengths))


class CharBagsGraph(BagsGraph):
    """The BiLSTM-CRF with its char CNN feature (``BiLSTMCRF.char_feature``) beside the bag mean."""

    char_feature = BiLSTMCRF.char_feature  # the student's own code, no second copy

    def __init__(self, model):
        super().__init__(model)
        self.char_embed, self.char_conv, self.dropout = model.char_embed, model.char_conv, model.dropout

    def forward(self, piece_ids: Tensor, piece_mask: Tensor, lengths: Tensor, char_ids: Tensor) -> Tensor:
        weights = piece_mask / piece_mask.sum(2, keepdim=True).clamp(min=1.0)
        e = nn.functional.embedding(piece_ids, self.embed.weight)
        x = torch.cat([(weights.unsqueeze(2) @ e).squeeze(2), self.char_feature(char_ids)], -1)
        return self.out(self.lstm(x, lengths))


class SubwordLSTMGraph(nn.Module):
    """The BiLSTM tagger (papers 001, 004): subword embeddings, BiLSTM, pooled to words, the
    GeLU projection (eq. 5) and the softmax head's logits (eq. 1)."""

    def __init__(self, model):
        super().__init__()
        self.embed, self.lstm = model.embed, PaddedBiLSTM(model.lstm)
        self.project, self.classifier = model.project, model.classifier

    def forward(self, ids: Tensor, lengths: Tensor, pool: Tensor) -> Tensor:
        h = self.lstm(self.embed(ids), lengths)
        return self.classifier(nn.functional.gelu(self.project(pool @ h)))


class RNNGraph(nn.Module):
    """The CNN + LSTM/SRU/SRU++ tagger (paper 003): embeddings, the conv block (BatchNorm with its
    running statistics, padding zeroed), the recurrent stack, first subword, BILOU logits
    ``[B, L, E * 5]``."""

    def __init__(self, model):
        super().__init__()
        self.embed, self.conv, self.heads = model.embed, model.conv, model.heads
        cell = model.config.extra.get("cell", "sru++")
        self.lstm = cell == "lstm"
        self.rnn = nn.ModuleList(PaddedBiLSTM(layer.lstm) if self.lstm else ExportSRU(layer) for layer in model.rnn)

    def forward(self, ids: Tensor, lengths: Tensor, pool: Tensor) -> Tensor:
        mask = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0) < lengths.unsqueeze(1)
        keep = mask.unsqueeze(-1).to(torch.float32)
        h = self.embed(ids)
        for layer in self.conv:
            x = h.transpose(1, 2) * keep.transpose(1, 2)
            x = torch.cat([conv(x) for conv in layer.convs], 1)
            n = layer.norm
            x = nn.functional.batch_norm(x, n.running_mean, n.running_var, n.weight, n.bias, False, 0.0, n.eps)
            h = torch.relu(x).transpose(1, 2) * keep
        for layer in self.rnn:
            h = layer(h, lengths) if self.lstm else layer(h, mask)
        return self.heads(pool @ h)


class SegmentsGraph(nn.Module):
    """An encoder and its linear head over framed segments: token scores ``[N, Lt, T]``."""

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        self.encoder, self.head = encoder, head

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.head(self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state)


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


def _student_graph(backend: TorchStudent) -> tuple[nn.Module, str, dict, dict]:
    """(graph, inputs kind, example inputs, export.json fields) of a torch student."""
    model, tok = backend.module, backend.tokenizer
    arch = model.config.arch
    if arch == "bilstm-crf":
        if model.config.char_filters:
            return CharBagsGraph(model), "bags", bag_inputs(tok, EXAMPLE, chars=True), {"chars": True}
        return BagsGraph(model), "bags", bag_inputs(tok, EXAMPLE), {}
    if arch in ("bilstm-tagger", "rnn-tagger"):
        pooling = model.config.pooling if arch == "bilstm-tagger" else "first"
        graph = SubwordLSTMGraph(model) if arch == "bilstm-tagger" else RNNGraph(model)
        return graph, "subwords", subword_inputs(tok, EXAMPLE, pooling), {"pooling": pooling}
    if arch == "transformer":
        fields = {"framing": "windows", "window": model.window, "cls_token_id": model.cls, "sep_token_id": model.sep}
        feed, _ = window_inputs(tok, EXAMPLE, model.window, model.cls, model.sep)
        return SegmentsGraph(model.encoder, model.out), "segments", feed, fields
    raise ExportError(f"student architecture {arch!r} cannot be exported")


def _teacher_graph(backend: TorchTeacher) -> tuple[nn.Module, str, dict, dict]:
    teacher = backend.module
    if backend.what == "sentscore":
        raise ExportError(
            f"{teacher.source_dir}: a SenTScore teacher is an encoder-decoder read by beam search, "
            "not a tagger graph; distil it into a student (`distill-train --recipe sentscore`) "
            "and export the student"
        )
    seg = teacher.words(EXAMPLE)
    feed = {"input_ids": seg.input_ids.numpy(), "attention_mask": seg.attention_mask.numpy()}
    return (
        SegmentsGraph(teacher.encoder, teacher.classifier),
        "segments",
        feed,
        {"framing": "teacher", "max_length": teacher.max_length, "pooling": teacher.pooling},
    )


def _fingerprint(d: Path, backend) -> dict:
    if backend.kind == "teacher":
        from ..teachers import teacher_fingerprints

        return teacher_fingerprints(d)
    return {"weights": sha256_file(d / "model.safetensors")}


def export_model(model_dir, out_dir, *, quantize: str = "none", trust_remote_code: bool = False) -> Path:
    """Export a student or teacher directory to ``out_dir`` (a new directory, written whole or
    not at all: built under a temporary name beside it and renamed)."""
    src, out = Path(model_dir), Path(out_dir)
    if quantize not in QUANTIZE:
        raise ExportError(f"--quantize {quantize!r} is not one of {', '.join(QUANTIZE)}")
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such model directory")
    if is_export_dir(src):
        raise ExportError(f"{src}: already an exported directory; export the student or teacher it came from")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out}: exists and is not empty; choose a new directory or remove it")
    backend = TorchStudent(src) if is_student_dir(src) else TorchTeacher(src, trust_remote_code=trust_remote_code)
    graph, inputs, feed, fields = (_student_graph if backend.kind == "student" else _teacher_graph)(backend)
    axes = dict(AXES[inputs])
    if fields.get("chars"):
        axes["char_ids"] = ["batch", "words", "bytes"]
    sru = any(isinstance(m, ExportSRU) for m in graph.modules())
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
                custom_opsets={"seqdistill": 1} if sru else None,
            )
        if sru:
            replace_sru_scans(fp32)
        if quantize == "int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(
                str(fp32),
                str(tmp / ONNX_FILE),
                weight_type=QuantType.QInt8,
                op_types_to_quantize=["MatMul", "Gemm", "LSTM"],
            )
            fp32.unlink()
        decoder = backend.decoder
        if decoder.transitions is not None:
            from safetensors.numpy import save_file

            save_file(
                dict(zip(("transitions", "start", "end"), (np.ascontiguousarray(a) for a in decoder.transitions))),
                str(tmp / DECODE_FILE),
            )
        backend.tokenizer.save_pretrained(tmp / "tokenizer")
        meta = {
            "format": EXPORT_FORMAT,
            "format_version": EXPORT_VERSION,
            "tool_version": __version__,
            "kind": backend.kind,
            "model": backend.what,
            "source": {"path": str(src), **_fingerprint(src, backend)},
            "inputs": inputs,
            "decoder": decoder.kind,
            "label_schema": decoder.schema.to_json(),
            "entity_types": list(decoder.entity_types),
            "quantize": quantize,
            "opset": OPSET,
            "params": backend.params,
            "params_without_embeddings": backend.params_without_embeddings,
            "onnx": ONNX_FILE,
            "onnx_sha256": sha256_file(tmp / ONNX_FILE),
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


def check_export(
    model_dir, export_dir, data: str, *, fmt: str = "auto", tag_names: tuple[str, ...] | None = None
) -> tuple[float, float]:
    """Micro F1 of the torch model and of its export on a labelled corpus (every span of a
    nested corpus); ``tag_names`` names integer tag ids of a Parquet or ``hf:`` corpus."""
    from .corpora import read_corpus
    from .evaluate import score_tagger

    corpus = read_corpus(data, "check", "test", format=fmt, tag_names=tag_names)
    return (score_tagger(Tagger.load(model_dir), corpus)["f1"], score_tagger(Tagger.load(export_dir), corpus)["f1"])


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model", "model_dir", required=True, help="Student or teacher directory.")
@click.option("--out", "out_dir", required=True, help="New directory for the export.")
@click.option(
    "--quantize",
    type=click.Choice(QUANTIZE),
    default="none",
    show_default=True,
    help="int8: dynamic quantization of the MatMul, Gemm and LSTM weights (ONNX Runtime).",
)
@click.option(
    "--check",
    "check_data",
    default=None,
    help="Labelled corpus (CoNLL, JSONL, Parquet, hf:DIR[@SPLIT]): score the export against the torch model on it.",
)
@tag_names_option
@click.option(
    "--max-f1-drop",
    type=float,
    default=0.5,
    show_default=True,
    help="With --check: the most F1 points the export may lose; beyond it, exit 1.",
)
@click.option("--trust-remote-code", is_flag=True, help="Allow a teacher's own code from its directory.")
def main(model_dir, out_dir, quantize, check_data, tag_names, max_f1_drop, trust_remote_code) -> None:
    """Export a student or teacher to a self-contained ONNX directory (graph, tokenizer, label
    schema, decoding tables, export.json), loadable with ``seqdistill.Tagger.load`` and by
    ``distill-eval`` and ``distill-predict``."""
    from .corpora import CorpusError

    try:
        out = export_model(model_dir, out_dir, quantize=quantize, trust_remote_code=trust_remote_code)
        meta = json.loads((out / EXPORT_JSON).read_text())
        click.echo(
            f"{meta['kind']} {meta['model']} -> {out} (ONNX, {quantize}, decoder {meta['decoder']}, "
            f"{(out / ONNX_FILE).stat().st_size / 2**20:.1f} MiB)"
        )
        if check_data:
            torch_f1, export_f1 = check_export(model_dir, out, check_data, tag_names=tag_names)
            drop = 100 * (torch_f1 - export_f1)
            click.echo(
                f"F1 on {check_data}: torch {100 * torch_f1:.2f}, export {100 * export_f1:.2f} "
                f"(drop {drop:+.2f}, allowed {max_f1_drop:.2f})"
            )
            if drop > max_f1_drop:
                raise click.ClickException(
                    f"the export loses {drop:.2f} F1 points on {check_data}, more than "
                    f"--max-f1-drop {max_f1_drop}: ship the fp32 export (--quantize none) "
                    f"or allow a larger drop; {out} is kept for inspection"
                )
    except (CorpusError, ExportError, FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from None
