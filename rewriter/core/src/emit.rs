//! Emitting the output ELF (D12): new memory for the runtime, the new code segment, the
//! patched windows and the new entry point. The program's own code and data never move.
//!
//! ```text
//! input                                   output
//! LOAD  R    0x000000 ...                 LOAD  R    0x000000 ...              (unchanged)
//! LOAD  R E  0x001000 ... .text           LOAD  R E  0x001000 ... .text        windows → jmp
//! LOAD  RW   0x003df0 memsz 0x260         LOAD  RW   0x003df0 memsz ↑          + RtState page
//!                                                                              + control pages
//! NOTE  R    0x000338 (= GNU_PROPERTY)    LOAD  R E  <end of file, page>       config, meta,
//!                                                                              runtime image,
//!                                                                              stubs, trampolines,
//!                                                                              .eh_frame(_hdr)
//! e_entry 0x1040                          e_entry → entry stub → 0x1040
//! ```
//! - Writable memory is the last RW segment's bss, grown: no new writable segment and no
//!   file bytes. The control pages are page-aligned so the runtime can map the profile's
//!   control region over them.
//! - The new code segment takes the program-header slot of the PT_NOTE that duplicates
//!   PT_GNU_PROPERTY (the kernel and ld.so read the property through PT_GNU_PROPERTY), so the
//!   header table keeps its place. The slot moves to just after the last PT_LOAD, keeping
//!   PT_LOADs sorted by address.
//! - Without such a slot (older toolchains emit no PT_GNU_PROPERTY) the table moves into the
//!   new segment, one entry longer, at a vaddr - offset equal to the first PT_LOAD's, so
//!   AT_PHDR is right both on kernels that compute it from the first PT_LOAD and on those that
//!   look for the PT_LOAD holding e_phoff. The file grows by the bss size in zeros for that.
//! - No segment is both writable and executable.
//! - Unwind information (D5, `unwind`): the segment ends with a combined `.eh_frame` (the
//!   program's, rt-lib's and one FDE per generated piece) and a new `.eh_frame_hdr`;
//!   PT_GNU_EH_FRAME and the section headers point there. A program without PT_GNU_EH_FRAME
//!   keeps its headers, and the added code has no unwind information.

use crate::codegen::{self, TimerEnv, TrampolineEnv};
use crate::error::{Error, Result};
use crate::input::{InputElf, Segment};
use crate::plan::{Plan, Tactic, JMP_LEN};
use crate::rtimage;
use crate::unwind::{self, Initial, Piece};
use object::elf;
use std::cell::RefCell;
use stint_layout::{
    align_up, counter_offset, ctl_len, gate_offset, RtConfig, WrapSite, CONFIG_MAGIC, CONFIG_VERSION, N_COUNTER_SLOTS,
    N_METRICS, PAGE, RT_STATE_SIZE, SEGMENT_MAGIC, SLOT_ACTIVE, SLOT_CALLS, SLOT_CPU_TICKS, SLOT_WALL_TICKS,
};

/// What the emitter needs besides the plan.
pub struct EmitInput<'a> {
    /// Self-description JSON for the profile file.
    pub meta_json: &'a str,
    /// Program name for the default profile path.
    pub program: &'a str,
    /// Initial gate byte per (metric, point), metric-major.
    pub gates: Vec<u8>,
    /// Per point: the `metric_bit`s it can measure | `POINT_INFO_WRAP`.
    pub info: Vec<u8>,
    /// Point names, each NUL-terminated, in point order.
    pub names: Vec<u8>,
    /// fs-relative offset of libc's tid word (0: none).
    pub tid_offset: u32,
}

/// Where things went, for the rewrite report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Layout {
    pub state: u64,
    pub control: u64,
    pub control_len: u64,
    pub segment_vaddr: u64,
    pub segment_offset: u64,
    pub segment_len: u64,
    pub entry_stub: u64,
    pub trampolines: u64,
}

