//! Tests of the analysis: small C programs built with gcc, and the system's `ls`.

use super::*;
use crate::testdir::TempDir;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh directory under the system temp dir.
fn temp_dir(tag: &str) -> TempDir {
    TempDir::new("stint-analysis", tag)
}

/// Compile `src` with gcc and `flags` into `dir/name`.
fn gcc(dir: &Path, name: &str, src: &str, flags: &[&str]) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).expect("write source");
    let out = dir.join(name);
    let st = Command::new("gcc").args(flags).arg("-o").arg(&out).arg(&c).status().expect("run gcc");
    assert!(st.success(), "gcc {flags:?} {name} failed");
    out
}

fn strip(src: &Path, dst: &Path) {
    let st = Command::new("strip").arg("-o").arg(dst).arg(src).status().expect("run strip");
    assert!(st.success(), "strip failed");
}

fn analyze_file(path: &Path) -> Analysis {
    let data = std::fs::read(path).expect("read binary");
    let elf = InputElf::parse(&data).expect("parse ELF");
    analyze(&elf).expect("analyze")
}

fn by_name<'a>(an: &'a Analysis, name: &str) -> &'a Function {
    an.functions.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no function {name}"))
}

/// Invariants every analysis must satisfy.
fn check_invariants(an: &Analysis) {
    for w in an.functions.windows(2) {
        assert!(w[0].address < w[1].address, "functions not sorted/unique at 0x{:x}", w[1].address);
    }
    for f in &an.functions {
        assert!(f.size > 0, "{} has size 0", f.name);
        assert!(an.branch_targets.contains(&f.address), "{} entry not a target", f.name);
        assert!(f.padding <= MAX_PADDING);
        if f.padding > 0 {
            assert!(an.branch_targets.range(f.end()..f.end() + f.padding).next().is_none());
        }
    }
}

const COLD_SRC: &str = r#"
#include <stdio.h>
#include <stdlib.h>

__attribute__((cold, noinline)) void report(long x) { fprintf(stderr, "odd value %ld\n", x); }

__attribute__((noinline)) long work(long *v, int n) {
    long s = 0;
    for (int i = 0; i < n; i++) {
        if (__builtin_expect(v[i] < 0, 0)) {
            fprintf(stderr, "negative %ld at %d\n", v[i], i);
            abort();
        }
        if (v[i] == 77) { report(v[i]); s -= 5; }
        s += v[i] * 3 + (s >> 2);
    }
    return s;
}

int main(int argc, char **argv) {
    long v[4] = {argc, 2, 3, 4};
    (void)argv;
    printf("%ld\n", work(v, 4));
    return 0;
}
"#;

#[test]
fn cold_part_with_symbols_and_stripped() {
    let dir = temp_dir("cold");
    let bin = gcc(&dir, "cold", COLD_SRC, &["-O2"]);
    let an = analyze_file(&bin);
    check_invariants(&an);
    let work = by_name(&an, "work");
    assert_eq!(work.kind, FunctionKind::Function);
    assert_eq!(work.source, FunctionSource::Symtab);
    let cold = by_name(&an, "work.cold");
    assert_eq!(cold.kind, FunctionKind::ColdPart { parent: Some(work.address) });
    assert_eq!(by_name(&an, "main").kind, FunctionKind::Function);
    assert_eq!(by_name(&an, "report").kind, FunctionKind::Function);

    let stripped = dir.join("cold.stripped");
    strip(&bin, &stripped);
    let sa = analyze_file(&stripped);
    check_invariants(&sa);
    // Every function that has an FDE is found again, with the same kind.
    for f in &sa.functions {
        assert_eq!(f.source, FunctionSource::EhFrame, "{}", f.name);
        assert_eq!(f.name, format!("sub_{:x}", f.address));
    }
    for addr in [work.address, cold.address, by_name(&an, "main").address, by_name(&an, "report").address] {
        let f = sa.functions.iter().find(|f| f.address == addr).expect("found from .eh_frame");
        let orig = an.functions.iter().find(|f| f.address == addr).expect("original");
        assert_eq!(f.kind, orig.kind, "kind of 0x{addr:x} ({})", orig.name);
        assert_eq!(f.size, orig.size, "size of 0x{addr:x} ({})", orig.name);
    }
    // The stripped binary knows less (crtstuff's size-0 symbols are gone), never more; inside
    // the functions it finds, it knows the same targets.
    assert!(sa.branch_targets.is_subset(&an.branch_targets));
    for f in &sa.functions {
        let a: Vec<_> = sa.branch_targets.range(f.address..f.end()).collect();
        let b: Vec<_> = an.branch_targets.range(f.address..f.end()).collect();
        assert_eq!(a, b, "targets in 0x{:x}", f.address);
    }
}

