"""GLiNER teachers as peers (issue 71): the rows ``peers.py`` adds when its teacher is a GLiNER
directory, each predicting as a GLiNER user gets it, on pre-split words, one thread.

* the GLiNER in torch (fp32), decoded as ``predict_entities(flat_ner=True)`` decodes (the
  package's greedy search over the spans above the threshold: ``SpanScorer.greedy``);
* its ONNX export by the package itself (``GLiNER.export_to_onnx``), fp32 and int8
  (``quantize=True``: the package's own dynamic int8), read back with
  ``GLiNER.from_pretrained(load_onnx_model=True)`` under one ONNX Runtime thread, decoded the same;
* a GLiNER of the size its users run, gliner_medium's (DeBERTa-v3-base, 184M parameters), built
  from a config with random weights for speed only (no F1): DeBERTa-v3-base's config written here
  (``DEBERTA_V3_BASE``, its published values), MiniLM-L6's WordPiece tokenizer standing in for its
  SentencePiece one, which installs nowhere here (the words' subword counts differ a little; the
  compute per subword is the encoder's).

Sizes on disk count what a user ships: the weights file used, ``gliner_config.json`` and the
tokenizer files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

DEBERTA_V3_BASE = {  # microsoft/deberta-v3-base's config.json, as published
    "model_type": "deberta-v2",
    "architectures": ["DebertaV2Model"],
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 512,
    "relative_attention": True,
    "position_buckets": 256,
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "pos_att_type": ["p2c", "c2p"],
    "layer_norm_eps": 1e-7,
    "max_relative_positions": -1,
    "position_biased_input": False,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "type_vocab_size": 0,
    "vocab_size": 128100,
}
MEDIUM = {"max_width": 12, "hidden_size": 768, "span_mode": "markerV0", "max_len": 384, "max_types": 25}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def shipped_bytes(d: Path, weights: str) -> int:
    names = (weights, "gliner_config.json", *TOKENIZER_FILES)
    return sum((d / n).stat().st_size for n in names if (d / n).is_file())


class GlinerModel:
    """A GLiNER (torch or ONNX) as peers.py times and scores models: IOB2 tags of its own decoding."""

    scheme = "IOB2"

    def __init__(self, path: Path, types: tuple, onnx_file: str | None = None, threshold: float = 0.5):
        import warnings

        from gliner import GLiNER

        from seqdistill.teachers.span_model import SpanScorer

        kw = {}
        if onnx_file:
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
            kw = {"load_onnx_model": True, "onnx_model_file": onnx_file, "session_options": so}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.model = GLiNER.from_pretrained(str(path), local_files_only=True, **kw)
        self.model.eval()
        self.names, self.tags = [n for n, _ in types], [t for _, t in types]  # what it reads, what it writes
        self.scorer = SpanScorer(self.model, self.names)
        self.threshold, self.path = threshold, path
        weights = onnx_file or next(n for n in ("model.safetensors", "pytorch_model.bin") if (path / n).is_file())
        self.bytes = shipped_bytes(path, weights)

    def predict_batch(self, batch: list[list[str]]):
        return self.scorer.greedy(batch, self.threshold)

    def predict(self, sentences: list[list[str]]) -> list[list[str]]:
        out = []
        for s in range(0, len(sentences), 32):
            batch = sentences[s : s + 32]
            for words, spans in zip(batch, self.predict_batch(batch)):
                tags = ["O"] * len(words)
                for start, end, c in spans:
                    tags[start] = f"B-{self.tags[c]}"
                    tags[start + 1 : end] = [f"I-{self.tags[c]}"] * (end - start - 1)
                out.append(tags)
        return out


def onnx_exports(teacher: Path, work: Path) -> Path:
    """The package's ONNX export of ``teacher`` (fp32 ``model.onnx`` and int8
    ``model_quantized.onnx``), made once into ``work`` (again when the teacher is newer)."""
    from gliner import GLiNER

    out = work / "gliner-onnx"
    done = out / "model_quantized.onnx"
    newest = max(f.stat().st_mtime for f in teacher.iterdir() if f.is_file())
    if done.exists() and newest > done.stat().st_mtime:
        shutil.rmtree(out)
    if not done.exists():
        model = GLiNER.from_pretrained(str(teacher), local_files_only=True)
        model.export_to_onnx(out, quantize=True)
    return out


def medium_sized(tokenizer_source: Path, work: Path) -> Path:
    """A GLiNER of gliner_medium's size with random weights (seeded), saved once into ``work``."""
    import torch
    from gliner import GLiNER
    from transformers import AutoTokenizer

    out = work / "gliner-medium-random"
    if (out / "model.safetensors").exists():
        return out
    backbone = work / "deberta-v3-base-config"
    backbone.mkdir(parents=True, exist_ok=True)
    (backbone / "config.json").write_text(json.dumps(DEBERTA_V3_BASE, indent=1))
    AutoTokenizer.from_pretrained(tokenizer_source).save_pretrained(backbone)
    torch.manual_seed(0)
    model = GLiNER.from_config({"model_name": str(backbone), **MEDIUM}, backbone_from_pretrained=False)
    model.save_pretrained(out, safe_serialization=True)
    return out