pub fn emit(elf: &InputElf, plan: &Plan, inp: &EmitInput) -> Result<(Vec<u8>, Layout)> {
    let n_points = plan.points.len() as u32;
    // 1. Writable memory: grow the last RW segment's bss.
    let last = elf.loads().max_by_key(|s| s.vaddr + s.memsz).ok_or_else(|| Error::Malformed("no PT_LOAD".into()))?;
    if last.flags & elf::PF_W == 0 || last.flags & elf::PF_X != 0 {
        return Err(Error::NoRoom(format!(
            "the highest PT_LOAD (at 0x{:x}) is not a data segment; cannot add the runtime's data",
            last.vaddr
        )));
    }
    let state = align_up(last.vaddr + last.memsz, 64);
    let control = align_up(state + RT_STATE_SIZE, PAGE);
    let control_len = ctl_len(n_points);
    let rw_end = control + control_len;

    // 2. The program-header slot for the code segment, or a new table inside it.
    let slot = spare_phdr_slot(elf);

    // 3. The code segment: after everything, in memory and in the file.
    let mut seg_off = align_up(elf.data.len() as u64, PAGE);
    let mut seg_vaddr = align_up(rw_end, PAGE) + PAGE; // a guard page between data and code
    let first = elf.loads().next().ok_or_else(|| Error::Malformed("no PT_LOAD".into()))?;
    if slot.is_none() {
        // The moved table must sit where every kernel computes AT_PHDR: old kernels take
        // the first PT_LOAD's (vaddr - offset) + e_phoff, new ones use the PT_LOAD that
        // holds e_phoff. Give the new segment the first PT_LOAD's vaddr - offset.
        let delta = first.vaddr.wrapping_sub(first.offset);
        let off = seg_off.max(seg_vaddr.wrapping_sub(delta));
        seg_off = off;
        seg_vaddr = off.wrapping_add(delta);
    }
    let mut seg: Vec<u8> = Vec::new();
    seg.extend_from_slice(&SEGMENT_MAGIC);
    pad_to(&mut seg, 64);
    let phdr_table_at = seg.len() as u64;
    let n_phdrs = elf.segments.len() + slot.is_none() as usize;
    if slot.is_none() {
        seg.resize(seg.len() + n_phdrs * 56, 0);
        pad_to(&mut seg, 64);
    }
    let config_at = seg_vaddr + seg.len() as u64;
    let config_size = std::mem::size_of::<RtConfig>();
    seg.resize(seg.len() + config_size, 0);
    let meta_at = seg_vaddr + seg.len() as u64;
    seg.extend_from_slice(inp.meta_json.as_bytes());
    let gates_at = seg_vaddr + seg.len() as u64;
    seg.extend_from_slice(&inp.gates);
    let info_at = seg_vaddr + seg.len() as u64;
    seg.extend_from_slice(&inp.info);
    let names_at = seg_vaddr + seg.len() as u64;
    seg.extend_from_slice(&inp.names);
    let name_at = seg_vaddr + seg.len() as u64;
    seg.extend_from_slice(inp.program.as_bytes());
    pad_to(&mut seg, PAGE as usize);
    let image_at = seg_vaddr + seg.len() as u64;
    seg.extend_from_slice(rtimage::IMAGE);
    pad_to(&mut seg, 64);
    let rel = |a: u64| a as i64 - config_at as i64;
    let mut config = RtConfig {
        magic: CONFIG_MAGIC,
        version: CONFIG_VERSION,
        n_points,
        n_metrics: N_METRICS,
        n_counter_slots: N_COUNTER_SLOTS,
        tid_offset: inp.tid_offset,
        _pad: 0,
        ctl_rel: rel(control),
        ctl_len: control_len,
        meta_rel: rel(meta_at),
        meta_len: inp.meta_json.len() as u64,
        gates_rel: rel(gates_at),
        name_rel: rel(name_at),
        name_len: inp.program.len() as u64,
        state_rel: rel(state),
        traps_rel: 0,
        n_traps: 0,
        trap_handler_rel: 0,
        link_addr: config_at,
        info_rel: rel(info_at),
        names_rel: rel(names_at),
        names_len: inp.names.len() as u64,
    };

    // Every piece of generated code, for its unwind information (D5, `unwind`): `put_as`
    // and `put` (entered by `call`) record what they append; code appended otherwise must
    // be pushed here too.
    let pieces: RefCell<Vec<Piece>> = RefCell::new(Vec::new());
    let entry_stub = seg_vaddr + seg.len() as u64;
    let code = codegen::entry_stub(entry_stub, config_at, image_at + rtimage::STINT_RT_INIT, elf.entry)?;
    seg.extend_from_slice(&code);
    pieces.borrow_mut().push(Piece { start: entry_stub, code, initial: Initial::Entry });
    pad_to(&mut seg, 16);
    let put_as = |seg: &mut Vec<u8>, initial: Initial, code: &dyn Fn(u64) -> Result<Vec<u8>>| -> Result<u64> {
        let at = seg_vaddr + seg.len() as u64;
        let code = code(at)?;
        seg.extend_from_slice(&code);
        pad_to(seg, 16);
        pieces.borrow_mut().push(Piece { start: at, code, initial });
        Ok(at)
    };
    let put = |seg: &mut Vec<u8>, code: &dyn Fn(u64) -> Result<Vec<u8>>| put_as(seg, Initial::Call, code);
    let slow_stub = put(&mut seg, &|at| codegen::slow_stub(at, config_at, image_at + rtimage::STINT_RT_SLOW))?;
    let timer_stub = put(&mut seg, &|at| codegen::timer_stub(at, config_at, image_at + rtimage::STINT_RT_TIMER))?;
    let tenv = TimerEnv {
        ctl: control,
        active: counter_offset(n_points, SLOT_ACTIVE, 0) as u32,
        cpu: counter_offset(n_points, SLOT_CPU_TICKS, 0) as u32,
        wall: counter_offset(n_points, SLOT_WALL_TICKS, 0) as u32,
        timer_stub,
    };
    let timer_enter = put(&mut seg, &|at| codegen::timer_routine(at, codegen::TIMER_OP_ENTER, tenv))?;
    let timer_exit = put(&mut seg, &|at| codegen::timer_routine(at, codegen::TIMER_OP_EXIT, tenv))?;
    let trap_handler = put(&mut seg, &|at| codegen::trap_stub(at, config_at, image_at + rtimage::STINT_RT_TRAP))?;
    let trampolines = seg_vaddr + seg.len() as u64;

    // 4. Trampolines, and the windows (or traps) that lead to them.
    let mut out = elf.data.to_vec();
    let mut traps: Vec<(u64, u64)> = Vec::new();
    let env_of = |point: u32| TrampolineEnv {
        gate: control + gate_offset(point),
        counter: counter_offset(n_points, SLOT_CALLS, point) as u32,
        tid_offset: inp.tid_offset,
        slow_stub,
        timer_enter,
        timer_exit,
    };
    for p in &plan.points {
        if let Some(w) = &p.wrap {
            // The WrapSite descriptor, then the thunk the PLT stub's jmp now leads to.
            pad_to(&mut seg, 8);
            let site_at = seg_vaddr + seg.len() as u64;
            let site = WrapSite {
                config_rel: config_at as i64 - site_at as i64,
                real_rel: w.got_slot as i64 - site_at as i64,
                indirect: 1,
                func: w.func,
                point: p.id,
                lazy_rel: lazy_rel(elf, w.got_slot, site_at),
            };
            seg.extend_from_slice(&site.to_bytes());
            let gate = control + gate_offset(p.id);
            let rt_wrap = image_at + rtimage::STINT_RT_WRAP;
            let at = put(&mut seg, &|at| codegen::wrap_thunk(at, gate, p.bits, site_at, rt_wrap, w.got_slot))?;
            patch(elf, &mut out, p.tactic, p.address, p.window_len, at, &mut traps)?;
            continue;
        }
        let at = put_as(&mut seg, Initial::At(p.address), &|at| codegen::trampoline(p, env_of(p.id), at))?;
        patch(elf, &mut out, p.tactic, p.address, p.window_len, at, &mut traps)?;
    }
    for x in &plan.exits {
        let at = put_as(&mut seg, Initial::At(x.address), &|at| codegen::exit_trampoline(x, env_of(x.point), at))?;
        patch(elf, &mut out, x.tactic, x.address, x.window_len, at, &mut traps)?;
    }
    // The trap table, sorted by site for the handler's binary search.
    traps.sort_unstable();
    pad_to(&mut seg, 8);
    let table_at = seg_vaddr + seg.len() as u64;
    for &(site, resume) in &traps {
        seg.extend_from_slice(&rel(site).to_le_bytes());
        seg.extend_from_slice(&rel(resume).to_le_bytes());
    }
    config.traps_rel = rel(table_at);
    config.n_traps = traps.len() as u64;
    config.trap_handler_rel = rel(trap_handler);
    let c = (config_at - seg_vaddr) as usize;
    seg[c..c + config_size].copy_from_slice(&config.to_bytes());
    // Unwind information (D5): the combined .eh_frame and a new .eh_frame_hdr, last.
    pad_to(&mut seg, 8);
    let eh_at = seg_vaddr + seg.len() as u64;
    let (eh_off, eh_len) = (rtimage::EH_FRAME_OFFSET as usize, rtimage::EH_FRAME_LEN as usize);
    let rt_eh = (image_at + rtimage::EH_FRAME_OFFSET, &rtimage::IMAGE[eh_off..eh_off + eh_len]);
    let eh = unwind::build(elf, &pieces.borrow(), rt_eh, eh_at)?;
    if let Some(eh) = &eh {
        seg.extend(eh.bytes());
    }
    let seg_len = seg.len() as u64;

    // 5. Headers.
    let code = Segment {
        index: usize::MAX,
        p_type: elf::PT_LOAD,
        flags: elf::PF_R | elf::PF_X,
        offset: seg_off,
        vaddr: seg_vaddr,
        filesz: seg_len,
        memsz: seg_len,
        align: PAGE,
    };
    let moved = slot.is_none().then_some((seg_off + phdr_table_at, seg_vaddr + phdr_table_at));
    let table = phdr_table(elf, last, rw_end, slot, code, moved);
    match moved {
        None => {
            let o = elf.phoff as usize;
            out[o..o + table.len()].copy_from_slice(&table);
        }
        Some((table_off, _)) => {
            let o = phdr_table_at as usize;
            seg[o..o + table.len()].copy_from_slice(&table);
            out[32..40].copy_from_slice(&table_off.to_le_bytes()); // e_phoff
            out[56..58].copy_from_slice(&(n_phdrs as u16).to_le_bytes()); // e_phnum
        }
    }
    out.resize(seg_off as usize, 0);
    out.extend_from_slice(&seg);
    let bss = (last.vaddr + last.memsz, rw_end, last.offset + last.memsz);
    add_section_headers(&mut out, bss, (seg_vaddr, seg_off, seg_len))?;
    out[24..32].copy_from_slice(&entry_stub.to_le_bytes()); // e_entry
    if let Some(eh) = &eh {
        unwind::patch_headers(&mut out, eh, seg_vaddr, seg_off)?;
    }
    Ok((
        out,
        Layout {
            state,
            control,
            control_len,
            segment_vaddr: seg_vaddr,
            segment_offset: seg_off,
            segment_len: seg_len,
            entry_stub,
            trampolines,
        },
    ))
}

