#!/usr/bin/env bash
# The CoNLL-2003 cache every recipe script trains from: the teacher over train/valid/test and
# WIKI Wikipedia sentences, k-best paths (K=10), emissions, marginals and hidden layer LAYERS.
#   TEACHER=.data/teachers/minilm-crf-conll WIKI=10000 LAYERS=4 examples/conll_cache.sh
# LAYERS= (set, empty): no hidden layers (examples/peers_conll.sh: the MGKD losses read none).
# Layer 4 of MiniLM-L6's 6 is where paper 001's layer 7 of mBERT's 12 falls (58% of the depth).
# A second run with the same teacher and corpora is a no-op.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
TEACHER=${TEACHER:-.data/teachers/minilm-crf-conll}
WIKI=${WIKI:-10000}
LAYERS=${LAYERS-4}
DATA=${DATA:-.data/conll}
export TOKENIZERS_PARALLELISM=false
mkdir -p "$DATA"
D=$($BIN/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('neuroner').origin).parent / 'data/conll2003/en')")
if [ ! -f "$DATA/wiki.txt" ]; then
  $BIN/python -c "
import sys; sys.path.insert(0, 'examples'); from pathlib import Path; import demo
print(demo.write_wikipedia(Path('$DATA/wiki.txt'), $WIKI), 'Wikipedia sentences')"
fi
$BIN/distill-cache build --out "$DATA/cache" --teacher "$TEACHER" --teacher-id minilm \
  --labelled conll=$D/train.txt@train --labelled conll=$D/valid.txt@dev --labelled conll=$D/test.txt@test \
  --unlabelled wiki=$DATA/wiki.txt --kbest 10 ${LAYERS:+--hidden-layers "$LAYERS"} --device cpu
