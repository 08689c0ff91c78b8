"""What a cache *is*: manifest, fields, layers, shard layout, checksums, the writer and the reader.

This package imports numpy, pyarrow, zarr and fsspec only — never torch models — so a cache can be
inspected and verified anywhere. docs/cache-format.md is the specification.
"""

from .errors import (
    CacheError,
    CacheLockedError,
    FieldError,
    FingerprintMismatchError,
    FormatVersionError,
    ManifestError,
    ShardError,
)
from .fields import FieldSpec
from .labels import LabelSchema, TagError
from .layout import EXAMPLES_FIELDS, example_id
from .lock import BuildLock
from .manifest import EXAMPLES_LAYER, FORMAT_VERSION, CorpusInfo, LayerInfo, Manifest, ShardInfo, TeacherInfo
from .reader import CacheReader, DenseField, ShardData
from .verify import Problem, verify_cache
from .writer import CacheWriter, LayerWriter

__all__ = [
    "BuildLock",
    "CacheError",
    "CacheLockedError",
    "FieldError",
    "FingerprintMismatchError",
    "FormatVersionError",
    "ManifestError",
    "ShardError",
    "FieldSpec",
    "LabelSchema",
    "TagError",
    "EXAMPLES_FIELDS",
    "example_id",
    "EXAMPLES_LAYER",
    "FORMAT_VERSION",
    "CorpusInfo",
    "LayerInfo",
    "Manifest",
    "ShardInfo",
    "TeacherInfo",
    "CacheReader",
    "DenseField",
    "ShardData",
    "Problem",
    "verify_cache",
    "CacheWriter",
    "LayerWriter",
]
