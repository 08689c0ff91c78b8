#!/usr/bin/env bash
# Issue 81, items 4-5: two converged teachers (MPNet-base + CRF and EmbeddingGemma-300M + CRF) over one
# cache, MT-BERT's student of both against each teacher's own, and the default MGKD student of both
# (`mgkd --teachers`) against each teacher's. Run after examples/headlines_conll.sh has built its cache.
#   examples/two_teachers_conll.sh                         # teacher, layer, then every row x SEEDS
#   ROWS="mgkd-two mgkd-gemma" SEEDS=13 examples/two_teachers_conll.sh
# 1. The Gemma teacher: examples/embeddinggemma_conll_teacher.sh (3 epochs, bf16; about 87 min on a
#    2-core AMD EPYC) when it has no training.json.
# 2. Its layer in examples/headlines_conll.sh's cache (.data/headlines/cache): k-best 10, marginals and
#    hidden layers 6, 12, 18, 24 (T*j of a 4-layer student of a 24-layer teacher), PCA-128 + int8.
# 3. The rows, one torch thread each, JOBS=2 at a time (MPNet alone: headlines_conll.sh's default rows):
#      mt-both     distill-train mt --teachers mpnet,embeddinggemma: MT-Hid and MT-Dis (eq. 1-3), a
#                  4-layer transformer started from MPNet's first 4 layers (the paper's co-fine-tuning
#                  is not run: the two converged teachers are used as they are)
#      mt-mpnet    the same student from MPNet alone; mt-gemma the same from Gemma alone (MPNet's layers
#                  and tokenizer to start from, so that only the teachers differ)
#      mgkd-two    the default student of both teachers' paths (--teachers embeddinggemma,mpnet, eq. 2
#                  shares), reading MPNet's table (--embeddings-teacher mpnet)
#      mgkd-gemma  the default student of Gemma's paths over MPNet's table (issue 72's best teacher)
#      mgkd-two-conf  mgkd-two with --teacher-shares confidence: each teacher's share of a row is its
#                  probability of its own best path, normalised, on the Wikipedia rows too (where eq. 2
#                  shares evenly; benchmarks/teachers_disagree.py: the best paths differ on 36.6% of them)
#      mgkd-two-glove, mgkd-gemma-glove, mgkd-two-conf-glove   the same three with every GloVe word
#                  (--projection 64)
#      xd-gemma    item 3's one Gemma seed: headlines_conll.sh's xd row from Gemma's layer, its hidden
#                  layer 12 of 24 (the cached layer nearest MPNet's 7 of 12; 6, 12, 18, 24 are cached), E = 50
#                  from the SVD of Gemma's table (its rows for the cache's subwords), and --hidden-norm
#                  standardize: Gemma's states make eq. 6's softmax one-hot on one huge dimension, MPNet's
#                  do not (recipes/xtremedistil.py); one seed, not in the default ROWS: ROWS=xd-gemma SEEDS=13
#    mgkd rows: at most EPOCHS=40 epochs, patience 5; mt rows: at most MT_EPOCHS=20, patience 3, each step in
#    bf16 autocast (--precision bf16: the 4-layer student's step 1.9x faster on an AVX512-BF16 CPU; BENCHMARKS).
#    The mt rows train on the 14,041 gold sentences alone (--no-unlabelled), as paper 002 trains on its tasks'
#    training sets (no transfer text); the mgkd rows on the gold and the 36,384 Wikipedia sentences.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=${OUT:-.data/headlines}
CACHE=$OUT/cache
TEACHER=.data/teachers/embeddinggemma-crf-conll
EPOCHS=${EPOCHS:-40}
MT_EPOCHS=${MT_EPOCHS:-20}
XD_EPOCHS=${XD_EPOCHS:-30}
ROWS=${ROWS:-"mgkd-two mgkd-gemma mgkd-two-conf mt-both mt-mpnet mt-gemma mgkd-two-glove mgkd-gemma-glove mgkd-two-conf-glove"}
SEEDS=${SEEDS:-"13 14 15"}
JOBS=${JOBS:-2}
export TOKENIZERS_PARALLELISM=false
[ -f "$CACHE/manifest.json" ] || { echo "no cache in $CACHE: run examples/headlines_conll.sh first" >&2; exit 1; }
[ -f "$TEACHER/training.json" ] || examples/embeddinggemma_conll_teacher.sh > "$OUT/teacher-gemma.log" 2>&1
TEACHER=$TEACHER TEACHER_ID=embeddinggemma CACHE=$CACHE WIKI=36385 LAYERS=6,12,18,24 \
  HIDDEN_FLAGS="--hidden-project 128 --hidden-dtype int8" PRECISION=bf16 examples/mpnet_conll_cache.sh \
  >> "$OUT/cache-gemma.log" 2>&1
GLOVE=$(examples/get_glove.sh)
MGKD="mgkd --epochs $EPOCHS --patience 5"
MT="mt --student-layers 4 --init-from mpnet --epochs $MT_EPOCHS --patience 3 --precision bf16 --no-unlabelled"
flags() {  # the recipe, then its flags
  case $1 in
    mgkd-two) echo "$MGKD" --teachers embeddinggemma,mpnet --embeddings-teacher mpnet ;;
    mgkd-gemma) echo "$MGKD" --teacher embeddinggemma --embeddings-teacher mpnet ;;
    mgkd-two-conf) echo "$MGKD" --teachers embeddinggemma,mpnet --embeddings-teacher mpnet --teacher-shares confidence ;;
    mgkd-two-glove) echo "$MGKD" --teachers embeddinggemma,mpnet --embeddings-teacher mpnet \
      --word-vectors "$GLOVE" --projection 64 ;;
    mgkd-gemma-glove) echo "$MGKD" --teacher embeddinggemma --embeddings-teacher mpnet \
      --word-vectors "$GLOVE" --projection 64 ;;
    mgkd-two-conf-glove) echo "$MGKD" --teachers embeddinggemma,mpnet --embeddings-teacher mpnet \
      --teacher-shares confidence --word-vectors "$GLOVE" --projection 64 ;;
    mt-both) echo "$MT" --teachers mpnet,embeddinggemma ;;
    mt-mpnet) echo "$MT" --teachers mpnet ;;
    mt-gemma) echo "$MT" --teachers embeddinggemma ;;
    xd-gemma) echo xtremedistil --teacher embeddinggemma --schedule d4.2 --embedding svd --embedding-dim 50 \
      --hidden-size 200 --teacher-layer 12 --hidden-norm standardize --epochs-per-step "$XD_EPOCHS" --patience 2 \
      --select dev-f1 ;;
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
