"""Compact encodings of dense float fields (cache format v1.1), decoded transparently by readers.

A Zarr float field may carry an ``encoding`` (:attr:`FieldSpec.encoding`, a flat JSON object).
Whatever it says, a reader returns float32 values of the field's per-unit ``shape``:

``quantize: "int8-absmax"``
    Values are stored as int8 ``q = round(127 x / m)`` with ``m = max |x|`` of each unit (row),
    and ``m`` is kept in the float32 array ``scale/<name>`` ``[units]``; decoding is
    ``x̂ = q m / 127``, so every value is within ``m / 254`` of the original.

``topk: N`` with ``fill``
    For per-unit distributions over the tag set (shape ``(T,)``): the N largest values of each
    unit are stored in ``<name>`` ``[units, N]`` and their tag indices in ``topk_index/<name>``
    (uint8 below 256 tags, uint16 above). The tags left out are rebuilt by one of two rules:

    * ``fill: "residual"`` (probabilities: CRF marginals): each missing tag gets
      ``max(0, 1 - Σ top-N) / (T - N)``: the row sums to 1 and the residual mass is spread
      evenly. The residual is computed from the stored values, not stored.
    * ``fill: "logmeanexp"`` (scores: emissions, logits): each missing tag gets
      ``f = log(mean(exp(x_missing)))``, one float32 per unit kept in ``fill/<name>``, computed at
      encoding time from the full row (no cancellation). The rebuilt row has the teacher's
      logsumexp, so its softmax equals the teacher's on the top N tags exactly and spreads the
      residual mass evenly over the rest; ``f`` is never above the smallest kept value, and it is
      finite, unlike ``-inf``, so a loss that regresses logits (XtremeDistil's MSE) stays defined.

``project_from: D`` and ``project_export: FILE``
    The values are PCA coefficients ``(x - μ) Cᵀ`` of the teacher's D-dimensional states; ``C``
    ``[N, D]`` and ``μ`` ``[D]`` are the tensors ``<name>.components`` and ``<name>.mean`` of the
    safetensors file ``FILE`` in the layer's exports. Readers return the coefficients (the stored
    space); :func:`reconstruct` maps them back (what a loss that is not invariant to a rotation of
    the hidden space needs: XtremeDistil's representation loss).

Combinations: ``project`` with ``quantize`` (PCA coefficients stored as int8); ``topk`` alone.
"""

from __future__ import annotations

import numpy as np

from .errors import FieldError

QUANTIZE = ("int8-absmax",)
FILLS = ("residual", "logmeanexp")
KEYS = ("quantize", "topk", "fill", "project_from", "project_export")


def check_encoding(spec) -> None:
    """Raise a :class:`FieldError` naming the field unless its encoding is one this version reads."""
    enc = spec.encoding
    if not enc:
        return
    where = f"field {spec.name!r}: encoding"
    unknown = sorted(set(enc) - set(KEYS))
    if unknown:
        raise FieldError(f"{where} has keys {unknown} this seqdistill does not know (known: {list(KEYS)}); upgrade it")
    if spec.storage != "zarr":
        raise FieldError(f"{where} applies to zarr fields only")
    if "quantize" in enc:
        if enc["quantize"] not in QUANTIZE:
            raise FieldError(f"{where} quantize {enc['quantize']!r} is not one of {QUANTIZE}")
        if spec.dtype != "int8":
            raise FieldError(f"{where} quantize stores int8 values; the field says dtype {spec.dtype!r}")
    elif spec.dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise FieldError(f"{where} applies to float fields")
    if "topk" in enc:
        k, fill = enc["topk"], enc.get("fill")
        if len(spec.shape) != 1 or not isinstance(k, int) or not 0 < k < spec.shape[0]:
            raise FieldError(f"{where} topk {k!r} must be an int in 1..{spec.shape[0] - 1 if spec.shape else '?'}")
        if fill not in FILLS:
            raise FieldError(f"{where} fill {fill!r} is not one of {FILLS}")
        if "quantize" in enc or "project_from" in enc:
            raise FieldError(f"{where} topk does not combine with quantize or project")
    elif "fill" in enc:
        raise FieldError(f"{where} fill is given without topk")
    if ("project_from" in enc) != ("project_export" in enc):
        raise FieldError(f"{where} project_from and project_export go together")
    if "project_from" in enc:
        d = enc["project_from"]
        if len(spec.shape) != 1 or not isinstance(d, int) or d < spec.shape[0]:
            raise FieldError(f"{where} project_from {d!r} must be an int >= the stored dimension {list(spec.shape)}")
        export = enc["project_export"]
        if not isinstance(export, str) or not export or export.startswith("/") or ".." in export.split("/"):
            raise FieldError(f"{where} project_export {export!r} is not a file name inside the layer's exports")