const SWITCH_SRC: &str = r#"
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int dispatch(int op, int a, int b) {
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return b ? a / b : 0;
    case 4: return a & b;
    case 5: return a | b;
    case 6: return a ^ b;
    case 7: return a << (b & 7);
    case 8: return a >> (b & 7);
    case 9: return printf("%d\n", a);
    case 10: return -a;
    default: return 42;
    }
}

int main(int argc, char **argv) {
    int s = 0;
    for (int i = 0; i < 12; i++) s += dispatch(i * argc, atoi(argv[0]) + 3, 5);
    return s & 1;
}
"#;

#[test]
fn pic_switch_table_is_resolved() {
    let dir = temp_dir("switch");
    let bin = gcc(&dir, "switch", SWITCH_SRC, &["-O2", "-fPIE", "-pie"]);
    let an = analyze_file(&bin);
    check_invariants(&an);
    let f = by_name(&an, "dispatch");
    assert!(!f.unresolved_indirect_jump, "dispatch unresolved");
    // The case labels: the targets of the table. Find the table with the decoder: every
    // target inside the function that is not a direct jump target must come from the table.
    let data = std::fs::read(&bin).unwrap();
    let elf = InputElf::parse(&data).unwrap();
    let ins = decode_at(&elf, f.address, f.size);
    assert!(ins.iter().any(|x| x.flow_control() == iced_x86::FlowControl::IndirectBranch), "no table jump");
    let inner: Vec<u64> = an.branch_targets.range(f.address + 1..f.end()).copied().collect();
    let direct: std::collections::BTreeSet<u64> = ins
        .iter()
        .filter(|x| {
            matches!(
                x.flow_control(),
                iced_x86::FlowControl::ConditionalBranch | iced_x86::FlowControl::UnconditionalBranch
            )
        })
        .map(|x| x.near_branch_target())
        .collect();
    let from_table = inner.iter().filter(|t| !direct.contains(t)).count();
    assert!(from_table >= 5, "only {from_table} table targets: {inner:x?}");
    // Every target is an instruction start.
    let starts: std::collections::BTreeSet<u64> = ins.iter().map(|x| x.ip()).collect();
    for t in &inner {
        assert!(starts.contains(t) || *t == f.end(), "target 0x{t:x} is not an instruction start");
    }
    // The same in a non-PIE build (absolute table).
    let bin2 = gcc(&dir, "switch-nopie", SWITCH_SRC, &["-O2", "-fno-pie", "-no-pie"]);
    let an2 = analyze_file(&bin2);
    check_invariants(&an2);
    let f2 = by_name(&an2, "dispatch");
    assert!(!f2.unresolved_indirect_jump, "non-PIE dispatch unresolved");
    assert!(an2.branch_targets.range(f2.address + 1..f2.end()).count() >= 8);
}

/// Switches and computed gotos of several shapes.
const TABLES_SRC: &str = r#"
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int dense(int op, int a, int b) {
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return b ? a / b : 0;
    case 4: return a & b;
    case 5: return a | b;
    case 6: return a ^ b;
    case 7: return a << (b & 7);
    case 8: return a >> (b & 7);
    case 9: return printf("%d\n", a);
    case 10: return -a;
    default: return 42;
    }
}

__attribute__((noinline)) long interp(const unsigned char *code, long *stack) {
    long acc = 0;
    for (;;) {
        switch (*code++) {
        case 0: return acc;
        case 1: acc += *stack++; break;
        case 2: acc -= *stack++; break;
        case 3: acc *= 3; break;
        case 4: acc = -acc; break;
        case 5: acc ^= 0x55; break;
        case 6: acc <<= 1; break;
        case 7: acc >>= 1; break;
        case 8: acc += printf("%ld\n", acc); break;
        case 9: acc |= 1; break;
        case 10: if (acc < 0) { fprintf(stderr, "neg\n"); abort(); } break;
        default: fprintf(stderr, "bad op %d\n", code[-1]); abort();
        }
    }
}

