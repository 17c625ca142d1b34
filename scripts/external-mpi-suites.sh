#!/usr/bin/env bash
# External MPI test suites against the ReduceLab interposition library (LD_PRELOAD), from
# sources you downloaded beforehand: this script never fetches anything. Not run by CI
# (scripts/test.sh runs mpi4py's own collective tests instead, see docs/mpi.md).
#
#   scripts/external-mpi-suites.sh [--library openmpi|mpich] [--ranks "2 4"]
#                                  [--algorithms "auto ring swing rabenseifner"] SUITE...
#   SUITE: osu          OSU Micro-Benchmarks: osu_allreduce -c (validation) for MPI_CHAR (the
#                       default), MPI_INT and MPI_FLOAT, small sizes; any "Fail" fails the run
#          mpich-tests  MPICH's test/mpi/coll programs of allreduce, reduce_scatter_block and
#                       allgather (those of its testlist whose name matches), through its
#                       runtests driver; its summary says how many passed
#
# Sources (put them in $REDUCELAB_EXTERNAL_SRC, default .cache/external/):
#   osu-micro-benchmarks-7.2.tar.gz  (or another 7.x: the newest osu-micro-benchmarks-7.*.tar.gz)
#       https://mvapich.cse.ohio-state.edu/download/mvapich/osu-micro-benchmarks-7.2.tar.gz
#   mpich-4.0.2.tar.gz  (only its test/mpi directory is used)
#       https://www.mpich.org/static/downloads/4.0.2/mpich-4.0.2.tar.gz
# e.g.  mkdir -p .cache/external && cd .cache/external && curl -LO <url>   (once, by hand)
#
# Needs mpi/build (Open MPI) or mpi/build-mpich (MPICH) from scripts/setup.sh. Builds go to
# .cache/external/build-<library>/ and are reused. Exit status: 0 when every run passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

library=openmpi
ranks="2 4"
algorithms="auto ring swing rabenseifner"
suites=()
while [ $# -gt 0 ]; do
    case "$1" in
    --library) library=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --algorithms) algorithms=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    osu|mpich-tests) suites+=("$1"); shift ;;
    *) echo "external-mpi-suites: unknown argument '$1' (suites: osu, mpich-tests; --help)" >&2; exit 2 ;;
    esac
done
[ ${#suites[@]} -gt 0 ] || { echo "external-mpi-suites: name a suite: osu and/or mpich-tests (--help)" >&2; exit 2; }

SRC=${REDUCELAB_EXTERNAL_SRC:-$ROOT/.cache/external}
case "$library" in
openmpi)
    MPICC=mpicc MPICXX=mpicxx BUILD=$ROOT/mpi/build
    # CMD: the launcher for $1 ranks with RUN_ENV (KEY=VALUE words) exported to the ranks only
    launcher() { CMD=(mpirun --allow-run-as-root --oversubscribe --mca op ^avx -np "$1")
        for kv in "${RUN_ENV[@]}"; do CMD+=(-x "$kv"); done; } ;;
mpich)
    MPICC=mpicc.mpich MPICXX=mpicxx.mpich BUILD=$ROOT/mpi/build-mpich
    launcher() { CMD=(mpiexec.mpich -n "$1")
        for kv in "${RUN_ENV[@]}"; do CMD+=(-genv "${kv%%=*}" "${kv#*=}"); done; } ;;
*) echo "external-mpi-suites: --library '$library' is not openmpi or mpich" >&2; exit 2 ;;
esac
command -v "$MPICC" >/dev/null || { echo "external-mpi-suites: $MPICC not found" >&2; exit 2; }
PRELOAD=$BUILD/libreducelab_pmpi.so
[ -f "$PRELOAD" ] || { echo "external-mpi-suites: $PRELOAD not built (run scripts/setup.sh)" >&2; exit 2; }
OUT=$ROOT/.cache/external/build-$library
mkdir -p "$OUT"
status=0

need() {
    [ -f "$SRC/$1" ] || { echo "external-mpi-suites: $SRC/$1 missing: download it by hand (see --help);" \
        "this script fetches nothing" >&2; exit 2; }
}

