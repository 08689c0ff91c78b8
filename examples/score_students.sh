#!/usr/bin/env bash
# Score trained students on CoNLL-2003 test as docs/RESULTS.md reports them: each exported int8 (once; an
# existing export is kept), then one `distill-eval --no-latency --threads 1` table and the seen/unseen-name
# table of benchmarks/seen_names.py (names seen in the training gold or not), written to OUT/seen-NAMES.json.
#   examples/score_students.sh mgkd-two-conf-s13 mgkd-gemma-s13        # students under OUT=.data/headlines
#   R100K=1 examples/score_students.sh mgkd-two-conf-glove-s13         # a --word-vectors student, also exported
#                                                                      # with its first 100k words at 4 bits
# Timings belong to benchmarks/peers.py, which runs each model alone, beside spaCy and the teacher.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=${OUT:-.data/headlines}
D=${CONLL:-.venv/lib/python3.11/site-packages/neuroner/data/conll2003/en}
[ $# -gt 0 ] || { echo "usage: examples/score_students.sh NAME... (directories under $OUT)" >&2; exit 2; }
models=(); named=(); dirs=()
for n in "$@"; do
  [ -f "$OUT/$n/training.json" ] || { echo "$OUT/$n: no training.json (not a finished student)" >&2; exit 1; }
  [ -d "$OUT/$n-int8" ] || $BIN/distill-export --model "$OUT/$n" --out "$OUT/$n-int8" --quantize int8 \
    > "$OUT/$n-export.log" 2>&1
  models+=(--model "$OUT/$n-int8"); named+=(--model "$n=$OUT/$n-int8"); dirs+=("$OUT/$n-int8")
  if [ -n "${R100K:-}" ]; then
    [ -d "$OUT/$n-int4-r100k" ] || $BIN/distill-export --model "$OUT/$n" --out "$OUT/$n-int4-r100k" --quantize int8 \
      --word-vectors-rows 100000 --table-bits 4 > "$OUT/$n-export-r100k.log" 2>&1
    models+=(--model "$OUT/$n-int4-r100k"); named+=(--model "$n-r100k=$OUT/$n-int4-r100k")
    dirs+=("$OUT/$n-int4-r100k")
  fi
done
du -sh "${dirs[@]}"
OMP_NUM_THREADS=1 $BIN/distill-eval "${models[@]}" --data "$D/test.txt" --no-latency --threads 1 2>&1 | grep -v "%|"
OMP_NUM_THREADS=1 $BIN/python benchmarks/seen_names.py --train "$D/train.txt" --data "$D/test.txt" "${named[@]}" \
  --json "$OUT/seen-$(echo "$@" | tr ' ' '_').json" 2>&1 | grep -v "%|" | tail -30
