"""A summary of a cache for people (``distill-cache info``) and programs (``--json``)."""

from __future__ import annotations

from .encodings import describe
from .manifest import Manifest


def cache_summary(manifest: Manifest) -> dict:
    """Corpora, teachers, fields with bytes per word, shards; all from the manifest alone."""
    words = max(manifest.num_words, 1)
    layers = []
    for layer in manifest.layers.values():
        per_field = {}
        for s in layer.shards:
            for name, b in s.field_bytes.items():
                per_field[name] = per_field.get(name, 0) + b
        layers.append(
            {
                "name": layer.name,
                "kind": layer.kind,
                "teacher": layer.teacher,
                "bytes": sum(s.bytes for s in layer.shards),
                "fields": [
                    {
                        **f.to_json(),
                        "bytes": per_field.get(f.name, 0),
                        "bytes_per_word": round(per_field.get(f.name, 0) / words, 2),
                    }
                    for f in layer.fields
                ],
            }
        )
    return {
        "format_version": manifest.format_version,
        "tool_version": manifest.tool_version,
        "label_schema": manifest.label_schema.to_json(),
        "examples": manifest.num_examples,
        "words": manifest.num_words,
        "shards": manifest.num_shards,
        "bytes": sum(lay["bytes"] for lay in layers),
        "corpora": [c.to_json() for c in manifest.corpora],
        "teachers": [t.to_json() for t in manifest.teachers.values()],
        "layers": layers,
    }


def format_summary(s: dict) -> str:
    schema = s["label_schema"]
    lines = [
        f"seqdistill cache, format v{s['format_version']} (written by seqdistill {s['tool_version']})",
        f"{s['examples']:,} examples, {s['words']:,} words in {s['shards']} shards, {_size(s['bytes'])}",
        f"labels: {schema['scheme']} over {', '.join(schema['entity_types']) or '(no types)'} "
        f"({len(schema['tags'])} tags)",
        "",
        "corpora:",
    ]
    for c in s["corpora"]:
        kind = "labelled" if c["labelled"] else "unlabelled"
        lines.append(
            f"  {c['name'] + '/' + c['split']:<24} {kind:<10} {c['examples']:>9,} examples "
            f"{c['words']:>10,} words  sha256 {c['sha256'][:12]}  {c['source']}"
        )
    lines += ["", "teachers:"] if s["teachers"] else []
    for t in s["teachers"]:
        fp = ", ".join(f"{k} {v[:12]}" for k, v in sorted(t["fingerprints"].items()))
        lines.append(
            f"  {t['id']}: {t['kind']}, pooling {t['pooling']}, hidden layers "
            f"{t['hidden_layers'] or 'none'}, decoding {t['decoding'] or '-'}; {fp}"
        )
    for layer in s["layers"]:
        lines += ["", f"layer {layer['name']} ({layer['kind']}, {_size(layer['bytes'])}):"]
        for f in layer["fields"]:
            shape = "x".join(str(d) for d in f["shape"]) or "scalar"
            enc = describe(f["encoding"]) if f.get("encoding") else ""
            lines.append(
                f"  {f['name']:<20} {f['level']:<8} {f['dtype']:<9} {shape:<12} {f['storage']:<8}"
                f" {f['bytes_per_word']:>10.2f} B/word" + (f"  {enc}" if enc else "")
            )
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"
