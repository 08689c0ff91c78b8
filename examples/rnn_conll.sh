#!/usr/bin/env bash
# Paper 003's Table 1 on CoNLL-2003 (flat: one BILOU layer per type): a MiniLM-L6 teacher with one
# BILOU head per entity type, a cache of its per-type logits over train/valid/test and WIKI
# Wikipedia sentences, and each of LSTM, SRU and SRU++ trained with and without distillation.
#   EPOCHS=5 DISTILL_EPOCHS=3 examples/rnn_conll.sh
# Budget decisions (2 CPU cores): the teacher's encoder starts from ENCODER, by default the CRF
# teacher's MiniLM-L6 already fine-tuned on CoNLL-2003 (.data/teachers/minilm-crf-conll, see
# docs/RESULTS.md; ENCODER=$MINILM starts from the plain encoder), and trains its BILOU heads and
# encoder for TEACHER_EPOCHS (default 1); each student gets DISTILL_EPOCHS of stage 1 and EPOCHS of
# stage 2 (the paper trains to convergence). The distilled and non-distilled students of a cell
# get the same stage-2 budget, so the comparison is fair.
# The test set is scored at the end by distill-eval (per-type and macro F1, latency at batch 32).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=${OUT:-.data/rnn-conll}
WIKI=${WIKI:-10000}
export TOKENIZERS_PARALLELISM=false
D=$($BIN/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('neuroner').origin).parent / 'data/conll2003/en')")
mkdir -p "$OUT"
if [ ! -f "$OUT/wiki.txt" ]; then
  $BIN/python -c "
import sys; sys.path.insert(0, 'examples'); from pathlib import Path; import demo
print(demo.write_wikipedia(Path('$OUT/wiki.txt'), $WIKI), 'Wikipedia sentences')"
fi
ENCODER=${ENCODER:-.data/teachers/minilm-crf-conll}
[ -f "$OUT/teacher/teacher.json" ] || $BIN/distill-cache finetune-teacher --encoder "$ENCODER" --head bilou-per-type \
  --train "$D/train.txt" --dev "$D/valid.txt" --test "$D/test.txt" --out "$OUT/teacher" \
  --lr 5e-5 --epochs "${TEACHER_EPOCHS:-1}" --patience 2 --device cpu > "$OUT/teacher.log" 2>&1
$BIN/distill-cache build --out "$OUT/cache" --teacher "$OUT/teacher" --teacher-id minilm-bilou \
  --labelled conll=$D/train.txt@train --labelled conll=$D/valid.txt@dev --labelled conll=$D/test.txt@test \
  --unlabelled wiki=$OUT/wiki.txt --device cpu > "$OUT/build.log" 2>&1
train() {  # name, then distill-train options
  local name=$1; shift
  [ -f "$OUT/$name/training.json" ] && return 0
  $BIN/distill-train --cache "$OUT/cache" --out "$OUT/$name" --recipe rnn --device cpu \
    --epochs "${EPOCHS:-5}" --distill-epochs "${DISTILL_EPOCHS:-3}" "$@" > "$OUT/$name.log" 2>&1
}
for cell in lstm sru sru++; do
  train "$cell-dist" --cell "$cell"
  train "$cell-nodist" --cell "$cell" --no-distill
done
[ -n "${NO_EVAL:-}" ] && exit 0
models=(--model "$OUT/teacher")
for cell in lstm sru sru++; do models+=(--model "$OUT/$cell-dist" --model "$OUT/$cell-nodist"); done
$BIN/distill-eval "${models[@]}" --data "$D/test.txt" | tee "$OUT/eval.md"
