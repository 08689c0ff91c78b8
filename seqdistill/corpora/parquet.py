"""Parquet: a row per sentence, ``tokens`` and ``ner_tags`` columns, read with pyarrow."""

from __future__ import annotations

import json

from .rows import TagNames, class_label_names, table_sentences
from .sentences import CorpusError, Sentence


def read_parquet(raw: bytes, path: str, labelled: bool, names: TagNames, notes: list[str]) -> list[Sentence]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    local = "://" not in path and path != "-"
    try:
        # Decision: a local file is parsed by Arrow from its path. Parsing the bytes already read
        # (any Python-backed buffer) leaves Arrow holding Python memory at interpreter exit, which
        # with torch loaded aborts the process now and then ("terminate called without an active
        # exception", pyarrow 26, torch 2.13); the sha256 is still that of the bytes read.
        table = pq.read_table(path) if local else pq.read_table(pa.BufferReader(raw))
    except (pa.ArrowException, OSError) as e:
        raise CorpusError(path, None, f"not a Parquet file ({e})") from None
    meta = (table.schema.metadata or {}).get(b"huggingface")
    features = None
    if meta:  # written by datasets (Dataset.to_parquet): its features, ClassLabel names included
        try:
            features = json.loads(meta).get("info", {}).get("features")
        except (ValueError, AttributeError):
            pass  # unreadable metadata: the ids need --tag-names, as in any other Parquet file
    names.set_class_label(class_label_names(features), path)
    return table_sentences(table, path, labelled, names, notes)