/// Describe the added memory with sections, so tools that rebuild a file from its sections
/// (`strip`, `objcopy`) keep it and debuggers can disassemble it:
/// ```text
/// [Nr] Name        Type      Flags  Address          covers
///  n   .stint.bss  NOBITS    WA     end of old bss   runtime state + control pages
///  n+1 .stint      PROGBITS  AX     new segment      config, meta, runtime, stubs, trampolines
/// ```
/// The section-name table is copied to the end of the file with the two names added, and the
/// section header table follows it. A file without section headers stays without.
fn add_section_headers(out: &mut Vec<u8>, bss: (u64, u64, u64), code: (u64, u64, u64)) -> Result<()> {
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(out, 40) as usize, u16_at(out, 58), u16_at(out, 60), u16_at(out, 62));
    if shoff == 0 || shnum == 0 || shentsize != 64 || shstrndx >= shnum {
        return Ok(());
    }
    let table_end = shoff + shnum as usize * 64;
    let mut table =
        out.get(shoff..table_end).ok_or_else(|| Error::Malformed("section headers past the end".into()))?.to_vec();
    let str_hdr = shstrndx as usize * 64;
    let (str_off, str_size) = (u64_at(&table, str_hdr + 24) as usize, u64_at(&table, str_hdr + 32) as usize);
    let mut names =
        out.get(str_off..str_off + str_size).ok_or_else(|| Error::Malformed(".shstrtab past the end".into()))?.to_vec();
    let bss_name = names.len() as u32;
    names.extend_from_slice(b".stint.bss\0");
    let code_name = names.len() as u32;
    names.extend_from_slice(b".stint\0");
    let new_str_off = out.len() as u64;
    out.extend_from_slice(&names);
    table[str_hdr + 24..str_hdr + 32].copy_from_slice(&new_str_off.to_le_bytes());
    table[str_hdr + 32..str_hdr + 40].copy_from_slice(&(names.len() as u64).to_le_bytes());
    let shdr = |name: u32, ty: u32, flags: u64, addr: u64, off: u64, size: u64, align: u64| {
        let mut h = Vec::with_capacity(64);
        h.extend_from_slice(&name.to_le_bytes());
        h.extend_from_slice(&ty.to_le_bytes());
        h.extend_from_slice(&flags.to_le_bytes());
        h.extend_from_slice(&addr.to_le_bytes());
        h.extend_from_slice(&off.to_le_bytes());
        h.extend_from_slice(&size.to_le_bytes());
        h.extend_from_slice(&[0u8; 8]); // sh_link, sh_info
        h.extend_from_slice(&align.to_le_bytes());
        h.extend_from_slice(&0u64.to_le_bytes()); // sh_entsize
        h
    };
    let (bss_start, bss_end, bss_off) = bss;
    let wa = u64::from(elf::SHF_ALLOC | elf::SHF_WRITE);
    let ax = u64::from(elf::SHF_ALLOC | elf::SHF_EXECINSTR);
    table.extend(shdr(bss_name, elf::SHT_NOBITS, wa, bss_start, bss_off, bss_end - bss_start, 64));
    table.extend(shdr(code_name, elf::SHT_PROGBITS, ax, code.0, code.1, code.2, PAGE));
    pad_to(out, 8);
    let new_shoff = out.len() as u64;
    out.extend_from_slice(&table);
    out[40..48].copy_from_slice(&new_shoff.to_le_bytes()); // e_shoff
    out[60..62].copy_from_slice(&(shnum + 2).to_le_bytes()); // e_shnum
    Ok(())
}

