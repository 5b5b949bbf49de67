#!/usr/bin/env python3
"""Every dependency's `rust-version` is at most walletgate's own (its MSRV).

A dependency that raises its `rust-version` past the crate's breaks the
build for users on the MSRV while CI, on a newer toolchain, stays green. The
versions come from `cargo metadata` (Cargo.lock, all features, every
dependency kind: tests and examples build on the MSRV too).

Exits 1 and names each offender; a dependency that declares no
`rust-version` is not counted (nothing to compare).
"""

import json
import subprocess
import sys


def version(text):
    """'1.88' or '1.88.0' as a comparable tuple."""
    parts = [int(part) for part in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    metadata = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--all-features", "--locked"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    packages = {package["id"]: package for package in metadata["packages"]}
    root = next(
        packages[member]
        for member in metadata["workspace_members"]
        if packages[member]["name"] == "walletgate"
    )
    msrv = root.get("rust_version")
    if not msrv:
        sys.exit("walletgate's Cargo.toml declares no rust-version")
    # Only what the build resolves (not every package the lock file lists
    # for other platforms' or features' sake).
    resolved = {node["id"] for node in metadata["resolve"]["nodes"]} - {root["id"]}
    offenders = sorted(
        (packages[id]["name"], packages[id]["version"], packages[id]["rust_version"])
        for id in resolved
        if packages[id].get("rust_version")
        and version(packages[id]["rust_version"]) > version(msrv)
    )
    for name, package_version, rust_version in offenders:
        print(f"{name} {package_version} needs Rust {rust_version} > walletgate's {msrv}")
    if offenders:
        print(
            f"msrv-deps: {len(offenders)} dependencies above the MSRV; pin them "
            "(cargo update -p NAME --precise VERSION) or raise rust-version",
            file=sys.stderr,
        )
        return 1
    print(f"msrv-deps: ok ({len(resolved)} dependencies, none above Rust {msrv})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
