"""Writing a cache: one shard at a time, each published atomically, the manifest last. One idea in
one module (over 400 lines): the write protocol, whose steps only make sense together.

A build calls :meth:`CacheWriter.examples_layer` and :meth:`CacheWriter.teacher_layer`, writes
shards with :meth:`LayerWriter.write_shard` (skipping those :meth:`LayerWriter.is_committed`
reports), and finishes with :meth:`CacheWriter.commit`. Killed at any moment, the same calls
resume: committed shards have a marker and are skipped, a half-written shard has none and is
written again, and readers see nothing until the manifest names it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import zarr

from .encodings import encode
from .errors import CacheError, FieldError, FingerprintMismatchError, ManifestError, ShardError
from .fields import INTEGER_DTYPES, FieldSpec, to_storage
from .labels import LabelSchema
from .layout import (
    DENSE,
    EXAMPLES_FIELDS,
    OFFSETS_GROUP,
    RECORDS,
    exports_dir,
    exports_marker,
    layer_header,
    shard_dir,
    shard_marker,
)
from .lock import LOCK
from .manifest import (
    EXAMPLES_LAYER,
    MANIFEST,
    CorpusInfo,
    FileInfo,
    LayerInfo,
    Manifest,
    ShardInfo,
    TeacherInfo,
    check_id,
)
from .reader import load_manifest, read_parquet_columns
from .storage import TMP_DIR, CacheStore, failpoint, sha256_file

CHUNK_BYTES = 4 << 20  # target uncompressed size of one zarr chunk


class CacheWriter:
    """Writes layers into the cache at ``url`` (a local path or an fsspec URL)."""

    def __init__(self, url, storage_options: dict | None = None, *, clean_staging: bool = True):
        self.store = CacheStore(url, storage_options)
        self.manifest: Manifest | None = load_manifest(self.store) if self.store.exists(MANIFEST) else None
        self._layers: dict[str, LayerWriter] = {}
        if clean_staging and self.store.is_local:  # leftovers of a killed run (not with other writers running)
            self.store.remove(TMP_DIR)
            for rel in _json_temporaries(self.store):
                self.store.remove(rel)

    def drop(self, layer: str | None = None) -> None:
        """Remove one teacher layer (``layer``) or the whole cache (None), manifest first, so that a
        crash in between leaves a cache without the layer rather than a manifest naming lost files."""
        if layer is None:
            for name in self.store.listdir(""):
                if name != LOCK:  # the lock of the build doing the dropping
                    self.store.remove(name)
            self.manifest = None
            return
        if self.manifest is not None and layer in self.manifest.layers:
            if layer == EXAMPLES_LAYER:
                raise CacheError("the examples layer cannot be dropped alone; drop the whole cache")
            layers = {k: v for k, v in self.manifest.layers.items() if k != layer}
            teachers = {k: v for k, v in self.manifest.teachers.items() if k != layer}
            m = Manifest(self.manifest.label_schema, self.manifest.corpora, layers, teachers)
            self.store.write_json_atomic(MANIFEST, m.to_json())
            self.manifest = m
        self.store.remove(f"layers/{layer}")

    # -- layers ----------------------------------------------------------------------------------
    def examples_layer(self, label_schema: LabelSchema, corpora: list[CorpusInfo], num_shards: int) -> "LayerWriter":
        """The examples layer for ``corpora`` (already complete when the manifest has them)."""
        header = {
            "layer": LayerInfo(EXAMPLES_LAYER, "examples", list(EXAMPLES_FIELDS)).to_json(False),
            "label_schema": label_schema.to_json(),
            "corpora": [c.to_json() for c in corpora],
            "num_shards": num_shards,
        }
        if self.manifest is not None:
            _compare_corpora(self.manifest.corpora, corpora, "the cache's manifest")
            if self.manifest.num_shards != num_shards:
                raise FingerprintMismatchError(
                    f"the cache holds its examples in {self.manifest.num_shards} shards of "
                    f"{self.manifest.examples.shards[0].examples} examples; this build asks for {num_shards} "
                    "shards. Use the cache's shard size: every layer is sharded like the examples"
                )
            if self.manifest.label_schema != label_schema:
                raise FingerprintMismatchError(
                    f"the cache's label schema {list(self.manifest.label_schema.tags)} differs from "
                    f"the corpora's {list(label_schema.tags)}"
                )
            writer = LayerWriter(self, self.manifest.examples, num_shards, complete=True)
        else:
            pending = self._pending_header(EXAMPLES_LAYER)
            if pending is not None:
                _compare_corpora(
                    [CorpusInfo.from_json(c) for c in pending["corpora"]],
                    corpora,
                    "an interrupted build in this directory",
                )
                if pending["num_shards"] != num_shards or pending["label_schema"] != header["label_schema"]:
                    raise FingerprintMismatchError(
                        f"an interrupted build in {self.store.url} used other sharding or labels "
                        f"({pending['num_shards']} shards); rerun it with the same settings, or "
                        "write to a new directory"
                    )
                if pending["layer"].get("fields") != header["layer"]["fields"]:
                    raise FingerprintMismatchError(
                        f"an interrupted build in {self.store.url} was written by another seqdistill version "
                        "(its examples layer has other fields); write to a new directory, or delete that one"
                    )
                header = pending  # what the header on disk says (sources may be spelled otherwise now)
            else:
                self.store.write_json_atomic(layer_header(EXAMPLES_LAYER), header)
            layer = LayerInfo.from_json(header["layer"])
            writer = LayerWriter(self, layer, num_shards)
            writer.header = header
        self._layers[EXAMPLES_LAYER] = writer
        return writer

    def teacher_layer(self, teacher: TeacherInfo, fields: list[FieldSpec]) -> "LayerWriter":
        """The layer of ``teacher`` (already complete when the manifest has it, same fingerprints)."""
        check_id(teacher.id, "teacher id")
        num_shards = self._num_shards()
        layer = LayerInfo(teacher.id, "teacher", list(fields), teacher=teacher.id)
        names = [f.name for f in fields]
        if len(set(names)) != len(names):
            raise FieldError(f"teacher {teacher.id!r}: a field is listed twice in {names}")
        header = {"layer": layer.to_json(False), "teacher": teacher.to_json()}
        if self.manifest is not None and teacher.id in self.manifest.layers:
            existing = self.manifest.layers[teacher.id]
            _compare_teacher(self.manifest.teachers[teacher.id], teacher, existing, layer, "the cache")
            writer = LayerWriter(self, existing, num_shards, complete=True)
        else:
            pending = self._pending_header(teacher.id)
            if pending is not None:
                _compare_teacher(
                    TeacherInfo.from_json(pending["teacher"]),
                    teacher,
                    LayerInfo.from_json(pending["layer"]),
                    layer,
                    "an interrupted build in this cache",
                )
                header = pending  # what the header on disk says (its source may be spelled otherwise now)
            else:
                self.store.write_json_atomic(layer_header(teacher.id), header)
            writer = LayerWriter(self, layer, num_shards)
            writer.header = header
        self._layers[teacher.id] = writer
        return writer

    def _pending_header(self, name: str) -> dict | None:
        rel = layer_header(name)
        return self.store.read_json(rel) if self.store.exists(rel) else None

    def _num_shards(self) -> int:
        if EXAMPLES_LAYER in self._layers:
            return self._layers[EXAMPLES_LAYER].num_shards
        if self.manifest is not None:
            return self.manifest.num_shards
        raise CacheError("open the examples layer (examples_layer) before a teacher layer")

    # -- commit ---------------------------------------------------------------------------------
    def commit(self) -> Manifest:
        """Write ``manifest.json`` naming every complete layer; refuse if a layer is incomplete."""
        base = self.manifest
        ex = self._layers.get(EXAMPLES_LAYER)
        if base is None and ex is None:
            raise CacheError("nothing to commit: no examples layer was written")
        if base is None:
            schema = LabelSchema.from_json(ex.header["label_schema"])
            corpora = [CorpusInfo.from_json(c) for c in ex.header["corpora"]]
            layers, teachers = {}, {}
        else:
            schema, corpora = base.label_schema, base.corpora
            layers, teachers = dict(base.layers), dict(base.teachers)
        for name, writer in self._layers.items():
            if writer.complete:
                continue
            layers[name] = writer.finished_layer()
            if writer.layer.kind == "teacher":
                teachers[name] = TeacherInfo.from_json(writer.header["teacher"])
        manifest = Manifest(schema, corpora, layers, teachers)
        manifest.check_consistency()
        failpoint("manifest")
        self.store.write_json_atomic(MANIFEST, manifest.to_json())
        self.manifest = manifest
        for writer in self._layers.values():
            writer.complete = True
        return manifest


class LayerWriter:
    """Writes the shards of one layer."""

    def __init__(self, cache: CacheWriter, layer: LayerInfo, num_shards: int, complete: bool = False):
        self.cache, self.store = cache, cache.store
        self.layer, self.num_shards, self.complete = layer, num_shards, complete
        self.header: dict = {}
        self._specs = {f.name: f for f in layer.fields}

    @property
    def name(self) -> str:
        return self.layer.name

    def is_committed(self, index: int) -> bool:
        return self.complete or self.store.exists(shard_marker(self.name, index))

    def missing_shards(self) -> list[int]:
        return [i for i in range(self.num_shards) if not self.is_committed(i)]

    def finished_layer(self) -> LayerInfo:
        missing = self.missing_shards()
        if missing:
            raise ShardError(
                f"layer {self.name!r} is incomplete: shards {missing[:10]}{'...' if len(missing) > 10 else ''} "
                "are not written; run the build again to resume it"
            )
        shards = [
            ShardInfo.from_json(self.store.read_json(shard_marker(self.name, i)), f"layer {self.name!r}")
            for i in range(self.num_shards)
        ]
        exports = []
        if self.store.exists(exports_marker(self.name)):
            exports = [
                FileInfo.from_json(f, f"layer {self.name!r} exports")
                for f in self.store.read_json(exports_marker(self.name))
            ]
        return LayerInfo(self.name, self.layer.kind, self.layer.fields, shards, self.layer.teacher, exports)

    # -- exports --------------------------------------------------------------------------------
    def has_exports(self) -> bool:
        return self.complete or self.store.exists(exports_marker(self.name))

    def write_exports(self, build) -> list[FileInfo]:
        """Publish what students need from the teacher (tokenizer, embeddings, ...) under
        ``layers/<layer>/exports/``. ``build(directory)`` writes the files into a staging directory."""
        if self.complete:
            raise CacheError(f"layer {self.name!r} is already complete in the manifest; nothing to write")
        rel = exports_dir(self.name)
        with self.store.staging_dir() as tmp:
            build(tmp)
            files = [
                FileInfo(f"{rel}/{p}", os.path.getsize(os.path.join(tmp, p)), _sha256_path(os.path.join(tmp, p)))
                for p in _walk_files(tmp)
            ]
            failpoint(f"exports-staged:{self.name}")
            self.store.publish_dir(tmp, rel)
        failpoint(f"exports-data:{self.name}")
        self.store.write_json_atomic(exports_marker(self.name), [f.to_json() for f in files])
        return files

    # -- one shard ------------------------------------------------------------------------------
    def write_shard(self, index: int, columns: dict[str, Sequence]) -> ShardInfo:
        """Validate and publish shard ``index``: ``columns`` maps ``example_id`` and every field
        of the layer to one value per example (per-word zarr fields: an array ``[words, *shape]``).
        """
        if self.complete:
            raise CacheError(f"layer {self.name!r} is already complete in the manifest; nothing to write")
        if not 0 <= index < self.num_shards:
            raise ShardError(f"layer {self.name!r}: shard index {index} is outside 0..{self.num_shards - 1}")
        where = f"layer {self.name!r} shard {index}"
        ids, n_words = self._check_rows(index, columns, where)
        with self.store.staging_dir() as tmp:
            field_bytes = _write_parquet(tmp, ids, columns, self.layer.fields, n_words, where)
            failpoint(f"shard-parquet:{self.name}:{index}")
            dense = [f for f in self.layer.fields if f.storage == "zarr"]
            if dense:
                field_bytes.update(_write_zarr(tmp, columns, dense, n_words, where))
            rel = shard_dir(self.name, index)
            files = [
                FileInfo(f"{rel}/{p}", os.path.getsize(os.path.join(tmp, p)), _sha256_path(os.path.join(tmp, p)))
                for p in _walk_files(tmp)
            ]
            failpoint(f"shard-staged:{self.name}:{index}")
            self.store.publish_dir(tmp, rel)
        failpoint(f"shard-data:{self.name}:{index}")
        info = ShardInfo(index, rel, len(ids), int(n_words.sum()), files, field_bytes)
        self.store.write_json_atomic(shard_marker(self.name, index), info.to_json())
        failpoint(f"shard-marker:{self.name}:{index}")
        return info

    def _check_rows(self, index: int, columns: dict, where: str) -> tuple[list[str], np.ndarray]:
        if "example_id" not in columns:
            raise FieldError(f"{where}: the column 'example_id' is missing")
        unknown = sorted(set(columns) - set(self._specs) - {"example_id"})
        if unknown:
            raise FieldError(f"{where}: columns {unknown} are not fields of the layer {sorted(self._specs)}")
        missing = sorted(n for n, f in self._specs.items() if n not in columns)
        if missing:
            raise FieldError(f"{where}: fields {missing} have no column")
        ids = [str(x) for x in columns["example_id"]]
        for name, col in columns.items():
            if len(col) != len(ids):
                raise FieldError(f"{where}: column {name!r} has {len(col)} rows, example_id has {len(ids)}")
        if len(set(ids)) != len(ids):
            raise FieldError(f"{where}: example ids repeat within the shard")
        if self.layer.kind == "examples":
            words = columns["words"]
            n_words = np.array([len(w) for w in words], dtype=np.int64)
            given = np.asarray(columns["n_words"], dtype=np.int64)
            if not np.array_equal(given, n_words):
                raise FieldError(f"{where}: 'n_words' disagrees with the length of 'words'")
            if (n_words == 0).any():
                bad = ids[int(np.argmax(n_words == 0))]
                raise FieldError(f"{where}: example {bad!r} has no words")
            return ids, n_words
        ref = _examples_shard_rows(self.store, index, self.cache.manifest)
        if ref is None:
            raise ShardError(f"{where}: the examples layer has no shard {index}; write it first")
        ref_ids, n_words = ref
        if ids != ref_ids:
            first = next((i for i, (a, b) in enumerate(zip(ids, ref_ids)) if a != b), min(len(ids), len(ref_ids)))
            raise ShardError(
                f"{where}: example ids do not match the examples layer's shard (first difference at "
                f"row {first}); layers must hold the same examples in the same order"
            )
        return ids, n_words


# -- helpers ------------------------------------------------------------------------------------


def _examples_shard_rows(
    store: CacheStore, index: int, manifest: Manifest | None
) -> tuple[list[str], np.ndarray] | None:
    """Example ids and word counts of examples shard ``index``: from the manifest of a committed
    cache (its shard markers need not travel with a copied cache), else from a committed marker."""
    if manifest is not None:
        path = manifest.examples.shards[index].path
    elif store.exists(shard_marker(EXAMPLES_LAYER, index)):
        path = shard_dir(EXAMPLES_LAYER, index)
    else:
        return None
    table = read_parquet_columns(store, f"{path}/{RECORDS}", ["example_id", "n_words"])
    return table.column("example_id").to_pylist(), table.column("n_words").to_numpy().astype(np.int64)


def _compare_corpora(old: list[CorpusInfo], new: list[CorpusInfo], where: str) -> None:
    old_by = {(c.name, c.split): c for c in old}
    new_by = {(c.name, c.split): c for c in new}
    for key in sorted(set(old_by) | set(new_by)):
        a, b = old_by.get(key), new_by.get(key)
        if a is None or b is None:
            raise FingerprintMismatchError(
                f"corpus {key[0]!r} split {key[1]!r} is in {'the request' if a is None else where} only: "
                f"{where} holds {sorted(old_by)}. A cache's corpora are fixed when it is first built; "
                "build a new cache (or overwrite this one) to change them"
            )
        if a.sha256 != b.sha256:
            raise FingerprintMismatchError(
                f"corpus {key[0]!r} split {key[1]!r} changed: source sha256 {a.sha256[:12]}… in {where}, "
                f"{b.sha256[:12]}… in {b.source}. Build a new cache (or overwrite this one)"
            )


def _compare_teacher(
    old: TeacherInfo, new: TeacherInfo, old_layer: LayerInfo, new_layer: LayerInfo, where: str
) -> None:
    diff = new.fingerprint_difference(old)
    if diff is not None:
        raise FingerprintMismatchError(
            f"teacher {new.id!r} in {where} is a different model: {diff}. Use another teacher id, "
            "or overwrite the layer"
        )
    if old.decoding != new.decoding:
        raise FingerprintMismatchError(
            f"teacher {new.id!r} in {where} was decoded with {old.decoding}; this run asks for "
            f"{new.decoding}. Use the same settings to resume, another teacher id, or overwrite the layer"
        )
    if [f.to_json() for f in old_layer.fields] != [f.to_json() for f in new_layer.fields]:
        raise FingerprintMismatchError(
            f"teacher {new.id!r} in {where} has fields {old_layer.field_names()}; this run asks for "
            f"{new_layer.field_names()}. Use another teacher id, or overwrite the layer"
        )


def _write_parquet(
    tmp: str, ids: list[str], columns: dict, fields: list[FieldSpec], n_words: np.ndarray, where: str
) -> dict[str, int]:
    arrays = {"example_id": pa.array(ids, type=pa.string())}
    for f in fields:
        if f.storage != "parquet":
            continue
        values = columns[f.name]
        if f.dtype in INTEGER_DTYPES and _holds_fraction_type(values):
            raise FieldError(f"{where}: field {f.name!r} is {f.dtype} but was given non-integer values")
        try:
            arr = pa.array(_plain(values), type=f.arrow_type())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
            raise FieldError(
                f"{where}: field {f.name!r} does not hold {f.dtype} values of shape {list(f.shape)}: {e}"
            ) from None
        if arr.null_count and not f.nullable:
            raise FieldError(f"{where}: field {f.name!r} has nulls but is not nullable")
        _check_word_lengths(arr, f, n_words, where)
        arrays[f.name] = arr
    table = pa.table(arrays)
    path = os.path.join(tmp, RECORDS)
    written: list = []  # the file's metadata as written, so that it is not read back
    pq.write_table(table, path, compression="zstd", metadata_collector=written)
    sizes: dict[str, int] = {}
    meta = written[0]
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for c in range(group.num_columns):
            col = group.column(c)
            top = col.path_in_schema.split(".")[0]
            sizes[top] = sizes.get(top, 0) + col.total_compressed_size
    sizes.pop("example_id", None)
    return sizes


def _holds_fraction_type(values) -> bool:
    """Whether a column for an integer field holds a float (a float array, or a float among lists):
    Arrow would cut 1.5 to 1 without a word. The zarr fields refuse the same (``_write_zarr``)."""
    for v in values:
        if isinstance(v, np.ndarray):
            if v.dtype.kind in "fc":
                return True
        elif isinstance(v, (float, np.floating)):
            return True
        elif isinstance(v, (list, tuple)) and _holds_fraction_type(v):
            return True
    return False


def _plain(values):
    """numpy arrays inside a column become lists, which pyarrow converts with a given type."""
    if isinstance(values, np.ndarray):
        return values.tolist()
    return [v.tolist() if isinstance(v, np.ndarray) else v for v in values]


def _check_word_lengths(arr: pa.Array, f: FieldSpec, n_words: np.ndarray, where: str) -> None:
    """Per-word lists and dimensions named ``words`` must have one entry per word (null rows and
    null lists are not checked). The lists of the ``words`` dimension are reached by flattening
    the levels above it, keeping each list's row: one vectorised comparison, no Python loop."""
    if f.level == "word":
        depth = 0
    elif "words" in f.shape:
        depth = f.shape.index("words")
    else:
        return
    rows, level = np.arange(len(arr)), arr
    for _ in range(depth):
        rows = rows[pc.list_parent_indices(level).to_numpy()]
        level = level.flatten()
    got = pc.list_value_length(level).fill_null(-1).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero((got >= 0) & (got != n_words[rows]))
    if bad.size:
        i, n = int(rows[bad[0]]), int(got[bad[0]])
        if f.level == "word":
            raise FieldError(f"{where}: field {f.name!r} row {i} has {n} values for {n_words[i]} words")
        raise FieldError(
            f"{where}: field {f.name!r} row {i} has a dimension 'words' of {n}, the example has {n_words[i]} words"
        )


