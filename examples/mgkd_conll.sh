#!/usr/bin/env bash
# Paper 000's Table 1 on full CoNLL-2003 with the MiniLM-L6+CRF teacher (docs/RESULTS.md).
#   TEACHER=.data/teachers/minilm-crf-conll WIKI=10000 EPOCHS=30 examples/mgkd_conll.sh
# The teacher comes from `distill-cache finetune-teacher` (the command is in docs/RESULTS.md); the cache
# from examples/conll_cache.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
TEACHER=${TEACHER:-.data/teachers/minilm-crf-conll}
WIKI=${WIKI:-10000}
EPOCHS=${EPOCHS:-30}
OUT=${OUT:-.data/mgkd-conll}
VARIANTS=${VARIANTS:-"vanilla te te-em te-pos te-seq te-da te-da-seq"}
export TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
TEACHER=$TEACHER WIKI=$WIKI examples/conll_cache.sh
CACHE=${DATA:-.data/conll}/cache
D=$($BIN/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('neuroner').origin).parent / 'data/conll2003/en')")
train() {  # name, then distill-train options
  local name=$1; shift
  [ -f "$OUT/$name/training.json" ] && return 0
  $BIN/distill-train --cache "$CACHE" --out "$OUT/$name" --epochs "$EPOCHS" --device cpu "$@" > "$OUT/$name.log" 2>&1
}
for v in $VARIANTS; do
  case $v in
    vanilla)   train vanilla   --losses hard --no-unlabelled --embedding random ;;
    te)        train te        --losses hard --no-unlabelled ;;
    te-em)     train te-em     --losses hard,token-em --no-unlabelled ;;
    te-pos)    train te-pos    --losses hard,token-pos --no-unlabelled ;;
    te-seq)    train te-seq    --losses hard,seq-ce,fuzzy --k 5 --no-unlabelled ;;
    te-da)     train te-da     --losses hard ;;
    te-da-seq) train te-da-seq --losses hard,seq-ce,fuzzy --k 5 ;;
    svd-da-seq) train svd-da-seq --losses hard,seq-ce,fuzzy --k 5 --embedding svd --embedding-dim 100 ;;
  esac
done
[ -n "${NO_EVAL:-}" ] && exit 0  # train only (score later, on a quiet machine)
models=("$TEACHER"); for v in $VARIANTS; do models+=("$OUT/$v"); done
args=(); for m in "${models[@]}"; do args+=(--model "$m"); done
$BIN/distill-eval "${args[@]}" --data "$D/test.txt" | tee "$OUT/eval.md"
