"""Issue 33: a new teacher kind or student architecture is one module (and its test). Each test
writes such a module into a directory of its own, adds the directory to the registry's package
path, and runs the kind or architecture through every part of the tool that reads the registry:
fine-tuning's command-line choices, building and loading, a cache layer, the Tagger's decoder and
the ONNX export. Nothing else of the package is edited."""

import textwrap

import pytest
import torch
from conftest import toy_corpus
from test_export import SCHEMA, _randomize, sentences, torch_tags

TOY_KIND = '''
"""A CRF teacher under another name: the smallest new kind."""

from seqdistill.teachers.kinds.crf import CRFKind, CRFTeacher


class ToyTeacher(CRFTeacher):
    kind = "toy-crf"


class ToyKind(CRFKind):
    name = "toy-crf"
    model = ToyTeacher
    help = "a CRF teacher under another name (tests/test_registries.py)"
    finetune_defaults = {"epochs": 1}


KIND = ToyKind()
'''

TOY_ARCH = '''
"""A BiLSTM-CRF whose emissions are scaled by 2: the smallest new architecture."""

from seqdistill.decode import crf_decoder
from seqdistill.students.archs.bilstm_crf import BagsGraph, BiLSTMCRF


class DoubleBiLSTMCRF(BiLSTMCRF):
    arch = "toy-double"

    def forward(self, words):
        return 2 * super().forward(words)

    def decoder(self):
        return crf_decoder(self.config.schema, self.crf)

    def export_graph(self):
        return DoubleGraph(self), "bags", {}


class DoubleGraph(BagsGraph):
    def forward(self, piece_ids, piece_mask, lengths):
        return 2 * super().forward(piece_ids, piece_mask, lengths)


ARCH = DoubleBiLSTMCRF
'''


def _module_dir(tmp_path, name: str, source: str):
    d = tmp_path / "plugins"
    d.mkdir(exist_ok=True)
    (d / f"{name}.py").write_text(textwrap.dedent(source))
    return str(d)


def test_a_new_teacher_kind_is_one_module(tiny_encoder, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from seqdistill.cache_schema import CacheReader
    from seqdistill.deploy.export import export_model
    from seqdistill.inference import Tagger
    from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
    from seqdistill.teachers import kinds, load_teacher
    from seqdistill.teachers.finetune import FinetuneConfig

    monkeypatch.setattr(kinds, "__path__", [*kinds.__path__, _module_dir(tmp_path, "toy_crf", TOY_KIND)])
    found = kinds._discover()
    assert "toy-crf" in found and {"crf", "softmax", "bilou-per-type", "sentscore"} <= set(found)
    monkeypatch.setitem(kinds.KINDS, "toy-crf", found["toy-crf"])  # what the import-time registry would hold
    assert FinetuneConfig.for_head("toy-crf").epochs == 1  # its paper's defaults

    from seqdistill.corpora import derive_label_schema, read_corpus
    from seqdistill.teachers.finetune import finetune

    train = toy_corpus(tmp_path / "train.txt", 24, 0)
    schema, (corpus,) = derive_label_schema([read_corpus(train, "toy", "train")])
    cfg = FinetuneConfig.for_head("toy-crf", batch_size=8, lr=1e-3)
    summary = finetune(
        tiny_encoder, corpus.sentences, corpus.sentences, schema, tmp_path / "teacher", cfg, device="cpu"
    )
    assert summary["steps"] == 3 and summary["config"]["epochs"] == 1
    teacher = load_teacher(tmp_path / "teacher")
    assert type(teacher).__name__ == "ToyTeacher" and teacher.kind == "toy-crf"

    spec = CorpusSpec("toy", train, "train", True)
    build_cache(str(tmp_path / "cache"), str(tmp_path / "teacher"), [spec], BuildConfig(device="cpu", k=2), log=print)
    manifest = CacheReader(str(tmp_path / "cache")).manifest
    assert manifest.teachers["teacher"].kind == "toy-crf"
    assert "kbest_paths" in {f.name for f in manifest.layers["teacher"].fields}

    sents = sentences(12)
    tagger = Tagger.load(tmp_path / "teacher")
    assert tagger.decoder.kind == "crf" and tagger.predict(sents) == torch_tags(tmp_path / "teacher", sents)
    out = export_model(tmp_path / "teacher", tmp_path / "onnx")
    assert Tagger.load(out).predict(sents) == tagger.predict(sents)

    # the command line reads the registry when its modules load: loaded again, it offers the kind
    import importlib

    from seqdistill.cli import cache as cache_cli
    from seqdistill.teachers import finetune as finetune_module

    try:
        importlib.reload(finetune_module)
        importlib.reload(cache_cli)
        r = CliRunner().invoke(cache_cli.main, ["finetune-teacher", "--help"])
        assert "toy-crf: a CRF teacher under another name" in " ".join(r.output.split())
    finally:  # loaded again without the kind, for the tests that follow
        kinds.KINDS.pop("toy-crf")
        importlib.reload(finetune_module)
        importlib.reload(cache_cli)


def test_a_new_student_architecture_is_one_module(tiny_encoder, tmp_path, monkeypatch):
    from transformers import AutoTokenizer, BertConfig

    from seqdistill.deploy.export import export_model
    from seqdistill.inference import Tagger
    from seqdistill.students import archs
    from seqdistill.students.base import save_student

    monkeypatch.setattr(archs, "__path__", [*archs.__path__, _module_dir(tmp_path, "toy_double", TOY_ARCH)])
    archs.architectures.cache_clear()
    try:
        assert "toy-double" in archs.architectures()
        tok = AutoTokenizer.from_pretrained(tiny_encoder)
        vocab = BertConfig.from_pretrained(tiny_encoder).vocab_size
        toy = archs.architectures()["toy-double"]
        model = toy(toy.config_class(SCHEMA.to_json(), vocab, 12, hidden_size=6, arch="toy-double"))
        _randomize(model)
        save_student(model.eval(), tok, tmp_path / "student")

        sents = sentences(16)
        tagger = Tagger.load(tmp_path / "student")
        loaded, _ = archs.load_student(tmp_path / "student")
        x = loaded.inputs(tok, sents[:2])
        assert torch.allclose(loaded(x), 2 * super(type(loaded), loaded).forward(x))  # its own forward
        assert tagger.kind == "student" and tagger.predict(sents) == torch_tags(tmp_path / "student", sents)
        out = export_model(tmp_path / "student", tmp_path / "onnx")
        assert Tagger.load(out).predict(sents) == tagger.predict(sents)
    finally:
        monkeypatch.undo()
        archs.architectures.cache_clear()


@pytest.mark.parametrize("registry", ["kinds", "archs"])
def test_the_registries_hold_every_module_that_declares_one(registry):
    """The five teacher kinds and the five student architectures, each found in its module."""
    if registry == "kinds":
        from seqdistill.teachers.kinds import KINDS

        assert {k: type(v).__module__.rsplit(".", 1)[1] for k, v in KINDS.items()} == {
            "bilou-per-type": "bilou_per_type",
            "crf": "crf",
            "sentscore": "sentscore",
            "softmax": "softmax",
            "span": "span",
        }
    else:
        from seqdistill.students.archs import architectures

        assert {k: v.__module__.rsplit(".", 1)[1] for k, v in architectures().items()} == {
            "bilstm-crf": "bilstm_crf",
            "cnn-crf": "cnn_crf",
            "bilstm-tagger": "bilstm_tagger",
            "rnn-tagger": "rnn_tagger",
            "transformer": "transformer",
        }
