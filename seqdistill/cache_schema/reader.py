"""Reading a cache: only the layers and fields asked for, one shard at a time.

>>> cache = CacheReader("runs/cache")                       # or "s3://bucket/cache"
>>> shard = cache.read_shard(0, {"examples": ["words"], "minilm": ["kbest_paths", "logits"]})
>>> shard.get("minilm", "logits")[3]                        # [words, tags] of the 4th example

Only the manifest is trusted for structure; every path in it has been checked to stay inside the
cache root. Checksums are checked by :func:`seqdistill.cache_schema.verify.verify_cache`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zarr

from .encodings import aux_arrays, decode
from .errors import CacheError, FieldError, ManifestError, ShardError
from .fields import FieldSpec, from_storage
from .layout import DENSE, OFFSETS_GROUP, RECORDS
from .manifest import EXAMPLES_LAYER, MANIFEST, FileInfo, LayerInfo, Manifest
from .storage import CacheStore


def load_manifest(store: CacheStore) -> Manifest:
    """Read and validate ``manifest.json``; errors say which file and what to do."""
    if not store.exists(MANIFEST):
        raise ManifestError(
            f"{store.url} has no {MANIFEST}: it is not a seqdistill cache, or its build has not "
            "finished (run the same `distill-cache build` again to resume it)"
        )
    raw = store.read_bytes(MANIFEST)
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ManifestError(f"{store.url}/{MANIFEST} is not UTF-8 text: the file is corrupt") from None
    except json.JSONDecodeError as e:
        raise ManifestError(
            f"{store.url}/{MANIFEST} line {e.lineno}: invalid JSON ({e.msg}); the file is corrupt"
        ) from None
    try:
        return Manifest.from_json(obj)
    except ManifestError as e:
        raise type(e)(f"{store.url}/{e}") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise ManifestError(f"{store.url}/{MANIFEST}: malformed manifest ({e})") from None


def read_parquet_columns(store: CacheStore, rel: str, columns: list[str]) -> pa.Table:
    try:
        with store.open(rel) as f:
            return pq.read_table(f, columns=columns)
    except FileNotFoundError:
        raise ShardError(f"{rel}: file missing; run `distill-cache verify` on the cache") from None
    except (pa.ArrowException, OSError) as e:
        raise ShardError(f"{rel}: unreadable parquet ({e}); run `distill-cache verify` on the cache") from None


def open_zarr_group(store: CacheStore, rel: str):
    """Open a shard's Zarr group read-only, locally or through fsspec."""
    if store.is_local:
        zstore = zarr.storage.LocalStore(store.path(rel), read_only=True)
    else:
        zstore = zarr.storage.FsspecStore.from_url(
            store.url_of(rel), storage_options=store.storage_options or None, read_only=True
        )
    try:
        return zarr.open_group(zstore, mode="r")
    except (FileNotFoundError, zarr.errors.NodeNotFoundError):
        raise ShardError(f"{rel}: zarr group missing; run `distill-cache verify` on the cache") from None
    except (zarr.errors.BaseZarrError, ValueError, json.JSONDecodeError) as e:
        raise ShardError(f"{rel}: unreadable zarr metadata ({e}); run `distill-cache verify`") from None


@dataclass
class DenseField:
    """A per-word or per-subword tensor of one shard: ``values[offsets[i]:offsets[i+1]]`` is row i."""

    values: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]


@dataclass
class ShardData:
    """The requested fields of one shard, rows aligned by example id across layers."""

    index: int
    example_ids: list[str]
    columns: dict[str, dict[str, pa.Array | DenseField]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.example_ids)

    def get(self, layer: str, name: str) -> pa.Array | DenseField:
        return self.columns[layer][name]

    def row(self, i: int) -> dict:
        """Example ``i`` as ``{"example_id": ..., layer: {field: value}}`` (lists and arrays)."""
        out: dict = {"example_id": self.example_ids[i]}
        for layer, cols in self.columns.items():
            out[layer] = {
                name: (col[i] if isinstance(col, DenseField) else col[i].as_py()) for name, col in cols.items()
            }
        return out

    def rows(self, keep: Sequence[int] | None = None) -> list[dict]:
        """:meth:`row` of every example (or of those in ``keep``), converting each Parquet column
        to Python once for the shard rather than value by value (the stream's hot path)."""
        index = range(len(self)) if keep is None else list(keep)
        out = [{"example_id": self.example_ids[i]} for i in index]
        for layer, cols in self.columns.items():
            per_row = [{} for _ in out]
            for name, col in cols.items():
                if isinstance(col, DenseField):
                    for d, i in zip(per_row, index):
                        d[name] = col[i]
                else:
                    values = col.to_pylist()
                    for d, i in zip(per_row, index):
                        d[name] = values[i]
            for r, d in zip(out, per_row):
                r[layer] = d
        return out


