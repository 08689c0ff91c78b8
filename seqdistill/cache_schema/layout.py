"""Where things lie inside a cache, and the fixed fields of the examples layer.

::

    manifest.json                          the commit point, written last
    layers/<layer>/layer.json              header of a layer being built (fields, teacher, corpora)
    layers/<layer>/shard-00000.json        commit marker of shard 0 (its ShardInfo), written last
    layers/<layer>/shard-00000/records.parquet   per-example records (always; `example_id` first)
    layers/<layer>/shard-00000/dense.zarr/       Zarr v3 group of per-word/subword tensors (if any)
    layers/<layer>/exports/...             teacher exports (tokenizer, embeddings) — see build

``<layer>`` is ``examples`` or a teacher id.
"""

from __future__ import annotations

from .fields import FieldSpec

RECORDS = "records.parquet"
DENSE = "dense.zarr"
OFFSETS_GROUP = "offsets"  # dense.zarr/offsets/word and dense.zarr/offsets/subword


def layer_header(layer: str) -> str:
    return f"layers/{layer}/layer.json"


def shard_dir(layer: str, index: int) -> str:
    return f"layers/{layer}/shard-{index:05d}"


def shard_marker(layer: str, index: int) -> str:
    return f"{shard_dir(layer, index)}.json"


def exports_dir(layer: str) -> str:
    return f"layers/{layer}/exports"


def exports_marker(layer: str) -> str:
    return f"layers/{layer}/exports.json"


def example_id(corpus: str, split: str, index: int) -> str:
    """Stable id of the ``index``-th sentence (0-based) of a corpus split."""
    return f"{corpus}/{split}/{index}"


EXAMPLES_FIELDS = (
    FieldSpec("corpus", "example", "string", description="corpus name"),
    FieldSpec("split", "example", "string", description="split name (train, dev, test, unlabelled...)"),
    FieldSpec("index", "example", "int64", description="0-based position of the sentence in its corpus"),
    FieldSpec("doc_id", "example", "string", nullable=True, description="document id, if the corpus has documents"),
    FieldSpec("n_words", "example", "int32", description="number of words"),
    FieldSpec("words", "word", "string", description="the words"),
    FieldSpec("tags", "word", "string", nullable=True, description="gold tags; null when unlabelled"),
    FieldSpec(
        "entity_spans",
        "example",
        "int32",
        ("entities", "bounds"),
        nullable=True,
        description="nested corpora: every gold entity as [start, end) word positions (tags then hold "
        "the outermost ones); null otherwise",
    ),
    FieldSpec(
        "entity_types",
        "example",
        "string",
        ("entities",),
        nullable=True,
        description="nested corpora: the type of each entity of entity_spans; null otherwise",
    ),
)
