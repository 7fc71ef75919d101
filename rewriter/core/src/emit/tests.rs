//! Tests of the last passes together: a small C program built with gcc, rewritten, and the
//! output read back with `object`.

use super::*;
use crate::{rewrite, spec::Spec, ErrorKind, Options};
use object::read::elf::{FileHeader as _, ProgramHeader as _, SectionHeader as _};
use std::process::Command;

const SRC: &str = r#"
#include <stdio.h>
__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }
__attribute__((noinline)) int mid(int x) { int s = 0; for (int i = 0; i < x; i++) s += leaf(i); return s; }
int main(int argc, char **argv) { (void)argv; printf("%d\n", mid(argc + 10)); return 0; }
"#;

/// Build `SRC` with `flags`; its bytes.
fn build(tag: &str, flags: &[&str]) -> Vec<u8> {
    let dir = std::env::temp_dir().join(format!("stint-emit-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let (c, exe) = (dir.join("p.c"), dir.join("p"));
    std::fs::write(&c, SRC).expect("write source");
    let st = Command::new("gcc").args(flags).arg("-o").arg(&exe).arg(&c).status().expect("run gcc");
    assert!(st.success(), "gcc {flags:?} failed");
    let data = std::fs::read(&exe).expect("read binary");
    let _ = std::fs::remove_dir_all(&dir);
    data
}

/// Run `exe` (bytes) without measuring; its stdout.
fn run(tag: &str, exe: &[u8]) -> String {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("stint-emit-run-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let path = dir.join("p");
    std::fs::write(&path, exe).expect("write program");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = Command::new(&path).env("STINT_PROFILE", "").current_dir(&dir).output().expect("run program");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{tag}: {:?}, stderr {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn check(tag: &str, data: &[u8], traps: bool) {
    let spec = Spec::default_spec();
    let opts = Options { program: "p", input: None, spec: &spec, traps };
    let p = crate::plan_program(data, &spec, traps).expect("plan");
    let (out, report) = rewrite(data, &opts).expect("rewrite");
    let layout = report.layout.clone().expect("a layout");
    validate_output(&out, &p.plan, &layout).expect("valid output");

    // Every piece of code sits where the layout put it, as the code generation pass makes it
    // when it encodes every piece again (the output holds the layout's sizing run).
    let contents = crate::place::SegmentData::new(&p, "p", None, &spec);
    let placed = crate::place::place(&p.elf, &p.plan, &contents).expect("place");
    let code = crate::codegen::generate(&p.plan, &placed.pieces, &placed.targets).expect("codegen");
    let file = |v: u64| (v - placed.seg_vaddr + placed.seg_offset) as usize;
    for piece in &code {
        assert_eq!(&out[file(piece.start)..file(piece.start) + piece.code.len()], &piece.code[..], "{tag}");
    }
    assert!(placed.pieces.windows(2).all(|w| w[0].at + w[0].len as u64 <= w[1].at), "{tag}: pieces overlap");
    let traps = placed.traps();
    assert!(traps.windows(2).all(|w| w[0].0 < w[1].0), "{tag}: trap table not sorted");
    assert_eq!(!traps.is_empty(), traps_expected(&p.plan), "{tag}");

    // Headers, read back.
    let en = object::LittleEndian;
    let hdr = elf::FileHeader64::<object::LittleEndian>::parse(&*out).expect("ELF header");
    assert_eq!(hdr.e_entry(en), layout.entry_stub, "{tag}");
    let phdrs = hdr.program_headers(en, &*out).expect("program headers");
    let code_seg = phdrs
        .iter()
        .find(|ph| ph.p_type(en) == elf::PT_LOAD && ph.p_vaddr(en) == layout.segment_vaddr)
        .expect("the new PT_LOAD");
    assert_eq!((code_seg.p_offset(en), code_seg.p_filesz(en)), (layout.segment_offset, layout.segment_len));
    assert_eq!(code_seg.p_flags(en), elf::PF_R | elf::PF_X, "{tag}");
    let sections = hdr.sections(en, &*out).expect("section headers");
    let named = |n: &[u8]| sections.iter().find(|s| sections.section_name(en, s).ok() == Some(n)).copied();
    let stint = named(b".stint").expect(".stint");
    assert_eq!(stint.sh_addr(en), layout.segment_vaddr, "{tag}");
    let bss = named(b".stint.bss").expect(".stint.bss");
    assert_eq!(bss.sh_addr(en) + bss.sh_size(en), layout.control + layout.control_len, "{tag}");
    if let Some(eh) = named(b".eh_frame_hdr") {
        let pt = phdrs.iter().find(|ph| ph.p_type(en) == elf::PT_GNU_EH_FRAME).expect("PT_GNU_EH_FRAME");
        assert_eq!((pt.p_vaddr(en), pt.p_filesz(en)), (eh.sh_addr(en), eh.sh_size(en)), "{tag}");
        assert!(eh.sh_addr(en) > layout.segment_vaddr, "{tag}: .eh_frame_hdr is not the new one");
        assert_eq!(stint.sh_addr(en) + stint.sh_size(en), named(b".eh_frame").expect(".eh_frame").sh_addr(en));
    }

    // An output is refused as input, and behaves like the input.
    assert_eq!(crate::input::InputElf::parse(&out).err().map(|e| e.kind()), Some(ErrorKind::AlreadyRewritten));
    assert_eq!(run(tag, &out), run(&format!("{tag}-original"), data), "{tag}");
}

fn traps_expected(plan: &crate::plan::Plan) -> bool {
    plan.points.iter().any(|p| p.tactic == Tactic::Trap) || plan.exits.iter().any(|x| x.tactic == Tactic::Trap)
}

#[test]
fn pie_output_reads_back() {
    check("pie", &build("pie", &["-O2", "-fPIE", "-pie"]), false);
}

#[test]
fn non_pie_with_traps_reads_back() {
    check("nopie-traps", &build("nopie-traps", &["-O1", "-no-pie"]), true);
}

/// Without a spare program-header slot (no PT_GNU_PROPERTY, no PT_NULL: older toolchains)
/// the table moves into the new segment; made here by turning PT_GNU_PROPERTY into a second
/// PT_NOTE, which the kernel and ld.so accept.
#[test]
fn moved_program_headers_read_back() {
    for (tag, flags) in [("moved-pie", &["-O2", "-fPIE", "-pie"][..]), ("moved-nopie", &["-O2", "-no-pie"][..])] {
        let mut data = build(tag, flags);
        let (phoff, phnum) = {
            let (h, _) = pod::from_bytes::<FileHeader64<LE>>(&data).expect("ELF header");
            (h.e_phoff.get(LE) as usize, h.e_phnum.get(LE) as usize)
        };
        let (phdrs, _) = pod::slice_from_bytes_mut::<ProgramHeader64<LE>>(&mut data[phoff..], phnum).expect("phdrs");
        for ph in phdrs.iter_mut().filter(|ph| ph.p_type.get(LE) == elf::PT_GNU_PROPERTY) {
            ph.p_type.set(LE, elf::PT_NOTE);
        }
        let elf = InputElf::parse(&data).expect("parse");
        let placed = crate::place::place(&elf, &crate::plan::Plan::default(), &empty()).expect("place");
        assert!(placed.moved_phdrs.is_some(), "{tag}: a spare slot was found");
        check(tag, &data, false);
    }
}
fn empty() -> crate::place::SegmentData<'static> {
    crate::place::SegmentData {
        meta_json: String::new(),
        program: "p",
        gates: Vec::new(),
        info: Vec::new(),
        names: Vec::new(),
        tid_offset: 0,
        flags: 0,
    }
}

/// The output and the report of a real program (sqlite3, the largest the unit tests use, on
/// a machine that has it; else the small test program) are byte-identical with 1 and with 4
/// threads, with and without traps: every pass spread over the cores (`par::map`) puts its
/// results back in item order.
#[test]
fn one_thread_and_four_give_the_same_bytes() {
    let data = match std::fs::read("/usr/bin/sqlite3") {
        Ok(d) => d,
        Err(_) if std::env::var_os("CI").is_none() => build("threads", &["-O2"]),
        Err(e) => panic!("/usr/bin/sqlite3: {e} (CI installs sqlite3)"),
    };
    let spec = Spec::default_spec();
    for traps in [false, true] {
        let opts = Options { program: "sqlite3", input: None, spec: &spec, traps };
        let run = |threads| {
            let (out, report) = crate::par::with_threads(threads, || rewrite(&data, &opts)).expect("rewrite");
            (out, serde_json::to_string(&report).expect("report JSON"))
        };
        let (one, four) = (run(1), run(4));
        assert!(one.0 == four.0, "traps {traps}: outputs differ ({} and {} bytes)", one.0.len(), four.0.len());
        assert!(one.1 == four.1, "traps {traps}: reports differ");
        assert!(one.0.len() > data.len(), "traps {traps}: nothing added");
    }
}

/// The meta JSON written a chunk of points at a time on every core is the whole `Meta`
/// serialised at once, with one thread and with four.
#[test]
fn the_meta_written_in_chunks_is_the_meta_serialised_whole() {
    let data = match std::fs::read("/usr/bin/sqlite3") {
        Ok(d) => d,
        Err(_) if std::env::var_os("CI").is_none() => build("meta", &["-O2"]),
        Err(e) => panic!("/usr/bin/sqlite3: {e} (CI installs sqlite3)"),
    };
    let spec = Spec::default_spec();
    let p = crate::plan_program(&data, &spec, false).expect("plan");
    assert!(p.plan.points.len() > 2 * crate::rewrite_report::META_CHUNK, "{} points", p.plan.points.len());
    let whole = crate::rewrite_report::meta_whole(&p, "sqlite3", Some("/usr/bin/sqlite3"));
    for threads in [1, 4] {
        let chunked = crate::par::with_threads(threads, || {
            crate::rewrite_report::meta_json(&p, "sqlite3", Some("/usr/bin/sqlite3"))
        });
        assert!(chunked == whole, "{threads} threads: the meta differs ({} and {} bytes)", chunked.len(), whole.len());
    }
}

/// `rewrite_then` hands `then` the bytes `rewrite` returns, once, and returns its value with
/// the report `rewrite` gives (built on another thread meanwhile); `Done` is the last phase.
#[test]
fn rewrite_then_hands_over_the_output_and_the_same_report() {
    let data = build("then", &["-O2"]);
    let spec = Spec::default_spec();
    let opts = Options { program: "p", input: None, spec: &spec, traps: false };
    let (out, report) = rewrite(&data, &opts).expect("rewrite");
    let mut phases = Vec::new();
    let mut calls = 0;
    let (handed, report_then) = crate::rewrite_then(&data, &opts, &mut |ph| phases.push(ph), |o| {
        calls += 1;
        o
    })
    .expect("rewrite_then");
    assert_eq!(calls, 1);
    assert!(handed == out, "outputs differ ({} and {} bytes)", handed.len(), out.len());
    let json = |r: &crate::RewriteReport| serde_json::to_string(r).expect("report JSON");
    assert_eq!(json(&report_then), json(&report));
    assert_eq!(phases.last(), Some(&crate::Phase::Done));
    assert_eq!(phases.iter().filter(|&&p| p == crate::Phase::Done).count(), 1);
}
