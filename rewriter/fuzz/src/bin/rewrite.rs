//! AFL target `rewrite` (see [`stint_fuzz::rewrite`]). Built by `cargo afl build`, it reads its
//! input from AFL; built by plain `cargo build`, it runs the target on each file named on
//! the command line (a replay of a crash or of a corpus).

#[cfg(fuzzing)]
fn main() {
    afl::fuzz!(|data: &[u8]| stint_fuzz::rewrite(data));
}

#[cfg(not(fuzzing))]
fn main() {
    stint_fuzz::replay("rewrite");
}
