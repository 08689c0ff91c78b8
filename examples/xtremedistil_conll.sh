#!/usr/bin/env bash
# Paper 001's Table 3 (strategies D0-D4.2) on full CoNLL-2003 with the MiniLM-L6+CRF teacher and
# Wikipedia as transfer data, from the cache of examples/conll_cache.sh (docs/RESULTS.md).
#   E=100 H=200 EPS=3 SCHEDULES="d0 d1 d2 d3.1 d3.2 d4.1 d4.2" examples/xtremedistil_conll.sh
# CACHE=DIR trains from a cache built already (LAYER must be one of its hidden layers), e.g. the
# MPNet-base one of examples/mpnet_conll_cache.sh:
#   CACHE=.data/mpnet/cache LAYER=7 TEACHER=.data/teachers/mpnet-crf-conll-e1 OUT=.data/xd-mpnet \
#     SCHEDULES=d4.2 examples/xtremedistil_conll.sh
# E, H: the student's embedding dimension and LSTM units per direction; EPS: most epochs per stage
# or unfreezing step (patience 1 on the validation loss); BATCH: sentences per batch, 32 here and
# not the paper's 512 (Table 12), which was for 7.2M transfer sentences: on our 25k, 512 leaves 49
# updates an epoch, and a D1 student trained that way reached 33 dev F1 after 8 epochs.
# SELECT=dev-f1: the steps that train on labels keep and stop on dev F1 (--select; runs named NAME-f1).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
TEACHER=${TEACHER:-.data/teachers/minilm-crf-conll}
E=${E:-100}
H=${H:-200}
EPS=${EPS:-3}
BATCH=${BATCH:-32}
LAYER=${LAYER:-4}
SELECT=${SELECT:-val-loss}
SFX=""; if [ "$SELECT" = dev-f1 ]; then SFX=-f1; fi
OUT=${OUT:-.data/xd-conll}
SCHEDULES=${SCHEDULES:-"d0 d1 d2 d3.1 d3.2 d4.1 d4.2"}
export TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
if [ -z "${CACHE:-}" ]; then
  TEACHER=$TEACHER LAYERS=$LAYER examples/conll_cache.sh
  CACHE=${DATA:-.data/conll}/cache
fi
D=$($BIN/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('neuroner').origin).parent / 'data/conll2003/en')")
for s in $SCHEDULES; do
  name=$s-e$E-h$H$SFX
  [ -f "$OUT/$name/training.json" ] && continue
  $BIN/distill-train --cache "$CACHE" --out "$OUT/$name" --recipe xtremedistil --schedule "$s" \
    --teacher-layer "$LAYER" --embedding-dim "$E" --hidden-size "$H" --epochs-per-step "$EPS" --patience 1 --select "$SELECT" \
    --batch-size "$BATCH" \
    --device cpu > "$OUT/$name.log" 2>&1
done
[ -n "${NO_EVAL:-}" ] && exit 0  # train only (score later, on a quiet machine)
models=("$TEACHER"); for s in $SCHEDULES; do models+=("$OUT/$s-e$E-h$H$SFX"); done
args=(); for m in "${models[@]}"; do args+=(--model "$m"); done
$BIN/distill-eval "${args[@]}" --data "$D/test.txt" | tee "$OUT/eval-e$E-h$H.md"