/// The file's value of a GOT slot (the lazy-binding entry in the PLT), relative to `from`;
/// 0 if the slot holds nothing that could be one (bound at load time, or out of reach).
fn lazy_rel(elf: &InputElf, slot: u64, from: u64) -> i32 {
    let Some(v) = elf.bytes_at(slot, 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default())) else {
        return 0;
    };
    if v == 0 || elf.exec_section_at(v).is_none() {
        return 0;
    }
    i32::try_from(v as i64 - from as i64).unwrap_or(0)
}

fn pad_to(v: &mut Vec<u8>, align: usize) {
    let n = v.len().div_ceil(align) * align;
    v.resize(n, 0);
}

/// The index of a program header we may turn into the new PT_LOAD: a PT_NOTE duplicating
/// PT_GNU_PROPERTY, or a PT_NULL. None: the table must move (see `emit`).
fn spare_phdr_slot(elf: &InputElf) -> Option<usize> {
    let prop = elf.segments.iter().find(|s| s.p_type == elf::PT_GNU_PROPERTY);
    if let Some(prop) = prop {
        if let Some(n) =
            elf.segments.iter().find(|s| s.p_type == elf::PT_NOTE && s.offset == prop.offset && s.filesz == prop.filesz)
        {
            return Some(n.index);
        }
    }
    elf.segments.iter().find(|s| s.p_type == elf::PT_NULL).map(|n| n.index)
}

