"""The spaCy component (issue 21, item 1): a real ``spacy.blank("en")`` pipeline with tiny students
built here; doc.ents are distill-predict's spans; nested spans in a span group; nlp.pipe batches
through the model; empty docs; words the two rules split differently."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_export import make_student

spacy = pytest.importorskip("spacy")

from seqdistill.bilou import flatten_spans  # noqa: E402
from seqdistill.cache_schema.labels import tags_to_spans  # noqa: E402
from seqdistill.inference import Span, TaggedSentence, Tagger, split_words  # noqa: E402
from seqdistill.inference.spacy_ner import FACTORY, SeqdistillNER, make_component  # noqa: E402  (registers it)

ENTRY_POINT = "seqdistill.inference.spacy_ner:make_component"
TEXTS = [  # spaCy's tokens and the student's words agree on these
    "Peter visits Paris.",
    "Anna visits Rome, then the EU.",
    "the eu visits peter in rome today",
    "Rome",
    "visits the the the paris anna peter eu",
]
DIFFERENT = "U.S.-based firms don't hire Smith's team in Rome."  # spaCy: "U.S.-based" "do" "n't" "Smith" "'s"


@pytest.fixture(scope="module")
def models(tiny_encoder, tmp_path_factory):
    from seqdistill.deploy.export import export_model

    d = tmp_path_factory.mktemp("spacy")
    flat = make_student(tiny_encoder, d / "flat", "bilstm-crf")
    return {
        "flat": str(flat),
        "onnx": str(export_model(flat, d / "onnx")),
        "nested": str(make_student(tiny_encoder, d / "nested", "rnn-tagger", extra={"cell": "sru"})),
    }


def pipeline(model: str, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe(FACTORY, config={"model": model, **config})
    return nlp


def ents(doc) -> list[tuple[str, int, int]]:
    return [(e.label_, e.start_char, e.end_char) for e in doc.ents]


def group(doc, key: str = "seqdistill") -> list[tuple[str, int, int]]:
    return [(s.label_, s.start_char, s.end_char) for s in doc.spans[key]]


def tagger_spans(tagger: Tagger, text: str) -> list[tuple[str, int, int]]:
    [s] = tagger([text])
    return [(e.type, e.char_start, e.char_end) for e in s.spans]


def test_flat_student_ents_are_distill_predicts_spans(models, tmp_path):
    """The issue's goal: one line, and doc.ents are distill-predict's spans (label, character
    offsets), text by text and for a doc of several lines (a sentence per line, as distill-predict)."""
    from click.testing import CliRunner

    from seqdistill.cli.evaluate import predict_main

    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "out.jsonl"
    r = CliRunner().invoke(
        predict_main,
        ["--model", models["flat"], "--input", str(tmp_path / "in.txt"), "--format", "text"]
        + ["--output", str(out), "--output-format", "jsonl"],
    )
    assert r.exit_code == 0, r.output
    predicted = [json.loads(line) for line in out.read_text().splitlines()]
    expected = [[(e["type"], e["char_start"], e["char_end"]) for e in p["spans"]] for p in predicted]
    assert [p["text"] for p in predicted] == TEXTS
    assert sum(map(len, expected)) >= 3  # the random student tags something

    nlp = pipeline(models["flat"])
    assert [ents(doc) for doc in nlp.pipe(TEXTS)] == expected
    tagger = Tagger.load(models["flat"])
    assert [ents(nlp(t)) for t in TEXTS] == [tagger_spans(tagger, t) for t in TEXTS]
    for doc, spans in zip(nlp.pipe(TEXTS), expected):  # a flat model: the span group holds the same spans
        assert group(doc) == spans
        assert len(doc.spans["seqdistill"].attrs["scores"]) == len(spans)
        assert all(0 < s <= 1 for s in doc.spans["seqdistill"].attrs["scores"])
        assert [e.text for e in doc.ents] == [doc.text[a:b] for _, a, b in spans]

    doc = nlp("\n".join(TEXTS))  # one doc, a sentence per line: offsets into the whole text
    starts = [sum(len(t) + 1 for t in TEXTS[:i]) for i in range(len(TEXTS))]
    assert ents(doc) == [(label, a + s, b + s) for spans, s in zip(expected, starts) for label, a, b in spans]


def test_an_exported_directory_gives_the_torch_students_ents(models):
    torch_nlp, onnx_nlp = pipeline(models["flat"]), pipeline(models["onnx"])
    assert onnx_nlp.get_pipe(FACTORY).tagger.runtime == "onnx"
    texts = [*TEXTS, DIFFERENT]
    got = [ents(d) for d in onnx_nlp.pipe(texts)]
    assert got == [ents(d) for d in torch_nlp.pipe(texts)]
    assert got[: len(TEXTS)] == [tagger_spans(Tagger.load(models["onnx"]), t) for t in TEXTS]


def test_nested_spans_go_to_the_span_group_and_ents_get_the_outermost(models):
    texts = [*TEXTS, "peter anna rome paris eu visits the peter paris rome anna eu the visits"]
    nlp = pipeline(models["nested"], spans_key="nested")
    tagger = Tagger.load(models["nested"])
    assert tagger.nested
    overlapping = 0
    for doc in nlp.pipe(texts):
        spans = tagger_spans(tagger, doc.text)
        assert group(doc, "nested") == spans  # every span the model predicts, nested ones included
        assert "seqdistill" not in doc.spans
        tokens = [(s.start, s.end, s.label_) for s in doc.spans["nested"]]
        overlapping += sum(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(tokens) for b in tokens[i + 1 :])
        outermost = flatten_spans(tokens)  # the Tagger's own flat tags' rule
        assert [(e.start, e.end, e.label_) for e in doc.ents] == outermost
        [s] = tagger([doc.text])
        assert [(e.start, e.end, e.label_) for e in doc.ents] == tags_to_spans(s.tags, tagger.scheme)
    assert overlapping > 0  # the random rnn student nests somewhere


class Counting:
    """A Tagger that records how many texts each call got."""

    def __init__(self, tagger: Tagger):
        self.tagger, self.calls, self.forward = tagger, [], []
        decode = tagger.backend.decode
        tagger.backend.decode = lambda words, *a: self.forward.append(len(words)) or decode(words, *a)

    def __call__(self, texts, **kw):
        self.calls.append(len(texts))
        return self.tagger(texts, **kw)


def test_nlp_pipe_batches_through_the_model(models):
    nlp = pipeline(models["flat"], batch_size=3)
    expected = [ents(nlp(t)) for t in TEXTS * 2]
    ner = nlp.get_pipe(FACTORY)
    ner.tagger = counting = Counting(ner.tagger)
    docs = list(nlp.pipe(TEXTS * 2, batch_size=4))
    assert counting.calls == [4, 4, 2]  # nlp.pipe's batch_size docs per Tagger call, not one at a time
    assert counting.forward and max(counting.forward) <= 3  # the component's batch_size per forward pass
    assert [ents(d) for d in docs] == expected
    counting.calls.clear()
    list(nlp.pipe(TEXTS * 2))  # spaCy's default batch (1000 docs): one call
    assert counting.calls == [10]
    counting.calls.clear()
    nlp(TEXTS[0])
    assert counting.calls == [1]


def test_empty_and_whitespace_docs(models):
    nlp = pipeline(models["flat"])
    ner = nlp.get_pipe(FACTORY)
    ner.tagger = counting = Counting(ner.tagger)
    for text in ["", " ", "  \n\t \n"]:
        doc = nlp(text)
        assert doc.ents == () and len(doc.spans["seqdistill"]) == 0
    assert counting.calls == []  # nothing to tag: no model call
    docs = list(nlp.pipe(["", TEXTS[0], "   ", "\n\n" + TEXTS[1]], batch_size=8))
    assert counting.calls == [2]
    assert [ents(d) for d in docs] == [
        [],
        ents(nlp(TEXTS[0])),
        [],
        [(label, a + 2, b + 2) for label, a, b in ents(nlp(TEXTS[1]))],
    ]


class Fixed:
    """A stand-in student that tags the words of ``labels`` by the seqdistill word rule, so that
    the spans that spaCy splits differently are known."""

    def __init__(self, labels: dict[str, str]):
        self.labels = labels

    def __call__(self, texts, batch_size=32, scores=True):
        out = []
        for t in texts:
            words, offsets = split_words(t)
            spans = [
                Span(self.labels[w], i, i + 1, offsets[i][0], offsets[i][1], w, 0.5)
                for i, w in enumerate(words)
                if w in self.labels
            ]
            out.append(TaggedSentence(t, words, offsets, ["O"] * len(words), spans))
        return out


def test_words_split_differently_by_spacy_and_the_student(models):
    """The student's words of DIFFERENT are "U.S" "." "-" "based" ... "don't" ... "Smith's";
    spaCy's tokens are "U.S.-based" ... "do" "n't" ... "Smith" "'s"."""
    nlp = spacy.blank("en")
    doc = nlp.make_doc(DIFFERENT)
    assert [t.text for t in doc][:4] == ["U.S.-based", "firms", "do", "n't"]
    assert split_words(DIFFERENT)[0][:4] == ["U.S", ".", "-", "based"]
    fixed = Fixed({"U.S": "LOC", "based": "MISC", "don't": "MISC", "Smith's": "PER", "Rome": "LOC"})
    kept = [("MISC", 17, 22), ("PER", 28, 35), ("LOC", 44, 48)]  # their ends are token boundaries in both

    doc = SeqdistillNER(nlp, "x", fixed)(nlp.make_doc(DIFFERENT))  # alignment_mode "expand"
    assert ents(doc) == [("LOC", 0, 10), *kept]  # "U.S" grows to the token "U.S.-based"
    assert [e.text for e in doc.ents][:3] == ["U.S.-based", "don't", "Smith's"]
    # "U.S" LOC and "based" MISC both grow to "U.S.-based": both in the span group, one in doc.ents
    assert group(doc) == [("LOC", 0, 10), ("MISC", 0, 10), *kept]
    for mode in ("contract", "strict"):  # no spaCy token inside "U.S" or "based": both dropped
        doc = SeqdistillNER(nlp, "x", fixed, alignment_mode=mode)(nlp.make_doc(DIFFERENT))
        assert ents(doc) == kept and group(doc) == kept

    # the real student on the same text: each of its spans mapped by doc.char_span(..., "expand")
    nlp = pipeline(models["flat"])
    doc = nlp(DIFFERENT)
    expected = []
    for label, a, b in tagger_spans(Tagger.load(models["flat"]), DIFFERENT):
        span = doc.char_span(a, b, alignment_mode="expand")
        expected.append((span.start, span.end, label))
    assert [(e.start, e.end, e.label_) for e in doc.ents] == flatten_spans(list(dict.fromkeys(expected)))


