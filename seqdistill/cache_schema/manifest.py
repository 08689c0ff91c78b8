"""``manifest.json``: the description and commit point of a cache.

The manifest is written last; a cache without one is not a cache yet (a build in progress, or a
build that was killed and will resume). Everything in it is plain JSON so that another team can
read a cache with pyarrow and zarr alone; docs/cache-format.md is the specification.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from ..version import __version__
from .errors import FormatVersionError, ManifestError
from .fields import FieldSpec
from .labels import LabelSchema, TagError
from .storage import safe_relpath

FORMAT_NAME = "seqdistill-cache"
FORMAT_VERSION = 2  # the newest format this code reads and writes
ENCODINGS_VERSION = 2  # format 2 ("cache v1.1") = format 1 + field encodings (encodings.py); a cache
# without encoded fields is still written as format 1, so that older seqdistill reads it, while one
# with them is refused by older seqdistill ("upgrade") instead of misread (int8 taken for values)
MANIFEST = "manifest.json"
EXAMPLES_LAYER = "examples"
LAYER_KINDS = ("examples", "teacher")

CHECKSUM_KEY = "manifest_sha256"


def manifest_digest(obj: dict) -> str:
    """sha256 of a manifest's contents without its own checksum (canonical JSON: sorted keys, no
    spaces), so that a flipped byte anywhere in the manifest is caught, not only in the files it lists."""
    body = {k: v for k, v in obj.items() if k != CHECKSUM_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def seal(obj: dict) -> dict:
    """Set the manifest's checksum (every write of a manifest goes through here)."""
    obj[CHECKSUM_KEY] = manifest_digest(obj)
    return obj


_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_id(value: str, what: str) -> str:
    """Names used in paths and example ids: letters, digits, ``._-``; not ``examples``."""
    if not isinstance(value, str) or not _ID.match(value) or value == EXAMPLES_LAYER:
        raise ManifestError(
            f"{what} {value!r} is not a valid name: use letters, digits, '.', '_' or '-' "
            f"(at most 128, not starting with a symbol, not {EXAMPLES_LAYER!r})"
        )
    return value


def _require(obj: dict, key: str, where: str):
    if key not in obj:
        raise ManifestError(f"{MANIFEST}: {where} lacks the key {key!r}")
    return obj[key]


@dataclass
class CorpusInfo:
    """One corpus split in the cache. ``sha256`` fingerprints the source file."""

    name: str
    split: str
    labelled: bool
    source: str
    sha256: str
    examples: int
    words: int
    nested: bool = False  # labelled with entity spans that may nest (examples' entity_spans/entity_types)

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, obj: dict) -> "CorpusInfo":
        where = f"corpus {obj.get('name', '?')!r}"
        optional = {"nested"}  # absent in caches written before nested corpora
        c = cls(
            **{k: _require(obj, k, where) for k in cls.__dataclass_fields__ if k not in optional},
            **{k: obj[k] for k in optional if k in obj},
        )
        check_id(c.name, "corpus name")
        check_id(c.split, "split name")
        return c


@dataclass
class TeacherInfo:
    """A teacher whose outputs form a layer. Fingerprints are sha256 digests of its files."""

    id: str
    kind: str
    fingerprints: dict[str, str]
    decoding: dict = field(default_factory=dict)
    hidden_layers: list[int] = field(default_factory=list)
    pooling: str = "first"
    source: str = ""

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, obj: dict) -> "TeacherInfo":
        where = f"teacher {obj.get('id', '?')!r}"
        t = cls(
            id=_require(obj, "id", where),
            kind=_require(obj, "kind", where),
            fingerprints=dict(_require(obj, "fingerprints", where)),
            decoding=dict(obj.get("decoding", {})),
            hidden_layers=[int(x) for x in obj.get("hidden_layers", [])],
            pooling=obj.get("pooling", "first"),
            source=obj.get("source", ""),
        )
        check_id(t.id, "teacher id")
        return t

    def fingerprint_difference(self, other: "TeacherInfo") -> str | None:
        """Which fingerprint differs from ``other`` (None when they all agree)."""
        for key in sorted(set(self.fingerprints) | set(other.fingerprints)):
            mine, theirs = self.fingerprints.get(key), other.fingerprints.get(key)
            if mine != theirs:
                return f"{key} fingerprint {theirs or 'absent'} in the cache vs {mine or 'absent'} now"
        if self.kind != other.kind:
            return f"kind {other.kind!r} in the cache vs {self.kind!r} now"
        return None


