"""Checks that the workspace's rust-version (its MSRV) covers every locked dependency: no
package that Cargo.lock resolves for Linux declares a newer rust-version. Clippy's
incompatible_msrv lint checks the standard library items the code uses against the same
rust-version (scripts/test.sh runs both).

Usage: cargo metadata --format-version 1 --locked --filter-platform x86_64-unknown-linux-gnu \
           | python3 scripts/check_msrv.py
"""

from __future__ import annotations

import json
import sys


def version(text: str) -> tuple[int, int, int]:
    """"1.85" and "1.85.0" alike."""
    major, minor, patch = (text.split(".") + ["0", "0"])[:3]
    return int(major), int(minor), int(patch)


def main() -> int:
    meta = json.load(sys.stdin)
    members = set(meta["workspace_members"])
    resolved = {node["id"] for node in meta["resolve"]["nodes"]}
    packages = [p for p in meta["packages"] if p["id"] in resolved]
    declared = {p["name"]: p["rust_version"] for p in packages if p["id"] in members}
    missing = sorted(name for name, rv in declared.items() if rv is None)
    if missing:
        print(f"check_msrv: no rust-version in {', '.join(missing)} (add rust-version.workspace = true)")
        return 1
    msrv = max(declared.values(), key=version)
    newer = sorted(
        f"{p['name']} {p['version']} needs Rust {p['rust_version']}"
        for p in packages
        if p["id"] not in members and p["rust_version"] and version(p["rust_version"]) > version(msrv)
    )
    if len(set(declared.values())) > 1 or newer:
        print(f"check_msrv: the workspace's rust-version is {msrv}, but:")
        if len(set(declared.values())) > 1:
            print(f"  the crates declare different ones: {declared}")
        for line in newer:
            print(f"  {line}")
        return 1
    print(f"check_msrv: rust-version {msrv} covers the {len(packages) - len(members)} locked dependencies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