__attribute__((noinline)) int letters(int c, int x) {
    switch (c) {
    case 'a': return x + 1;
    case 'b': return x * 7;
    case 'c': return x - 9;
    case 'e': return x ^ 3;
    case 'f': return puts("f");
    case 'h': return x / 3;
    case 'k': return x % 5;
    case 'm': return x << 2;
    case 'n': return x >> 1;
    case 'q': return ~x;
    default: return 0;
    }
}

__attribute__((noinline)) int two(int a, int b) {
    int r = 0;
    switch (a) {
    case 0: r = 5; break; case 1: r = b; break; case 2: r = b * 2; break; case 3: r = puts("x"); break;
    case 4: r = b - 1; break; case 5: r = b + 9; break; case 6: r = b / 7; break; case 7: r = 77; break;
    }
    switch (b) {
    case 10: r += 1; break; case 11: r -= 3; break; case 12: r *= 5; break; case 13: r = puts("y"); break;
    case 14: r ^= 9; break; case 15: r |= 2; break; case 16: r &= 6; break; case 17: r += a; break;
    }
    return r;
}

__attribute__((noinline)) int gotos(int i) {
    static const int offs[] = { &&l0 - &&l0, &&l1 - &&l0, &&l2 - &&l0, &&l3 - &&l0 };
    int r = 0;
    goto *(&&l0 + offs[i & 3]);
l0: r += 1;
l1: r += 10;
l2: r += 100;
l3: r += puts("g");
    return r;
}

__attribute__((noinline)) int gotos_abs(int i) {
    static void *const tbl[] = { &&m0, &&m1, &&m2 };
    int r = 0;
    goto *tbl[i % 3];
m0: r += 2;
m1: r += 20;
m2: r += puts("h");
    return r;
}

int main(int argc, char **argv) {
    unsigned char prog[] = {1, 3, 5, 8, 9, 0};
    long st[] = {4, 5, 6};
    (void)argv;
    return (dense(argc, 3, 4) + (int)interp(prog, st) + letters('a' + argc, 3) + two(argc, 12) + gotos(argc) + gotos_abs(argc)) & 1;
}
"#;

/// Labels referenced by the jump tables (and label-difference tables) of a GCC `.s` file.
fn table_labels(asm: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in asm.lines() {
        let t = line.trim();
        let rest = t.strip_prefix(".long").or_else(|| t.strip_prefix(".quad")).map(str::trim);
        if let Some(r) = rest {
            let first = r.split('-').next().unwrap_or("").trim();
            if first.starts_with(".L") {
                out.push(first.to_string());
            }
        }
    }
    out
}

