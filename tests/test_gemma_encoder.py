"""EmbeddingGemma-style teachers (issue 36): a tiny random bidirectional ``Gemma3TextModel`` built
from a config, with sliding-window layers, as a CRF teacher; its cache over a trimmed vocabulary,
and a transformer student from its exported first layer."""

import pytest
import torch
from conftest import toy_corpus
from safetensors.numpy import load

from seqdistill.cache_schema import CacheReader, LabelSchema
from seqdistill.deploy.export import export_model
from seqdistill.inference import Tagger
from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
from seqdistill.students.archs import load_student
from seqdistill.students.recipes import train as train_student
from seqdistill.students.recipes.mt import MTConfig
from seqdistill.teachers import build_teacher

SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))
WORDS = ["peter", "anna", "visits", "the", "paris", "rome"]


@pytest.fixture(scope="module")
def gemma_encoder(tmp_path_factory):
    """A Gemma 3 text encoder: bidirectional attention, a sliding-window layer of 4 tokens and a
    full one, 24 positions; a Gemma-style tokenizer (<bos> ... <eos>, word pieces)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import Gemma3TextConfig, Gemma3TextModel, PreTrainedTokenizerFast

    chars = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["<pad>", "<eos>", "<bos>", "<unk>", *chars, *("##" + c for c in chars), *WORDS]
    ids = {w: i for i, w in enumerate(vocab)}
    tok = Tokenizer(models.WordPiece(ids, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", special_tokens=[("<bos>", ids["<bos>"]), ("<eos>", ids["<eos>"])]
    )
    d = tmp_path_factory.mktemp("gemma-encoder")
    PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    ).save_pretrained(d)
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=24,
        use_bidirectional_attention=True,
        pad_token_id=0,
    )
    Gemma3TextModel(cfg).save_pretrained(d)
    return str(d)


def test_a_gemma3_encoder_is_a_bidirectional_crf_teacher_that_pads_and_windows(gemma_encoder):
    teacher = build_teacher(gemma_encoder, SCHEMA, "crf").eval()
    assert type(teacher.encoder).__name__ == "Gemma3TextModel" and teacher.max_length == 24
    with torch.no_grad():
        a = teacher.encode([["peter", "visits", "paris"]]).logits[0]
        b = teacher.encode([["peter", "visits", "rome"]]).logits[0]
        batch = teacher.encode([["peter", "visits", "paris"], ["anna", "and", "peter", "visit", "big", "paris"]])
        long = [w for _ in range(8) for w in ["peter", "visits", "paris"]]  # 64 subwords: windows of 22
        whole = teacher.encode([long]).logits[0]
        n = max(
            i
            for i in range(1, len(long))
            if len(teacher.tokenizer(long[:i], is_split_into_words=True)["input_ids"]) <= 24
        )
        first = teacher.encode([long[:n]]).logits[0]
    assert (a[0] - b[0]).abs().max() > 1e-3  # the first word sees the last: bidirectional attention
    torch.testing.assert_close(batch.logits[0, :3], a, atol=1e-5, rtol=0)  # padding changes nothing
    assert whole.shape[0] == len(long) and torch.isfinite(whole).all()
    torch.testing.assert_close(whole[0], first[0], atol=1e-5, rtol=0)  # the first window owns the first word


def test_gemma3_teacher_cache_is_trimmed_and_a_transformer_student_starts_from_it(gemma_encoder, tmp_path):
    build_teacher(gemma_encoder, SCHEMA, "crf").save(tmp_path / "teacher")
    specs = [
        CorpusSpec("toy", toy_corpus(tmp_path / "train.txt", 30, 0), "train", True),
        CorpusSpec("toy", toy_corpus(tmp_path / "dev.txt", 10, 1), "dev", True),
    ]
    # a toy Gemma vocabulary is small (62 rows), so the trimming of a real one is asked for by name
    cfg = BuildConfig(device="cpu", hidden_layers=(1,), export_layers=1, trim_vocabulary=True, frequent_subwords=0)
    build_cache(str(tmp_path / "cache"), str(tmp_path / "teacher"), specs, cfg, teacher_id="g", log=lambda *a: None)
    reader = CacheReader(str(tmp_path / "cache"))
    export = load(reader.read_export("g", "embeddings.safetensors"))
    ids = export["ids"].tolist()
    assert ids == [0, 1, 2, 3, *range(56, 62)]  # the four specials and the six words of the toy corpora
    summary = train_student(
        str(tmp_path / "cache"),
        tmp_path / "mt",
        MTConfig(teachers=("g",), student_layers=1, epochs=1, max_steps=1, lr=0.0, hidden_loss=False, device="cpu"),
        log=lambda *a: None,
    )
    assert summary["steps"] == 1
    student, _ = load_student(tmp_path / "mt")
    emb = student.encoder.get_input_embeddings().weight.detach()
    assert emb.shape == (len(ids) + 1, 32) and student.config.teacher_vocab_size == 62
    full = torch.from_numpy(load((tmp_path / "teacher" / "model.safetensors").read_bytes())["embed_tokens.weight"])
    torch.testing.assert_close(emb[:-1], full[ids])  # lr 0: the kept rows, then their mean
    torch.testing.assert_close(emb[-1], full[ids].mean(0))
    sents = [["peter", "visits", "rome"], ["anna", "visits", "the", "zurich"], ["x", "paris"]]
    out = export_model(tmp_path / "mt", tmp_path / "onnx")
    assert Tagger.load(out).predict(sents) == Tagger.load(tmp_path / "mt").predict(sents)


def test_a_gemma3_crf_teacher_exports_with_the_torch_tags_and_scores(gemma_encoder, tmp_path):
    """The ONNX graph gets Gemma 3's layer masks built from the padding mask (onnx_graphs.layer_masks)."""
    teacher = build_teacher(gemma_encoder, SCHEMA, "crf")
    with torch.no_grad():
        for p in [*teacher.classifier.parameters(), *teacher.crf.parameters()]:
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    teacher.save(tmp_path / "teacher")
    out = export_model(tmp_path / "teacher", tmp_path / "onnx")
    sents = [["peter", "visits", "rome"], ["anna", "visits", "the", "zurich", "and", "paris"], ["x"]]
    sents.append([w for _ in range(6) for w in ["peter", "visits", "paris"]])  # windows
    onnx, torch_tagger = Tagger.load(out), Tagger.load(tmp_path / "teacher")
    assert onnx.predict(sents) == torch_tagger.predict(sents)
    a, b = onnx.backend.scores(sents), torch_tagger.backend.scores(sents)
    for i, s in enumerate(sents):
        torch.testing.assert_close(
            torch.from_numpy(a[i, : len(s)]), torch.from_numpy(b[i, : len(s)]), atol=1e-4, rtol=0
        )
