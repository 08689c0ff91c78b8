"""Parquet: a row per sentence, ``tokens`` and ``ner_tags`` columns, read with pyarrow a row group
at a time."""

from __future__ import annotations

import json
from collections.abc import Iterator

from .rows import TagNames, class_label_names, table_sentences
from .sentences import CorpusError, Sentence

BATCH_ROWS = 4096  # rows parsed at a time: the memory of a read does not grow with the file


def read_parquet(raw: bytes | None, path: str, labelled: bool, names: TagNames, notes: list[str]) -> Iterator[Sentence]:
    """The sentences of a Parquet file, ``BATCH_ROWS`` rows at a time. ``raw``: the file's bytes,
    for a file that is not local (``None`` for a local one, which Arrow reads from its path)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # Decision: a local file is parsed by Arrow from its path. Parsing the bytes already read
        # (any Python-backed buffer) leaves Arrow holding Python memory at interpreter exit, which
        # with torch loaded aborts the process now and then ("terminate called without an active
        # exception", pyarrow 26, torch 2.13); the sha256 is still that of the file's bytes.
        parquet = pq.ParquetFile(path if raw is None else pa.BufferReader(raw))
    except (pa.ArrowException, OSError) as e:
        raise CorpusError(path, None, f"not a Parquet file ({e})") from None
    with parquet:
        schema = parquet.schema_arrow
        meta = (schema.metadata or {}).get(b"huggingface")
        features = None
        if meta:  # written by datasets (Dataset.to_parquet): its features, ClassLabel names included
            try:
                features = json.loads(meta).get("info", {}).get("features")
            except (ValueError, AttributeError):
                pass  # unreadable metadata: the ids need --tag-names, as in any other Parquet file
        names.set_class_label(class_label_names(features), path)
        try:
            yield from table_sentences(parquet.iter_batches(BATCH_ROWS), schema.names, path, labelled, names, notes)
        except (pa.ArrowException, OSError) as e:
            raise CorpusError(path, None, f"not a readable Parquet file ({e})") from None
