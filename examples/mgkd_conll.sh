#!/usr/bin/env bash
# Paper 000's Table 1 on full CoNLL-2003 with the MiniLM-L6+CRF teacher (docs/RESULTS.md).
#   TEACHER=.data/teachers/minilm-crf-conll WIKI=10000 EPOCHS=30 examples/mgkd_conll.sh
# The teacher comes from `distill-cache finetune-teacher` (the command is in docs/RESULTS.md); the cache
# from examples/conll_cache.sh, or CACHE=DIR for one built already (examples/mpnet_conll_cache.sh:
#   CACHE=.data/mpnet/cache TEACHER=.data/teachers/mpnet-crf-conll-e1 OUT=.data/mgkd-mpnet examples/mgkd_conll.sh).
# Variants NAME-chars add the student's byte CNN (--chars). The variants of docs/RESULTS.md's tables
# use eq. 9's learned loss weights (--weighting uncertainty, the paper's); te-da-seq-fixed is the MGKD
# student with eq. 8's fixed weights, distill-train's default since issue 22; te-da-seq-fixed-tT
# (te-da-seq-fixed-t0.5, ...) that student with the teacher's K paths at temperature T.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
TEACHER=${TEACHER:-.data/teachers/minilm-crf-conll}
WIKI=${WIKI:-10000}
EPOCHS=${EPOCHS:-30}
OUT=${OUT:-.data/mgkd-conll}
SEED=${SEED:-13}  # runs of another seed are named NAME-sSEED
VARIANTS=${VARIANTS:-"vanilla te te-em te-pos te-seq te-da te-da-seq"}
export TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
if [ -z "${CACHE:-}" ]; then
  TEACHER=$TEACHER WIKI=$WIKI examples/conll_cache.sh
  CACHE=${DATA:-.data/conll}/cache
fi
D=$($BIN/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('neuroner').origin).parent / 'data/conll2003/en')")
train() {  # name, then distill-train options
  local name=$1; shift
  [ "$SEED" != 13 ] && name=$name-s$SEED
  [ -f "$OUT/$name/training.json" ] && return 0
  $BIN/distill-train --cache "$CACHE" --out "$OUT/$name" --epochs "$EPOCHS" --seed "$SEED" --device cpu "$@" > "$OUT/$name.log" 2>&1
}
eq9=(--weighting uncertainty)  # the paper's learned loss weights, as RESULTS' tables were made
for v in $VARIANTS; do
  chars=(); base=$v
  if [[ $v == *-chars ]]; then chars=(--chars); base=${v%-chars}; fi
  case $base in
    vanilla) train "$v" --losses hard --no-unlabelled --embedding random "${chars[@]}" ;;
    te) train "$v" --losses hard --no-unlabelled "${chars[@]}" ;;
    te-em) train "$v" --losses hard,token-em --no-unlabelled "${eq9[@]}" "${chars[@]}" ;;
    te-pos) train "$v" --losses hard,token-pos --no-unlabelled "${eq9[@]}" "${chars[@]}" ;;
    te-seq) train "$v" --losses hard,seq-ce,fuzzy --k 5 --no-unlabelled "${eq9[@]}" "${chars[@]}" ;;
    te-da) train "$v" --losses hard "${chars[@]}" ;;
    te-da-seq) train "$v" --losses hard,seq-ce,fuzzy --k 5 "${eq9[@]}" "${chars[@]}" ;;
    te-da-seq-fixed-t*) train "$v" --losses hard,seq-ce,fuzzy --k 5 --weighting fixed \
      --seq-temperature "${base#te-da-seq-fixed-t}" "${chars[@]}" ;;
    te-da-seq-fixed) train "$v" --losses hard,seq-ce,fuzzy --k 5 --weighting fixed "${chars[@]}" ;;
    svd-da-seq) train "$v" --losses hard,seq-ce,fuzzy --k 5 --embedding svd --embedding-dim 100 "${eq9[@]}" "${chars[@]}" ;;
  esac
done
[ -n "${NO_EVAL:-}" ] && exit 0  # train only (score later, on a quiet machine)
suffix=""; [ "$SEED" != 13 ] && suffix=-s$SEED
models=("$TEACHER"); for v in $VARIANTS; do models+=("$OUT/$v$suffix"); done
args=(); for m in "${models[@]}"; do args+=(--model "$m"); done
$BIN/distill-eval "${args[@]}" --data "$D/test.txt" | tee "$OUT/eval.md"
