# shellcheck shell=bash
# Sourced by the example scripts that train ROWS x SEEDS students (headlines_conll.sh, table1_conll.sh, ...):
# `run_rows` checks every row's flags first (an unknown row stops there, before any run), then runs
# `run ROW SEED` for each seed and row, JOBS at a time, and prints each run's directory, $OUT/ROW-sSEED.
# The sourcing script defines `flags ROW` and `run ROW SEED`, and sets ROWS, SEEDS, JOBS and OUT.
run_rows() {
  local row seed
  for row in $ROWS; do flags "$row" > /dev/null; done
  for seed in $SEEDS; do
    for row in $ROWS; do
      while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
      run "$row" "$seed" &
    done
  done
  wait
  for seed in $SEEDS; do for row in $ROWS; do echo "$OUT/$row-s$seed"; done; done
}
