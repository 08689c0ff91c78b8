"""End-to-end verification of a cache: ``distill-cache verify``.

Checks, in order: the manifest (format version, safe paths, consistent counts); every file of
every shard (present, size, sha256); every Parquet shard (columns and types as the manifest says,
row counts, example ids identical to the examples layer's); every Zarr group (arrays present,
dtypes and per-unit shapes, offsets consistent with the examples layer's word counts); gold tags
inside the label schema; per-corpus example counts; then the files the builder reads that the
manifest does not checksum (layer headers, shard and exports markers, ``verify_tree.py``) and
files that belong to no part of the cache (stray: a warning, an error with ``strict``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .encodings import aux_arrays, decode
from .errors import CacheError, FieldError
from .fields import FieldSpec, from_storage
from .layout import DENSE, OFFSETS_GROUP, RECORDS
from .manifest import EXAMPLES_LAYER, MANIFEST, LayerInfo, Manifest, ShardInfo
from .reader import load_manifest, open_zarr_group, read_parquet_columns
from .storage import CacheStore
from .verify_tree import check_markers, stray_files


@dataclass
class Problem:
    where: str  # a file, or "layer X shard N"
    what: str
    warning: bool = False  # a stray file (not an error unless verify is strict)

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def verify_cache(
    url, storage_options: dict | None = None, checksums: bool = True, strict: bool = False
) -> list[Problem]:
    """Every problem found in the cache at ``url`` (an empty list means it is sound). Stray files
    come back with ``warning=True``, or as errors when ``strict``."""
    store = CacheStore(url, storage_options)
    try:
        manifest = load_manifest(store)
    except CacheError as e:
        return [Problem(MANIFEST, str(e))]
    problems: list[Problem] = []
    examples = manifest.examples
    ex_rows: dict[int, tuple[list[str], np.ndarray] | None] = {}
    counts: Counter = Counter()
    for shard in examples.shards:
        problems += _check_files(store, shard, checksums)
        ex_rows[shard.index] = _check_examples_shard(store, manifest, shard, problems, counts)
    if all(r is not None for r in ex_rows.values()):
        for c in manifest.corpora:
            if counts[(c.name, c.split)] != c.examples:
                problems.append(
                    Problem(
                        MANIFEST,
                        f"corpus {c.name!r} split {c.split!r} lists {c.examples} "
                        f"examples; the shards hold {counts[(c.name, c.split)]}",
                    )
                )
    for layer in manifest.layers.values():
        if layer.name == EXAMPLES_LAYER:
            continue
        for f in layer.exports:
            problems += _check_file(store, f.path, f.bytes, f.sha256, checksums)
        for shard in layer.shards:
            problems += _check_files(store, shard, checksums)
            _check_layer_shard(store, layer, shard, ex_rows.get(shard.index), problems)
    check_markers(store, manifest, lambda where, what: problems.append(Problem(where, what)))
    problems += [Problem(path, f"stray: {why}", warning=not strict) for path, why in stray_files(store, manifest)]
    return problems


def _check_files(store: CacheStore, shard: ShardInfo, checksums: bool) -> list[Problem]:
    out = []
    for f in shard.files:
        out += _check_file(store, f.path, f.bytes, f.sha256, checksums)
    return out


def _check_file(store: CacheStore, rel: str, size: int, sha256: str, checksums: bool) -> list[Problem]:
    if not store.exists(rel):
        return [Problem(rel, "file missing")]
    actual = store.size(rel)
    if actual != size:
        return [Problem(rel, f"size {actual} bytes, the manifest says {size} (truncated or replaced)")]
    if checksums and store.sha256(rel) != sha256:
        return [Problem(rel, "sha256 mismatch: the file is corrupt or was modified")]
    return []


def _read_records(store, shard: ShardInfo, columns: list[str], problems: list[Problem]) -> pa.Table | None:
    try:
        return read_parquet_columns(store, f"{shard.path}/{RECORDS}", columns)
    except CacheError as e:
        problems.append(Problem(f"{shard.path}/{RECORDS}", str(e).split(": ", 1)[-1]))
        return None


def _check_table(table: pa.Table, layer: LayerInfo, shard: ShardInfo, problems: list[Problem]) -> bool:
    rel = f"{shard.path}/{RECORDS}"
    ok = True
    if table.num_rows != shard.examples:
        problems.append(Problem(rel, f"{table.num_rows} rows, the manifest says {shard.examples} examples"))
        ok = False
    for spec in layer.fields:
        if spec.storage != "parquet":
            continue
        col = table.schema.field(spec.name) if spec.name in table.column_names else None
        if col is None:
            problems.append(Problem(rel, f"field {spec.name!r} missing"))
            ok = False
        elif col.type != spec.arrow_type():
            problems.append(
                Problem(
                    rel,
                    f"field {spec.name!r} has type {col.type}, the manifest says {spec.arrow_type()} ({spec.dtype})",
                )
            )
            ok = False
        elif not spec.nullable and table.column(spec.name).null_count:
            problems.append(Problem(rel, f"field {spec.name!r} has nulls but is not nullable"))
            ok = False
    return ok


def _check_examples_shard(store, manifest: Manifest, shard: ShardInfo, problems: list[Problem], counts: Counter):
    layer = manifest.examples
    table = _read_records(store, shard, ["example_id", *[f.name for f in layer.fields]], problems)
    if table is None or not _check_table(table, layer, shard, problems):
        return None
    rel = f"{shard.path}/{RECORDS}"
    ids = table.column("example_id").to_pylist()
    n_words = table.column("n_words").to_numpy().astype(np.int64)
    words = table.column("words").to_pylist()
    if [len(w) for w in words] != n_words.tolist():
        problems.append(Problem(rel, "field 'n_words' disagrees with the length of 'words'"))
    if int(n_words.sum()) != shard.words:
        problems.append(Problem(rel, f"{int(n_words.sum())} words, the manifest says {shard.words}"))
    if len(set(ids)) != len(ids):
        problems.append(Problem(rel, "example ids repeat"))
    counts.update(zip(table.column("corpus").to_pylist(), table.column("split").to_pylist()))
    known = set(manifest.label_schema.tags)
    for i, tags in enumerate(table.column("tags").to_pylist()):
        if tags is None:
            continue
        if len(tags) != n_words[i]:
            problems.append(Problem(rel, f"row {i} ({ids[i]}): {len(tags)} tags for {n_words[i]} words"))
        bad = set(tags) - known
        if bad:
            problems.append(Problem(rel, f"row {i} ({ids[i]}): tags {sorted(bad)} are not in the label schema"))
    return ids, n_words


def _check_layer_shard(store, layer: LayerInfo, shard: ShardInfo, ref, problems: list[Problem]) -> None:
    table = _read_records(
        store, shard, ["example_id", *[f.name for f in layer.fields if f.storage == "parquet"]], problems
    )
    if table is None or not _check_table(table, layer, shard, problems):
        return
    if ref is None:
        problems.append(
            Problem(
                f"layer {layer.name!r} shard {shard.index}",
                "cannot be aligned: the examples layer's shard is unreadable",
            )
        )
        return
    ref_ids, n_words = ref
    if table.column("example_id").to_pylist() != ref_ids:
        problems.append(
            Problem(f"{shard.path}/{RECORDS}", "example ids differ from the examples layer's shard (order or content)")
        )
    dense = [f for f in layer.fields if f.storage == "zarr"]
    if dense:
        _check_dense(store, shard, dense, n_words, problems)


def _check_dense(store, shard: ShardInfo, specs: list[FieldSpec], n_words: np.ndarray, problems: list[Problem]) -> None:
    rel = f"{shard.path}/{DENSE}"
    try:
        group = open_zarr_group(store, rel)
    except CacheError as e:
        problems.append(Problem(rel, str(e).split(": ", 1)[-1]))
        return
    offsets: dict[str, np.ndarray] = {}
    for level in sorted({s.level for s in specs}):
        try:
            off = group[f"{OFFSETS_GROUP}/{level}"][...]
        except Exception as e:
            problems.append(Problem(f"{rel}/{OFFSETS_GROUP}/{level}", f"unreadable ({type(e).__name__}: {e})"))
            continue
        if len(off) != shard.examples + 1 or off[0] != 0 or (np.diff(off) < 0).any():
            problems.append(Problem(f"{rel}/{OFFSETS_GROUP}/{level}", "offsets are not a valid partition"))
            continue
        if level == "word" and not np.array_equal(np.diff(off), n_words):
            problems.append(
                Problem(f"{rel}/{OFFSETS_GROUP}/word", "word counts differ from the examples layer's 'n_words'")
            )
        offsets[level] = off
    for spec in specs:
        where = f"{rel}/{spec.name}"
        try:
            arr = group[spec.name]
            values = arr[...]
        except Exception as e:
            problems.append(Problem(where, f"unreadable ({type(e).__name__}: {e})"))
            continue
        if values.dtype != spec.storage_dtype() or arr.attrs.get("dtype") != spec.dtype:
            problems.append(
                Problem(where, f"dtype {values.dtype} ({arr.attrs.get('dtype')}), the manifest says {spec.dtype}")
            )
        if tuple(values.shape[1:]) != spec.storage_shape():
            problems.append(
                Problem(
                    where,
                    f"per-{spec.level} shape {list(values.shape[1:])}, the manifest says {list(spec.storage_shape())}",
                )
            )
        elif spec.encoding:
            try:
                decode({spec.name: values, **{p: group[p][...] for p in aux_arrays(spec)}}, spec, from_storage, rel)
            except FieldError as e:
                problems.append(Problem(where, str(e)))
            except Exception as e:  # an auxiliary array missing or unreadable
                problems.append(Problem(where, f"its encoding's arrays are unreadable ({type(e).__name__}: {e})"))
        off = offsets.get(spec.level)
        if off is not None and off[-1] != values.shape[0]:
            problems.append(Problem(where, f"{values.shape[0]} rows, the offsets say {off[-1]}"))
