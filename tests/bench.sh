#!/usr/bin/env bash
# What a counted call costs (STYLE 21: a benchmark printing ratios against the same program
# uninstrumented, in one run; never a timed test). The full harness of issue 14 (medians
# with spread, the mutex and import workloads, the rewriter, profile memory, uftrace) is
# tests/bench/perf.py; this script stays the quick look at the call loop and lock pairs.
#
# Builds testbins/bench_calls.c (-O2, PIE), rewrites it with target/release/stint twice (the
# default spec: calls, cpu_time and wall_time; and a spec with calls only), and runs the
# original, both rewritten programs measuring, and the default rewrite with every metric off
# (its profile cannot be created, so the runtime warns and runs unmeasured), and with a
# control file that turns every metric off (`on: []`: deployed with the profile live, so
# `stint ctl` can turn metrics on later; the cost of a point whose metrics are all off),
# interleaved,
# RUNS times each; reports the minimum wall time of each as ns added per call and as a ratio
# to the original.
#
# The default rewrite runs once more with STINT_CALLTREE_NODES=0 (call paths off, D16): the
# difference is what the calling-context tree adds per timed call. Then the machine's rdtsc
# cost, and testbins/matmul.c (4 threads; original, timers with and without call paths).
#
# Then the same for testbins/bench_locks.c (uncontended pthread_mutex_lock/unlock pairs):
# calls only (no wrappers: the spec selects no sync metric), calls + lock_wait + lock_hold
# (both imports go through the wrappers), and that rewrite with every metric off (the
# wrapper thunks fall through to the GOT).
#
# Usage: tests/bench.sh [N]      (N calls, default 100000000; RUNS=5 in the environment;
#                                 LOCKS_N pairs, default N/5)
set -euo pipefail
cd "$(dirname "$0")/.."

N=${1:-100000000}
RUNS=${RUNS:-5}
STINT=${STINT:-target/release/stint}
if [[ ! -x $STINT ]]; then
    echo "bench.sh: $STINT is missing; run: cargo build --release" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/stint-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
gcc -O2 -fPIE -pie -Wall -Werror testbins/bench_calls.c -o "$work/bench_calls"
"$STINT" rewrite "$work/bench_calls" -o "$work/bench_calls.stint" --quiet
echo 'metrics: [{name: calls, kind: counter, at: entry, on_at_start: true}]' >"$work/calls.yaml"
"$STINT" rewrite "$work/bench_calls" -o "$work/bench_calls.calls" --spec "$work/calls.yaml" --quiet
mkdir "$work/profiles"
echo 'on: []' >"$work/off.yaml"

# run NAME CMD...: one timed run, stdout to $work/NAME.out; prints elapsed ns.
run() {
    local name=$1 start end
    shift
    start=$(date +%s%N)
    "$@" >"$work/$name.out" 2>"$work/$name.err"
    end=$(date +%s%N)
    echo $((end - start))
}

best_orig='' best_on='' best_off='' best_timers='' best_ctl='' best_nopaths=''
min() { if [[ -z $1 || $2 -lt $1 ]]; then echo "$2"; else echo "$1"; fi; }
for ((i = 0; i < RUNS; i++)); do
    t=$(run orig env -u STINT_PROFILE "$work/bench_calls" "$N")
    best_orig=$(min "$best_orig" "$t")
    t=$(run on env STINT_PROFILE="$work/profiles/bench_calls.%p.stint" "$work/bench_calls.calls" "$N")
    best_on=$(min "$best_on" "$t")
    t=$(run timers env STINT_PROFILE="$work/profiles/bench_calls.%p.stint" "$work/bench_calls.stint" "$N")
    best_timers=$(min "$best_timers" "$t")
    t=$(run nopaths env STINT_PROFILE="$work/profiles/bench_calls.%p.stint" STINT_CALLTREE_NODES=0 "$work/bench_calls.stint" "$N")
    best_nopaths=$(min "$best_nopaths" "$t")
    t=$(run off env STINT_PROFILE=/nonexistent-dir/p.%p.stint "$work/bench_calls.stint" "$N")
    best_off=$(min "$best_off" "$t")
    t=$(run ctl env STINT_PROFILE="$work/profiles/bench_calls.%p.stint" STINT_CONTROL="$work/off.yaml" "$work/bench_calls.stint" "$N")
    best_ctl=$(min "$best_ctl" "$t")
    for v in on timers nopaths off ctl; do
        if ! cmp -s "$work/orig.out" "$work/$v.out"; then
            echo "bench.sh: the rewritten program ($v) printed something else than the original:" >&2
            cat "$work/orig.out" "$work/$v.out" >&2
            exit 1
        fi
    done