/// Build TABLES_SRC with `flags`, keeping the local labels (`-Wa,-L`), and check that every
/// label a table refers to is a branch target and no function is unresolved.
fn check_tables(tag: &str, compile: &[&str], link: &[&str], expect_cold: bool) {
    use object::{Object, ObjectSymbol};
    let dir = temp_dir(tag);
    let c = dir.join("t.c");
    std::fs::write(&c, TABLES_SRC).unwrap();
    let s = dir.join("t.s");
    let st = Command::new("gcc").args(compile).arg("-S").arg("-o").arg(&s).arg(&c).status().unwrap();
    assert!(st.success());
    let bin = dir.join("t");
    let st = Command::new("gcc").args(link).arg("-Wa,-L").arg("-o").arg(&bin).arg(&s).status().unwrap();
    assert!(st.success());
    let asm = std::fs::read_to_string(&s).unwrap();
    let labels = table_labels(&asm);
    assert!(labels.len() >= 40, "only {} table labels", labels.len());
    let data = std::fs::read(&bin).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let addr: HashMap<String, u64> =
        file.symbols().filter_map(|s| Some((s.name().ok()?.to_string(), s.address()))).collect();
    let an = analyze_file(&bin);
    check_invariants(&an);
    for f in an.functions.iter().filter(|f| f.source == FunctionSource::Symtab) {
        assert!(!f.unresolved_indirect_jump, "{tag}: {} unresolved", f.name);
    }
    for l in &labels {
        let a = addr.get(l).unwrap_or_else(|| panic!("{tag}: no symbol {l}"));
        assert!(an.branch_targets.contains(a), "{tag}: table label {l} at 0x{a:x} is not a branch target");
    }
    // GCC moved some cases into cold parts; the tables point there.
    let colds: Vec<&Function> = an.functions.iter().filter(|f| f.name.contains(".cold")).collect();
    assert!(!expect_cold || !colds.is_empty(), "{tag}: no cold part");
    for f in colds {
        let parent = by_name(&an, f.name.split(".cold").next().unwrap_or_default());
        assert_eq!(f.kind, FunctionKind::ColdPart { parent: Some(parent.address) }, "{tag}: {}", f.name);
    }
    // Stripped: the same kinds and the same targets inside every function.
    let stripped = dir.join("t.stripped");
    strip(&bin, &stripped);
    let sa = analyze_file(&stripped);
    check_invariants(&sa);
    for f in &sa.functions {
        let o = an.functions.iter().find(|g| g.address == f.address).expect("function known with symbols");
        assert_eq!(f.kind, o.kind, "{tag}: stripped kind of {}", o.name);
        assert_eq!(f.unresolved_indirect_jump, o.unresolved_indirect_jump, "{tag}: {}", o.name);
        let a: Vec<_> = sa.branch_targets.range(f.address..f.end()).collect();
        let b: Vec<_> = an.branch_targets.range(f.address..f.end()).collect();
        assert_eq!(a, b, "{tag}: targets in {}", o.name);
    }
}

#[test]
fn jump_tables_pie() {
    check_tables("tables-pie", &["-O2", "-fPIE"], &["-pie"], true);
}

#[test]
fn jump_tables_non_pie() {
    check_tables("tables-exec", &["-O2", "-fno-pie"], &["-no-pie"], true);
}

#[test]
fn jump_tables_pie_cet() {
    check_tables("tables-cet", &["-O2", "-fPIE", "-fcf-protection=full"], &["-pie"], true);
}

#[test]
fn jump_tables_other_levels() {
    check_tables("tables-o0", &["-O0", "-fPIE"], &["-pie"], false);
    check_tables("tables-o0-exec", &["-O0", "-fno-pie"], &["-no-pie"], false);
    check_tables("tables-o3", &["-O3", "-fPIE"], &["-pie"], false);
    check_tables("tables-os", &["-Os", "-fPIE"], &["-pie"], false);
}

/// C++ with exceptions: landing pads, cold parts of mangled functions.
const CPP_SRC: &str = r#"
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace ns {
struct Guard {
    int *p;
    explicit Guard(int *q) : p(q) { ++*p; }
    ~Guard() { --*p; }
};

__attribute__((noinline)) int risky(int x) {
    if (x > 100) throw std::runtime_error("too big: " + std::to_string(x));
    return x * 2;
}

__attribute__((noinline)) int work(std::vector<int> &v, int *depth) {
    Guard g(depth);
    int s = 0;
    for (int x : v) {
        try {
            s += risky(x);
        } catch (const std::runtime_error &e) {
            std::fprintf(stderr, "caught %s\n", e.what());
            s -= 1;
        }
    }
    if (__builtin_expect(s < -1000, 0)) {
        std::fprintf(stderr, "weird %d\n", s);
        std::abort();
    }
    return s;
}
}  // namespace ns

int main(int argc, char **) {
    std::vector<int> v{1, 2, 300, argc};
    int depth = 0;
    std::printf("%d %d\n", ns::work(v, &depth), depth);
    return 0;
}
"#;

/// Landing-pad labels of the call-site tables in a GCC `.s` file.
fn landing_pad_labels(asm: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_table = false;
    let mut field = 0;
    for line in asm.lines() {
        let t = line.trim();
        if t.starts_with(".LLSDACSB") && t.ends_with(':') {
            in_table = true;
            field = 0;
            continue;
        }
        if t.starts_with(".LLSDACSE") && t.ends_with(':') {
            in_table = false;
            continue;
        }
        if in_table {
            if let Some(v) = t.strip_prefix(".uleb128") {
                if field % 4 == 2 {
                    let lab = v.trim().split('-').next().unwrap_or("").trim();
                    if lab.starts_with(".L") {
                        out.push(lab.to_string());
                    }
                }
                field += 1;
            }
        }
    }
    out
}

