#!/bin/bash
# Issue 22, item 3: the cache of the MPNet-base + CRF teacher over full CoNLL-2003 train/dev/test
# and 10,000 Wikipedia sentences: k-best 10, marginals, hidden layer 7 of 12 (about 7/12 of the
# depth, for XtremeDistil's representation loss). Resumable: run it again after a kill.
# Teacher: .data/teachers/mpnet-crf-conll-e1, the model examples/mpnet_conll_teacher.sh saved
# after its first epoch (dev F1 92.45); that run was stopped in epoch 2 for CPU time (the same
# script continues it, into .data/teachers/mpnet-crf-conll).
# TEACHER, LAYERS: another teacher directory (issue 72: .data/teachers/mpnet-crf-conll, run to
# convergence) and hidden layers (LAYERS= for none; examples/table1_conll.sh).
# PRECISION: the teacher's forward pass (default auto: fp32 on the CPU; bf16 autocasts on a CPU with
# AMX or AVX512-BF16, about 3x faster; examples/table1_conll.sh passes bf16).
# HIDDEN_FLAGS: how the hidden layers are stored, e.g. "--hidden-project 128 --hidden-dtype int8" (issue
# 23's compact form, 13.7x smaller than fp16 for MPNet's 768 dimensions, and within 0.15 F1 for its
# students: docs/BENCHMARKS.md "Compact caches"); default: fp16.
# EXPORT_LAYERS: the teacher's first K encoder layers exported into the cache, from which an MT-BERT
# student starts (`distill-train mt`, paper 002; default: none).
# TEACHER_ID: the name of its layer (default mpnet; examples/embeddinggemma_conll_teacher.sh's is embeddinggemma).
# WIKI: how many Wikipedia sentences (the package holds 36,385; WIKI=36385 takes them all, into
# CACHE=.data/mpnet/cache-wikiall, say: the transfer-text lever of docs/RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
D=.venv/lib/python3.11/site-packages/neuroner/data/conll2003/en
WIKI=${WIKI:-10000}
CACHE=${CACHE:-.data/mpnet/cache}
TEACHER=${TEACHER:-.data/teachers/mpnet-crf-conll-e1}
LAYERS=${LAYERS-7}
PRECISION=${PRECISION:-auto}
W=.data/mpnet/wiki$((WIKI / 1000))k.txt
mkdir -p .data/mpnet
if [ ! -s "$W" ]; then
  .venv/bin/python -c "import sys; sys.path.insert(0, 'examples'); from pathlib import Path; from demo import write_wikipedia; print(write_wikipedia(Path('$W'), $WIKI), 'sentences')"
fi
exec .venv/bin/distill-cache build --out "$CACHE" --teacher "$TEACHER" --teacher-id "${TEACHER_ID:-mpnet}" \
  --labelled conll=$D/train.txt@train --labelled conll=$D/valid.txt@dev --labelled conll=$D/test.txt@test \
  --unlabelled wiki=$W --kbest 10 ${LAYERS:+--hidden-layers "$LAYERS"} ${HIDDEN_FLAGS:-} ${EXPORT_LAYERS:+--export-layers "$EXPORT_LAYERS"} --precision "$PRECISION" --device cpu
