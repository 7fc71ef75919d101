//! stint's integration tests: one test crate with a module per area (as cargo's own
//! `tests/testsuite/main.rs`), so the harness in `common` compiles once and every test runs
//! in one process. Test names read `module::test`, e.g. `locks::mutex_hold::pie_o2::same_output`;
//! run one area with `cargo test --release -p stint --test it -- locks::`.
//!
//! The modules whose checks measure time (`timers`, `locks`, `control`, `top`) take turns
//! through [`common::cpu_turn`], and the other tests that run programs hold a
//! [`common::cpu_share`] so they never run next to a turn: the
//! modules used to be separate test binaries that cargo ran one after another, and now
//! share one process whose harness runs tests in parallel.
//!
//! | module | what it tests |
//! | --- | --- |
//! | `behaviour` | every `testbins/*.c` program in every variant: same behaviour rewritten, its `//# expect:` directives |
//! | `callpaths` | calling-context trees (D16): exact calls per path and thread, self time, `--calltree`, `--callers`, `--callees`, overflow, the switch |
//! | `compensation` | overhead compensation (D21): a tiny function's time per call and its caller's time against the uninstrumented program, `--raw` |
//! | `control` | `stint ctl` and the control file on running programs |
//! | `debian` | real programs from Debian packages (pigz, sqlite3, lua) |
//! | `diff` | `stint diff` on real runs: the exact calls gate, `--min-abs`, JSON inputs and output, markdown, bad input |
//! | `errors` | bad input: one-line errors naming the file |
//! | `gotwrap` | thread-library wrappers for calls through the GOT (Rust std, `-fno-plt`): names, creators, lock counts and waits as with PLT calls; warnings for uses no wrapper sees |
//! | `imports` | calls into shared libraries as points (D19), tail jumps into imports (D17), exceptions and cancellation through patched call sites |
//! | `location` | where profiles go without `STINT_PROFILE` (D15): never the cwd |
//! | `merge` | `stint merge` and `stint report` over several runs: exact sums, forked children, bad inputs |
//! | `locks` | the thread-library wrappers: waits, states, objects |
//! | `prometheus` | `stint serve` scraped by a real Prometheus: exact calls, lock waits, bad files, ended processes, promtool |
//! | `proctree` | process trees: every image of a forking, exec'ing program measured, each naming its parent; `report --tree` |
//! | `names` | names from separate debug info (build-id, debuglink, debuginfod, `--symbols`), lock objects by data symbol, join targets |
//! | `runbatch` | `stint run` (behaves as the program, report, cache) and `stint batch` (trees, `--in-place`, `--restore`) |
//! | `rseqclk` | the CPU clock's switch detector (rseq area or perf page): timed functions that block (futex, sleep, pipe), take a signal or run in a fork child get their own CPU time, with glibc, glibc's rseq off and musl; no wrapper calibration without wrappers |
//! | `report_opts` | `stint report --sort/--top/--thread/--width/--format csv`, `off` cells |
//! | `security` | the profile file's permissions and the environment of setuid programs |
//! | `states` | RUN split into on a CPU, off a CPU and waiting for a CPU (schedstat): a sleeping and a spinning thread |
//! | `suite` | a test suite in CI: `batch`, runs, `merge`, `diff` against a checked-in baseline |
//! | `statics` | static executables (glibc `-static`, `-static-pie`, musl): exact per-thread counts, lock waits, forks; busybox; Go refused |
//! | `slowwrap` | compensation for the wrappers' full path (D21): rwlocks, a trylock and a contended relock in a timed function against the uninstrumented program, exact lock figures, `--raw` |
//! | `snapshots` | insta snapshots of `inspect` and `report` (in `snapshots/`) |
//! | `timers` | exits, the shadow stack and the CPU/wall timers against the programs' own clocks |
//! | `tools` | the tools the tests need |
//! | `top` | `stint top` and `stint ls` |
//! | `traps` | safe traps (issue 12): a program that blocks every signal and handles SIGTRAP itself, rewritten with `--traps`, behaves as the original; exact counts of its trap sites; signal wrappers only where there are trap sites |
//! | `unwind` | unwinding through added code: C++ exceptions, `.eh_frame_hdr`, gdb backtraces |
//! | `wrapcomp` | compensation for the thread-library wrappers (D21): a timed lock loop and its caller against the uninstrumented program, exact lock figures, `--raw` |

mod common;

mod behaviour;
mod buildtrees;
mod callpaths;
mod compensation;
mod control;
mod corpus;
mod debian;
mod diff;
mod entrycov;
mod errors;
mod exitcov;
mod export;
mod faults;
mod gotwrap;
mod imports;
mod location;
mod locks;
mod merge;
mod names;
mod proctree;
mod prometheus;
mod report_opts;
mod rseqclk;
mod runbatch;
mod sampling;
mod security;
mod slowwrap;
mod snapshots;
mod states;
mod statics;
mod suite;
mod timers;
mod tools;
mod top;
mod traps;
mod unwind;
mod wrapcomp;
