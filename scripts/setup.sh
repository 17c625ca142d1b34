#!/usr/bin/env bash
# Idempotent setup on a machine with Rust (cargo) and Python >= 3.11 (e.g. Debian 12):
#   .venv/                      virtualenv with maturin and the `test`, `plot`, `sweep`, `dev` extras
#   python/reducelab/_core*.so  the Rust extension, built in release mode by `maturin develop`,
#                               which also installs `reducelab` editable (python/ is used in place)
#                               and the `reducelab` command into .venv/bin.
#   target/release/reducelab-switch  the software switch binary (`reducelab switch`), and
#   target/release/libreducelab_innet.so  its host side's C ABI (REDUCELAB_ALLREDUCE=canary loads it).
#   mpi/build/                  the MPI runtime (libreducelab_mpi.so, the LD_PRELOAD library
#                               libreducelab_pmpi.so, test and benchmark programs), built with
#                               Open MPI's mpicc; Open MPI is installed with apt-get if missing
#                               and we are root, and mpi4py (the `mpi` extra) into .venv.
#   mpi/build-mpich/            the same built against MPICH 4 (an MPI-4 library: MPI_Allreduce_c,
#                               MPI_Allreduce_init), Debian's mpich installed beside Open MPI
#                               (mpicc.mpich, mpiexec.mpich; `mpicc` stays Open MPI's).
#   .cache/mpi4py-<version>/test/  mpi4py's own test suite from its source distribution (the
#                               tests run a subset of its collective tests under LD_PRELOAD).
# Re-running only rebuilds what changed. Honours CARGO_TARGET_DIR and PYTHON (default: python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv

die() { echo "setup: $*" >&2; exit 1; }

command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (rustup) and put ~/.cargo/bin on PATH"
# scripts/test.sh checks the code with cargo fmt and cargo clippy, rustup components of the
# toolchain. A missing one is added from rustup's server; where that cannot be reached this
# gives up after two minutes with a warning (the main job does not need them).
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null 2>&1; then
        echo "setup: adding the rustup components rustfmt and clippy"
        timeout 120 rustup component add rustfmt clippy \
            || echo "setup: 'rustup component add rustfmt clippy' failed (is static.rust-lang.org reachable?);" \
                    "scripts/test.sh needs cargo fmt and cargo clippy" >&2
    else
        echo "setup: cargo fmt or cargo clippy is missing and there is no rustup to add it;" \
             "scripts/test.sh needs both (the toolchain's rustfmt and clippy)" >&2
    fi
fi
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found: install Python >= 3.11"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$PYTHON is Python $("$PYTHON" -c 'import platform; print(platform.python_version())'); need >= 3.11"

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV"
    if ! "$PYTHON" -m venv "$VENV"; then
        # Debian's python3 ships without ensurepip; python3-venv provides it.
        rm -rf "$VENV"
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
            "$PYTHON" -m venv "$VENV"
        else
            die "'$PYTHON -m venv' failed: install python3-venv (sudo apt-get install python3-venv)"
        fi
    fi
fi

# Open MPI for the MPI runtime (mpi/): Debian's packages, only if mpicc is missing.
if ! command -v mpicc >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing Open MPI (openmpi-bin libopenmpi-dev)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev
    else
        echo "setup: mpicc not found and not root with apt-get: the MPI runtime (mpi/) is not built;" \
             "install Open MPI (sudo apt-get install openmpi-bin libopenmpi-dev) and re-run" >&2
    fi
fi
have_mpi=0
command -v mpicc >/dev/null 2>&1 && have_mpi=1
# MPICH as a second library, only beside Open MPI, and only if its compiler wrapper is missing.
if [ "$have_mpi" = 1 ] && ! command -v mpicc.mpich >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing MPICH (mpich libmpich-dev) beside Open MPI"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mpich libmpich-dev >/dev/null \
            || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mpich libmpich-dev >/dev/null; } \
            || echo "setup: installing MPICH failed: the MPICH build (mpi/build-mpich) is skipped" >&2
    else
        echo "setup: mpicc.mpich not found and not root with apt-get: the MPICH build (mpi/build-mpich) is" \
             "skipped; install it with sudo apt-get install mpich libmpich-dev" >&2
    fi
fi
if [ "$have_mpi" = 1 ] && ! command -v make >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make
    else
        die "make not found: install it (sudo apt-get install make) to build the MPI runtime"
    fi