/// Patch a site by its tactic: a window jumps to the trampoline; a trap is one `int3`
/// recorded in `traps` as (site, trampoline).
fn patch(
    elf: &InputElf,
    out: &mut [u8],
    tactic: Tactic,
    address: u64,
    len: u64,
    trampoline: u64,
    traps: &mut Vec<(u64, u64)>,
) -> Result<()> {
    if tactic != Tactic::Trap {
        return patch_window(elf, out, address, len, trampoline);
    }
    let off = elf
        .vaddr_to_offset(address)
        .ok_or_else(|| Error::Internal(format!("trap site 0x{address:x} is not in the file")))? as usize;
    *out.get_mut(off).ok_or_else(|| Error::Internal(format!("trap site 0x{address:x} leaves the file")))? = 0xcc;
    traps.push((address, trampoline));
    Ok(())
}

/// `jmp rel32` to the trampoline at `window`, the rest of the window `int3`.
fn patch_window(elf: &InputElf, out: &mut [u8], window: u64, len: u64, target: u64) -> Result<()> {
    let off = elf
        .vaddr_to_offset(window)
        .ok_or_else(|| Error::Internal(format!("window 0x{window:x} is not in the file")))? as usize;
    let end = off + len as usize;
    if end > out.len() || elf.vaddr_to_offset(window + len - 1).is_none() {
        return Err(Error::Internal(format!("window 0x{window:x}+{len} leaves the file")));
    }
    let rel = target as i64 - (window + JMP_LEN) as i64;
    let rel = i32::try_from(rel).map_err(|_| Error::NoRoom(format!("0x{window:x}: trampoline out of rel32 reach")))?;
    out[off] = 0xe9;
    out[off + 1..off + 5].copy_from_slice(&rel.to_le_bytes());
    out[off + 5..end].fill(0xcc);
    Ok(())
}

