#!/usr/bin/env bash
# Bounded AFL++ run of the fuzz targets (README, "Fuzzing"):
#   ./run.sh [SECONDS_PER_TARGET [TARGET...]]      (default: 60 s each, all four targets)
# Builds the targets with `cargo afl build --release`, makes the seeds (seeds.sh), runs
# `cargo afl fuzz -V SECONDS` per target into out/<target>/, prints AFL's figures, and fails
# (exit 1) if any target found a crash or a hang: each one is replayed so its panic shows.
# FUZZ_KEEP=1 keeps the previous findings (out/<target>) and resumes from them.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(rewrite spec control profile)

cargo afl build --release
./seeds.sh

# In containers: no CPU-frequency governor, no core dumps to wait for, no free CPU to pin.
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1 AFL_NO_UI=1
export AFL_SKIP_CRASHES=0 AFL_QUIET=1
bad=0
for t in "${targets[@]}"; do
  dict=()
  [[ -f dict/$t.dict ]] && dict=(-x "dict/$t.dict")
  input=out/seeds/$t
  if [[ ${FUZZ_KEEP:-0} = 1 && -d out/$t/default/queue ]]; then input=-; else rm -rf "out/$t"; fi
  # -t: a rewrite of a seed takes milliseconds; 10 s is a hang, not a slow machine.
  cargo afl fuzz -V "$secs" -t 10000 "${dict[@]}" -i "$input" -o "out/$t" -- "target/release/$t" \
    >"out/$t.log" 2>&1 || { echo "afl-fuzz $t failed:"; tail -30 "out/$t.log"; bad=1; continue; }
  s=out/$t/default/fuzzer_stats
  printf '%-8s %s\n' "$t" "$(awk -F' *: *' '$1~/^(execs_done|execs_per_sec|corpus_count|saved_crashes|saved_hangs|run_time)$/ {printf "%s=%s ", $1, $2}' "$s")"
  for kind in crashes hangs; do
    for f in out/$t/default/$kind/id:*; do
      [[ -e $f ]] || continue
      bad=1
      echo "== $t: $kind: $f"
      timeout 20 "target/release/$t" <"$f" 2>&1 | tail -15 || true
    done
  done
done
exit $bad
