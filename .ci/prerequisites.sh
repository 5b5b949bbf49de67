#!/usr/bin/env bash
# What .ci/run needs on a fresh Debian/Ubuntu machine, checked first with one
# clear message per missing piece. As root with apt-get it installs what the
# distribution packages well (a C compiler, python3-venv, Node.js when absent);
# with rustup it adds rustfmt and clippy. Run it alone: bash .ci/prerequisites.sh
set -uo pipefail

missing=0
need() {
  printf 'missing prerequisite: %s\n' "$*" >&2
  missing=1
}

# apt-get install, once the package lists are fresh; quiet unless it fails.
apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  echo "installing with apt-get: $*"
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "${apt_updated:-}" ]; then
    apt-get update -qq >/dev/null 2>&1 || true
    apt_updated=1
  fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1
}

# libsecp256k1 (x402, SIWE signature recovery) and ring (feature rustls) build C.
command -v cc >/dev/null 2>&1 || apt_install gcc libc6-dev
command -v cc >/dev/null 2>&1 ||
  need "a C compiler (cc): libsecp256k1 and ring compile C sources; Debian/Ubuntu: apt-get install build-essential"

# The Python interop tests (MCP client, BlockRun SDK) each make a venv.
command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  apt_install python3-venv
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 ||
    need "python3 with venv and ensurepip: the Python interop tests make virtual environments; Debian/Ubuntu: apt-get install python3-venv"
fi

# The interop tests drive the official npm clients, which need Node.js 20+.
command -v node >/dev/null 2>&1 || apt_install nodejs npm
node_version=$(node --version 2>/dev/null || echo none)
node_major=$(printf '%s' "$node_version" | sed -E 's/^v([0-9]+).*/\1/')
if ! [ "$node_major" -ge 20 ] 2>/dev/null; then
  need "Node.js 20 or later (found $node_version): the x402 and MCP interop tests run npm clients; install a current Node.js release"
fi
command -v npm >/dev/null 2>&1 || need "npm: installs the interop tests' pinned clients (npm ci); it ships with Node.js"

# The Redis backends' tests run against a real redis-server on loopback.
command -v redis-server >/dev/null 2>&1 || apt_install redis-server
command -v redis-server >/dev/null 2>&1 ||
  need "redis-server: the Redis backends are tested against a real one; Debian/Ubuntu: apt-get install redis-server"

# The CORS tests and the browser consoles' tests (puppeteer-core, which
# downloads no browser, in tests/interop/console) drive a headless Chromium
# (its .deb and libraries: about 16 s on a fresh Debian with warm mirrors).
[ -x /usr/bin/chromium ] || apt_install chromium
[ -x /usr/bin/chromium ] ||
  need "chromium at /usr/bin/chromium: the CORS and console tests run a headless browser; Debian/Ubuntu: apt-get install chromium"

# Format and lint checks.
for component in rustfmt clippy; do
  subcommand=${component#rust}
  cargo "$subcommand" --version >/dev/null 2>&1 && continue
  command -v rustup >/dev/null 2>&1 && rustup component add "$component" >/dev/null 2>&1
  cargo "$subcommand" --version >/dev/null 2>&1 ||
    need "cargo $subcommand: rustup component add $component"
done

# Optional: a faster runner; plain cargo test otherwise.
cargo nextest --version >/dev/null 2>&1 ||
  echo "note: cargo-nextest not found, tests run with cargo test (optional: cargo install cargo-nextest --locked)"

if [ "$missing" != 0 ]; then
  echo "install the prerequisites above (docs/development.md, Prerequisites) and run again" >&2
  exit 1
fi
echo "prerequisites present"
