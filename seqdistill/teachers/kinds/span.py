"""The ``span`` teacher kind (issue 71): a GLiNER-family span model, which needs no labels in the
target tag set (the entity types are named as words at build time), read as a semi-Markov CRF over
flat segmentations (``seqdistill/semicrf.py``) so that its layer holds what a crf layer holds.

``distill-cache build --teacher DIR_OR_HUB_ID --entity-types person=PER,organization=ORG,...``: the
names are what the model reads, the tags what the cache writes (IOB2 over the tags). A GLiNER
directory is recognised by its own ``gliner_config.json`` and read through the ``gliner`` package
(``teachers/span_model.py``: which calls, which decisions).

The layer holds

* ``span_logits`` ``[W, C]`` a word: the raw logit of the span starting at the word, of ``w + 1``
  words, for each type (the model's full score tensor, not its thresholded output; -inf for a span
  past the sentence's end);
* ``kbest_paths``, ``kbest_log_probs``, ``log_z`` and ``marginals`` under the same names and
  meanings as the crf kind's (k-best IOB2 paths with global log-probabilities, log Z, per-word tag
  marginals), under the semi-CRF ``phi = (l + b) / T``, so every recipe that reads those (MGKD's
  hard, seq-ce, fuzzy and token-pos losses) takes a span teacher unchanged;
* ``gold_nll``: ``log Z - S(gold)`` under the semi-CRF (+inf where a gold entity is wider than the
  model's widest span, which no segmentation reaches).

The manifest records the types (name to tag), the threshold, ``b = -logit(threshold)``, ``T`` and
the model's geometry. Decisions: the cache's scheme is IOB2 (one path per segmentation, the scheme
paper 000 uses); span teachers are made with the gliner package's own training code, not by
``finetune-teacher``; ``build`` makes one with a random head over an encoder, for tests and speed
measurements only.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
from pathlib import Path

import torch
from torch import Tensor, nn

from ... import semicrf
from ...cache_schema import FieldSpec, LabelSchema
from ..base import TeacherError, TeacherOutput, inference_autocast, teacher_fingerprints
from ..kind import LayerOptions, SpanOptions, TeacherKind
from ..paths import marginals_field, path_fields, path_values
from ..span_model import GLINER_CONFIG, INSTALL, SpanScorer, gliner_config, load_gliner, span_geometry

SCHEME = "IOB2"
TAG = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
EXAMPLE = "--entity-types person=PER,organization=ORG,location=LOC"


def parse_entity_types(text: str | None) -> tuple[tuple[str, str], ...]:
    """``NAME=TAG,NAME=TAG,...`` as ``((name, tag), ...)``, in the order given; refused by name where
    it is missing or empty, names a tag twice, or gives a tag that is not an entity type of a tag
    scheme (``O``, a prefixed ``B-PER``, spaces or punctuation)."""
    if text is None or not text.strip():
        raise TeacherError(f"a span teacher reads the entity types it is asked for: give them, e.g. {EXAMPLE}")
    pairs, names, tags = [], set(), set()
    for item in text.split(","):
        name, sep, tag = (part.strip() for part in item.partition("="))
        if not sep or not name or not tag:
            raise TeacherError(f"--entity-types: {item.strip()!r} is not NAME=TAG (e.g. {EXAMPLE})")
        if not TAG.fullmatch(tag) or tag == "O" or re.match(r"[BIESLUMW]-", tag):
            raise TeacherError(
                f"--entity-types: tag {tag!r} (for {name!r}) is not an entity type of a tag scheme: give a bare "
                "type such as PER (letters, digits, _ . -; not O, not a prefixed B-PER)"
            )
        if tag in tags:
            raise TeacherError(f"--entity-types: tag {tag!r} is given twice; one name a tag")
        if name in names:
            raise TeacherError(f"--entity-types: name {name!r} is given twice")
        pairs.append((name, tag))
        names.add(name)
        tags.add(tag)
    return tuple(pairs)


def span_schema(span: SpanOptions) -> LabelSchema:
    return LabelSchema(SCHEME, tuple(tag for _, tag in span.entity_types))


class SpanTeacher(nn.Module):
    """A GLiNER model with the types it is asked for, read as a semi-CRF."""

    kind = "span"

    def __init__(self, model, schema: LabelSchema, span: SpanOptions):
        super().__init__()
        self.gliner, self.schema = model, schema
        # The prompts list the types in the order --entity-types gives them (a GLiNER trained with
        # its types always in one order reads them by position: RESULTS, issue 71); the scores'
        # type axis is then put in the schema's order, which the cache's tag ids follow.
        self.names = [name for name, _ in span.entity_types]
        prompt = [tag for _, tag in span.entity_types]
        self.order = torch.tensor([prompt.index(t) for t in schema.entity_types])
        self.scorer = SpanScorer(model, self.names)
        self.span = dataclasses.replace(span, max_width=self.scorer.max_width)
        self.pooling = getattr(model.config, "subtoken_pooling", "first")
        self.max_length = self.scorer.max_len
        self.source_dir: Path | None = None

    @property
    def encoder(self) -> nn.Module:
        """The backbone (a transformers model): its embeddings and tokenizer are what students read."""
        return self.gliner.model.token_rep_layer.bert_layer.model

    @property
    def tokenizer(self):
        return self.gliner.data_processor.transformer_tokenizer

    @property
    def device(self) -> torch.device:
        return next(self.gliner.parameters()).device

    @property
    def num_layers(self) -> int:
        return int(self.encoder.config.num_hidden_layers)

    def prepare(self, batch_words: list[list[str]]):
        """The host side of a batch: windows, type groups and the package's tokenization."""
        return self.scorer.prepare(batch_words)

    def potentials(self, logits: Tensor) -> Tensor:
        """phi = (l + b) / T (semicrf.py, S1)."""
        return (logits.float() + self.span.bias) / self.span.temperature

    def outputs(
        self,
        batch_words,
        tags: Tensor | None = None,
        *,
        k: int = 10,
        marginals: bool = True,
        hidden_layers=(),
        subwords: bool = False,
        precision: str | None = "auto",
        prepared=None,
    ) -> TeacherOutput:
        """Span logits, and under the semi-CRF k-best paths, log Z, marginals and the gold NLL."""
        if hidden_layers or subwords:
            raise TeacherError("a span teacher stores no hidden layers or subword fields")
        with torch.inference_mode():
            with inference_autocast(self.device, precision):
                logits = self.scorer.logits(batch_words, prepared)[..., self.order].to(self.device)
            lengths = torch.tensor([len(w) for w in batch_words], device=self.device)
            mask = torch.arange(logits.shape[1], device=self.device)[None, :] < lengths[:, None]
            out = TeacherOutput(mask, logits, shortest=int(lengths.min()))
            phi = self.potentials(logits)
            log_z = None
            if marginals:
                m = semicrf.marginals(phi, lengths)
                out.marginals, log_z = m.tags, m.log_z
            best = semicrf.kbest(phi, lengths, k, log_z=log_z)
            out.log_z, out.kbest_paths, out.kbest_log_probs = best.log_z, best.paths, best.log_probs
            if tags is not None:
                out.gold_nll = out.log_z - semicrf.path_scores(phi, lengths, tags.to(self.device))
            return out

    @torch.no_grad()
    def predict(self, batch_words: list[list[str]]) -> list[list[str]]:
        """The semi-CRF's best path of each sentence (its MAP segmentation) as tags."""
        out = self.outputs(batch_words, k=1, marginals=False, precision="fp32")
        return [self.schema.decode(out.kbest_paths[b, 0, : len(w)].tolist()) for b, w in enumerate(batch_words)]

    def decoder(self):
        return None

    def export_graph(self):
        raise TeacherError(
            "a span teacher (GLiNER) is exported by its own package (GLiNER.export_to_onnx); distill-export "
            "exports the students made from it"
        )

    def export_head(self, directory: Path) -> None:
        """Nothing beyond the embeddings and tokenizer: a student reads the layer's paths and marginals."""

    def fingerprints(self) -> dict[str, str]:
        if self.source_dir is None:
            raise TeacherError("this teacher was not loaded from a directory: save it first")
        return teacher_fingerprints(self.source_dir)

    def save(self, directory) -> Path:
        """The GLiNER directory, as its package writes it (safetensors); read again with the types."""
        d = Path(directory)
        self.gliner.save_pretrained(d, safe_serialization=True)
        self.source_dir = d
        return d