done

echo "bench_calls: $N calls, best wall time of $RUNS runs each"
awk -v n="$N" -v o="$best_orig" -v on="$best_on" -v off="$best_off" -v tm="$best_timers" -v ctl="$best_ctl" -v np="$best_nopaths" 'BEGIN {
    printf "original:     %.3f s (%.2f ns/call)\n", o / 1e9, o / n
    printf "calls on:     %+.2f ns/call (%.2fx)\n", (on - o) / n, on / o
    printf "calls+timers: %+.2f ns/call (%.2fx)\n", (tm - o) / n, tm / o
    printf "  without call paths (STINT_CALLTREE_NODES=0): %+.2f ns/call (%.2fx); call paths add %+.2f ns/call\n", (np - o) / n, np / o, (tm - np) / n
    printf "metrics off:  %+.2f ns/call (%.2fx)\n", (off - o) / n, off / o
    printf "on: [] (ctl): %+.2f ns/call (%.2fx)\n", (ctl - o) / n, ctl / o
}'

# ---- the machine's rdtsc (every timed call reads it twice) ----
cat >"$work/rdtsc.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    unsigned long long s = 0;
    for (long i = 0; i < n; i++)
        s += __rdtsc();
    printf("%llu\n", s & 1);
    return 0;
}
C
gcc -O2 "$work/rdtsc.c" -o "$work/rdtsc"
RN=$((N / 4))
rd=''
for ((i = 0; i < RUNS; i++)); do rd=$(min "$rd" "$(run rdtsc "$work/rdtsc" "$RN")"); done
awk -v n="$RN" -v t="$rd" 'BEGIN { printf "rdtsc:        %.2f ns each (%d reads)\n", t / n, n }'

# ---- timed calls: bench_calls' `step` (x + 1) is too short to time (its ret lies in the
# entry window), so a function a few instructions longer, timed, with and without call paths
cat >"$work/timed.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
volatile long sink;
__attribute__((noipa)) long step(long x) {
    long y = x * 3;
    sink = y;
    y ^= x >> 2;
    return y + 1;
}
int main(int argc, char **argv) {
    long n = atol(argv[1]), acc = 0;
    for (long i = 0; i < n; i++)
        acc += step(i);
    printf("%ld\n", acc);
    return 0;
}
C
gcc -O2 -fPIE -pie "$work/timed.c" -o "$work/timed"
"$STINT" rewrite "$work/timed" -o "$work/timed.stint" --quiet
to='' tt='' tp=''
for ((i = 0; i < RUNS; i++)); do
    to=$(min "$to" "$(run torig env -u STINT_PROFILE "$work/timed" "$N")")
    tt=$(min "$tt" "$(run ttimers env STINT_PROFILE="$work/profiles/timed.%p.stint" "$work/timed.stint" "$N")")
    tp=$(min "$tp" "$(run tnopaths env STINT_PROFILE="$work/profiles/timed.%p.stint" STINT_CALLTREE_NODES=0 "$work/timed.stint" "$N")")
done
echo "timed calls: $N calls of a timed function, best wall time of $RUNS runs each"
awk -v n="$N" -v o="$to" -v t="$tt" -v p="$tp" 'BEGIN {
    printf "original:             %.3f s (%.2f ns/call)\n", o / 1e9, o / n
    printf "calls+timers+paths:   %+.2f ns/call (%.2fx)\n", (t - o) / n, t / o
    printf "  without call paths: %+.2f ns/call (%.2fx); call paths add %+.2f ns/call\n", (p - o) / n, p / o, (t - p) / n
}'