def test_sentences_options_and_errors(models, tmp_path):
    text = "Peter visits Paris. Anna visits Rome."
    whole = pipeline(models["flat"], split="doc")(text)
    assert ents(whole) == tagger_spans(Tagger.load(models["flat"]), text)
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe(FACTORY, config={"model": models["flat"], "split": "sents"})
    doc = nlp(text)
    assert [s.text for s in doc.sents] == ["Peter visits Paris.", "Anna visits Rome."]
    tagger = Tagger.load(models["flat"])
    assert ents(doc) == tagger_spans(tagger, "Peter visits Paris.") + [
        (label, a + 20, b + 20) for label, a, b in tagger_spans(tagger, "Anna visits Rome.")
    ]
    with pytest.raises(ValueError, match="sentencizer"):
        pipeline(models["flat"], split="sents")(text)
    with pytest.raises(ValueError, match="alignment_mode 'loose'"):
        pipeline(models["flat"], alignment_mode="loose")
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        pipeline(str(tmp_path / "nowhere"))


def test_a_saved_pipeline_loads_the_model_again(models, tmp_path):
    nlp = pipeline(models["flat"])
    nlp.to_disk(tmp_path / "nlp")
    again = spacy.load(tmp_path / "nlp")
    assert again.pipe_names == [FACTORY]
    assert [ents(d) for d in again.pipe(TEXTS)] == [ents(d) for d in nlp.pipe(TEXTS)]