/// The new program-header table: the data segment grown, the code segment in `slot` (or
/// added, when the table moves to `moved` = (file offset, vaddr)), and the code segment
/// placed right after the last PT_LOAD so PT_LOADs stay sorted by address.
fn phdr_table(
    elf: &InputElf,
    data: &Segment,
    rw_end: u64,
    slot: Option<usize>,
    code: Segment,
    moved: Option<(u64, u64)>,
) -> Vec<u8> {
    let mut segs: Vec<Segment> = elf.segments.clone();
    for s in segs.iter_mut() {
        if s.index == data.index {
            s.memsz = rw_end - s.vaddr;
        }
        if let (Some((off, vaddr)), elf::PT_PHDR) = (moved, s.p_type) {
            let len = (elf.segments.len() as u64 + 1) * 56;
            (s.offset, s.vaddr, s.filesz, s.memsz) = (off, vaddr, len, len);
        }
    }
    if let Some(slot) = slot {
        segs.remove(slot);
    }
    let last_load = segs.iter().rposition(|s| s.is_load()).map_or(0, |i| i + 1);
    segs.insert(last_load, code);
    let mut out = Vec::with_capacity(segs.len() * 56);
    for s in &segs {
        out.extend_from_slice(&s.p_type.to_le_bytes());
        out.extend_from_slice(&s.flags.to_le_bytes());
        out.extend_from_slice(&s.offset.to_le_bytes());
        out.extend_from_slice(&s.vaddr.to_le_bytes());
        out.extend_from_slice(&s.vaddr.to_le_bytes()); // p_paddr
        out.extend_from_slice(&s.filesz.to_le_bytes());
        out.extend_from_slice(&s.memsz.to_le_bytes());
        out.extend_from_slice(&s.align.to_le_bytes());
    }
    out
}

