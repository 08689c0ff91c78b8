#!/usr/bin/env bash
# Span-confidence calibration of every student kind (issue 37, item 2; docs/RESULTS.md): ECE on the
# full CoNLL-2003 test set before and after a temperature fitted on the full dev set.
#   examples/calibration_kinds.sh            # after `make demo` (and, for SenTScore students,
#                                            # examples/sentscore_conll.sh with TEACHER=gemma)
# Kinds and where their confidence comes from (seqdistill/deploy/calibration.py):
#   - BiLSTM-CRF students (make demo's vanilla and MGKD): mean CRF marginal of the span's tags;
#   - XtremeDistil (softmax over subwords, first subword of each word) and token-KD (softmax over
#     words) students trained here from make demo's cache: mean softmax probability;
#   - SenTScore BiLSTM students (softmax) of the Gemma 3 270M teacher, when SENTSCORE names their run.
# Budget decisions (2 CPU cores): the students trained here get a few epochs (XD_EPS, KD_EPOCHS;
# XtremeDistil in batches of 32, as examples/xtremedistil_conll.sh and for its reason);
# calibration does not need a strong model, only a real one. Models are copied to OUT
# so the fitted calibration.json lands beside the copies, not in make demo's models.
#   - a transformer student (mt recipe, paper 002; CRF head: mean CRF marginal), MT_LAYERS (2)
#     layers started from make demo's teacher's first layers: make demo's cache exports none, so a
#     second cache (OUT/layers-cache) over the same corpora as make demo's cache (train, dev, test,
#     unlabelled Wikipedia), from make demo's teacher, holds them, and the teacher's hidden layers
#     T, 2T ... for MT-Hid (T = the teacher's layers / K: 3 and 6 for MiniLM-L6). The same corpora
#     matter: the student keeps the embedding rows of the subwords its cache's corpora use
#     (vocabulary.py), and over train and dev alone 14% of the test words have a subword outside
#     them, read through the UNK row (docs/RESULTS.md).
# Not here: the CNN + SRU students with a BILOU head per type, which need a bilou-per-type teacher
# and its cache (examples/rnn_conll.sh, about an hour of teacher fine-tuning on this CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
DEMO=${DEMO:-.data/demo}
OUT=${OUT:-.data/calibration-kinds}
SENTSCORE=${SENTSCORE:-.data/sentscore-conll-gemma/g100-s250-e10}
export TOKENIZERS_PARALLELISM=false
D=$($BIN/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('neuroner').origin).parent / 'data/conll2003/en')")
[ -f "$DEMO/cache/manifest.json" ] || { echo "no $DEMO/cache: run make demo first" >&2; exit 2; }
mkdir -p "$OUT"
train() {  # name, recipe, then options; skipped when finished
  local name=$1 recipe=$2; shift 2
  [ -f "$OUT/$name/training.json" ] && return 0
  $BIN/distill-train "$recipe" --cache "$DEMO/cache" --out "$OUT/$name" --device cpu "$@" > "$OUT/$name.log" 2>&1
}
train xtremedistil-d1 xtremedistil --schedule d1 --embedding-dim 100 --hidden-size 200 --epochs-per-step "${XD_EPS:-3}" --patience 1 --batch-size 32
train token-kd token-kd --temperature 2 --epochs "${KD_EPOCHS:-5}"
MT_LAYERS=${MT_LAYERS:-2}
TL=$($BIN/python -c "import json; print(json.load(open('$DEMO/teacher/config.json'))['num_hidden_layers'])")
[ -f "$OUT/layers-cache/manifest.json" ] ||
  $BIN/distill-cache build --out "$OUT/layers-cache" --teacher "$DEMO/teacher" --teacher-id teacher \
  --labelled "conll=$DEMO/train.txt@train" --labelled "conll=$DEMO/dev.txt@dev" --labelled "conll=$DEMO/test.txt@test" \
  --unlabelled "wiki=$DEMO/wiki.txt" --export-layers "$MT_LAYERS" \
  --hidden-layers "$(seq -s, $((TL / MT_LAYERS)) $((TL / MT_LAYERS)) "$TL")" --device cpu > "$OUT/layers-cache.log" 2>&1
[ -f "$OUT/transformer-k$MT_LAYERS/training.json" ] ||
  $BIN/distill-train mt --cache "$OUT/layers-cache" --out "$OUT/transformer-k$MT_LAYERS" --student-layers "$MT_LAYERS" \
  --epochs "${MT_EPOCHS:-3}" --device cpu > "$OUT/transformer-k$MT_LAYERS.log" 2>&1
MODELS=()
for m in vanilla mgkd; do
  [ -d "$OUT/$m" ] || cp -r "$DEMO/$m" "$OUT/$m"
  MODELS+=("$OUT/$m")
done
MODELS+=("$OUT/xtremedistil-d1" "$OUT/token-kd" "$OUT/transformer-k$MT_LAYERS")
if [ -d "$SENTSCORE/kd" ]; then
  for m in pseudo kd pseudo-s14 kd-s14 pseudo-s15 kd-s15; do
    [ -d "$SENTSCORE/$m" ] || continue
    [ -d "$OUT/sentscore-$m" ] || cp -r "$SENTSCORE/$m" "$OUT/sentscore-$m"
    MODELS+=("$OUT/sentscore-$m")
  done
fi
ARGS=(); for m in "${MODELS[@]}"; do ARGS+=(--model "$m"); rm -f "$m/calibration.json"; done  # "before" is T = 1
$BIN/distill-eval "${ARGS[@]}" --data "$D/test.txt" --calibration --fit-temperature "$D/valid.txt" \
  --plot-dir "$OUT/plots" --json > "$OUT/calibration.json"
$BIN/distill-eval "${ARGS[@]}" --data "$D/test.txt" --no-latency --json > "$OUT/f1.json"
$BIN/python - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
f1 = {Path(r["model"]).name: r["f1"] for r in json.loads((out / "f1.json").read_text())}
print("| model | test F1 | predicted spans | ECE at T = 1 | T fitted on dev | ECE on dev at T | ECE on test at T |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r in json.loads((out / "calibration.json").read_text()):
    name = Path(r["model"]).name
    print(f"| {name} | {100 * f1[name]:.2f} | {r['spans']:,} | {r['ece']:.4f} | {r['fitted_temperature']:.3g} "
          f"| {r['dev_ece']:.4f} | {r['ece_after']:.4f} |")
EOF
