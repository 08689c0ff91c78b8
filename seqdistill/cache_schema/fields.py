"""Field specifications: what a column of a layer holds and where it is stored.

A field has a *level* — ``example`` (one value per sentence), ``word`` or ``subword`` (one value
per word or subword) — a dtype, a per-unit shape and a storage:

* ``parquet`` holds per-example records: scalars (log Z, gold NLL), integer or string lists
  (words, tags, k-best paths as ``shape=("k", "words")``) and short float vectors (k-best
  log-probabilities, ``shape=("k",)``). Symbolic dimensions (strings) are list levels.
* ``zarr`` holds dense per-word or per-subword tensors as one flat array ``[units, *shape]`` per
  shard, with the example boundaries in an offsets array. Word- and subword-level floats must live
  here: nested lists of floats in Parquet are an order of magnitude slower to write and read.

``bfloat16`` exists only in Zarr, stored as the raw ``uint16`` bit pattern (numpy has no bf16) and
marked in the array attributes; readers get float32 back.

A Zarr float field may carry an ``encoding`` (int8 with per-unit scales, top-k of a distribution,
PCA coefficients; ``encodings.py``): ``dtype`` is then the element type of the stored values and
``shape`` the per-unit shape readers get back, as float32.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from .encodings import check_encoding, storage_shape
from .errors import FieldError

LEVELS = ("example", "word", "subword")
STORAGES = ("parquet", "zarr")
INT_DTYPES = ("bool", "uint8", "uint16", "int8", "int16", "int32", "int64")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
DTYPES = INT_DTYPES + FLOAT_DTYPES + ("string",)

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
RESERVED = ("example_id", "offsets", "scale", "topk_index", "fill")  # columns and zarr groups

_ARROW_SCALARS = {
    "bool": pa.bool_(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
}
INTEGER_DTYPES = frozenset(d for d, t in _ARROW_SCALARS.items() if pa.types.is_integer(t))


@dataclass(frozen=True)
class FieldSpec:
    name: str
    level: str
    dtype: str
    shape: tuple = ()
    storage: str = "parquet"
    nullable: bool = False
    description: str = ""
    encoding: dict = field(default_factory=dict, hash=False)  # encodings.py; empty: stored as returned

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        object.__setattr__(self, "encoding", dict(self.encoding or {}))
        self.validate()

    # -- rules ----------------------------------------------------------------------------------
    def validate(self) -> None:
        where = f"field {self.name!r}"
        if not _NAME.match(self.name) or self.name in RESERVED:
            raise FieldError(f"{where}: names are lower-case identifiers, not {RESERVED}")
        if self.level not in LEVELS:
            raise FieldError(f"{where}: level {self.level!r} is not one of {LEVELS}")
        if self.dtype not in DTYPES:
            raise FieldError(f"{where}: dtype {self.dtype!r} is not one of {DTYPES}")
        if self.storage not in STORAGES:
            raise FieldError(f"{where}: storage {self.storage!r} is not one of {STORAGES}")
        for d in self.shape:
            if not (isinstance(d, str) and _NAME.match(d)) and not (isinstance(d, int) and d > 0):
                raise FieldError(f"{where}: shape entries are positive ints or dimension names, got {d!r}")
        is_float = self.dtype in FLOAT_DTYPES
        if self.storage == "zarr":
            if self.level == "example":
                raise FieldError(f"{where}: example-level fields are stored in parquet")
            if self.dtype == "string":
                raise FieldError(f"{where}: zarr fields are numeric")
            if not all(isinstance(d, int) for d in self.shape):
                raise FieldError(f"{where}: a zarr field's per-unit shape must be fixed ints")
            if self.nullable:
                raise FieldError(f"{where}: zarr fields cannot be null")
            check_encoding(self)
        else:
            if self.encoding:
                raise FieldError(f"{where}: an encoding applies to zarr fields only")
            if self.dtype in ("float16", "bfloat16"):
                raise FieldError(f"{where}: {self.dtype} is only stored in zarr; use float32 in parquet")
            if self.level != "example" and is_float:
                raise FieldError(
                    f"{where}: per-{self.level} floats go to zarr (storage='zarr'), never to nested parquet lists"
                )
            if self.level != "example" and self.shape:
                raise FieldError(f"{where}: a per-{self.level} parquet field holds one value per unit")
            if is_float and len(self.shape) > 1:
                raise FieldError(f"{where}: nested lists of floats are not stored in parquet")
            if any(isinstance(d, int) for d in self.shape):
                raise FieldError(f"{where}: parquet list dimensions are named, e.g. ('k', 'words')")

    # -- types ----------------------------------------------------------------------------------
    def arrow_type(self) -> pa.DataType:
        """Arrow type of the Parquet column (a list level for each dimension and for word level)."""
        t = _ARROW_SCALARS[self.dtype]
        depth = len(self.shape) + (self.level != "example")
        for _ in range(depth):
            t = pa.list_(t)
        return t

    def numpy_dtype(self) -> np.dtype:
        """dtype of the values a reader returns (bf16 and encoded values come back as float32)."""
        return np.dtype("float32" if self.dtype == "bfloat16" or self.encoding else self.dtype)

    def storage_shape(self) -> tuple:
        """Per-unit shape of the stored values (``shape`` unless a top-k encoding keeps fewer)."""
        return storage_shape(self)

    def storage_dtype(self) -> np.dtype:
        """dtype of the values as stored in zarr (bf16 is kept as its uint16 bit pattern)."""
        return np.dtype("uint16" if self.dtype == "bfloat16" else self.dtype)

    def to_json(self) -> dict:
        out = {
            "name": self.name,
            "level": self.level,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "storage": self.storage,
        }
        if self.nullable:
            out["nullable"] = True
        if self.description:
            out["description"] = self.description
        if self.encoding:
            out["encoding"] = dict(self.encoding)
        return out

    @classmethod
    def from_json(cls, obj: dict) -> "FieldSpec":
        if not isinstance(obj.get("encoding") or {}, dict):
            raise FieldError(f"field {obj.get('name', '?')!r}: encoding must be a JSON object")
        try:
            return cls(
                name=obj["name"],
                level=obj["level"],
                dtype=obj["dtype"],
                shape=tuple(obj.get("shape", ())),
                storage=obj["storage"],
                nullable=bool(obj.get("nullable", False)),
                description=obj.get("description", ""),
                encoding=dict(obj.get("encoding") or {}),
            )
        except KeyError as e:
            raise FieldError(f"field {obj.get('name', '?')!r}: missing key {e.args[0]!r}") from None


def to_storage(values: np.ndarray, spec: FieldSpec) -> np.ndarray:
    """Cast float data to the stored dtype of ``spec`` (round-to-nearest-even for bfloat16)."""
    if spec.dtype != "bfloat16":
        return np.asarray(values).astype(spec.storage_dtype(), copy=False)
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    out = (rounded >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    out[nan] = 0x7FC0
    return out


def from_storage(values: np.ndarray, spec: FieldSpec) -> np.ndarray:
    """Inverse of :func:`to_storage` (bf16 bit patterns become float32)."""
    if spec.dtype != "bfloat16":
        return values
    return (values.astype(np.uint32) << 16).view(np.float32)