/// Re-read an output and check what the emitter promises (STYLE 12): no segment both
/// writable and executable, PT_LOADs sorted and disjoint in memory, `e_entry` inside the new
/// code segment, and every window starting with a `jmp rel32` into it.
pub fn validate_output(out: &[u8], plan: &Plan, layout: &Layout) -> Result<()> {
    use object::read::elf::{FileHeader as _, ProgramHeader as _};
    let bad = |m: String| Err(Error::Internal(format!("output check: {m}")));
    let hdr = elf::FileHeader64::<object::Endianness>::parse(out).map_err(|e| Error::Internal(e.to_string()))?;
    let en = hdr.endian().map_err(|e| Error::Internal(e.to_string()))?;
    let phdrs = hdr.program_headers(en, out).map_err(|e| Error::Internal(e.to_string()))?;
    let mut prev_end = 0u64;
    let mut loads = Vec::new();
    for p in phdrs.iter().filter(|p| p.p_type(en) == elf::PT_LOAD) {
        let (f, v, m) = (p.p_flags(en), p.p_vaddr(en), p.p_memsz(en));
        if f & elf::PF_W != 0 && f & elf::PF_X != 0 {
            return bad(format!("segment at 0x{v:x} is writable and executable"));
        }
        if v < prev_end {
            return bad(format!("PT_LOAD at 0x{v:x} overlaps or is out of order"));
        }
        prev_end = v + m;
        loads.push((v, m, f, p.p_offset(en), p.p_filesz(en)));
    }
    let entry = hdr.e_entry(en);
    let seg = (layout.segment_vaddr, layout.segment_vaddr + layout.segment_len);
    if !(seg.0..seg.1).contains(&entry) {
        return bad(format!("e_entry 0x{entry:x} is outside the new code segment"));
    }
    let sites = plan.points.iter().map(|p| (p.address, p.window_len, p.tactic));
    let mut patched: Vec<(u64, u64)> = Vec::new();
    for (address, len, tactic) in sites.chain(plan.exits.iter().map(|x| (x.address, x.window_len, x.tactic))) {
        let Some(&(v, _, _, off, _)) = loads.iter().find(|l| address >= l.0 && address < l.0 + l.4) else {
            return bad(format!("window 0x{address:x} is not in a file-backed segment"));
        };
        let o = (address - v + off) as usize;
        if tactic == Tactic::Trap {
            if out[o] != 0xcc {
                return bad(format!("trap site 0x{address:x} is not an int3"));
            }
        } else {
            let rel = i32::from_le_bytes(out[o + 1..o + 5].try_into().unwrap_or_default()) as i64;
            let target = (address as i64 + JMP_LEN as i64 + rel) as u64;
            if out[o] != 0xe9 || !(seg.0..seg.1).contains(&target) {
                return bad(format!("window 0x{address:x} does not jump into the new code segment"));
            }
        }
        patched.push((address, len));
    }
    patched.sort_unstable();
    if let Some(w) = patched.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0) {
        return bad(format!("patches at 0x{:x} and 0x{:x} overlap", w[0].0, w[1].0));
    }
    Ok(())
}