def test_the_entry_point_resolves_to_the_registered_factory():
    """pyproject's ``[project.entry-points.spacy_factories] seqdistill_ner = ENTRY_POINT`` (seen by
    importlib.metadata only after a reinstall): the object it names is the registered factory."""
    import tomllib
    from importlib.metadata import EntryPoint

    from spacy.language import Language

    assert EntryPoint(FACTORY, ENTRY_POINT, "spacy_factories").load() is make_component
    assert spacy.registry.factories.get(FACTORY) is make_component  # what spaCy looks up by name
    assert Language.get_factory_meta(FACTORY).factory == FACTORY
    assert FACTORY in spacy.blank("en").factory_names
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    declared = pyproject["project"].get("entry-points", {}).get("spacy_factories")
    if declared is not None:
        assert declared == {FACTORY: ENTRY_POINT}


def test_seqdistill_imports_spacy_only_on_use():
    """spaCy is imported on use only: by the component, and by the documents' ``spacy`` splitter."""
    root = Path(__file__).parents[1] / "seqdistill"
    importers = {
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if any(line.lstrip().startswith(("import spacy", "from spacy")) for line in p.read_text().splitlines())
    }
    assert importers == {"inference/spacy_ner.py", "corpora/documents.py"}
    code = (
        "import sys, seqdistill, seqdistill.inference, seqdistill.corpora.documents; "
        "assert not [m for m in sys.modules if m.startswith('spacy')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
