#!/usr/bin/env bash
# Runs every fuzz target with coverage instrumentation (cargo fuzz, libFuzzer)
# for SECONDS each, one after the other (default 60), and prints per target:
# executions this run and in total, coverage (`cov:`), corpus size, crashes.
#
#   scripts/fuzz.sh [SECONDS]          (FUZZ_TARGETS="a b" to run only some)
#
# Targets are whatever `cargo fuzz list` reports (every [[bin]] of
# fuzz/Cargo.toml). The committed seeds in fuzz/corpus/<target>/ are read,
# never written; what a run finds is kept in fuzz/work/corpus/<target>/ (not
# committed) and grows across runs, with a running total of executions in
# fuzz/work/<target>.executions. Crashes land in fuzz/artifacts/<target>/:
# minimise one with `cargo fuzz tmin <target> <file>`, fix the bug, and commit
# the minimised input as a seed (and a regression test beside the code).
# Needs cargo-fuzz (`cargo install cargo-fuzz`); nightly features through
# RUSTC_BOOTSTRAP=1 on a stable toolchain.
set -euo pipefail
seconds=${1:-60}
cd "$(dirname "$0")/../fuzz"
export RUSTC_BOOTSTRAP=1

command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz is missing: cargo install cargo-fuzz" >&2; exit 1; }

targets=${FUZZ_TARGETS:-$(cargo fuzz list)}
echo "building $(echo "$targets" | wc -w) targets with coverage instrumentation"
cargo fuzz build --release 2>&1 | grep -E '^(error|warning: unused)' || true

mkdir -p work/corpus
status=0
summary=()
for target in $targets; do
  kept=work/corpus/$target
  artifacts=artifacts/$target
  mkdir -p "$kept" "$artifacts" "corpus/$target"
  log=work/$target.log
  marker=work/$target.started
  touch "$marker"
  echo "==> $target for ${seconds}s"
  # The kept corpus first: libFuzzer writes new inputs into the first directory.
  if cargo fuzz run --release "$target" "$kept" "corpus/$target" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" >"$log" 2>&1; then
    :
  else
    status=1
  fi
  executions=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  executions=${executions:-0}
  total_file=work/$target.executions
  total=$(( $(cat "$total_file" 2>/dev/null || echo 0) + executions ))
  echo "$total" >"$total_file"
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(echo "$last" | grep -oE 'cov: [0-9]+' || echo "cov: ?")
  corp=$(echo "$last" | grep -oE 'corp: [0-9]+/[^ ]+' || echo "corp: ?")
  crashes=$(find "$artifacts" -type f -newer "$marker" | wc -l)
  line=$(printf '%-26s executions %10s (total %11s)  %-10s  %-16s  crashes %s' \
    "$target" "$executions" "$total" "$cov" "$corp" "$crashes")
  echo "$line"
  summary+=("$line")
  if [ "$crashes" -gt 0 ]; then
    grep -m1 -E 'panicked at|ERROR: libFuzzer' "$log" || true
    find "$artifacts" -type f -newer "$marker" | head -3
  fi
done

echo
echo "summary (${seconds}s per target):"
printf '%s\n' "${summary[@]}"
exit "$status"