#[test]
fn cpp_exceptions_and_names() {
    use object::{Object, ObjectSymbol};
    let dir = temp_dir("cpp");
    let cc = dir.join("t.cc");
    std::fs::write(&cc, CPP_SRC).unwrap();
    let s = dir.join("t.s");
    let st = Command::new("g++").args(["-O2", "-S", "-o"]).arg(&s).arg(&cc).status().unwrap();
    assert!(st.success());
    let bin = dir.join("t");
    let st = Command::new("g++").arg("-Wa,-L").arg("-o").arg(&bin).arg(&s).status().unwrap();
    assert!(st.success());
    let asm = std::fs::read_to_string(&s).unwrap();
    let pads = landing_pad_labels(&asm);
    assert!(pads.len() >= 2, "landing pads: {pads:?}");
    let data = std::fs::read(&bin).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let addr: HashMap<String, u64> =
        file.symbols().filter_map(|s| Some((s.name().ok()?.to_string(), s.address()))).collect();
    let an = analyze_file(&bin);
    check_invariants(&an);
    for l in &pads {
        let a = addr[l];
        assert!(an.branch_targets.contains(&a), "landing pad {l} at 0x{a:x} is not a branch target");
    }
    let work = by_name(&an, "ns::work");
    let risky = by_name(&an, "ns::risky");
    assert_eq!(work.kind, FunctionKind::Function);
    assert_eq!(by_name(&an, "ns::work.cold").kind, FunctionKind::ColdPart { parent: Some(work.address) });
    assert_eq!(by_name(&an, "ns::risky.cold").kind, FunctionKind::ColdPart { parent: Some(risky.address) });
    // Stripped: the same kinds.
    let stripped = dir.join("t.stripped");
    strip(&bin, &stripped);
    let sa = analyze_file(&stripped);
    check_invariants(&sa);
    for f in &sa.functions {
        if let Some(o) = an.functions.iter().find(|g| g.address == f.address) {
            assert_eq!(f.kind, o.kind, "stripped kind of {}", o.name);
        }
    }
    for l in &pads {
        assert!(sa.branch_targets.contains(&addr[l]), "stripped: landing pad {l}");
    }
}

const CET_SRC: &str = r#"
#include <stdio.h>
__attribute__((noinline)) int add(int a, int b) { return a + b; }
__attribute__((noinline)) static int twice(int a) { return add(a, a) * 2; }
int main(int argc, char **argv) { (void)argv; printf("%d\n", twice(argc)); return 0; }
"#;

#[test]
fn cet_functions_have_endbr() {
    let dir = temp_dir("cet");
    let bin = gcc(&dir, "cet", CET_SRC, &["-O2", "-fcf-protection=full"]);
    let an = analyze_file(&bin);
    check_invariants(&an);
    assert!(by_name(&an, "add").has_endbr);
    assert!(by_name(&an, "main").has_endbr);
    let bin2 = gcc(&dir, "nocet", CET_SRC, &["-O2", "-fcf-protection=none"]);
    let an2 = analyze_file(&bin2);
    assert!(!by_name(&an2, "add").has_endbr);
}

#[test]
fn system_ls() {
    let path = Path::new("/usr/bin/ls");
    if !path.exists() {
        eprintln!("no /usr/bin/ls; skipped");
        return;
    }
    let data = std::fs::read(path).unwrap();
    let elf = InputElf::parse(&data).unwrap();
    let t = std::time::Instant::now();
    let an = analyze(&elf).unwrap();
    let took = t.elapsed();
    check_invariants(&an);
    assert!(an.functions.len() > 100, "only {} functions", an.functions.len());
    let plt: Vec<&crate::input::Section> =
        elf.sections.iter().filter(|s| PLT_SECTIONS.contains(&s.name.as_str())).collect();
    for f in an.functions.iter().filter(|f| !f.is_cold_part()) {
        assert!(!plt.iter().any(|s| f.address >= s.addr && f.address < s.addr + s.size), "{} in a PLT", f.name);
    }
    let count = |p: &dyn Fn(&Function) -> bool| an.functions.iter().filter(|f| p(f)).count();
    eprintln!(
        "/usr/bin/ls: {} functions (symtab {}, dynsym {}, eh_frame {}), {} cold parts ({} without parent), {} unresolved, {} with endbr, {} with padding, {} branch targets, {} PLT stubs, {:?}",
        an.functions.len(),
        count(&|f| f.source == FunctionSource::Symtab),
        count(&|f| f.source == FunctionSource::Dynsym),
        count(&|f| f.source == FunctionSource::EhFrame),
        count(&|f| f.is_cold_part()),
        count(&|f| f.kind == FunctionKind::ColdPart { parent: None }),
        count(&|f| f.unresolved_indirect_jump),
        count(&|f| f.has_endbr),
        count(&|f| f.padding > 0),
        an.branch_targets.len(),
        an.plt_stubs.len(),
        took
    );
}