def describe(encoding: dict) -> str:
    """One line for ``distill-cache info``: e.g. ``pca 768->128, int8-absmax`` or ``top-8 (residual)``."""
    parts = []
    if "project_from" in encoding:
        parts.append(f"pca of {encoding['project_from']} dims")
    if "quantize" in encoding:
        parts.append(encoding["quantize"])
    if "topk" in encoding:
        parts.append(f"top-{encoding['topk']} ({encoding['fill']})")
    return ", ".join(parts)


def storage_shape(spec) -> tuple:
    """Per-unit shape of the stored values array."""
    k = (spec.encoding or {}).get("topk")
    return (k,) if k else tuple(spec.shape)


def aux_arrays(spec) -> dict[str, tuple[tuple, np.dtype]]:
    """The arrays beside the field's own in a shard's zarr group: path -> (per-unit shape, dtype)."""
    enc = spec.encoding or {}
    out = {}
    if "quantize" in enc:
        out[f"scale/{spec.name}"] = ((), np.dtype("float32"))
    if "topk" in enc:
        out[f"topk_index/{spec.name}"] = ((enc["topk"],), _index_dtype(spec.shape[0]))
        if enc["fill"] == "logmeanexp":
            out[f"fill/{spec.name}"] = ((), np.dtype("float32"))
    return out


def encode(values: np.ndarray, spec, to_storage) -> dict[str, np.ndarray]:
    """The arrays to store for float ``values`` ``[units, *shape]`` (the field's own under its name).
    ``to_storage`` casts floats to the field's stored dtype (fields.to_storage)."""
    enc = spec.encoding or {}
    if not enc:
        return {spec.name: to_storage(values, spec)}
    x = np.asarray(values, dtype=np.float32)
    if not np.isfinite(x).all():
        bad = int(np.argwhere(~np.isfinite(x).reshape(len(x), -1).all(axis=1))[0, 0])
        raise FieldError(f"field {spec.name!r}: unit {bad} holds NaN or inf, which its encoding cannot store")
    if "quantize" in enc:
        m = np.abs(x).reshape(len(x), -1).max(axis=1) if x.size else np.zeros(len(x), np.float32)
        safe = np.where(m > 0, m, 1.0).reshape(-1, *([1] * (x.ndim - 1)))
        q = np.clip(np.rint(x / safe * 127.0), -127, 127).astype(np.int8)
        return {spec.name: q, f"scale/{spec.name}": m.astype(np.float32)}
    if "topk" in enc:
        k = enc["topk"]
        idx = np.argsort(-x, axis=1, kind="stable")[:, :k]
        top = np.take_along_axis(x, idx, axis=1)
        out = {spec.name: to_storage(top, spec), f"topk_index/{spec.name}": idx.astype(_index_dtype(spec.shape[0]))}
        if enc["fill"] == "logmeanexp":
            missing = np.ones_like(x, dtype=bool)
            np.put_along_axis(missing, idx, False, axis=1)
            rest = np.where(missing, x, -np.inf)
            out[f"fill/{spec.name}"] = (_logsumexp(rest) - np.log(x.shape[1] - k)).astype(np.float32)
        return out
    return {spec.name: to_storage(x, spec)}  # projected values, stored as floats


