#!/usr/bin/env bash
# Issue 36, item 4: a non-English corpus end to end, the Japanese NER corpus of DATA.md (IREX types,
# MeCab IPAdic morphemes, IOB2, 500 sentences; `pip install hironsancorpus==0.1.2`) with the
# multilingual, cased EmbeddingGemma-300M + CRF teacher (examples/get_embeddinggemma.sh).
#   examples/japanese_ner.sh                   # teacher, cache, students, exports, distill-eval
#   SEED=14 examples/japanese_ner.sh           # the students again with another seed (NAME-s14)
# Decisions:
# * The file is read as it is: the word is the first column and the tag the last, whatever lies
#   between (12 MeCab fields for a known word, 10 for an unknown one; corpora/conll.py names the
#   rule). Its 2 stray I- tags (an I- after O or after another type, e.g. line 6855) are made B-,
#   conlleval's reading of a stray I-, in OUT/corpus.txt: the IOB2 reader refuses them.
# * Split (few-shot-split, seed 13): TEST=100 sentences held out first, DEV=50, TRAIN=340; the 10
#   left are the only unlabelled text (no other Japanese text installs here), so the students learn
#   from the teacher's outputs on the gold sentences and those 10.
# * Teacher: EmbeddingGemma-300M + CRF, lr 5e-5, batch 8, TEACHER_EPOCHS=8 with patience 3.
# * Cache: k-best 10, marginals, hidden layer LAYER=12 (of 24) for XtremeDistil; the embedding rows
#   of the subwords the corpus uses (seqdistill.vocabulary).
# * Students: MGKD (hard, seq-ce, fuzzy, k 5) with and without --chars, vanilla (gold only, random
#   embeddings), and XtremeDistil D4.2 at E=100, H=200; EPOCHS=30, patience 5. Each is exported to
#   ONNX int8 and scored beside the torch models.
# * The students record the words rule the corpus implies (mecab: MeCab morphemes), so Tagger and
#   distill-serve split raw Japanese text with MeCab IPAdic (fugashi, `pip install 'seqdistill[ja]'`).
# Resumable: each finished step is skipped when the script runs again.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=${OUT:-.data/japanese}
SEED=${SEED:-13}
EPOCHS=${EPOCHS:-30}
LAYER=${LAYER:-12}
VARIANTS=${VARIANTS:-"vanilla mgkd mgkd-chars xd-d4.2"}
export TOKENIZERS_PARALLELISM=false
$BIN/python -c "import hironsan" 2>/dev/null || $BIN/python -m pip install --quiet hironsancorpus==0.1.2
$BIN/python -c "import fugashi, ipadic" 2>/dev/null || $BIN/python -m pip install --quiet -e ".[ja]"
SOURCE=$($BIN/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('hironsan').submodule_search_locations[0]) / 'corpus/iob_sents.txt')")
ENCODER=${ENCODER:-$(examples/get_embeddinggemma.sh | tail -1)}
mkdir -p "$OUT"
[ -s "$OUT/corpus.txt" ] || awk -F'\t' -v OFS='\t' '
  NF == 0 { prev = "O"; print; next }
  { tag = $NF
    if (tag ~ /^I-/ && prev != "B-" substr(tag, 3) && prev != tag) { $NF = "B-" substr(tag, 3) }
    prev = tag; print }' "$SOURCE" > "$OUT/corpus.txt"
S=$OUT/split
[ -f "$S/gold_test.txt" ] || $BIN/distill-cache few-shot-split --corpus "$OUT/corpus.txt" --out "$S" \
  --train "${TRAIN:-340}" --dev "${DEV:-50}" --test "${TEST:-100}" --seed 13
TEACHER=${TEACHER:-$OUT/teacher}
[ -f "$TEACHER/training.json" ] || $BIN/distill-cache finetune-teacher --encoder "$ENCODER" --head crf \
  --train "$S/gold_train.txt" --dev "$S/gold_dev.txt" --test "$S/gold_test.txt" --out "$TEACHER" \
  --lr 5e-5 --batch-size 8 --epochs "${TEACHER_EPOCHS:-8}" --patience 3 --device cpu > "$OUT/teacher.log" 2>&1
[ -f "$OUT/cache/manifest.json" ] || $BIN/distill-cache build --out "$OUT/cache" --teacher "$TEACHER" --teacher-id teacher \
  --labelled ja=$S/gold_train.txt@train --labelled ja=$S/gold_dev.txt@dev --unlabelled ja-silver=$S/silver.txt \
  --kbest 10 --hidden-layers "$LAYER" --device cpu > "$OUT/cache.log" 2>&1
train() {  # name, then distill-train options
  local name=$1; shift
  [ "$SEED" != 13 ] && name=$name-s$SEED
  [ -f "$OUT/$name/training.json" ] && return 0
  $BIN/distill-train --cache "$OUT/cache" --out "$OUT/$name" --seed "$SEED" --device cpu "$@" > "$OUT/$name.log" 2>&1
}
for v in $VARIANTS; do
  case $v in
    vanilla) train "$v" --epochs "$EPOCHS" --patience 5 --losses hard --embedding random ;;
    mgkd) train "$v" --epochs "$EPOCHS" --patience 5 --losses hard,seq-ce,fuzzy --k 5 ;;
    mgkd-chars) train "$v" --epochs "$EPOCHS" --patience 5 --losses hard,seq-ce,fuzzy --k 5 --chars ;;
    xd-d4.2) train "$v" --recipe xtremedistil --schedule d4.2 --teacher-layer "$LAYER" --embedding-dim 100 \
      --hidden-size 200 --epochs-per-step 3 --patience 1 --batch-size 32 ;;
  esac
done
suffix=""; [ "$SEED" != 13 ] && suffix=-s$SEED
# the teacher in ONNX too (fp32: the students' speed-up is measured against the teacher's best runtime)
[ -f "$TEACHER-onnx/export.json" ] || $BIN/distill-export --model "$TEACHER" --out "$TEACHER-onnx" > /dev/null
args=(--model "$TEACHER" --model "$TEACHER-onnx")
for v in $VARIANTS; do
  m=$OUT/$v$suffix
  [ -f "$m-onnx-int8/export.json" ] || $BIN/distill-export --model "$m" --out "$m-onnx-int8" --quantize int8 > /dev/null
  args+=(--model "$m" --model "$m-onnx-int8")
done
[ -n "${NO_EVAL:-}" ] && exit 0
$BIN/distill-eval "${args[@]}" --data "$S/gold_test.txt" | tee "$OUT/eval$suffix.md"