/// `STINT_ANALYZE=/path cargo test … dump_env -- --ignored --nocapture`: print the analysis.
#[test]
#[ignore]
fn dump_env() {
    let Ok(path) = std::env::var("STINT_ANALYZE") else { return };
    let data = std::fs::read(&path).unwrap();
    let elf = InputElf::parse(&data).unwrap();
    let t = std::time::Instant::now();
    let an = analyze(&elf).unwrap();
    let took = t.elapsed();
    for f in &an.functions {
        println!(
            "{:x} {:5} {:?} {:?} endbr={} pad={} unres={} {}",
            f.address, f.size, f.source, f.kind, f.has_endbr, f.padding, f.unresolved_indirect_jump, f.name
        );
    }
    for s in &an.plt_stubs {
        println!("plt {:x} {:x} {}", s.address, s.got_slot, s.name);
    }
    println!("{} functions, {} targets, {:?}", an.functions.len(), an.branch_targets.len(), took);
}

/// `STINT_COMPARE=/path/to/unstripped cargo test … compare_env -- --ignored --nocapture`:
/// analyse the binary and a stripped copy, and compare the cold-part classification.
#[test]
#[ignore]
fn compare_env() {
    let Ok(path) = std::env::var("STINT_COMPARE") else { return };
    let dir = temp_dir("compare");
    let stripped = dir.join("stripped");
    strip(Path::new(&path), &stripped);
    let t = std::time::Instant::now();
    let an = analyze_file(Path::new(&path));
    let t1 = t.elapsed();
    let t = std::time::Instant::now();
    let sa = analyze_file(&stripped);
    let t2 = t.elapsed();
    check_invariants(&an);
    check_invariants(&sa);
    let orig: HashMap<u64, &Function> = an.functions.iter().map(|f| (f.address, f)).collect();
    let (mut tp, mut fp, mut fneg, mut tn, mut bad_parent, mut missing) = (0, 0, 0, 0, 0, 0);
    for f in &sa.functions {
        let Some(o) = orig.get(&f.address) else {
            missing += 1;
            continue;
        };
        match (o.is_cold_part(), f.is_cold_part()) {
            (true, true) => {
                tp += 1;
                if o.kind != f.kind {
                    bad_parent += 1;
                    if bad_parent <= 10 {
                        println!("parent differs: {} {:?} vs {:?}", o.name, o.kind, f.kind);
                    }
                }
            }
            (false, true) => {
                fp += 1;
                if fp <= 100 {
                    println!("false cold: {:x} {} {}", o.address, o.size, o.name);
                }
            }
            (true, false) => {
                fneg += 1;
                if fneg <= 20 {
                    println!("missed cold: {:x} {}", o.address, o.name);
                }
            }
            (false, false) => tn += 1,
        }
    }
    let unres = |a: &Analysis| a.functions.iter().filter(|f| f.unresolved_indirect_jump).count();
    println!(
        "symbols: {} functions, {} cold, {} unresolved, {:?}; stripped: {} functions ({} not in the symbol analysis), {} unresolved, {:?}",
        an.functions.len(),
        an.functions.iter().filter(|f| f.is_cold_part()).count(),
        unres(&an),
        t1,
        sa.functions.len(),
        missing,
        unres(&sa),
        t2
    );
    println!("cold: {tp} right ({bad_parent} with another parent), {fneg} missed, {fp} false; {tn} functions right");
}

