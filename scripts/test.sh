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

# The gateway's Python interop test drives the real BlockRun SDK from a venv.
py_dir=tests/interop/blockrun-python
step "Python venv in $py_dir"
if [ ! -x "$py_dir/.venv/bin/python" ]; then
  python3 -m venv "$py_dir/.venv"
fi
"$py_dir/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$py_dir/requirements.txt"

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
  step "fuzz targets build"
  if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --quiet
  fi
  (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz build -O)
fi

step "all checks passed"
cd "$root"
