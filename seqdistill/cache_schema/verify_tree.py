"""``verify`` beyond the data files: the small JSON files the builder reads, and stray files.

The manifest lists every data file with its sha256, but a cache tree also holds files the
manifest does not checksum, which the builder reads when it adds a teacher or rewrites a lost
manifest (``layout.py``): each layer's header ``layer.json``, each shard's commit marker
``shard-NNNNN.json`` and a layer's ``exports.json``. Each one is checked in two ways:

1. **its content**: parsed with the classes the builder parses it with, it must equal the
   manifest's entry (a flipped digit, letter or key changes what the builder would read), and it
   may hold no key those classes would drop (a renamed key that the builder would silently
   ignore);
2. **its bytes**: they must be exactly ``json.dumps(parsed, indent=1) + "\\n"``, the one form the
   writer produces (a flipped byte in whitespace or structure that still parses is caught).

Markers may be absent (a cache copied without them is complete: the manifest is the commit point).

Every other file under the root is *stray* unless it is the manifest, the build lock of a build
in progress, or a file the manifest lists: a stray is a warning, an error with ``strict``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from .labels import LabelSchema
from .layout import exports_marker, layer_header, shard_marker
from .lock import LOCK
from .manifest import EXAMPLES_LAYER, MANIFEST, CorpusInfo, FileInfo, LayerInfo, Manifest, ShardInfo, TeacherInfo
from .storage import TMP_DIR, CacheStore


def check_markers(store: CacheStore, manifest: Manifest, report: Callable[[str, str], None]) -> None:
    """Report (``report(file, what)``) every header, shard marker and exports marker that differs
    from the manifest."""
    for layer in manifest.layers.values():
        _check_marker(store, layer_header(layer.name), _expected_header(manifest, layer), _parse_header, report)
        for shard in layer.shards:
            where = f"layer {layer.name!r}"
            _check_marker(
                store,
                shard_marker(layer.name, shard.index),
                shard.to_json(),
                lambda obj, where=where: ShardInfo.from_json(obj, where).to_json(),
                report,
            )
        _check_marker(
            store,
            exports_marker(layer.name),
            [f.to_json() for f in layer.exports],
            lambda obj, name=layer.name: [FileInfo.from_json(f, f"layer {name!r} exports").to_json() for f in obj],
            report,
        )


def stray_files(store: CacheStore, manifest: Manifest) -> list[tuple[str, str]]:
    """``(path, why)`` for every file under the root that belongs to no part of the cache.

    A layer directory the manifest does not name (an interrupted build of another teacher) is
    reported once, not file by file.
    """
    known = {MANIFEST, LOCK}
    for layer in manifest.layers.values():
        known |= {layer_header(layer.name), exports_marker(layer.name)}
        known |= {f.path for f in layer.exports}
        for shard in layer.shards:
            known.add(shard_marker(layer.name, shard.index))
            known |= {f.path for f in shard.files}
    out: list[tuple[str, str]] = []
    unknown_layers: dict[str, int] = {}
    for path in store.find(""):
        if path in known or _is_lock_file(path):
            continue
        parts = path.split("/")
        if parts[0] == "layers" and len(parts) > 2 and parts[1] not in manifest.layers:
            unknown_layers[parts[1]] = unknown_layers.get(parts[1], 0) + 1
        elif parts[0] == TMP_DIR:
            out.append((path, "staging file left by a killed build (the next build removes it)"))
        elif path.startswith(MANIFEST + ".tmp-") or ".tmp-" in parts[-1]:
            out.append((path, "temporary copy of a JSON file left by a killed build"))
        else:
            out.append((path, "not named by the manifest"))
    for name, n in sorted(unknown_layers.items()):
        out.append(
            (
                f"layers/{name}/",
                f"{n} file(s) of a layer the manifest does not name (an interrupted build of teacher "
                f"{name!r}: run that build again to finish it, or delete the directory)",
            )
        )
    return out


def _is_lock_file(path: str) -> bool:
    """The lock of a build in progress, and the temporary files it writes the lock through."""
    return path == LOCK or path.startswith(LOCK + ".")


def _expected_header(manifest: Manifest, layer: LayerInfo) -> dict:
    """What the builder wrote as ``layer.json`` for ``layer`` (writer.CacheWriter.*_layer)."""
    head = LayerInfo(layer.name, layer.kind, layer.fields, teacher=layer.teacher).to_json(False)
    if layer.name == EXAMPLES_LAYER:
        return {
            "layer": head,
            "label_schema": manifest.label_schema.to_json(),
            "corpora": [c.to_json() for c in manifest.corpora],
            "num_shards": manifest.num_shards,
        }
    return {"layer": head, "teacher": manifest.teachers[layer.teacher].to_json()}


def _parse_header(obj: dict) -> dict:
    """A ``layer.json`` as the builder reads it (normalised through the manifest's classes)."""
    layer = LayerInfo.from_json(obj["layer"])
    out = {"layer": LayerInfo(layer.name, layer.kind, layer.fields, teacher=layer.teacher).to_json(False)}
    if "teacher" in obj:
        out["teacher"] = TeacherInfo.from_json(obj["teacher"]).to_json()
    else:
        out["label_schema"] = LabelSchema.from_json(obj["label_schema"]).to_json()
        out["corpora"] = [CorpusInfo.from_json(c).to_json() for c in obj["corpora"]]
        out["num_shards"] = int(obj["num_shards"])
    return out


def _check_marker(store: CacheStore, rel: str, expected, parse, report) -> None:
    if not store.exists(rel):
        return
    raw = store.read_bytes(rel)
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        report(rel, f"not valid JSON ({e}); the builder cannot read it")
        return
    try:
        parsed = parse(obj)
    except Exception as e:  # any structural damage: a missing key, a wrong type, a bad path
        report(rel, f"unreadable as the builder reads it ({type(e).__name__}: {e})")
        return
    if parsed != expected:
        report(rel, f"differs from the manifest ({_first_difference(parsed, expected)})")
    elif (extra := _not_kept(obj, parsed)) is not None:
        report(rel, f"holds {extra}")
    elif raw != (json.dumps(obj, indent=1) + "\n").encode("utf-8"):
        report(rel, "its bytes are not the form the builder writes (a damaged byte in its layout)")


def _not_kept(raw, parsed, path: str = "") -> str | None:
    """The first place where ``raw`` says something its normalised form ``parsed`` does not: a
    key the parse drops, or a value it recomputes (a shard's ``bytes``). ``parsed`` may add keys
    (defaults of keys that older writers did not write)."""
    if isinstance(raw, dict) and isinstance(parsed, dict):
        for k, v in raw.items():
            if k not in parsed:
                return f"key {path}{k}, which the builder would ignore"
            found = _not_kept(v, parsed[k], f"{path}{k}.")
            if found:
                return found
        return None
    if isinstance(raw, list) and isinstance(parsed, list) and len(raw) == len(parsed):
        for i, (a, b) in enumerate(zip(raw, parsed)):
            found = _not_kept(a, b, f"{path}{i}.")
            if found:
                return found
        return None
    if raw != parsed:
        return f"{path.rstrip('.')} = {_short(raw)}, which the builder reads as {_short(parsed)}"
    return None


def _first_difference(a, b, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"key {path}{k} only in {'the manifest' if k in b else 'this file'}"
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], f"{path}{k}.")
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path.rstrip('.')}: {len(a)} entries, the manifest has {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}{i}.")
    return f"{path.rstrip('.') or 'value'} is {_short(a)}, the manifest says {_short(b)}"


def _short(v) -> str:
    s = json.dumps(v)
    return s if len(s) <= 60 else s[:57] + "..."