fi

# The build backend plus the package's runtime, `test`, `plot`, `sweep`, `dev` (ruff) and
# (with MPI) `mpi` dependencies, all read from pyproject.toml (installed here rather than by
# maturin so that pip stays quiet on re-runs).
mapfile -t requirements < <(HAVE_MPI=$have_mpi "$VENV/bin/python" - <<'PY'
import tomllib

with open("pyproject.toml", "rb") as f:
    pyproject = tomllib.load(f)
reqs = list(pyproject["build-system"]["requires"])
reqs += pyproject["project"].get("dependencies", [])
import os
extras = ["test", "plot", "sweep", "dev"] + (["mpi"] if os.environ.get("HAVE_MPI") == "1" else [])
for extra in extras:
    reqs += pyproject["project"]["optional-dependencies"][extra]
print("\n".join(dict.fromkeys(reqs)))
PY
)
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"

echo "setup: building the extension (release) and installing reducelab into $VENV"
# maturin develop installs into the active virtualenv; activate it for this command only.
VIRTUAL_ENV="$PWD/$VENV" PATH="$PWD/$VENV/bin:$PATH" \
    "$VENV/bin/maturin" develop --release --quiet

# The software switch (`reducelab switch` runs this binary; docs/switch.md).
echo "setup: building the software switch (target/release/reducelab-switch) and its C ABI (libreducelab_innet.so)"
cargo build --release --quiet -p reducelab-switch -p reducelab-innet

if [ "$have_mpi" = 1 ]; then
    echo "setup: building the MPI runtime (mpi/build)"
    make -C mpi --quiet -j2 CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
    if command -v mpicc.mpich >/dev/null 2>&1; then
        echo "setup: building the MPI runtime against MPICH (mpi/build-mpich)"
        # (-Wno-stringop-overflow: MPICH's MPI_STATUSES_IGNORE is (MPI_Status *)1, which gcc 12
        # reads as a zero-size array)
        make -C mpi --quiet -j2 CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" BUILD=build-mpich \
            MPICC=mpicc.mpich MPIFORT=mpifort.mpich EXTRA_CFLAGS=-Wno-stringop-overflow
    fi
    # mpi4py's own tests ship only in its source distribution: fetched here, once per version,
    # so that the tests never download anything
    m4v=$("$VENV/bin/python" -c 'import mpi4py; print(mpi4py.__version__)' 2>/dev/null || true)
    if [ -n "$m4v" ] && [ ! -f ".cache/mpi4py-$m4v/test/main.py" ]; then
        echo "setup: fetching mpi4py $m4v's source distribution for its test suite (.cache/mpi4py-$m4v)"
        mkdir -p .cache
        tmp=$(mktemp -d)
        # (From PyPI's simple index (PEP 691 JSON), checked against its SHA-256: `pip download
        # --no-binary` would first build Cython from source to prepare metadata, minutes on two cores.)
        if "$VENV/bin/python" - "$m4v" "$tmp/mpi4py-$m4v.tar.gz" <<'PY' \
            && tar -xzf "$tmp/mpi4py-$m4v.tar.gz" -C .cache "mpi4py-$m4v/test"; then
import hashlib, json, sys, urllib.request
version, out = sys.argv[1], sys.argv[2]
index = urllib.request.Request("https://pypi.org/simple/mpi4py/",
                               headers={"Accept": "application/vnd.pypi.simple.v1+json"})
with urllib.request.urlopen(index, timeout=60) as r:
    files = [f for f in json.load(r)["files"] if f["filename"] == f"mpi4py-{version}.tar.gz"]
if not files:
    sys.exit(f"no sdist of mpi4py {version} on PyPI")
with urllib.request.urlopen(files[0]["url"], timeout=120) as r:
    data = r.read()
if hashlib.sha256(data).hexdigest() != files[0]["hashes"]["sha256"]:
    sys.exit("the sdist's SHA-256 does not match PyPI's")
open(out, "wb").write(data)
PY
            :
        else
            echo "setup: could not fetch mpi4py $m4v's sdist: its tests will be skipped" >&2
        fi
        rm -rf "$tmp"
    fi
fi

"$VENV/bin/python" -c 'import reducelab; print("setup: reducelab", reducelab.__version__, "ready in .venv")'
