#!/usr/bin/env bash
# Issue 81: the papers' headlines at their own scale, from the converged MPNet-base + CRF teacher on
# full CoNLL-2003 and all 36,384 Wikipedia sentences. Resumable, each step skipped once done:
#   examples/headlines_conll.sh                       # teacher, cache, then every row of ROWS x SEEDS
#   ROWS=bilstm SEEDS="14 15" examples/headlines_conll.sh
# 1. The teacher: examples/mpnet_conll_teacher.sh (3 epochs, bf16; about 55 min on a 2-core AMD EPYC),
#    when .data/teachers/mpnet-crf-conll has no training.json.
# 2. Its cache (item 1), examples/mpnet_conll_cache.sh into $OUT/cache: k-best 10 and marginals as
#    examples/table1_conll.sh's, plus hidden layers 3, 6, 9, 12 (MT-BERT's layers T*j for a 4-layer
#    student of a 12-layer teacher, recipes/mt.py) and 7 (XtremeDistil's layer, as issue 22's cache),
#    stored in issue 23's compact form (PCA-128 + int8: 13.7x smaller than fp16, students within 0.15
#    F1 of fp16's; docs/BENCHMARKS.md "Compact caches"), and the teacher's first 4 encoder layers (EXPORT_LAYERS=4),
#    which a 4-layer MT-BERT student starts from (item 4). The MGKD students read none of them.
# 3. The students (item 2), `distill-train mgkd`, each until dev F1 stops rising (patience 5, paper 000
#    §5.3, under a cap of EPOCHS=40 that a run must not reach; the log says when one did):
#      bilstm   paper 000's own student: --arch bilstm-crf --chars (its defaults: lr 1e-3, dropout 0.5)
#      default  the window CNN-CRF with chars, no flags
#      xd       XtremeDistil row X (item 3): `distill-train xtremedistil`, paper 001's stage-wise schedule with
#               gradual unfreezing (d4.2), E = 50 (the SVD of the teacher's table), H = 2 x 200, from hidden
#               layer 7; each unfreezing step until its metric stops rising (patience 2: validation loss for
#               RL and LL, dev F1 for CE, --select dev-f1) under a cap of XD_EPOCHS=30 a step that no step
#               may reach (the run's metrics.jsonl shows each step's epochs)
#      bilstm-glove  the one change item 2's seen/unseen table points to (its shortfall against the teacher
#               is on unseen ORG and PER, which GloVe lifted in the default): bilstm with every GloVe word as a
#               word feature (--word-vectors, examples/get_glove.sh)
#    one torch thread a run, JOBS=2 runs at a time. ROWS="xd" SEEDS="13 14 15" runs item 3 alone.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=${OUT:-.data/headlines}
CACHE=$OUT/cache
TEACHER=.data/teachers/mpnet-crf-conll
EPOCHS=${EPOCHS:-40}
ROWS=${ROWS:-"bilstm default"}
SEEDS=${SEEDS:-"13 14 15"}
JOBS=${JOBS:-2}
export TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
[ -f "$TEACHER/training.json" ] || examples/mpnet_conll_teacher.sh > "$OUT/teacher.log" 2>&1
TEACHER=$TEACHER CACHE=$CACHE WIKI=36385 LAYERS=3,6,7,9,12 HIDDEN_FLAGS="--hidden-project 128 --hidden-dtype int8" \
  EXPORT_LAYERS=4 PRECISION=bf16 examples/mpnet_conll_cache.sh > "$OUT/cache.log" 2>&1
XD_EPOCHS=${XD_EPOCHS:-30}
# --teacher mpnet: the cache also holds Gemma's layer once examples/two_teachers_conll.sh has run
flags() {  # the recipe, then its flags
  case $1 in
    bilstm) echo mgkd --teacher mpnet --arch bilstm-crf --chars --epochs "$EPOCHS" --patience 5 ;;
    bilstm-glove) echo mgkd --teacher mpnet --arch bilstm-crf --chars --word-vectors "$(examples/get_glove.sh)" \
      --epochs "$EPOCHS" --patience 5 ;;
    default) echo mgkd --teacher mpnet --epochs "$EPOCHS" --patience 5 ;;
    xd) echo xtremedistil --teacher mpnet --schedule d4.2 --embedding svd --embedding-dim 50 --hidden-size 200 --teacher-layer 7 \
      --epochs-per-step "$XD_EPOCHS" --patience 2 --select dev-f1 ;;
    *) echo "unknown row $1" >&2; exit 2 ;;
  esac
}
run() {  # row seed
  local name=$1-s$2
  [ -f "$OUT/$name/training.json" ] && return 0
  # shellcheck disable=SC2046
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $BIN/distill-train $(flags "$1") --cache "$CACHE" --out "$OUT/$name" \
    --seed "$2" --device cpu > "$OUT/$name.log" 2>&1
}
. examples/run_rows.sh  # every row's flags checked, then ROWS x SEEDS, JOBS at a time
run_rows