@dataclass
class FileInfo:
    path: str
    bytes: int
    sha256: str

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, obj: dict, where: str) -> "FileInfo":
        return cls(
            path=safe_relpath(_require(obj, "path", where), where),
            bytes=int(_require(obj, "bytes", where)),
            sha256=str(_require(obj, "sha256", where)),
        )


@dataclass
class ShardInfo:
    """One shard of one layer: its directory, counts, files with checksums and bytes per field."""

    index: int
    path: str
    examples: int
    words: int
    files: list[FileInfo]
    field_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "path": self.path,
            "examples": self.examples,
            "words": self.words,
            "bytes": self.bytes,
            "files": [f.to_json() for f in self.files],
            "field_bytes": self.field_bytes,
        }

    @classmethod
    def from_json(cls, obj: dict, where: str) -> "ShardInfo":
        where = f"{where} shard {obj.get('index', '?')}"
        files = [FileInfo.from_json(f, where) for f in _require(obj, "files", where)]
        path = safe_relpath(_require(obj, "path", where), where)
        for f in files:
            if not f.path.startswith(path + "/"):
                raise ManifestError(f"{MANIFEST}: {where}: file {f.path!r} lies outside its shard {path!r}")
        return cls(
            index=int(_require(obj, "index", where)),
            path=path,
            examples=int(_require(obj, "examples", where)),
            words=int(_require(obj, "words", where)),
            files=files,
            field_bytes={k: int(v) for k, v in obj.get("field_bytes", {}).items()},
        )


@dataclass
class LayerInfo:
    """A layer: the examples layer, or the outputs of one teacher, sharded like the examples."""

    name: str
    kind: str
    fields: list[FieldSpec]
    shards: list[ShardInfo] = field(default_factory=list)
    teacher: str | None = None
    exports: list[FileInfo] = field(default_factory=list)

    def field(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]

    def to_json(self, with_shards: bool = True) -> dict:
        out = {
            "name": self.name,
            "kind": self.kind,
            "teacher": self.teacher,
            "fields": [f.to_json() for f in self.fields],
        }
        if self.exports:
            out["exports"] = [f.to_json() for f in self.exports]
        if with_shards:
            out["shards"] = [s.to_json() for s in self.shards]
        return out

    @classmethod
    def from_json(cls, obj: dict) -> "LayerInfo":
        name = _require(obj, "name", "a layer")
        where = f"layer {name!r}"
        kind = _require(obj, "kind", where)
        if kind not in LAYER_KINDS:
            raise ManifestError(f"{MANIFEST}: {where} has unknown kind {kind!r}")
        if name != EXAMPLES_LAYER:
            check_id(name, "layer name")
        fields = [FieldSpec.from_json(f) for f in _require(obj, "fields", where)]
        names = [f.name for f in fields]
        if len(set(names)) != len(names):
            raise ManifestError(f"{MANIFEST}: {where} lists a field twice: {names}")
        shards = [ShardInfo.from_json(s, where) for s in obj.get("shards", [])]
        for i, s in enumerate(shards):
            if s.index != i:
                raise ManifestError(f"{MANIFEST}: {where}: shard {i} is listed with index {s.index}")
            if not s.path.startswith(f"layers/{name}/"):
                raise ManifestError(f"{MANIFEST}: {where}: shard path {s.path!r} is outside layers/{name}/")
        exports = [FileInfo.from_json(f, f"{where} exports") for f in obj.get("exports", [])]
        for f in exports:
            if not f.path.startswith(f"layers/{name}/exports/"):
                raise ManifestError(f"{MANIFEST}: {where}: export {f.path!r} is outside layers/{name}/exports/")
        return cls(name, kind, fields, shards, obj.get("teacher"), exports)


