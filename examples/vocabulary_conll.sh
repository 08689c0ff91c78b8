#!/usr/bin/env bash
# Issue 53: what each vocabulary option costs a student on text its cache never saw. CoNLL-2003,
# `make demo`'s MiniLM-L6 + CRF teacher (TEACHER), one cache per option over the demo's train and
# dev sentences only (no test text, no unlabelled text: the README's first example), then the
# default MGKD student (hard, seq-ce, fuzzy; MGKD_EPOCHS=8) and the 2-layer transformer student
# (mt, started from the teacher's first 2 blocks; MT_EPOCHS=3) over each, SEEDS (13 14 15), all
# scored by distill-eval on the whole test set.
#   examples/vocabulary_conll.sh                  # needs `make demo` first (its teacher and splits)
#   OPTIONS="default corpus" examples/vocabulary_conll.sh
# Options (seqdistill/vocabulary.py):
#   default   the build's default: every row of MiniLM's 30,522 (at most 65,536)
#   corpus    --trim-vocabulary --frequent-subwords 0: the corpora's subwords alone, the default before issue 53
#   freq8k    --trim-vocabulary --frequent-subwords 8192: those and 8,192 frequent subwords of their scripts
#   full      --full-vocabulary: cache only, to show its exports are the default's, byte for byte
# Resumable: each finished cache, student and score is skipped when the script runs again.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
DEMO=${DEMO:-.data/demo}
TEACHER=${TEACHER:-$DEMO/teacher}
OUT=${OUT:-.data/vocabulary-conll}
SEEDS=${SEEDS:-"13 14 15"}
OPTIONS=${OPTIONS:-"default corpus freq8k full"}
JOBS=${JOBS:-2}
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
    --teacher-id minilm --labelled "conll=$DEMO/train.txt@train" --labelled "conll=$DEMO/dev.txt@dev" \
    --export-layers 2 --hidden-layers 3,6 --device cpu "${opts[@]}" > "$OUT/cache-$o.log" 2>&1
done
runs=()
for o in $OPTIONS; do
  [ "$o" = full ] && continue
  for s in $SEEDS; do
    runs+=("mgkd $o $s" "mt $o $s")
  done
done
train() {  # recipe option seed
  local name=$1-$2-s$3
  [ -f "$OUT/$name/training.json" ] && return 0
  if [ "$1" = mgkd ]; then
    $BIN/distill-train mgkd --cache "$OUT/cache-$2" --out "$OUT/$name" --seed "$3" --epochs "${MGKD_EPOCHS:-8}" \
      --device cpu > "$OUT/$name.log" 2>&1
  else
    $BIN/distill-train mt --cache "$OUT/cache-$2" --out "$OUT/$name" --seed "$3" --student-layers 2 \
      --epochs "${MT_EPOCHS:-3}" --device cpu > "$OUT/$name.log" 2>&1
  fi
}
export -f train
export BIN OUT MGKD_EPOCHS MT_EPOCHS
printf '%s\n' "${runs[@]}" | xargs -P "$JOBS" -L 1 bash -c 'OMP_NUM_THREADS=1 train $0 $1 $2'
for r in "${runs[@]}"; do
  set -- $r
  name=$1-$2-s$3
  [ -s "$OUT/$name.eval.json" ] || $BIN/distill-eval --model "$OUT/$name" --data "$DEMO/test.txt" --no-latency --json \
    > "$OUT/$name.eval.json"
done
$BIN/python - "$OUT" $OPTIONS <<'EOF'
import json, statistics, sys
from pathlib import Path
out, options = Path(sys.argv[1]), [o for o in sys.argv[2:] if o != "full"]
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