# ---- matmul (seeds/000 Table 3): T threads, N*N calls of innerp, each N multiply-adds ----
MT=${MATMUL_T:-4} MN=${MATMUL_N:-480}
gcc -O2 -fPIE -pie -Wall -Werror -pthread testbins/matmul.c -o "$work/matmul"
"$STINT" rewrite "$work/matmul" -o "$work/matmul.stint" --quiet
mo='' mt='' mp=''
for ((i = 0; i < RUNS; i++)); do
    mo=$(min "$mo" "$(run morig env -u STINT_PROFILE "$work/matmul" "$MT" "$MN")")
    mt=$(min "$mt" "$(run mtimers env STINT_PROFILE="$work/profiles/matmul.%p.stint" "$work/matmul.stint" "$MT" "$MN")")
    mp=$(min "$mp" "$(run mnopaths env STINT_PROFILE="$work/profiles/matmul.%p.stint" STINT_CALLTREE_NODES=0 "$work/matmul.stint" "$MT" "$MN")")
    for v in mtimers mnopaths; do
        if ! cmp -s "$work/morig.out" "$work/$v.out"; then
            echo "bench.sh: the rewritten matmul ($v) printed something else than the original" >&2
            exit 1
        fi
    done
done
echo "matmul: $MT threads, $((MN * MN)) calls of innerp, best wall time of $RUNS runs each"
awk -v n="$((MN * MN))" -v o="$mo" -v t="$mt" -v p="$mp" 'BEGIN {
    printf "original:             %.3f s\n", o / 1e9
    printf "calls+timers+paths:   %+.2f ns/call (%.3fx)\n", (t - o) / n, t / o
    printf "  without call paths: %+.2f ns/call (%.3fx); call paths add %+.2f ns/call\n", (p - o) / n, p / o, (t - p) / n
}'

# ---- wrapped thread-library calls ----
LOCKS_N=${LOCKS_N:-$((N / 5))}
gcc -O2 -fPIE -pie -Wall -Werror -pthread testbins/bench_locks.c -o "$work/bench_locks"
cat >"$work/locks.yaml" <<'YAML'
metrics:
  - {name: calls, kind: counter, at: entry, on_at_start: true}
  - {name: lock_wait, kind: wait, at: sync_calls, on_at_start: true}
  - {name: lock_hold, kind: wait, at: sync_calls, on_at_start: true}
YAML
"$STINT" rewrite "$work/bench_locks" -o "$work/bench_locks.calls" --spec "$work/calls.yaml" --quiet
"$STINT" rewrite "$work/bench_locks" -o "$work/bench_locks.locks" --spec "$work/locks.yaml" --quiet
lo='' lc='' ll='' loff=''
for ((i = 0; i < RUNS; i++)); do
    lo=$(min "$lo" "$(run lorig env -u STINT_PROFILE "$work/bench_locks" "$LOCKS_N")")
    lc=$(min "$lc" "$(run lcalls env STINT_PROFILE="$work/profiles/bench_locks.%p.stint" "$work/bench_locks.calls" "$LOCKS_N")")
    ll=$(min "$ll" "$(run llocks env STINT_PROFILE="$work/profiles/bench_locks.%p.stint" "$work/bench_locks.locks" "$LOCKS_N")")
    loff=$(min "$loff" "$(run loff env STINT_PROFILE=/nonexistent-dir/p.%p.stint "$work/bench_locks.locks" "$LOCKS_N")")
    for v in lcalls llocks loff; do
        if ! cmp -s "$work/lorig.out" "$work/$v.out"; then
            echo "bench.sh: the rewritten program ($v) printed something else than the original:" >&2
            cat "$work/lorig.out" "$work/$v.out" >&2
            exit 1
        fi
    done
done
echo "bench_locks: $LOCKS_N lock/unlock pairs, best wall time of $RUNS runs each"
awk -v n="$LOCKS_N" -v o="$lo" -v c="$lc" -v l="$ll" -v off="$loff" 'BEGIN {
    printf "original:             %.3f s (%.2f ns/pair)\n", o / 1e9, o / n
    printf "calls (no wrappers):  %+.2f ns/pair (%.2fx)\n", (c - o) / n, c / o
    printf "+lock_wait+lock_hold: %+.2f ns/pair (%.2fx)\n", (l - o) / n, l / o
    printf "wrappers, all off:    %+.2f ns/pair (%.2fx)\n", (off - o) / n, off / o
}'
