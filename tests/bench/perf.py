#!/usr/bin/env python3
"""The whole-program benchmark of issue 14 (STYLE 21: ratios against the same program
uninstrumented, in one run; never a timed test). One command:

    tests/bench/perf.py [-o FILE.md]        (QUICK=1: a one-minute smoke run; RUNS=N)

It builds the testbins it needs (gcc -O2, PIE), rewrites them with target/release/stint and
runs every variant of a workload interleaved (round r runs each variant once, in an order
rotated every round), RUNS times (default 7; QUICK=1: 3, with smaller inputs). A rewritten
program must print what the original printed, or the run fails. It reports the median wall
time and the spread (min–max) of each, and the median's cost against the original: ns per
operation and percent. Workloads:

- the machine's floor: rdtsc and CLOCK_THREAD_CPUTIME_ID read costs, and whether the perf
  page offers cap_user_time (tests/bench/clocks.c);
- the call loop (testbins/bench_calls.c): off (the default rewrite, control `on: []`), calls,
  calls+wall, calls+cpu, the default spec (all);
- trampoline layouts for a calls-only point (tests/bench/trampolines.c): hand-written
  copies of the entry trampoline and its alternatives, each against the function called
  directly (CPU time, least of RUNS);
- matmul, 2 threads (testbins/matmul.c): calls on innerp, cpu_time on innerp, default spec;
  at N = 480 (0.05 s), at N = 960 (about 0.45 s, nearer the issue's 0.78 s run), and at
  N = 2 (the fixed start-up and per-thread costs alone, in µs per run);
- the mutex workload (testbins/bench_mutex.c, 4 threads, 10^6 items): off, calls, lock
  metrics (lock_wait + lock_hold), default spec; three times the rounds of the others, and
  a table of its user and system CPU time and context switches;
- uncontended lock/unlock pairs (testbins/bench_locks.c): calls (a spec without lock
  metrics: the imports are counted at their call sites), calls at the wrappers (lock metrics
  defined but off: the thunks count), lock metrics, default spec;
- an import-heavy loop (testbins/bench_imports.c): off, calls, default spec (imports are
  timed);
- clock_gettime(CLOCK_THREAD_CPUTIME_ID) system calls per run (perf stat), the syscall
  the CPU clock's re-synchronisation costs where the perf page offers no cap_user_time;
- the rewriter on /usr/bin/gdb and (if present) node, 3 runs each (with STINT_BEFORE the other
  stint alternating): median time, peak RSS, output size ratio;
- profile memory at 1, 64 and 1,000 short-lived threads (testbins/bench_threads.c): the
  profile file's allocated blocks and the program's peak RSS, default spec;
- uftrace side by side (if installed): the same sources built with -pg, `uftrace record`
  against the -pg build run bare (the call loop with 10^6 calls: uftrace writes 16 bytes
  per event).

ONLY=mutex,locks (a comma-separated list of calls, layouts, matmul, mutex, locks, imports,
syscalls, rewriter, memory, uftrace) runs only those workloads, after the machine's floor
(syscalls needs matmul and mutex).

STINT_BEFORE=/path/to/another/stint adds, next to each rewritten variant, the same rewrite
made by that build, in the same interleaved rounds ("(before)" rows): what a change bought.

The markdown goes to stdout (and to -o FILE); progress to stderr.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICK = os.environ.get("QUICK") == "1"
RUNS = int(os.environ.get("RUNS", "3" if QUICK else "7"))
STINT = os.environ.get("STINT", os.path.join(ROOT, "target/release/stint"))
# Another build of stint (e.g. the main branch's) whose rewrites run as "(before)" variants in
# the same interleaved rounds: what a change bought, measured side by side.
BEFORE = os.environ.get("STINT_BEFORE")
# The workloads to run (ONLY=mutex,locks; unset: all of them).
ONLY = {w for w in os.environ.get("ONLY", "").split(",") if w}


def wanted(section):
    return not ONLY or section in ONLY

CALLS = "metrics: [{name: calls, kind: counter, at: entry, on_at_start: true}]\n"
WALL = CALLS.replace("]", ", {name: wall_time, kind: timer, at: function, on_at_start: true}]")
CPU = CALLS.replace("]", ", {name: cpu_time, kind: timer, at: function, on_at_start: true}]")
INNERP_CALLS = "metrics: [{name: calls, kind: counter, at: entry, functions: [innerp], on_at_start: true}]\n"
INNERP_CPU = "metrics: [{name: cpu_time, kind: timer, at: function, functions: [innerp], on_at_start: true}]\n"
LOCKS = (
    "metrics:\n"
    "  - {name: lock_wait, kind: wait, at: sync_calls, on_at_start: true}\n"
    "  - {name: lock_hold, kind: wait, at: sync_calls, on_at_start: true}\n"
)
# The wrappers are there (lock metrics defined) but off: only calls are measured at them,
# which their thunks count by themselves.
CALLS_WRAPPED = LOCKS.replace("on_at_start: true", "on_at_start: false").replace(
    "metrics:\n", "metrics:\n  - {name: calls, kind: counter, at: entry, on_at_start: true}\n")
OFF = "on: []\n"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Bench:
    def __init__(self, work):
        self.work = work
        self.profiles = os.path.join(work, "profiles")
        os.mkdir(self.profiles)
        self.rows = []  # markdown table rows of the overhead table
        self.cpu_rows = []  # rows of the CPU-time table (workloads run with cpu=True)
        self.last_usage = None  # (user s, system s, voluntary context switches) of the last run

    def path(self, name):
        return os.path.join(self.work, name)

    def gcc(self, src, out, extra=()):
        out = self.path(out)
        cmd = ["gcc", "-O2", "-fPIE", "-pie", "-Wall", "-Werror", "-pthread", *extra,
               os.path.join(ROOT, src if "/" in src else "testbins/" + src), "-o", out]
        subprocess.run(cmd, check=True)
        return out

    def spec(self, name, text):
        p = self.path(name + ".yaml")
        with open(p, "w") as f:
            f.write(text)
        return p

    def rewrite(self, binary, suffix, spec=None, stint=STINT):
        out = binary + "." + suffix
        cmd = [stint, "rewrite", binary, "-o", out, "--quiet"]
        if spec:
            cmd += ["--spec", self.spec(suffix, spec)]
        subprocess.run(cmd, check=True)
        return out

    def run(self, argv, env=None, cwd=None):
        """One run: (wall seconds, peak RSS KiB, stdout)."""
        e = dict(os.environ)
        e.pop("STINT_PROFILE", None)
        e.pop("STINT_CONTROL", None)
        e.update(env or {})
        out = tempfile.TemporaryFile()
        start = time.perf_counter()
        # In the work directory: -pg programs write gmon.out to their cwd.
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=e, cwd=cwd or self.work)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - start
        self.last_usage = (ru.ru_utime, ru.ru_stime, ru.ru_nvcsw)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
        if p.returncode != 0:
            raise SystemExit(f"perf.py: {' '.join(argv)}: exit {p.returncode}")
        return wall, ru.ru_maxrss, text

    def variants(self, label, binary, suffix, spec, args, env):
        """The variant `label` of `binary` rewritten with `spec` (None: the default spec), and
        with STINT_BEFORE its "(before)" twin."""
        v = [(label, [self.rewrite(binary, suffix, spec), *args], env)]
        if BEFORE:
            v.append((label + " (before)", [self.rewrite(binary, suffix + ".before", spec, BEFORE), *args], env))
        return v

    def measured(self, name):
        return {"STINT_PROFILE": os.path.join(self.profiles, name + ".%p.stint")}

    def interleave(self, title, ops, unit, variants, rounds=None, cpu=False):
        """Run `variants` [(label, argv, env)] interleaved `rounds` (RUNS) times; the first is the
        original. Adds one table row per variant; with `cpu`, also rows of user and system CPU
        time and voluntary context switches (medians) to the CPU-time table. Returns the
        medians."""
        log(f"== {title}")
        times = {label: [] for label, _, _ in variants}
        usage = {label: [] for label, _, _ in variants}
        want = None
        for r in range(rounds or RUNS):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for label, argv, env in order:
                wall, _, out = self.run(argv, env)
                times[label].append(wall)
                usage[label].append(self.last_usage)
                if label == variants[0][0]:
                    if want is not None and out != want:
                        raise SystemExit(f"perf.py: {title}: the original printed two different things")
                    want = out
        # Outputs are compared once more, outside the timed loop.
        for label, argv, env in variants[1:]:
            _, _, out = self.run(argv, env)
            if out != want:
                raise SystemExit(f"perf.py: {title} ({label}) printed something else than the original")
        base = statistics.median(times[variants[0][0]])
        med = {}
        for label, _, _ in variants:
            t = times[label]
            m = statistics.median(t)
            med[label] = m
            # A whole run's cost reads better in microseconds.
            scale, per = (1e6, "µs") if unit == "run" else (1e9, "ns")
            if label == variants[0][0]:
                cost = f"{m / ops * scale:.2f} {per}/{unit}"
                pct = "–"
            else:
                cost = f"{(m - base) / ops * scale:+.2f} {per}/{unit}"
                pct = f"{(m / base - 1) * 100:+.1f} %"
            self.rows.append(f"| {title} | {label} | {m:.3f} s | {min(t):.3f}–{max(t):.3f} | {cost} | {pct} |")
            if cpu:
                u, s, v = (statistics.median(x[i] for x in usage[label]) for i in range(3))
                b = [statistics.median(x[i] for x in usage[variants[0][0]]) for i in range(2)]
                vs = "–" if label == variants[0][0] else f"{(u + s) / (b[0] + b[1]) * 100 - 100:+.1f} %"
                self.cpu_rows.append(f"| {title} | {label} | {u:.3f} s | {s:.3f} s | {vs} | {v:.0f} |")
        return med


def main():
    args = sys.argv[1:]
    out_file = None
    if args[:1] == ["-o"] and len(args) == 2:
        out_file = args[1]
    elif args:
        raise SystemExit("usage: tests/bench/perf.py [-o FILE.md]   (QUICK=1, RUNS=N in the environment)")
    if not os.access(STINT, os.X_OK):
        raise SystemExit(f"perf.py: {STINT} is missing; run: cargo build --release")
    started = time.time()
    work = tempfile.mkdtemp(prefix="stint-perf.")
    try:
        md = bench(Bench(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    md.append(f"\nHarness wall time: {time.time() - started:.0f} s.")
    text = "\n".join(md) + "\n"
    sys.stdout.write(text)
    if out_file:
        with open(out_file + ".tmp", "w") as f:
            f.write(text)
        os.replace(out_file + ".tmp", out_file)


def trampoline_layouts(b, n):
    """tests/bench/trampolines.c: each layout's CPU time (user + system, the least of RUNS
    interleaved runs) against `base`, the function called directly."""
    log("== trampoline layouts")
    tr = b.gcc("tests/bench/trampolines.c", "bench_trampolines")
    names = subprocess.run([tr, "list"], check=True, capture_output=True, text=True).stdout.split()
    cpu = {v: [] for v in names}
    for r in range(RUNS):
        for v in names[r % len(names):] + names[:r % len(names)]:
            p = subprocess.Popen([tr, v, str(n)], stdout=subprocess.PIPE)
            out = p.stdout.read().decode()
            _, status, ru = os.wait4(p.pid, 0)
            if os.waitstatus_to_exitcode(status) != 0 or f"acc {n * (n + 1) // 2}," not in out:
                raise SystemExit(f"perf.py: trampolines {v}: {out.strip()}")
            cpu[v].append(ru.ru_utime + ru.ru_stime)
    base = min(cpu["base"])
    rows = ["## Trampoline layouts (calls-only point)", "",
            f"`tests/bench/trampolines.c`, {n:.0e} calls; CPU time, least of {RUNS} interleaved runs.", "",
            "| layout | least CPU | cost |", "|---|---|---|"]
    for v in names:
        t = min(cpu[v])
        cost = f"{t / n * 1e9:.2f} ns/call" if v == "base" else f"{(t - base) / n * 1e9:+.2f} ns/call"
        rows.append(f"| {v} | {t:.3f} s | {cost} |")
    return rows + [""]


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    load = open("/proc/loadavg").read().split()[0]
    return f"{cpu}, {os.cpu_count()} CPUs, Linux {os.uname().release}, load average {load} at the start"


def bench(b):
    n_calls = 10_000_000 if QUICK else 100_000_000
    mm_n = 240 if QUICK else 480
    mm_big = 480 if QUICK else 960
    mutex_n = 200_000 if QUICK else 1_000_000
    lock_n = 2_000_000 if QUICK else 20_000_000
    imp_n = 1_000_000 if QUICK else 10_000_000
    md = ["# stint performance figures", "",
          f"Machine: {machine()}. `QUICK={int(QUICK)}`, {RUNS} interleaved runs per variant; "
          "median wall time, min–max, and the median's cost against the original.", ""]

    # ---- the machine's floor ----
    clocks = b.gcc("tests/bench/clocks.c", "bench_clocks")
    _, _, out = b.run([clocks, "200000" if QUICK else "1000000"])
    floor = dict(line.split() for line in out.decode().splitlines() if line.count(" ") == 1)
    rdtsc = float(floor["rdtsc_ns"])
    md += ["## The machine's floor", "",
           f"- `rdtsc`: {floor['rdtsc_ns']} ns (a timed call reads it twice: floor {2 * rdtsc:.1f} ns)",
           f"- `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`: {floor['cputime_ns']} ns (a system call)",
           f"- perf task-clock page `cap_user_time`: {floor['cap_user_time']} "
           "(1: the CPU clock re-synchronises from the page, no system call; 0: one system call "
           "per context switch)", ""]

    # ---- the call loop ----
    if wanted("calls"):
        bench_calls(b, n_calls)
    if wanted("layouts"):
        md += trampoline_layouts(b, n_calls)
    mm = mm_args = mx = None
    if wanted("matmul"):
        mm, mm_args = bench_matmul(b, mm_n, mm_big)
    if wanted("mutex"):
        mx = bench_mutex(b, mutex_n)
    if wanted("locks"):
        bench_locks(b, lock_n)
    if wanted("imports"):
        bench_imports(b, imp_n)
    return md + report(b, mm, mm_args, mx, n_calls, mm_n, mutex_n, imp_n)


def ctl(b, name):
    """The environment of an "off" variant: measured, with every point switched off."""
    e = b.measured(name)
    e["STINT_CONTROL"] = b.spec("off-" + name, OFF)
    return e


def bench_calls(b, n_calls):
    calls = b.gcc("bench_calls.c", "bench_calls")
    a = [str(n_calls)]
    v = [("original", [calls, *a], None),
         *b.variants("off (on: [])", calls, "all", None, a, ctl(b, "calls-off")),
         *b.variants("calls", calls, "calls", CALLS, a, b.measured("c")),
         *b.variants("calls+wall", calls, "wall", WALL, a, b.measured("w")),
         *b.variants("calls+cpu", calls, "cpu", CPU, a, b.measured("u")),
         *b.variants("default (all)", calls, "all", None, a, b.measured("a"))]
    b.interleave(f"call loop, {n_calls:.0e} calls", n_calls, "call", v)


def bench_matmul(b, mm_n, mm_big):
    mm = b.gcc("matmul.c", "matmul")
    mm_args = ["2", str(mm_n)]
    v = [("original", [mm, *mm_args], None),
         *b.variants("calls on innerp", mm, "calls", INNERP_CALLS, mm_args, b.measured("mc")),
         *b.variants("cpu_time on innerp", mm, "cpu", INNERP_CPU, mm_args, b.measured("mu")),
         *b.variants("default (all)", mm, "all", None, mm_args, b.measured("ma"))]
    b.interleave(f"matmul, 2 threads, {mm_n * mm_n} innerp calls", mm_n * mm_n, "call", v)
    # The same at a size whose run (about 0.45 s) is closer to the 0.78 s: what one
    # run costs at start-up and per thread (profile file, TSC calibration, the timer
    # calibration, each thread's column and perf page) weighs 10x less than above.
    big = ["2", str(mm_big)]
    v = [("original", [mm, *big], None),
         *[(label, [argv[0], *big], env) for label, argv, env in v[1:]]]
    b.interleave(f"matmul, 2 threads, {mm_big * mm_big} innerp calls", mm_big * mm_big, "call", v)
    # ... and those fixed costs alone: 2 x 2 matrices, 4 innerp calls.
    v = [("original", [mm, "2", "2"], None),
         *[(label, [argv[0], "2", "2"], env) for label, argv, env in v[1:]]]
    b.interleave("matmul start-up, 2 threads, 4 innerp calls", 1, "run", v)
    return mm, mm_args


def bench_mutex(b, mutex_n):
    mx = b.gcc("bench_mutex.c", "bench_mutex")
    a = [str(mutex_n)]
    v = [("original", [mx, *a], None),
         *b.variants("off (on: [])", mx, "all", None, a, ctl(b, "mutex-off")),
         *b.variants("calls", mx, "calls", CALLS, a, b.measured("xc")),
         *b.variants("lock_wait+lock_hold", mx, "locks", LOCKS, a, b.measured("xl")),
         *b.variants("default (all)", mx, "all", None, a, b.measured("xa"))]
    # Four threads on two cores: the wall time depends on how the threads meet at the mutex
    # (the original alone spreads over 2x); three times the rounds, and the CPU-time table.
    b.interleave(f"mutex producer/consumer, 4 threads, {mutex_n} items", mutex_n, "item", v, rounds=3 * RUNS,
                 cpu=True)
    return mx


def bench_locks(b, lock_n):
    lk = b.gcc("bench_locks.c", "bench_locks")
    a = [str(lock_n)]
    v = [("original", [lk, *a], None),
         *b.variants("calls", lk, "calls", CALLS, a, b.measured("lc")),
         *b.variants("calls, wrapped (lock metrics off)", lk, "callsw", CALLS_WRAPPED, a, b.measured("lw")),
         *b.variants("lock_wait+lock_hold", lk, "locks", LOCKS, a, b.measured("ll")),
         *b.variants("default (all)", lk, "all", None, a, b.measured("la"))]
    b.interleave(f"uncontended lock/unlock, {lock_n} pairs", lock_n, "pair", v, cpu=True)


def bench_imports(b, imp_n):
    im = b.gcc("bench_imports.c", "bench_imports")
    a = [str(imp_n)]
    v = [("original", [im, *a], None),
         *b.variants("off (on: [])", im, "all", None, a, ctl(b, "imports-off")),
         *b.variants("calls", im, "calls", CALLS, a, b.measured("ic")),
         *b.variants("default (all)", im, "all", None, a, b.measured("ia"))]
    b.interleave(f"import-heavy loop, {imp_n} steps (2 imports each)", imp_n, "step", v)


def report(b, mm, mm_args, mx, n_calls, mm_n, mutex_n, imp_n):
    """The tables of what ran, then the workloads that are not interleaved."""
    md = ["## Overheads", "",
           "| workload | variant | median | min–max (s) | cost | vs original |",
           "|---|---|---|---|---|---|", *b.rows, ""]
    md += ["## CPU time of the mutex workload and the lock/unlock pairs", "",
           "Medians over the same rounds as their rows above (`wait4` rusage of the whole process): the "
           "wall time of four threads on two cores depends on how they meet at the mutex; the CPU "
           "time shows what the instrumentation itself costs, in the program (user) and in the "
           "kernel (system: futex calls, context switches, and a perf event's work at each switch "
           "of a thread that opened one).", "",
           "| workload | variant | user | system | user+system vs original | voluntary context switches |",
           "|---|---|---|---|---|---|", *b.cpu_rows, ""]

    # ---- system calls of the CPU clock ----
    if shutil.which("perf") and mm and mx and wanted("syscalls"):
        log("== system calls")
        md += ["## CPU-clock system calls per run", "",
               "`perf stat`: `clock_gettime` system calls (in the rewritten programs: the "
               "CLOCK_THREAD_CPUTIME_ID re-synchronisations of the CPU clock), `futex` calls and "
               "context switches; one run each.", "",
               "| program | variant | clock_gettime | futex | context switches |", "|---|---|---|---|---|"]
        events = "syscalls:sys_enter_clock_gettime,syscalls:sys_enter_futex,context-switches"
        for title, label, argv, env in [
            ("mutex workload", "original", [mx, str(mutex_n)], None),
            ("mutex workload", "default (all)", [mx + ".all", str(mutex_n)], b.measured("sx")),
            ("matmul 2 threads", "original", [mm, *mm_args], None),
            ("matmul 2 threads", "cpu_time on innerp", [mm + ".cpu", *mm_args], b.measured("sm")),
        ]:
            cfile = b.path("perf-stat.csv")
            try:
                b.run(["perf", "stat", "-x", ",", "-o", cfile, "-e", events, "--", *argv], env)
            except SystemExit as e:
                log(f"perf.py: perf stat failed ({e}); no system-call counts")
                md.pop()
                break
            counts = {}
            for line in open(cfile):
                f = line.strip().split(",")
                if len(f) > 2:
                    counts[f[2].split(":")[-1]] = f[0]
            md.append(f"| {title} | {label} | {counts.get('sys_enter_clock_gettime', '?')} "
                      f"| {counts.get('sys_enter_futex', '?')} | {counts.get('context-switches', '?')} |")
        md.append("")

    # ---- the rewriter on big binaries ----
    if wanted("rewriter"):
        md += rewriter(b)
    if wanted("memory"):
        md += memory(b)
    if shutil.which("uftrace") and wanted("uftrace"):
        md += uftrace(b, n_calls, mm_args or ["2", str(mm_n)], mm_n, mutex_n, imp_n)
    return md


def rewriter(b):
    """gdb and node rewritten 3 times each (once, gdb only, with QUICK=1) by this stint
    and with STINT_BEFORE by the other one, alternating in each round: medians side by side."""
    md = ["## The rewriter", "", "| input | stint | size | median time | min–max (s) | peak RSS | output / input |",
           "|---|---|---|---|---|---|---|"]
    stints = [("", STINT)] + ([(" (before)", BEFORE)] if BEFORE else [])
    for name in ["/usr/bin/gdb", "/usr/bin/node"]:
        real = os.path.realpath(name)
        if not os.path.exists(real) or (QUICK and "node" in name):
            continue
        log(f"== rewrite {real}")
        out = b.path("big.stint")
        ts = {label: [] for label, _ in stints}
        rss = {label: [] for label, _ in stints}
        size_out = {}
        for _ in range(1 if QUICK else 3):
            for label, exe in stints:
                wall, kib, _ = b.run([exe, "rewrite", real, "-o", out, "--quiet"])
                ts[label].append(wall)
                rss[label].append(kib)
                size_out[label] = os.path.getsize(out)
                os.unlink(out)
        size_in = os.path.getsize(real)
        for label, _ in stints:
            t = ts[label]
            md.append(f"| {real} | stint{label} | {size_in / 1e6:.1f} MB | {statistics.median(t):.2f} s "
                      f"| {min(t):.2f}–{max(t):.2f} | {max(rss[label]) / 1024:.0f} MiB "
                      f"| {size_out[label] / size_in:.2f} |")
    md.append("")
    return md


def memory(b):
    log("== profile memory")
    th = b.gcc("bench_threads.c", "bench_threads")
    builds = [("", b.rewrite(th, "all"))]
    if BEFORE:
        builds.append((" (before)", b.rewrite(th, "all.before", None, BEFORE)))
    md = ["## Profile memory (default spec)", "",
           "| threads | stint | profile file allocated | per thread | peak RSS original | peak RSS rewritten |",
           "|---|---|---|---|---|---|"]
    for t in [1, 64, 1000]:
        _, rss0, _ = b.run([th, str(t)])
        for label, tha in builds:
            d = os.path.join(b.profiles, f"threads{t}{label.strip(' ()')}")
            os.mkdir(d)
            _, rss1, _ = b.run([tha, str(t)], {"STINT_PROFILE": os.path.join(d, "t.%p.stint")})
            blocks = sum(os.stat(os.path.join(d, f)).st_blocks * 512 for f in os.listdir(d))
            md.append(f"| {t} | this{label} | {blocks / 1024:.0f} KiB | {blocks / 1024 / (t + 1):.0f} KiB "
                      f"| {rss0 / 1024:.1f} MiB | {rss1 / 1024:.1f} MiB |")
    md.append("")
    return md


def uftrace(b, n_calls, mm_args, mm_n, mutex_n, imp_n):
    """The same workloads under `uftrace record` (sources built with -pg, as uftrace needs),
    against the -pg build run bare."""
    uf_calls = 100_000 if QUICK else 1_000_000
    data = b.path("uftrace.data")
    rows = []
    for title, src, args, ops, unit in [
        (f"call loop, {uf_calls:.0e} calls", "bench_calls.c", [str(uf_calls)], uf_calls, "call"),
        (f"matmul, 2 threads, {mm_n * mm_n} innerp calls", "matmul.c", mm_args, mm_n * mm_n, "call"),
        (f"mutex producer/consumer, {mutex_n} items", "bench_mutex.c", [str(mutex_n)], mutex_n, "item"),
        (f"import-heavy loop, {uf_calls} steps", "bench_imports.c", [str(uf_calls)], uf_calls, "step"),
    ]:
        log(f"== uftrace {title}")
        pg = b.gcc(src, src[:-2] + ".pg", ["-pg"])
        base, rec = [], []
        for _ in range(max(1, RUNS // 2)):
            base.append(b.run([pg, *args])[0])
            shutil.rmtree(data, ignore_errors=True)
            rec.append(b.run(["uftrace", "record", "-d", data, pg, *args])[0])
        shutil.rmtree(data, ignore_errors=True)
        mb, mr = statistics.median(base), statistics.median(rec)
        rows.append(f"| {title} | {mb:.3f} s | {mr:.3f} s ({min(rec):.3f}–{max(rec):.3f}) "
                    f"| {(mr - mb) / ops * 1e9:+.1f} ns/{unit} | {(mr / mb - 1) * 100:+.0f} % |")
    return ["## uftrace side by side", "",
            "Built with `-pg`; `uftrace record` (its defaults: every -pg function and library call) "
            "against the -pg build run bare; medians of " + str(max(1, RUNS // 2)) + " runs.", "",
            "| workload | -pg bare | uftrace record | cost | vs bare |", "|---|---|---|---|---|", *rows, ""]


if __name__ == "__main__":
    main()
