"""Teachers from GGUF files (issue 35), through transformers' own GGUF loader: a tiny Llama GGUF is
written in the test with the ``gguf`` package (random float32 weights, a sentencepiece-style
vocabulary with <unusedN> sentinels). Not tested here: quantized tensor types (Q4_K_M and the
like: transformers dequantizes them with the gguf package's own code) and architectures other
than Llama (Gemma 3 270M's GGUF file is read in docs/RESULTS.md's runs)."""

import hashlib
import json

import numpy as np
import pytest
import torch
from test_sentscore import CONLL, WORDS

TAGS = ["O", "I", "LOC", "PER"]


def write_llama_gguf(
    path, vocabulary, *, hidden=16, layers=2, heads=2, kv_heads=1, ffn=32, seed=0, std=0.2, context=256
) -> None:
    """A Llama GGUF file: llama.cpp's metadata keys and tensor names, float32 tensors drawn with
    ``seed`` at standard deviation ``std``; ``vocabulary(writer)`` writes the tokenizer's keys and
    returns the number of tokens."""
    import gguf

    rng = np.random.default_rng(seed)

    def weight(*shape):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(context)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(hidden // heads)
    w.add_layer_norm_rms_eps(1e-6)
    n_tokens = vocabulary(w)
    kv = kv_heads * hidden // heads
    w.add_tensor("token_embd.weight", weight(n_tokens, hidden))
    for b in range(layers):
        w.add_tensor(f"blk.{b}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{b}.attn_q.weight", weight(hidden, hidden))
        w.add_tensor(f"blk.{b}.attn_k.weight", weight(kv, hidden))
        w.add_tensor(f"blk.{b}.attn_v.weight", weight(kv, hidden))
        w.add_tensor(f"blk.{b}.attn_output.weight", weight(hidden, hidden))
        w.add_tensor(f"blk.{b}.ffn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{b}.ffn_gate.weight", weight(ffn, hidden))
        w.add_tensor(f"blk.{b}.ffn_up.weight", weight(ffn, hidden))
        w.add_tensor(f"blk.{b}.ffn_down.weight", weight(hidden, ffn))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.add_tensor("output.weight", weight(n_tokens, hidden))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _sentencepiece_vocabulary(w) -> int:
    """A sentencepiece-style vocabulary of the test words and their letters, <unusedN> sentinels."""
    import gguf

    chars = sorted(set("".join(WORDS + TAGS)))
    tokens = ["<unk>", "<s>", "</s>", *(f"<unused{i}>" for i in range(12)), "\u2581"]
    tokens += [*chars, *("\u2581" + c for c in chars)]
    tokens += [t for t in ("\u2581" + w for w in WORDS + TAGS) if t not in tokens]
    special = 15  # unk, bos, eos and the sentinels: control tokens
    types = [gguf.TokenType.UNKNOWN] + [gguf.TokenType.CONTROL] * (special - 1)
    types += [gguf.TokenType.NORMAL] * (len(tokens) - special)
    scores = [0.0] * special + [-float(i) for i in range(len(tokens) - special)]
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types([int(t) for t in types])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(0)
    return len(tokens)


def write_tiny_llama_gguf(path, **shape) -> None:
    """The tiny Llama these tests read: 2 layers of 16, the sentencepiece-style vocabulary."""
    write_llama_gguf(path, _sentencepiece_vocabulary, **shape)


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    write_tiny_llama_gguf(d / "tiny.gguf")
    return d / "tiny.gguf"


def _finetune(args, tmp_path):
    from click.testing import CliRunner

    from seqdistill.cli.cache import main as cache_cli

    (tmp_path / "train.txt").write_text(CONLL)
    base = ["finetune-teacher", "--train", str(tmp_path / "train.txt"), "--dev", str(tmp_path / "train.txt")]
    base += ["--epochs", "1", "--batch-size", "4", "--device", "cpu", "--out", str(tmp_path / "t")]
    return CliRunner().invoke(cache_cli, base + args)


def test_a_sentscore_teacher_from_a_gguf_file(gguf_path, tmp_path):
    """--encoder DIR --gguf-file F: the decoder-only LM is detected from the file, fine-tuned,
    and saved as a normal teacher directory (safetensors, tokenizer, config: transformers will
    not save a GGUF-loaded model itself) whose teacher.json and fingerprints name the file's sha256."""
    from seqdistill.teachers import load_teacher
    from seqdistill.teachers.base import teacher_fingerprints

    r = _finetune(["--encoder", str(gguf_path.parent), "--gguf-file", gguf_path.name, "--head", "sentscore"], tmp_path)
    assert r.exit_code == 0, r.output
    sha = hashlib.sha256(gguf_path.read_bytes()).hexdigest()
    meta = json.loads((tmp_path / "t" / "teacher.json").read_text())
    assert meta["base"] == {"gguf_file": "tiny.gguf", "gguf_sha256": sha} and meta["architecture"] == "causal"
    assert teacher_fingerprints(tmp_path / "t")["base_gguf"] == sha
    assert (tmp_path / "t" / "model.safetensors").is_file() and not list((tmp_path / "t").glob("*.gguf"))
    teacher = load_teacher(tmp_path / "t")
    assert type(teacher.model).__name__ == "LlamaForCausalLM" and teacher.causal
    assert teacher.format.sentinels[:2] == teacher.tokenizer.convert_tokens_to_ids(["<unused0>", "<unused1>"])
    assert len(teacher.predict([["anna", "visits", "rome"]])[0]) == 3


def test_a_crf_teacher_over_a_gguf_file(gguf_path, tmp_path):
    """Every kind reads GGUF: a CRF teacher over the GGUF Llama's decoder stack, its weights as
    loaded from the file before training (the embedding matrix is the file's)."""
    from seqdistill.teachers import load_teacher
    from seqdistill.teachers.loading import build_teacher
    from seqdistill.teachers.pretrained import from_pretrained

    r = _finetune(["--encoder", str(gguf_path), "--freeze-embeddings"], tmp_path)
    assert r.exit_code == 0, r.output
    teacher = load_teacher(tmp_path / "t")
    assert type(teacher.encoder).__name__ == "LlamaModel" and teacher.base["gguf_file"] == "tiny.gguf"
    import gguf
    from transformers import AutoModel

    reader = gguf.GGUFReader(str(gguf_path))
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    rows = np.asarray(embd.data).reshape(-1, 16)
    assert torch.equal(teacher.encoder.embed_tokens.weight, torch.from_numpy(rows.copy()))  # frozen, as in the file
    fresh = from_pretrained(AutoModel, str(gguf_path))
    assert fresh.embed_tokens.weight.dtype == torch.float32
    assert build_teacher(str(gguf_path), teacher.schema).base["gguf_sha256"] == teacher.base["gguf_sha256"]


def test_gguf_errors_name_the_file_and_the_fix(gguf_path, tmp_path, monkeypatch):
    import importlib.util

    from seqdistill.teachers.pretrained import PretrainedError, split

    with pytest.raises(PretrainedError, match="no such GGUF file"):
        split(str(tmp_path / "missing.gguf"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    with pytest.raises(
        PretrainedError, match=r"tiny.gguf: reading a GGUF file needs the gguf package.*seqdistill\[gguf\]"
    ):
        split(str(gguf_path))
    monkeypatch.undo()
    r = _finetune(["--encoder", str(gguf_path.parent), "--gguf-file", "../x.bin"], tmp_path)
    assert r.exit_code != 0 and "--gguf-file" in r.output


def test_model_paths_may_be_path_objects(gguf_path, tiny_encoder):
    """Issue 54: every function that takes a model path takes ``str | os.PathLike`` (the build
    benchmark passes a ``pathlib.Path``): the same answers as for the string."""
    from pathlib import Path

    from seqdistill.cache_schema import LabelSchema
    from seqdistill.teachers.loading import build_teacher
    from seqdistill.teachers.pretrained import base_record, split

    assert split(gguf_path) == split(str(gguf_path)) == (str(gguf_path.parent), {"gguf_file": gguf_path.name})
    assert split(Path(tiny_encoder)) == (str(Path(tiny_encoder)), {})
    assert base_record(gguf_path) == base_record(str(gguf_path)) is not None
    teacher = build_teacher(Path(tiny_encoder), LabelSchema("IOB2", ("LOC", "PER")), "crf")
    assert teacher.num_layers == 2