run_osu() {
    local tarball
    tarball=$(ls "$SRC"/osu-micro-benchmarks-7.*.tar.gz 2>/dev/null | sort -V | tail -1)
    [ -n "$tarball" ] || need osu-micro-benchmarks-7.2.tar.gz
    local dir=$OUT/$(basename "$tarball" .tar.gz)
    if [ ! -d "$dir" ]; then tar -xzf "$tarball" -C "$OUT"; fi
    local exe
    exe=$(find "$dir" -name osu_allreduce -type f -perm -u+x 2>/dev/null | head -1)
    if [ -z "$exe" ]; then
        (cd "$dir" && ./configure -q CC="$MPICC" CXX="$MPICXX" && make -s -j2) >"$OUT/osu-build.log" 2>&1 \
            || { echo "external-mpi-suites: building OSU failed (see $OUT/osu-build.log)" >&2; exit 1; }
        exe=$(find "$dir" -name osu_allreduce -type f -perm -u+x | head -1)
    fi
    for np in $ranks; do
        for alg in $algorithms; do
            for type in mpi_char mpi_int mpi_float; do
                RUN_ENV=(LD_PRELOAD="$PRELOAD" REDUCELAB_ALLREDUCE="$alg" REDUCELAB_VERBOSE=1)
                local log=$OUT/osu-$np-$alg-$type.log
                launcher "$np"
                if timeout 600 "${CMD[@]}" "$exe" -c -T "$type" -m 1:65536 -i 20 -x 2 >"$log" 2>&1 && ! grep -q "Fail" "$log" \
                    && grep -q "Pass" "$log"; then
                    echo "osu_allreduce -c -T $type p=$np $alg: PASS ($(grep -c Pass "$log") sizes;" \
                         "$(grep -m1 -o '[0-9]* collectives ran ReduceLab schedules, [0-9]* went' "$log") to the library)"
                else
                    echo "osu_allreduce -c -T $type p=$np $alg: FAIL (see $log)"; status=1
                fi
            done
        done
    done
}

run_mpich_tests() {
    need mpich-4.0.2.tar.gz
    local dir=$OUT/mpich-4.0.2/test/mpi
    if [ ! -d "$dir" ]; then tar -xzf "$SRC/mpich-4.0.2.tar.gz" -C "$OUT" mpich-4.0.2/test/mpi mpich-4.0.2/confdb 2>/dev/null \
        || tar -xzf "$SRC/mpich-4.0.2.tar.gz" -C "$OUT" mpich-4.0.2/test/mpi; fi
    if [ ! -f "$dir/util/mtest.o" ] && [ ! -f "$dir/util/libmtest_single.la" ]; then
        (cd "$dir" && ./configure -q CC="$MPICC" CXX="$MPICXX" --disable-fortran --disable-cxx --disable-romio \
            --disable-spawn --disable-ft-tests --disable-perftest && make -s -C util) >"$OUT/mpich-tests-build.log" 2>&1 \
            || { echo "external-mpi-suites: configuring MPICH's tests failed (see $OUT/mpich-tests-build.log)" >&2; exit 1; }
    fi
    # the collective programs whose name says allreduce, reduce_scatter_block or allgather
    grep -E '^(allred|iallred|nballred|redscatblk|red_scat_block|allgather|iallgather|nballgather|op_)' \
        "$dir/coll/testlist" >"$OUT/coll-testlist" || true
    local names
    names=$(awk '{print $1}' "$OUT/coll-testlist" | sort -u)
    # shellcheck disable=SC2086
    (cd "$dir/coll" && make -s $names) >>"$OUT/mpich-tests-build.log" 2>&1 \
        || { echo "external-mpi-suites: building MPICH's coll tests failed (see $OUT/mpich-tests-build.log)" >&2; exit 1; }
    for alg in $algorithms; do
        RUN_ENV=(LD_PRELOAD="$PRELOAD" REDUCELAB_ALLREDUCE="$alg")
        local log=$OUT/mpich-tests-$alg.log
        : >"$log"
        local pass=0 fail=0
        while read -r name np rest; do
            [ -n "$name" ] || continue
            [ -n "$np" ] || np=2
            launcher "$np"
            echo "== $name $np" >>"$log"
            if (cd "$dir/coll" && timeout 120 "${CMD[@]}" "./$name" >"$OUT/last.log" 2>&1) \
                && grep -q "No Errors" "$OUT/last.log"; then
                pass=$((pass + 1))
            else
                fail=$((fail + 1)); echo "FAILED: $name $np ($alg)" >>"$log"
            fi
            cat "$OUT/last.log" >>"$log"
        done <"$OUT/coll-testlist"
        echo "MPICH coll tests ($alg): $pass passed, $fail failed (log: $log)"
        [ "$fail" = 0 ] || status=1
    done
}

for s in "${suites[@]}"; do
    case "$s" in
    osu) run_osu ;;
    mpich-tests) run_mpich_tests ;;
    esac
done
exit $status
