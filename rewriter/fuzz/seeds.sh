#!/usr/bin/env bash
# Seed corpus of the fuzz targets, in out/seeds/<target>/: the small committed seeds of
# corpus/<target>/, plus what is too big to commit or made by tools:
#   rewrite: testbins programs built with gcc/g++ (PIE, non-PIE, -O0/-O2, stripped, C++
#            with exceptions, threads), a static -nostdlib program, Debian's /usr/bin/true;
#   profile: synthetic files (stint_profile::synthetic) and the profiles of real runs of
#            rewritten testbins (one thread with call paths; threads with mutex waits),
#            in the profile target's sparse encoding (src/lib.rs, `sparse`).
# Needs gcc, g++, the `stint` binary (built here if absent) and the `seeds` helper of this
# crate (run.sh builds it first).
set -euo pipefail
cd "$(dirname "$0")"
fuzz=$PWD
root=$(cd ../.. && pwd)
out=$fuzz/out/seeds
seeds=$fuzz/target/release/seeds
stint=$root/target/release/stint
[[ -x $stint ]] || (cd "$root" && cargo build --release -p stint-cli)
[[ -x $seeds ]] || { echo "seeds.sh: $seeds missing (run ./run.sh, or cargo afl build --release)" >&2; exit 2; }

rm -rf "$out"
for t in rewrite spec control profile; do
  mkdir -p "$out/$t"
  cp corpus/$t/* "$out/$t/" 2>/dev/null || true
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# rewrite: small programs of every shape the rewriter meets.
gcc -O2 -o "$out/rewrite/recurse-pie-O2" "$root/testbins/recurse.c"
gcc -O0 -fno-pie -no-pie -o "$out/rewrite/recurse-nopie-O0" "$root/testbins/recurse.c"
gcc -O2 -s -o "$out/rewrite/recurse-pie-O2-stripped" "$root/testbins/recurse.c"
gcc -O2 -pthread -o "$out/rewrite/locks_mutex-pie-O2" "$root/testbins/locks_mutex.c"
g++ -O2 -o "$out/rewrite/unwind-cpp-O2" "$root/testbins/unwind.cpp"
cat >"$tmp/tiny.c" <<'C'
static int work(int n) { return n > 1 ? work(n - 1) + n : n; }
void _start(void) {
  __asm__ volatile("mov $60, %%eax; syscall" : : "D"(work(3) & 0) : "memory");
}
C
gcc -O2 -static -nostdlib -o "$out/rewrite/tiny-static-nostdlib" "$tmp/tiny.c"
cp /usr/bin/true "$out/rewrite/debian-true"
# An odd length selects the trap tactic (src/lib.rs, `rewrite`): one byte appended.
{ cat "$out/rewrite/recurse-pie-O2"; printf '\0'; } >"$out/rewrite/recurse-pie-O2-traps"

# profile: synthetic files, and real runs of rewritten programs.
"$seeds" synthetic "$out/profile"
for prog in recurse-pie-O2 locks_mutex-pie-O2; do
  "$stint" rewrite "$out/rewrite/$prog" -o "$tmp/$prog.stint" >/dev/null 2>&1
  STINT_PROFILE="$tmp/$prog.prof" "$tmp/$prog.stint" >/dev/null
  "$seeds" encode "$tmp/$prog.prof" "$out/profile/run-$prog"
done
du -sh "$out"/* | sed "s|$out/||"