@dataclass
class Manifest:
    label_schema: LabelSchema
    corpora: list[CorpusInfo]
    layers: dict[str, LayerInfo]
    teachers: dict[str, TeacherInfo] = field(default_factory=dict)
    tool_version: str = __version__
    format_version: int = 0  # 0: the required version (a manifest being written)

    def __post_init__(self) -> None:
        if not self.format_version:
            self.format_version = self.required_version()

    def required_version(self) -> int:
        """The oldest format that can describe this cache (2 when a field has an encoding)."""
        encoded = any(f.encoding for layer in self.layers.values() for f in layer.fields)
        return ENCODINGS_VERSION if encoded else 1

    @property
    def examples(self) -> LayerInfo:
        return self.layers[EXAMPLES_LAYER]

    @property
    def num_shards(self) -> int:
        return len(self.examples.shards)

    @property
    def num_examples(self) -> int:
        return sum(s.examples for s in self.examples.shards)

    @property
    def num_words(self) -> int:
        return sum(s.words for s in self.examples.shards)

    def layer(self, name: str) -> LayerInfo:
        if name not in self.layers:
            raise KeyError(f"the cache has no layer {name!r}; its layers are: {', '.join(self.layers)}")
        return self.layers[name]

    def to_json(self) -> dict:
        return seal(
            {
                "format": FORMAT_NAME,
                "format_version": self.required_version(),
                "tool_version": self.tool_version,
                "label_schema": self.label_schema.to_json(),
                "corpora": [c.to_json() for c in self.corpora],
                "teachers": [t.to_json() for t in self.teachers.values()],
                "layers": [layer.to_json() for layer in self.layers.values()],
            }
        )

    @classmethod
    def from_json(cls, obj: dict) -> "Manifest":
        if not isinstance(obj, dict) or obj.get("format") != FORMAT_NAME:
            raise ManifestError(f"{MANIFEST} is not a seqdistill cache manifest (no format {FORMAT_NAME!r})")
        check_format_version(obj.get("format_version"), obj.get("tool_version", "?"))
        if CHECKSUM_KEY in obj and obj[CHECKSUM_KEY] != manifest_digest(obj):
            raise ManifestError(
                f"{MANIFEST}: its {CHECKSUM_KEY} does not match its contents: the file is corrupt "
                f"or was edited; delete it and run the same `distill-cache build` again, which "
                f"rewrites it from the shard markers"
            )
        try:
            schema = LabelSchema.from_json(_require(obj, "label_schema", "the manifest"))
        except (TagError, KeyError) as e:
            raise ManifestError(f"{MANIFEST}: invalid label_schema: {e}") from None
        corpora = [CorpusInfo.from_json(c) for c in _require(obj, "corpora", "the manifest")]
        teachers = [TeacherInfo.from_json(t) for t in obj.get("teachers", [])]
        layers = [LayerInfo.from_json(layer) for layer in _require(obj, "layers", "the manifest")]
        m = cls(
            label_schema=schema,
            corpora=corpora,
            layers={layer.name: layer for layer in layers},
            teachers={t.id: t for t in teachers},
            tool_version=obj.get("tool_version", "?"),
            format_version=obj["format_version"],
        )
        m.check_consistency()
        if m.format_version < m.required_version():
            raise ManifestError(
                f"{MANIFEST}: a field has an encoding, which format v{m.format_version} cannot hold; the "
                f"manifest is inconsistent (encoded fields need format v{m.required_version()})"
            )
        return m

    def check_consistency(self) -> None:
        """Structural rules that hold for every valid manifest."""
        if EXAMPLES_LAYER not in self.layers:
            raise ManifestError(f"{MANIFEST} has no {EXAMPLES_LAYER!r} layer")
        n = self.num_shards
        for layer in self.layers.values():
            if layer.kind == "teacher" and layer.teacher not in self.teachers:
                raise ManifestError(
                    f"{MANIFEST}: layer {layer.name!r} names teacher {layer.teacher!r}, "
                    "which the manifest does not describe"
                )
            if len(layer.shards) != n:
                raise ManifestError(
                    f"{MANIFEST}: layer {layer.name!r} has {len(layer.shards)} shards, the examples "
                    f"layer has {n}; layers must be sharded identically"
                )
            for mine, ref in zip(layer.shards, self.examples.shards):
                if (mine.examples, mine.words) != (ref.examples, ref.words):
                    raise ManifestError(
                        f"{MANIFEST}: layer {layer.name!r} shard {mine.index} counts "
                        f"({mine.examples} examples, {mine.words} words) differ from the examples "
                        f"layer ({ref.examples}, {ref.words})"
                    )
        listed = sum(c.examples for c in self.corpora)
        if listed != self.num_examples:
            raise ManifestError(f"{MANIFEST}: corpora list {listed} examples but the shards hold {self.num_examples}")


def check_format_version(version, tool_version: str) -> None:
    """Refuse a manifest whose format this code cannot read, saying what to do."""
    if not isinstance(version, int):
        raise ManifestError(f"{MANIFEST}: format_version must be an integer, got {version!r}")
    if version > FORMAT_VERSION:
        raise FormatVersionError(
            f"this cache uses format v{version} (written by seqdistill {tool_version}); this "
            f"seqdistill {__version__} reads format v{FORMAT_VERSION}. Upgrade seqdistill "
            "(pip install -U seqdistill) to read it."
        )
    if version < 1:
        raise FormatVersionError(
            f"this cache uses format v{version} (written by seqdistill {tool_version}); this "
            f"seqdistill {__version__} reads formats v1 to v{FORMAT_VERSION}. Rebuild the cache with "
            f"`distill-cache build`, or read it with seqdistill {tool_version}."
        )
