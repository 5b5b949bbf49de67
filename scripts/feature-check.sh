#!/usr/bin/env bash
# Every Cargo feature builds alone (and with none, and all): a `#[cfg]` that
# names the wrong feature, or a feature that forgets one it needs, only shows
# in a build that enables that feature without the others. Not in .ci/run:
# each feature set rebuilds the dependencies whose features differ, which
# costs more than the rest of CI on a cold machine (README, "Security" and
# "Cargo features", gives the measured time).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo hack --version >/dev/null 2>&1; then
  echo "cargo-hack is missing: cargo install cargo-hack --locked" >&2
  exit 1
fi
# --no-dev-deps: the library and binary as a user builds them (the tests and
# examples name their own required-features).
cargo hack check --each-feature --no-dev-deps "$@"