def _write_zarr(tmp: str, columns: dict, fields: list[FieldSpec], n_words: np.ndarray, where: str) -> dict[str, int]:
    group = zarr.open_group(zarr.storage.LocalStore(os.path.join(tmp, DENSE)), mode="w")
    offsets = group.require_group(OFFSETS_GROUP)
    sizes: dict[str, int] = {}
    n_sub = None
    for f in fields:
        rows = [np.asarray(v) for v in columns[f.name]]
        for i, r in enumerate(rows):
            if r.ndim != 1 + len(f.shape) or tuple(r.shape[1:]) != tuple(f.shape):
                raise FieldError(
                    f"{where}: field {f.name!r} row {i} has shape {list(r.shape)}, "
                    f"expected [{f.level}s, {', '.join(map(str, f.shape))}]".replace(", ]", "]")
                )
        counts = np.array([r.shape[0] for r in rows], dtype=np.int64)
        if f.level == "word" and not np.array_equal(counts, n_words):
            i = int(np.argmax(counts != n_words))
            raise FieldError(f"{where}: field {f.name!r} row {i} has {counts[i]} words, the example has {n_words[i]}")
        if f.level == "subword":
            if n_sub is None:
                n_sub = counts
            elif not np.array_equal(counts, n_sub):
                raise FieldError(
                    f"{where}: subword field {f.name!r} disagrees with the other subword fields "
                    "on the number of subwords per example"
                )
        if not np.issubdtype(f.numpy_dtype(), np.floating) and any(
            r.size and not np.issubdtype(r.dtype, np.integer) and r.dtype != np.bool_ for r in rows
        ):
            raise FieldError(f"{where}: field {f.name!r} is {f.dtype} but was given non-integer values")
        flat = np.concatenate(rows) if rows else np.zeros((0, *f.shape))
        if f.dtype == "float16" and _overflows_float16(flat):
            raise FieldError(f"{where}: field {f.name!r} overflows float16; store it as float32 or bfloat16")
        sizes[f.name] = 0
        try:
            encoded = encode(flat, f, to_storage)
        except FieldError as e:
            raise FieldError(f"{where}: {e}") from None
        for path, data in encoded.items():
            parent, _, name = path.rpartition("/")
            target = group.require_group(parent) if parent else group
            per_unit = data.shape[1:]
            row_bytes = max(1, int(np.prod(per_unit, dtype=np.int64)) * data.dtype.itemsize)
            chunk_rows = max(1, min(len(data), CHUNK_BYTES // row_bytes))
            attrs = {"level": f.level, "dtype": f.dtype, **({"encoding": f.encoding} if f.encoding else {})}
            arr = target.create_array(
                name,
                shape=data.shape,
                dtype=data.dtype,
                chunks=(chunk_rows, *per_unit),
                attributes=attrs if path == f.name else {"of": f.name},
            )
            if data.size:
                arr[...] = data
            sizes[f.name] += _dir_bytes(os.path.join(tmp, DENSE, *path.split("/")))
    levels = {f.level for f in fields}
    for level, counts in (("word", n_words), ("subword", n_sub)):
        if level in levels:
            off = np.zeros(len(counts) + 1, dtype=np.int64)
            np.cumsum(counts, out=off[1:])
            offsets.create_array(level, shape=off.shape, dtype=off.dtype)[...] = off
    return sizes


def _overflows_float16(flat: np.ndarray) -> bool:
    """Whether a finite value lies beyond float16's range (infinities and NaN are stored as they
    are). Two reductions decide the common case; only an array holding a non-finite value or a
    large one pays for the exact test."""
    if not flat.size:
        return False
    lo, hi = float(flat.min()), float(flat.max())
    if np.isfinite(lo) and np.isfinite(hi):
        return max(-lo, hi) > 65504
    return bool(np.abs(flat[np.isfinite(flat)]).max(initial=0) > 65504)


def _json_temporaries(store: CacheStore) -> list[str]:
    """Temporary copies that ``write_json_atomic`` leaves when killed before its rename: beside the
    manifest and beside each layer's header and markers (``layout.py``); not the build lock's."""
    dirs = ["", *(f"layers/{name}" for name in store.listdir("layers"))]
    return [
        f"{d}/{name}".lstrip("/")
        for d in dirs
        for name in store.listdir(d)
        if ".json.tmp-" in name and not name.startswith(LOCK)
    ]


def _walk_files(root: str) -> list[str]:
    out = []
    for d, _, files in os.walk(root):
        for name in files:
            out.append(os.path.relpath(os.path.join(d, name), root).replace(os.sep, "/"))
    return sorted(out)


def _dir_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(root, p)) for p in _walk_files(root))


def _sha256_path(path: str) -> str:
    with open(path, "rb") as f:
        return sha256_file(f)


__all__ = ["CacheWriter", "LayerWriter", "ManifestError"]
