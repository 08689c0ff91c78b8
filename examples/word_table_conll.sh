#!/usr/bin/env bash
# Issue 83, items 2-3 on full CoNLL-2003: word tables for the default student from the MPNet-base + CRF teacher's
# cache (examples/headlines_conll.sh builds both), each row paired by seed with that script's `default` row.
# Resumable, each step skipped once done:
#   examples/word_table_conll.sh                          # the teacher's table, then every row of ROWS x SEEDS
#   ROWS="tt tt-train" SEEDS="14 15" examples/word_table_conll.sh
# 1. The teacher's own table (`distill-cache word-table`, seqdistill/pipeline/word_table.py): every word of the
#    cache's train, dev and Wikipedia text (about 62k lowercased words; test's are never read), alone through
#    the teacher, its last layer, PCA to 50. About 25 minutes on one thread of a 2-core AMD EPYC.
# 2. The students, `distill-train mgkd` as the default row (patience 5 under a cap of EPOCHS=40), plus:
#      tt            --word-vectors TABLE --projection 64 (the teacher's table and its word list)
#      tt-hash       the same table hashed into 30,000 rows with no word list (--hash-rows 30000)
#      tt-train      the teacher's table, trained with the student (--train-word-vectors)
#      tt-drop       the teacher's table, each word's vector zeroed with probability 0.1 in training
#                    (--word-vectors-dropout 0.1: test words outside the table then look like training words)
#      tt-hash-drop  tt-hash with --word-vectors-dropout 0.1
#      glove-hash    GloVe 6B 50d hashed into 50,000 rows, trained with the student (needs examples/get_glove.sh)
#      glove-hash-w100k  GloVe's first 100k words hashed into 50,000 rows, frozen (the demo's best hashed table)
#    --projection 64 as the word-vector rows of docs/RESULTS.md, so that the export stays under spaCy's 6.7 MB.
#    One torch thread a run, JOBS=2 at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=${OUT:-.data/headlines}
CACHE=$OUT/cache
TABLE=$OUT/teacher-table
TEACHER=.data/teachers/mpnet-crf-conll
EPOCHS=${EPOCHS:-40}
ROWS=${ROWS:-"tt tt-hash tt-train"}
SEEDS=${SEEDS:-"13 14 15"}
JOBS=${JOBS:-2}
export TOKENIZERS_PARALLELISM=false
[ -f "$CACHE/manifest.json" ] || { echo "$CACHE: no cache; run examples/headlines_conll.sh first" >&2; exit 2; }
[ -f "$TABLE/word_table.json" ] || OMP_NUM_THREADS=${THREADS:-1} $BIN/distill-cache word-table "$CACHE" \
  --teacher "$TEACHER" --out "$TABLE" > "$OUT/teacher-table.log" 2>&1
flags() {  # the row's flags beside the default's
  case $1 in
    tt) echo --word-vectors "$TABLE" --projection 64 ;;
    tt-hash) echo --word-vectors "$TABLE" --hash-rows 30000 --projection 64 ;;
    tt-train) echo --word-vectors "$TABLE" --projection 64 --train-word-vectors ;;
    tt-drop) echo --word-vectors "$TABLE" --projection 64 --word-vectors-dropout 0.1 ;;
    tt-hash-drop) echo --word-vectors "$TABLE" --hash-rows 30000 --projection 64 --word-vectors-dropout 0.1 ;;
    glove-hash) echo --word-vectors "$(examples/get_glove.sh)" --hash-rows 50000 --projection 64 --train-word-vectors ;;
    glove-hash-w100k) echo --word-vectors "$(examples/get_glove.sh)" --word-vectors-rows 100000 --hash-rows 50000 \
      --projection 64 ;;
    *) echo "unknown row $1" >&2; exit 2 ;;
  esac
}
run() {  # row seed
  local name=$1-s$2
  [ -f "$OUT/$name/training.json" ] && return 0
  # shellcheck disable=SC2046
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $BIN/distill-train mgkd --epochs "$EPOCHS" --patience 5 $(flags "$1") \
    --cache "$CACHE" --out "$OUT/$name" --seed "$2" --device cpu > "$OUT/$name.log" 2>&1
}
. examples/run_rows.sh  # every row's flags checked, then ROWS x SEEDS, JOBS at a time
run_rows