def decode(arrays: dict[str, np.ndarray], spec, from_storage, where: str) -> np.ndarray:
    """Float32 values ``[units, *shape]`` from the stored arrays (checked against the field's
    metadata: an array of the wrong shape or an index out of range is refused, naming it)."""
    enc = spec.encoding or {}
    main = arrays[spec.name]
    n = len(main)
    for path, (shape, dtype) in aux_arrays(spec).items():
        a = arrays[path]
        if a.dtype != dtype or tuple(a.shape) != (n, *shape):
            raise FieldError(
                f"{where}/{path}: holds {a.dtype} {list(a.shape)}, field {spec.name!r} needs {dtype} {[n, *shape]} "
                "(hostile or damaged metadata; run `distill-cache verify`)"
            )
    if "quantize" in enc:
        scale = arrays[f"scale/{spec.name}"]
        if not np.isfinite(scale).all() or (scale < 0).any():
            raise FieldError(f"{where}/scale/{spec.name}: scales must be finite and >= 0")
        return (main.astype(np.float32) * (scale / 127.0).reshape(-1, *([1] * (main.ndim - 1)))).astype(np.float32)
    if "topk" in enc:
        t, k = spec.shape[0], enc["topk"]
        idx = arrays[f"topk_index/{spec.name}"].astype(np.int64)
        if idx.size and (idx.max() >= t):
            raise FieldError(f"{where}/topk_index/{spec.name}: tag index {int(idx.max())} is not below {t} tags")
        top = from_storage(main, spec).astype(np.float32)
        if enc["fill"] == "residual":
            rest = np.maximum(0.0, 1.0 - top.sum(axis=1)) / (t - k)
        else:
            rest = arrays[f"fill/{spec.name}"]
            if not np.isfinite(rest).all():
                raise FieldError(f"{where}/fill/{spec.name}: fill values must be finite")
        out = np.repeat(rest[:, None], t, axis=1).astype(np.float32)
        np.put_along_axis(out, idx, top, axis=1)
        return out
    if not enc:  # a plain field keeps its stored dtype (fp16 stays fp16; bf16 comes back as float32)
        return from_storage(main, spec)
    return from_storage(main, spec).astype(np.float32, copy=False)  # projected values


def reconstruct(coefficients: np.ndarray, components: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Teacher states ``x̂ = c C + μ`` from PCA coefficients ``c`` ``[units, N]``, ``C`` ``[N, D]``."""
    return coefficients @ components + mean


def fit_pca(states: np.ndarray, dim: int, seed: int = 0, max_rows: int = 20000) -> tuple[np.ndarray, np.ndarray, float]:
    """Components ``C`` ``[dim, D]``, mean ``μ`` ``[D]`` and the share of variance kept, from at
    most ``max_rows`` rows of ``states`` drawn with ``seed`` (SVD of the centred sample)."""
    x = np.asarray(states, dtype=np.float64)
    if len(x) > max_rows:
        x = x[np.sort(np.random.default_rng(seed).choice(len(x), max_rows, replace=False))]
    if len(x) < dim:
        raise FieldError(f"a PCA to {dim} dimensions needs at least {dim} states in its sample; it has {len(x)}")
    mean = x.mean(axis=0)
    _, s, vt = np.linalg.svd(x - mean, full_matrices=False)
    kept = float((s[:dim] ** 2).sum() / max((s**2).sum(), 1e-30))
    return vt[:dim].astype(np.float32), mean.astype(np.float32), kept


def project(states: np.ndarray, components: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """PCA coefficients ``(x - μ) Cᵀ``."""
    return (np.asarray(states, dtype=np.float32) - mean) @ components.T


def _index_dtype(num_tags: int) -> np.dtype:
    return np.dtype("uint8" if num_tags <= 256 else "uint16")


def _logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=1)
    return m + np.log(np.exp(x - m[:, None]).sum(axis=1))