class SpanKind(TeacherKind):
    """A GLiNER-family span model as a semi-CRF: k-best IOB2 paths, marginals, span logits."""

    name = "span"
    model = SpanTeacher
    help = "GLiNER-family span model read as a semi-CRF (issue 71; trained with the gliner package)"
    marker = GLINER_CONFIG
    finetunable = False
    co_finetune = False

    def build(self, encoder_path, schema, *, trust_remote_code=False, seed=13, **head):
        """A GLiNER with a random head over a pretrained encoder, the schema's types named as its
        tags (tests, speed measurements)."""
        from transformers import AutoConfig

        try:
            from gliner import GLiNER
        except ImportError:
            raise TeacherError(f"a span teacher needs the gliner package: {INSTALL}") from None
        hidden = AutoConfig.from_pretrained(encoder_path, trust_remote_code=trust_remote_code).hidden_size
        config = {"model_name": str(encoder_path), "hidden_size": hidden, "span_mode": "markerV0", "max_width": 12}
        if head.get("max_length"):
            config["max_len"] = int(head["max_length"])
        torch.manual_seed(seed)
        model = GLiNER.from_config(config)
        model.eval()
        span = SpanOptions(tuple((t, t) for t in schema.entity_types))
        return SpanTeacher(model, schema, span)

    def load(self, directory, meta, trust_remote_code=False):
        raise TeacherError(
            f"{directory}: span teachers are GLiNER directories ({GLINER_CONFIG}), read with their types"
        )

    def read_directory(self, directory, options, trust_remote_code=False):
        if options.span is None:
            raise TeacherError(
                f"{directory}: a GLiNER span model finds the entity types it is asked for: give them, e.g. {EXAMPLE}"
            )
        config = gliner_config(directory, trust_remote_code)
        if importlib.util.find_spec("gliner") is None:
            raise TeacherError(f"{directory}: a GLiNER span model needs the gliner package: {INSTALL}")
        width, max_len, max_types, token_level = span_geometry(config)
        options = dataclasses.replace(options, span=dataclasses.replace(options.span, max_width=width))
        geometry = {
            "model": "gliner",
            "span_mode": config.get("span_mode", "markerV0"),
            "max_len": max_len,
            "max_types": max_types,
        }
        return span_schema(options.span), config.get("subtoken_pooling", "first"), geometry, options

    def hidden_size(self, directory) -> int:
        """The backbone's width, from its ``encoder_config`` in ``gliner_config.json``."""
        config = json.loads((Path(directory) / GLINER_CONFIG).read_text())  # read only: no model built
        return int(config["encoder_config"]["hidden_size"])

    def load_directory(self, directory, options, trust_remote_code=False):
        if options is None or options.span is None:
            raise TeacherError(
                f"{directory}: a GLiNER span model is read with the entity types it is asked for, by `distill-cache "
                f"build {EXAMPLE}`; distil it into a student to tag, evaluate or export (its own package exports "
                "the GLiNER itself: GLiNER.export_to_onnx)"
            )
        return SpanTeacher(load_gliner(directory, trust_remote_code), span_schema(options.span), options.span)

    def refusal(self, options: LayerOptions):
        if options.span is None:
            return f"a span teacher (GLiNER) finds the entity types it is asked for: give them, e.g. {EXAMPLE}"
        if options.hidden_layers or options.subwords:
            return "a span teacher stores no hidden layers or subword fields: leave out --hidden-layers and --subwords"
        if not 0 < options.span.threshold < 1:
            return f"--span-threshold {options.span.threshold}: a probability strictly between 0 and 1"
        if options.span.temperature <= 0:
            return f"--span-temperature {options.span.temperature}: a temperature must be above 0"
        return None

    def decoding(self, options, scheme, precision):
        return {
            "k": options.k,
            "constrained": True,
            "scheme": scheme,
            "algorithm": "semi-crf",
            "precision": precision,
            **options.span.to_json(),
        }

    def own_fields(self, schema, options):
        types = len(schema.entity_types)
        fields = [
            FieldSpec(
                "span_logits",
                "word",
                options.dense_dtype,
                (options.span.max_width, types),
                "zarr",
                description="raw logit of the span starting at the word, of w + 1 words, per type (-inf: past the end)",
            )
        ]
        fields += path_fields(
            "semi-CRF log-partition over flat segmentations, phi = (logit + b) / T",
            "segmentation score - log Z under the semi-CRF",
        )
        if options.marginals:
            fields.append(marginals_field(schema, options.dense_dtype, "IOB2 tag marginals under the semi-CRF"))
        return fields

    def own_values(self, host, j, n, options):
        values = {"span_logits": host["logits"][j, :n], **path_values(host, j, n)}
        if options.marginals:
            values["marginals"] = host["marginals"][j, :n]
        return values


KIND = SpanKind()
