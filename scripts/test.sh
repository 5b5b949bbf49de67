#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what the tests need,
# then format, lints, unit/integration tests, doc tests and the fuzz build.
# `.ci/run` runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

step() { printf '\n==> %s\n' "$*"; }

# Interop tests drive the real npm clients; each folder pins them in a lock file.
for dir in tests/interop/*/; do
  [ -f "$dir/package-lock.json" ] || continue
  step "npm ci in $dir"
  npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
done

# Python interop tests (MCP client, BlockRun SDK) each run from their own venv.
for dir in tests/interop/*/; do
  [ -f "$dir/requirements.txt" ] || continue
  step "python venv in $dir"
  [ -x "$dir/.venv/bin/python" ] || python3 -m venv "$dir/.venv"
  "$dir/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$dir/requirements.txt"
done

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy (all targets, all features)"
cargo clippy --all-targets --all-features -- -D warnings

step "tests (all features)"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --all-features --no-fail-fast
else
  cargo test --all-features --no-fail-fast --lib --bins --tests --examples
fi

step "doc tests"
cargo test --all-features --doc

step "docs build without warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features --quiet

if [ -f fuzz/Cargo.toml ]; then
  # Builds every fuzz target on stable (libFuzzer links without cargo-fuzz's
  # sanitizer flags) and replays the committed seed corpus once.
  step "fuzz targets build and replay their seeds"
  (cd fuzz && cargo build --quiet --bins)
  fuzz_target_dir="${CARGO_TARGET_DIR:-fuzz/target}"
  for target in fuzz/fuzz_targets/*.rs; do
    name=$(basename "$target" .rs)
    "$fuzz_target_dir/debug/$name" "fuzz/corpus/$name" -runs=0
  done
fi

step "all checks passed"
cd "$root"
