#!/usr/bin/env bash
# Run one example grid (examples/grids/NAME.toml) over a CoNLL-2003 cache and commit-ready outputs:
# the sweep's runs under .data/sweeps/NAME, its table in docs/sweeps/NAME.md and its plots in
# docs/sweeps/NAME/ (dev F1 against every numeric axis, latency and parameters; teacher dashed).
#   examples/sweeps_conll.sh mgkd_unlabelled          # CACHE defaults to examples/conll_cache.sh's
#   CACHE=.data/rnn-conll/cache examples/sweeps_conll.sh rnn_cells
# JOBS runs at once (default 1: on 2 cores, two runs at once are no faster). TEACHER_F1: the
# teacher's dev F1 for the dashed line (default: read from the cache's teacher directory record).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
NAME=${1:?usage: examples/sweeps_conll.sh GRID_NAME (one of examples/grids/*.toml)}
CACHE=${CACHE:-.data/conll/cache}
OUT=${OUT:-.data/sweeps/$NAME}
export TOKENIZERS_PARALLELISM=false
[ -d "$CACHE" ] || { echo "no cache at $CACHE: build it first (examples/conll_cache.sh)" >&2; exit 1; }
$BIN/distill-train sweep --cache "$CACHE" --grid "examples/grids/$NAME.toml" --out "$OUT" --jobs "${JOBS:-1}"
TEACHER_F1=${TEACHER_F1:-$($BIN/python - "$CACHE" <<'PY'
import json, pathlib, sys
m = json.loads((pathlib.Path(sys.argv[1]) / "manifest.json").read_text())
src = pathlib.Path(m["teachers"][0]["source"]) / "training.json"
print(round(100 * json.loads(src.read_text())["best_dev_f1"], 2) if src.exists() else "")
PY
)}
mkdir -p "docs/sweeps/$NAME"
# a written reading (from the line starting "Reading (" on) survives regenerating the table
READING=$([ -f "docs/sweeps/$NAME.md" ] && sed -n '/^Reading (/,$p' "docs/sweeps/$NAME.md" || true)
{
  echo "# Sweep: $NAME"
  echo
  echo "Command: \`CACHE=$CACHE examples/sweeps_conll.sh $NAME\` (grid: \`examples/grids/$NAME.toml\`)."
  echo "Machine: $(getconf _NPROCESSORS_ONLN) CPU cores, $(date -u +%Y-%m-%d). Dev F1 is each run's best epoch; latency is"
  echo "the median ms/sentence at batch 32 on the cache's first 256 dev sentences, measured after all runs."
  [ -n "$TEACHER_F1" ] && echo "Teacher dev F1: $TEACHER_F1."
  echo
  $BIN/distill-train report "$OUT" --plots ${TEACHER_F1:+--teacher-f1 "$TEACHER_F1"} | grep -v '^plot: '
  echo
  for p in "$OUT"/f1_vs_*.png; do cp "$p" "docs/sweeps/$NAME/"; echo "![$(basename "$p" .png)]($NAME/$(basename "$p"))"; done
  if [ -n "$READING" ]; then echo; echo "$READING"; fi
} > "docs/sweeps/$NAME.md"
cat "docs/sweeps/$NAME.md"
