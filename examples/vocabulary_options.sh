#!/usr/bin/env bash
# Issue 53: what each vocabulary option costs a student on text its cache never saw. One cache per
# option over a corpus's train and dev sentences only (no test text), students over each with SEEDS
# (13 14 15), all scored by distill-eval on the test set, and a table (docs/RESULTS.md, "Vocabulary
# trimming that never costs accuracy").
#   SET=conll examples/vocabulary_options.sh      # after `make demo`: its MiniLM-L6 + CRF teacher and splits
#   SET=japanese examples/vocabulary_options.sh   # after examples/japanese_ner.sh's teacher (TEACHER_EPOCHS)
# SET=conll: the demo's train and dev sentences, no unlabelled text (the README's first example);
#   the default MGKD student (hard, seq-ce, fuzzy; MGKD_EPOCHS=8) and the 2-layer transformer student
#   (mt, from the teacher's first 2 blocks; MT_EPOCHS=3); the cache stores hidden layers 3,6 for it.
# SET=japanese: examples/japanese_ner.sh's split (340 train, 50 dev, 10 unlabelled; 100 test), its
#   cache settings (k-best 10, hidden layer 12) and its MGKD student (hard, seq-ce, fuzzy, k 5;
#   MGKD_EPOCHS=30, patience 5).
# Options (seqdistill/vocabulary.py):
#   default   the build's default: every row of a matrix of at most 65,536 (MiniLM's 30,522); of a larger
#             one (EmbeddingGemma's 262,144) the corpora's subwords and 28,672 frequent ones of their scripts
#   corpus    --trim-vocabulary --frequent-subwords 0: the corpora's subwords alone, the default before issue 53
#   freq8k    --trim-vocabulary --frequent-subwords 8192: those and 8,192 frequent subwords of their scripts
#   full      --full-vocabulary: every row
# Resumable: each finished cache, student and score is skipped when the script runs again.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
SET=${SET:-conll}
SEEDS=${SEEDS:-"13 14 15"}
JOBS=${JOBS:-2}
if [ "$SET" = conll ]; then
  DEMO=${DEMO:-.data/demo}
  TEACHER=${TEACHER:-$DEMO/teacher}
  OUT=${OUT:-.data/vocabulary-conll}
  OPTIONS=${OPTIONS:-"default corpus freq8k"}
  RECIPES=${RECIPES:-"mgkd mt"}
  CORPORA=(--labelled "conll=$DEMO/train.txt@train" --labelled "conll=$DEMO/dev.txt@dev" --export-layers 2 --hidden-layers 3,6)
  TEST=$DEMO/test.txt
  MGKD_ARGS="--epochs ${MGKD_EPOCHS:-8}"
else
  S=.data/japanese/split
  TEACHER=${TEACHER:-.data/japanese/teacher}
  OUT=${OUT:-.data/vocabulary-japanese}
  OPTIONS=${OPTIONS:-"default corpus full"}
  RECIPES=${RECIPES:-"mgkd"}
  CORPORA=(--labelled "ja=$S/gold_train.txt@train" --labelled "ja=$S/gold_dev.txt@dev" --unlabelled "ja-silver=$S/silver.txt"
    --kbest 10 --hidden-layers 12)
  TEST=$S/gold_test.txt
  MGKD_ARGS="--epochs ${MGKD_EPOCHS:-30} --patience 5 --losses hard,seq-ce,fuzzy --k 5"
fi
export TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
for o in $OPTIONS; do
  case $o in
    default) opts=() ;;
    corpus) opts=(--trim-vocabulary --frequent-subwords 0) ;;
    freq8k) opts=(--trim-vocabulary --frequent-subwords 8192) ;;
    full) opts=(--full-vocabulary) ;;
  esac
  [ -f "$OUT/cache-$o/manifest.json" ] || $BIN/distill-cache build --out "$OUT/cache-$o" --teacher "$TEACHER" \
    --teacher-id teacher "${CORPORA[@]}" --device cpu "${opts[@]}" > "$OUT/cache-$o.log" 2>&1
  du -sb "$OUT/cache-$o" > "$OUT/cache-$o.bytes"
done
runs=()
for o in $OPTIONS; do
  for s in $SEEDS; do
    for r in $RECIPES; do runs+=("$r $o $s"); done
  done
done
train() {  # recipe option seed
  local name=$1-$2-s$3
  [ -f "$OUT/$name/training.json" ] && return 0
  if [ "$1" = mgkd ]; then
    $BIN/distill-train mgkd --cache "$OUT/cache-$2" --out "$OUT/$name" --seed "$3" $MGKD_ARGS \
      --device cpu > "$OUT/$name.log" 2>&1
  else
    $BIN/distill-train mt --cache "$OUT/cache-$2" --out "$OUT/$name" --seed "$3" --student-layers 2 \
      --epochs "${MT_EPOCHS:-3}" --device cpu > "$OUT/$name.log" 2>&1
  fi
}
export -f train
export BIN OUT MT_EPOCHS MGKD_ARGS  # an array does not cross into xargs' shells: a string
printf '%s\n' "${runs[@]}" | xargs -P "$JOBS" -L 1 bash -c 'OMP_NUM_THREADS=1 train $0 $1 $2'
for r in "${runs[@]}"; do
  set -- $r
  name=$1-$2-s$3
  [ -s "$OUT/$name.eval.json" ] || $BIN/distill-eval --model "$OUT/$name" --data "$TEST" --no-latency --json \
    > "$OUT/$name.eval.json"
done
for o in $OPTIONS; do echo "cache $o: $(cut -f1 "$OUT/cache-$o.bytes") bytes"; done
$BIN/python - "$OUT" $OPTIONS <<'EOF'
import json, statistics, sys
from pathlib import Path
out, options = Path(sys.argv[1]), sys.argv[2:]
print("| student | vocabulary | embedding rows | MB | test F1 (mean ± std) | per seed | unseen words | gold spans with one |")
print("|---|---|---:|---:|---:|---|---:|---:|")
for recipe in ("mgkd", "mt"):
    for o in options:
        rows = [json.loads(p.read_text())[0] for p in sorted(out.glob(f"{recipe}-{o}-s*.eval.json"))]
        if not rows:
            continue
        f1 = [100 * r["f1"] for r in rows]
        u = rows[0].get("unseen") or {"words": 0.0, "gold_spans": 0.0}
        print(
            f"| {recipe} | {o} | {rows[0]['embedding_rows']:,} | {rows[0]['bytes'] / 2**20:.1f} | "
            f"{statistics.mean(f1):.2f} ± {statistics.stdev(f1) if len(f1) > 1 else 0:.2f} | "
            f"{', '.join(f'{x:.2f}' for x in f1)} | {100 * u['words']:.2f}% | {100 * (u['gold_spans'] or 0):.2f}% |"
        )
EOF
