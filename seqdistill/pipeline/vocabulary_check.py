"""``distill-cache verify``'s check of a trimmed vocabulary (``seqdistill.vocabulary``): the rows a
teacher layer exported must cover every subword its tokenizer gives the cache's words, or a student
would read a subword of its own training data as unseen (the UNK row). It needs the tokenizer
(transformers), so it lives in stage one, beside build, and not in ``cache_schema``'s verify."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from ..cache_schema import EXAMPLES_LAYER, CacheReader
from ..cache_schema.verify import Problem
from ..vocabulary import EMBEDDINGS_EXPORT, kept_subwords, read_kept


def vocabulary_problems(reader: CacheReader) -> list[Problem]:
    """For every teacher layer whose exports hold a trimmed matrix: kept ids that are not sorted and
    unique or lie outside the teacher's rows, a matrix whose rows do not match the ids, and the
    subwords of the cache's words that are not kept."""
    from safetensors import safe_open
    from transformers import AutoTokenizer

    problems = []
    words = None
    for name, layer in reader.manifest.layers.items():
        if layer.kind != "teacher" or f"{EMBEDDINGS_EXPORT}" not in reader.exports(name):
            continue
        where = f"layer {name!r} exports/{EMBEDDINGS_EXPORT}"
        with tempfile.TemporaryDirectory(prefix="seqdistill-verify-") as tmp:
            d = Path(reader.export_dir(name, tmp))
            ids, rows = read_kept(d / EMBEDDINGS_EXPORT)
            if ids is None:
                continue
            with safe_open(str(d / EMBEDDINGS_EXPORT), "pt") as f:
                n_weight = f.get_slice("weight").get_shape()[0]
            tokenizer = AutoTokenizer.from_pretrained(d / "tokenizer")
        ids = ids.numpy()
        if n_weight != len(ids):
            problems.append(Problem(where, f"{n_weight} rows for {len(ids)} subword ids"))
        if len(ids) and (np.any(np.diff(ids) <= 0) or ids[0] < 0 or ids[-1] >= rows):
            problems.append(Problem(where, f"the kept ids are not sorted, unique ids below the teacher's {rows} rows"))
        if words is None:
            words = [
                w
                for shard in reader.iter_shards({EXAMPLES_LAYER: ["words"]})
                for w in shard.get(EXAMPLES_LAYER, "words").to_pylist()
            ]
        missing = np.setdiff1d(kept_subwords(tokenizer, words, rows), ids)
        if len(missing):
            problems.append(
                Problem(
                    where,
                    f"{len(missing)} subwords of the cache's words are not kept (ids {missing[:5].tolist()} ...): "
                    "students would read them as unseen; rebuild the layer with --overwrite",
                )
            )
    return problems
