#!/usr/bin/env bash
# Issue 81's peers run: the finished students of examples/headlines_conll.sh and examples/two_teachers_conll.sh
# (seed 13 of each row, int8 as examples/score_students.sh exports them), scored and timed in one
# benchmarks/peers.py run beside spaCy trained on the same gold, the int8 MPNet teacher (the setting's) and the
# int8 EmbeddingGemma teacher, one thread a model. Run it with nothing else on the machine (about 30 minutes on a
# 2-core AMD EPYC, most of it the two teachers); a row whose student is not trained yet is left out and named.
#   examples/peers_headlines.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=${OUT:-.data/headlines}
GEMMA=.data/teachers/embeddinggemma-crf-conll
ROWS=(  # name shown = student directory under OUT (an export: -int8, or -int4-r100k for 100k GloVe words at 4 bits)
  "paper 000's BiLSTM-CRF with chars (seed 13)=bilstm-s13-int8"
  "default window CNN-CRF (seed 13)=default-s13-int8"
  "XtremeDistil d4.2, E 50, H 2 x 200 (seed 13)=xd-s13-int8"
  "default, Gemma's paths (seed 13)=mgkd-gemma-s13-int8"
  "default, two teachers, confidence shares (seed 13)=mgkd-two-conf-s13-int8"
  "default + every GloVe word, Gemma's paths, 100k at 4 bits (seed 13)=mgkd-gemma-glove-s13-int4-r100k"
  "default + every GloVe word, two teachers, 100k at 4 bits (seed 13)=mgkd-two-conf-glove-s13-int4-r100k"
)
args=()
for row in "${ROWS[@]}"; do
  name=${row%%=*} dir=$OUT/${row#*=}
  student=${dir%-int8}
  if [ ! -d "$dir" ] && [ -f "$student/training.json" ] && [[ $dir == *-int8 ]]; then
    $BIN/distill-export --model "$student" --out "$dir" --quantize int8 > "$dir.log" 2>&1
  fi
  if [ -d "$dir" ]; then args+=(--student "$name=$dir"); else echo "left out (not trained or exported yet): $name" >&2; fi
done
[ -f "$GEMMA/training.json" ] && args+=(--student "teacher: EmbeddingGemma-300M + CRF, ONNX int8=$GEMMA")
OMP_NUM_THREADS=1 $BIN/python benchmarks/peers.py --setting conll-headlines --no-teacher-labels "${args[@]}" \
  --section conll-headlines-issue81 --json .data/peers/conll-headlines-issue81.json --write docs/BENCHMARKS.md