/// Corrupted inputs give errors or analyses, never panics (debug builds check overflow too).
#[test]
fn corrupted_inputs_never_panic() {
    let dir = temp_dir("fuzz");
    let bin = gcc(&dir, "fuzz", SWITCH_SRC, &["-O2", "-fPIE", "-pie"]);
    let orig = std::fs::read(&bin).unwrap();
    let elf = InputElf::parse(&orig).unwrap();
    let regions: Vec<(usize, usize)> = [".eh_frame", ".text", ".rela.dyn", ".dynsym", ".rodata", ".symtab", ".dynamic"]
        .iter()
        .filter_map(|n| elf.section(n))
        .map(|s| (s.offset as usize, s.size as usize))
        .chain(std::iter::once((0, orig.len())))
        .filter(|r| r.1 > 0)
        .collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut analysed = 0;
    for round in 0..600 {
        let mut data = orig.clone();
        let (off, len) = regions[round % regions.len()];
        for _ in 0..1 + rnd() % 8 {
            let at = off + (rnd() as usize) % len;
            let v = rnd();
            match v % 4 {
                0 => data[at] = (v >> 8) as u8,
                1 => data[at] ^= 1 << (v % 8),
                2 => data[at] = 0xff,
                _ => data[at] = 0,
            }
        }
        if let Ok(elf) = InputElf::parse(&data) {
            if analyze(&elf).is_ok() {
                analysed += 1;
            }
        }
    }
    assert!(analysed > 100, "only {analysed} corrupted inputs analysed");
}

/// `STINT_SURVEY=/usr/bin cargo test --release … survey_env -- --ignored --nocapture`: analyse
/// every executable in a directory; print errors and totals.
#[test]
#[ignore]
fn survey_env() {
    let Ok(dir) = std::env::var("STINT_SURVEY") else { return };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).collect();
    entries.sort();
    let (mut files, mut funcs, mut cold, mut unres, mut errors) = (0, 0, 0, 0, 0);
    let mut slowest = (std::time::Duration::ZERO, PathBuf::new());
    for p in entries {
        let Ok(data) = std::fs::read(&p) else { continue };
        let Ok(elf) = InputElf::parse(&data) else { continue };
        let t = std::time::Instant::now();
        match analyze(&elf) {
            Ok(an) => {
                let took = t.elapsed();
                if took > slowest.0 {
                    slowest = (took, p.clone());
                }
                files += 1;
                funcs += an.functions.len();
                cold += an.functions.iter().filter(|f| f.is_cold_part()).count();
                let u = an.functions.iter().filter(|f| f.unresolved_indirect_jump).count();
                unres += u;
                if u > 0 {
                    println!("{}: {} unresolved of {}", p.display(), u, an.functions.len());
                }
            }
            Err(e) => {
                errors += 1;
                println!("{}: {e}", p.display());
            }
        }
    }
    println!(
        "{files} files, {funcs} functions, {cold} cold parts, {unres} unresolved, {errors} errors; slowest {slowest:?}"
    );
}

/// The merged jump-table extents answer as a scan of every table does, with nested,
/// overlapping, touching and empty tables.
#[test]
fn table_extents_answer_as_the_scan_does() {
    let tables = vec![(100, 120), (110, 115), (118, 130), (130, 140), (200, 200), (300, 310), (50, 60), (305, 400)];
    let ext = Extents::new(tables.clone());
    assert_eq!(ext.0, vec![(50, 60), (100, 140), (300, 400)]);
    for a in 0..450u64 {
        let scan = tables.iter().any(|t| a >= t.0 && a < t.1);
        assert_eq!(ext.contains(a), scan, "0x{a:x}");
    }
}

/// The radix sort of addresses gives `sort_unstable`'s order: duplicates, a span needing
/// three passes, one needing more than four (the fallback), and short inputs.
#[test]
fn addresses_sort_as_sort_unstable_does() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for (n, span) in [(100_000, 1u64 << 26), (50_000, 1 << 12), (20_000, u64::MAX), (100, 1 << 20)] {
        let mut v: Vec<u64> = (0..n).map(|_| 0x40_0000 + next() % span.max(1)).collect();
        v.extend_from_within(..n / 10);
        let mut want = v.clone();
        want.sort_unstable();
        sort_addresses(&mut v);
        assert_eq!(v, want, "n {n} span {span:#x}");
    }
}