class CacheReader:
    """A committed cache, opened for reading."""

    def __init__(
        self,
        url,
        storage_options: dict | None = None,
        *,
        verify: bool = False,
        local_cache: str | os.PathLike | None = None,
    ):
        """``verify``: check the size and sha256 of every file against the manifest before its
        first read (shards as they are read, exports when asked for), so that a damaged file is
        refused with its name instead of being trained on. Students read with ``verify=True``;
        the cost is one extra pass over each file, once per process.

        ``local_cache``: for a cache on object storage, a local directory that keeps a copy of
        every shard file read (downloaded whole on first use, checked against the manifest's
        sha256, then read locally: later epochs and runs fetch nothing). Committed shard files
        never change, so a copy whose sha256 matches is always current; the manifest itself is
        always read from the cache."""
        self.store = CacheStore(url, storage_options)
        self.manifest = load_manifest(self.store)
        self.verify = verify
        self.mirror = CacheStore(local_cache) if local_cache is not None and not self.store.is_local else None
        self._verified: set[str] = set()

    def _source(self, files) -> CacheStore:
        """Where to read ``files`` (``FileInfo``) from, after checking them: the cache, or its
        local mirror once the copies there are complete."""
        if self.mirror is None:
            if self.verify:
                self.check_files(files)
            return self.store
        for f in files:
            if f.path in self._verified:
                continue
            local = self.mirror.path(f.path)
            if not (
                os.path.exists(local) and os.path.getsize(local) == f.bytes and self.mirror.sha256(f.path) == f.sha256
            ):
                os.makedirs(os.path.dirname(local), exist_ok=True)
                part = f"{f.path}.part-{os.getpid()}"
                try:
                    self.store.fs.get_file(self.store.path(f.path), self.mirror.path(part))
                    _check_file(self.mirror, FileInfo(part, f.bytes, f.sha256), self.store.url, f.path)
                    os.replace(self.mirror.path(part), local)  # atomic: DataLoader workers may fetch it too
                except FileNotFoundError:
                    raise ShardError(
                        f"{self.store.url}/{f.path}: file missing; the cache is damaged: run "
                        "`distill-cache verify` and rebuild what it names"
                    ) from None
                finally:
                    if os.path.exists(self.mirror.path(part)):
                        os.unlink(self.mirror.path(part))
            self._verified.add(f.path)
        return self.mirror

    def check_files(self, files) -> None:
        """Size and sha256 of ``files`` (``FileInfo``) against the manifest; raise naming the first
        that differs. Each file is checked once per reader."""
        for f in files:
            if f.path in self._verified:
                continue
            _check_file(self.store, f, self.store.url)
            self._verified.add(f.path)

    @property
    def num_shards(self) -> int:
        return self.manifest.num_shards

    def __len__(self) -> int:
        return self.manifest.num_examples

    def exports(self, layer: str) -> list[str]:
        """Names of the files a teacher layer exported (relative to its ``exports/``)."""
        prefix = f"layers/{layer}/exports/"
        return [f.path[len(prefix) :] for f in self.manifest.layer(layer).exports]

    def read_export(self, layer: str, name: str) -> bytes:
        if name not in self.exports(layer):
            raise CacheError(f"layer {layer!r} exported no {name!r}; it exported: {', '.join(self.exports(layer))}")
        rel = f"layers/{layer}/exports/{name}"
        return self._source([f for f in self.manifest.layer(layer).exports if f.path == rel]).read_bytes(rel)

    def export_dir(self, layer: str, local_dir=None) -> str:
        """A local directory holding the layer's exports: the cache's own for a local cache,
        else a copy in ``local_dir`` (or a new temporary directory)."""
        if self.store.is_local or self.mirror is not None:
            return self._source(self.manifest.layer(layer).exports).path(f"layers/{layer}/exports")
        import tempfile

        target = str(local_dir or tempfile.mkdtemp(prefix="seqdistill-exports-"))
        for name in self.exports(layer):
            path = os.path.join(target, *name.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(self.read_export(layer, name))
        return target

    def projection(self, layer: str, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The PCA of a field built with ``--hidden-project``: components ``C`` ``[N, D]`` and mean
        ``μ`` ``[D]``, so that ``encodings.reconstruct(values, C, μ)`` gives the teacher's states
        back (up to what the N components leave out). Dimensions are checked against the field."""
        from safetensors import SafetensorError
        from safetensors.numpy import load

        try:
            spec = self.manifest.layer(layer).field(name)
        except KeyError as e:
            raise CacheError(f"no field {name!r} in layer {layer!r} ({e.args[0]})") from None
        enc = spec.encoding
        if "project_from" not in enc:
            raise CacheError(f"field {name!r} of layer {layer!r} is not PCA-projected (its encoding: {enc or 'none'})")
        where = f"{self.store.url}/layers/{layer}/exports/{enc['project_export']}"
        try:
            tensors = load(self.read_export(layer, enc["project_export"]))
        except SafetensorError as e:
            raise FieldError(f"{where}: unreadable safetensors ({e})") from None
        comp, mean = tensors.get(f"{name}.components"), tensors.get(f"{name}.mean")
        want = {"components": (spec.shape[0], enc["project_from"]), "mean": (enc["project_from"],)}
        for key, t in (("components", comp), ("mean", mean)):
            if t is None or tuple(t.shape) != want[key]:
                got = "absent" if t is None else list(t.shape)
                raise FieldError(
                    f"{where}: {name}.{key} is {got}; field {name!r} needs {list(want[key])} "
                    f"({spec.shape[0]} components of {enc['project_from']} dimensions)"
                )
            if not np.isfinite(t).all():
                raise FieldError(f"{where}: {name}.{key} holds NaN or inf")
        return comp.astype(np.float32), mean.astype(np.float32)

    def resolve(self, fields: Mapping[str, Sequence[str]] | None) -> dict[str, list[FieldSpec]]:
        """Check a request ``{layer: [field, ...]}``; errors list what the cache holds."""
        if fields is None:
            fields = {EXAMPLES_LAYER: self.manifest.examples.field_names()}
        out: dict[str, list[FieldSpec]] = {}
        for layer_name, names in fields.items():
            try:
                layer = self.manifest.layer(layer_name)
            except KeyError as e:
                raise CacheError(e.args[0]) from None
            specs = []
            for name in names:
                try:
                    specs.append(layer.field(name))
                except KeyError:
                    raise CacheError(
                        f"layer {layer_name!r} has no field {name!r}; it holds: {', '.join(layer.field_names())}"
                    ) from None
            out[layer_name] = specs
        return out

    def read_shard(self, index: int, fields: Mapping[str, Sequence[str]] | None = None) -> ShardData:
        """Read the requested ``{layer: [field, ...]}`` of shard ``index`` (default: examples)."""
        if not 0 <= index < self.num_shards:
            raise CacheError(f"shard {index} does not exist: the cache has {self.num_shards} shards")
        request = self.resolve(fields)
        ref = self.manifest.examples.shards[index]
        src = self._source([f for f in ref.files if f.path.endswith(f"/{RECORDS}")])
        ids = read_parquet_columns(src, f"{ref.path}/{RECORDS}", ["example_id"]).column(0).to_pylist()
        data = ShardData(index, ids)
        for layer_name, specs in request.items():
            layer = self.manifest.layer(layer_name)
            data.columns[layer_name] = self._read_layer_shard(
                self._source(layer.shards[index].files), layer, index, specs, ids
            )
        return data

    def iter_shards(
        self, fields: Mapping[str, Sequence[str]] | None = None, shards: Sequence[int] | None = None
    ) -> Iterator[ShardData]:
        for i in range(self.num_shards) if shards is None else shards:
            yield self.read_shard(i, fields)

    def iter_examples(self, fields: Mapping[str, Sequence[str]] | None = None) -> Iterator[dict]:
        for shard in self.iter_shards(fields):
            for i in range(len(shard)):
                yield shard.row(i)

    def _read_layer_shard(
        self, store: CacheStore, layer: LayerInfo, index: int, specs: list[FieldSpec], ids: list[str]
    ) -> dict:
        shard = layer.shards[index]
        out: dict = {}
        tabular = [s.name for s in specs if s.storage == "parquet"]
        rel = f"{shard.path}/{RECORDS}"
        table = read_parquet_columns(store, rel, ["example_id", *tabular])
        if table.column("example_id").to_pylist() != ids:
            raise ShardError(
                f"{rel}: its example ids do not match the examples layer's shard {index}; the cache is "
                "inconsistent (run `distill-cache verify`)"
            )
        for name in tabular:
            out[name] = table.column(name).combine_chunks()
        dense = [s for s in specs if s.storage == "zarr"]
        if dense:
            group_rel = f"{shard.path}/{DENSE}"
            group = open_zarr_group(store, group_rel)
            offsets = {}
            for spec in dense:
                if spec.level not in offsets:
                    off = _read_array(group, f"{OFFSETS_GROUP}/{spec.level}", group_rel)
                    if off.ndim != 1 or not np.issubdtype(off.dtype, np.integer):
                        raise ShardError(
                            f"{group_rel}/{OFFSETS_GROUP}/{spec.level}: holds {off.dtype} {list(off.shape)}, not "
                            "one integer offset per example; run `distill-cache verify`"
                        )
                    offsets[spec.level] = off
                stored = _read_array(group, spec.name, group_rel)
                if (
                    stored.dtype != spec.storage_dtype()
                    or stored.ndim != 1 + len(spec.storage_shape())
                    or tuple(stored.shape[1:]) != spec.storage_shape()
                ):
                    raise ShardError(
                        f"{group_rel}/{spec.name}: holds {stored.dtype} of per-{spec.level} shape "
                        f"{list(stored.shape[1:])}, the manifest says {spec.dtype} of shape "
                        f"{list(spec.storage_shape())}; the cache is inconsistent (run `distill-cache verify`)"
                    )
                arrays = {spec.name: stored, **{p: _read_array(group, p, group_rel) for p in aux_arrays(spec)}}
                values = decode(arrays, spec, from_storage, group_rel)
                off = offsets[spec.level]
                if len(off) != len(ids) + 1 or off[-1] != len(values):
                    raise ShardError(
                        f"{group_rel}/{spec.name}: {len(values)} rows do not match its "
                        f"offsets; run `distill-cache verify`"
                    )
                out[spec.name] = DenseField(values, off)
        return out


def _check_file(store: CacheStore, f, url: str, name: str | None = None) -> None:
    """Raise, naming ``url/name`` (default ``f.path``), unless the file ``f.path`` in ``store`` has
    the manifest's size and sha256."""
    name = name or f.path
    try:
        size = store.size(f.path)
    except FileNotFoundError:
        raise ShardError(
            f"{url}/{name}: file missing; the cache is damaged: run `distill-cache verify` and rebuild what it names"
        ) from None
    if size != f.bytes or store.sha256(f.path) != f.sha256:
        what = (
            f"{size} bytes, the manifest says {f.bytes}"
            if size != f.bytes
            else "its sha256 differs from the manifest's"
        )
        raise ShardError(f"{url}/{name}: corrupt ({what}); run `distill-cache verify` and rebuild what it names")


def _read_array(group, name: str, where: str) -> np.ndarray:
    try:
        return group[name][...]
    except KeyError:
        raise ShardError(f"{where}/{name}: array missing; run `distill-cache verify` on the cache") from None
    except Exception as e:  # zarr raises codec-specific errors on corrupt chunks
        raise ShardError(f"{where}/{name}: unreadable ({type(e).__name__}: {e}); run `distill-cache verify`") from None
