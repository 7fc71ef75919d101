//! Writing pass (D12): the output ELF from the input, the layout, the generated code and the
//! unwind information. The program's own code and data never move; each step below runs once:
//!
//! 1. the new code segment's bytes, every block at the place the layout pass gave it;
//! 2. a copy of the input with every site patched (`jmp rel32` + `int3` filler, or `int3`);
//! 3. the program-header table (in place, or moved into the new segment), the new segment
//!    appended, then section headers, all through object's Pod ELF types.
//!
//! Program headers before and after (`readelf -lW` of testbins/calltree.c, a PIE from gcc 12
//! with 11 functions; the addresses come from the layout pass, see [`crate::place`]):
//!
//! ```text
//! input                                            output
//! Type         Offset   VirtAddr FileSiz MemSiz Flg  Type         Offset   VirtAddr FileSiz MemSiz Flg
//! PHDR         0x000040 0x000040 0x2d8   0x2d8  R    PHDR         0x000040 0x000040 0x2d8   0x2d8  R
//! INTERP       0x000318 0x000318 0x01c   0x01c  R    INTERP       0x000318 0x000318 0x01c   0x01c  R
//! LOAD         0x000000 0x000000 0x708   0x708  R    LOAD         0x000000 0x000000 0x708   0x708  R
//! LOAD         0x001000 0x001000 0x521   0x521  R E  LOAD         0x001000 0x001000 0x521   0x521  R E  windows
//! LOAD         0x002000 0x002000 0x2d8   0x2d8  R    LOAD         0x002000 0x002000 0x2d8   0x2d8  R
//! LOAD         0x002dd0 0x003dd0 0x258   0x2a0  RW   LOAD         0x002dd0 0x003dd0 0x258   0x4230 RW   + state,
//!                                                                                                       control
//!                                                  LOAD         0x005000 0x009000 0xd1a8  0xd1a8 R E  new segment
//! DYNAMIC      0x002de0 0x003de0 0x1e0   0x1e0  RW   DYNAMIC      0x002de0 0x003de0 0x1e0   0x1e0  RW
//! NOTE         0x000338 0x000338 0x020   0x020  R    (its slot went to the new LOAD)
//! NOTE         0x000358 0x000358 0x044   0x044  R    NOTE         0x000358 0x000358 0x044   0x044  R
//! GNU_PROPERTY 0x000338 0x000338 0x020   0x020  R    GNU_PROPERTY 0x000338 0x000338 0x020   0x020  R
//! GNU_EH_FRAME 0x0020b0 0x0020b0 0x074   0x074  R    GNU_EH_FRAME 0x011f14 0x015f14 0x294   0x294  R    new hdr
//! GNU_STACK, GNU_RELRO                             (unchanged)
//! e_entry 0x1280                                   e_entry 0x141c0: the entry stub, then 0x1280
//! ```
//! - The new PT_LOAD takes the PT_NOTE's slot and moves to just after the last PT_LOAD,
//!   keeping PT_LOADs sorted by address. Without a spare slot the table moves into the new
//!   segment, one entry longer (e_phoff, e_phnum and PT_PHDR follow it).
//! - No segment is both writable and executable.
//! - PT_GNU_EH_FRAME points at the new `.eh_frame_hdr` (D5, `unwind`); a program without it
//!   keeps its headers, and the added code has no unwind information.
//!
//! Section headers, appended with a copy of `.shstrtab` that has two more names (so tools
//! that rebuild a file from its sections, `strip` and `objcopy`, keep the added memory and
//! debuggers can disassemble it); a file without section headers stays without:
//!
//! ```text
//! [Nr] Name           Type      Address  Off      Size     Flg  (same program)
//! [18] .eh_frame_hdr  PROGBITS  0x20b0   0x0020b0 0x74     A    → 0x15f14 0x011f14 0x294: the new one
//! [19] .eh_frame      PROGBITS  0x2128   0x002128 0x1b0    A    → 0x14e30 0x010e30 0x10e4: input's,
//!                                                                 rt-lib's and generated code's FDEs
//! [31] .stint.bss     NOBITS    0x4070   0x003070 0x3f90   WA   added: end of old bss → runtime
//!                                                                 state + control pages
//! [32] .stint         PROGBITS  0x9000   0x005000 0xbe30   AX   added: the new segment up to .eh_frame
//! ```

use crate::error::{Error, Result};
use crate::input::{InputElf, Segment};
use crate::place::{Placement, SegmentData, Site, WrapCall, PHDR_SIZE};
use crate::plan::{Exit, Plan, Tactic, JMP8_LEN, JMP_LEN};
use crate::rtimage;
use crate::unwind::{EhOut, Piece};
use object::elf::{self, FileHeader64, ProgramHeader64, SectionHeader64};
use object::pod;
use object::LittleEndian as LE;
use stint_layout::{PAGE, SEGMENT_MAGIC};

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

/// The writing pass. The output is allocated once at its final size, and the new segment
/// written in place (no copy of it, nor of the input, is made along the way).
pub fn emit(
    elf: &InputElf,
    data: &SegmentData,
    placed: &Placement,
    code: &[Piece],
    eh: Option<&EhOut>,
) -> Result<(Vec<u8>, Layout)> {
    let seg_len = (placed.eh_frame - placed.seg_vaddr) + eh.map_or(0, |eh| eh.end() - eh.lsda_at);
    let seg_offset = placed.seg_offset as usize;
    let seg_end = seg_offset + seg_len as usize;
    // The section headers are the input's (read from it: nothing patched below touches them).
    let shdrs = section_headers(elf.data, placed, seg_len, eh, seg_end as u64)?;
    let names_end = seg_end + shdrs.as_ref().map_or(0, |(names, _)| names.len());
    let shoff = names_end.next_multiple_of(8);
    let total = match &shdrs {
        Some((_, table)) => shoff + std::mem::size_of_val(table.as_slice()),
        None => seg_end,
    };
    // Zeros (pages the kernel maps as they are written), the input copied in on every core.
    let mut out = vec![0u8; total];
    let input: Vec<(usize, &[u8])> = elf.data.chunks(1 << 20).enumerate().map(|(k, c)| (k << 20, c)).collect();
    crate::par::copy_parts(&mut out[..elf.data.len()], &input);
    for site in &placed.sites {
        patch(elf, &mut out[..elf.data.len()], site)?;
    }
    for w in &placed.wrap_calls {
        patch_wrap_call(elf, &mut out[..elf.data.len()], w)?;
    }
    let layout = Layout {
        state: placed.state,
        control: placed.control,
        control_len: placed.control_len,
        segment_vaddr: placed.seg_vaddr,
        segment_offset: placed.seg_offset,
        segment_len: seg_len,
        entry_stub: placed.entry_stub,
        trampolines: placed.trampolines,
    };
    let phdrs = program_headers(elf, placed, seg_len, eh);
    let phdr_bytes = pod::bytes_of_slice(&phdrs);
    let phoff = match placed.moved_phdrs {
        None => elf.phoff,
        Some(at) => at - placed.seg_vaddr + placed.seg_offset,
    };
    write_segment(&mut out[seg_offset..seg_end], data, placed, code, eh)?;
    out.get_mut(phoff as usize..phoff as usize + phdr_bytes.len())
        .ok_or_else(|| Error::Internal(format!("output: program headers at 0x{phoff:x} leave the file")))?
        .copy_from_slice(phdr_bytes);
    {
        let h = file_header(&mut out)?;
        h.e_entry.set(LE, placed.entry_stub);
        h.e_phoff.set(LE, phoff);
        h.e_phnum.set(LE, phdrs.len() as u16);
    }
    if let Some((names, table)) = shdrs {
        out[seg_end..names_end].copy_from_slice(&names);
        out[shoff..total].copy_from_slice(pod::bytes_of_slice(&table));
        let h = file_header(&mut out)?;
        h.e_shoff.set(LE, shoff as u64);
        h.e_shnum.set(LE, table.len() as u16);
    }
    debug_assert_eq!(out.len(), total);
    Ok((out, layout))
}

/// Write the new code segment into `seg` (zeros, as long as the segment), laid out as
/// [`Placement`] says, `.eh_frame` and `.eh_frame_hdr` last.
fn write_segment(
    seg: &mut [u8],
    data: &SegmentData,
    placed: &Placement,
    code: &[Piece],
    eh: Option<&EhOut>,
) -> Result<()> {
    let base = placed.seg_vaddr;
    let put = |seg: &mut [u8], at: u64, bytes: &[u8]| -> Result<()> {
        let o = at.wrapping_sub(base) as usize;
        seg.get_mut(o..o.wrapping_add(bytes.len()))
            .ok_or_else(|| Error::Internal(format!("output: block at 0x{at:x} is outside the new segment")))?
            .copy_from_slice(bytes);
        Ok(())
    };
    put(seg, base, &SEGMENT_MAGIC)?;
    put(seg, placed.config, &placed.config(data).to_bytes())?;
    put(seg, placed.meta, data.meta_json.as_bytes())?;
    put(seg, placed.gates, &data.gates)?;
    put(seg, placed.info, &data.info)?;
    put(seg, placed.names, &data.names)?;
    put(seg, placed.name, data.program.as_bytes())?;
    put(seg, placed.image, rtimage::IMAGE)?;
    // The pieces (most of the segment) checked in order, then copied on every core.
    let mut pieces = Vec::with_capacity(code.len());
    for p in code {
        if p.start.wrapping_add(p.code.len() as u64) > placed.eh_frame {
            return Err(Error::Internal(format!("output: piece at 0x{:x} runs into .eh_frame", p.start)));
        }
        let o = p.start.wrapping_sub(base) as usize;
        if o.checked_add(p.code.len()).is_none_or(|end| end > seg.len()) {
            return Err(Error::Internal(format!("output: block at 0x{:x} is outside the new segment", p.start)));
        }
        pieces.push((o, p.code.as_slice()));
    }
    crate::par::copy_parts(seg, &pieces);
    for (at, site) in &placed.wrap_sites {
        put(seg, *at, &site.to_bytes())?;
    }
    let rel = |a: u64| a as i64 - placed.config as i64;
    for (k, (site, resume)) in placed.traps().into_iter().enumerate() {
        let at = placed.trap_table + k as u64 * 16;
        put(seg, at, &rel(site).to_le_bytes())?;
        put(seg, at + 8, &rel(resume).to_le_bytes())?;
    }
    if let Some(eh) = eh {
        if eh.lsda_at != placed.eh_frame {
            return Err(Error::Internal(format!("output: .eh_frame built for 0x{:x}", eh.lsda_at)));
        }
        // The padding between the parts is the zeros already there.
        put(seg, eh.lsda_at, &eh.lsda)?;
        put(seg, eh.eh_frame_at, &eh.eh_frame)?;
        put(seg, eh.hdr_at, &eh.eh_frame_hdr)?;
    }
    Ok(())
}

/// `jmp rel32` (`E9 cd`): the first bytes of every patched window, the bytes being fixed.
const JMP_REL32: u8 = 0xe9;
/// `jmp rel8` (`EB cb`): the first bytes of a [`Tactic::Rel8Slot`] exit.
const JMP_REL8: u8 = 0xeb;
/// `int3` (`CC`): the rest of a window (never executed: nothing branches into a window but
/// to its first byte), and the whole patch of a trap site.
const INT3: u8 = 0xcc;
const _: () = assert!(JMP_LEN == 1 + 4, "a window starts with jmp rel32");

/// Patch a site by its tactic: a window jumps to its trampoline, the rest of it `int3`; a
/// trap is one `int3` (the trap table leads to the trampoline).
fn patch(elf: &InputElf, out: &mut [u8], site: &Site) -> Result<()> {
    let Site { address, len, tactic, target } = *site;
    let off = elf
        .vaddr_to_offset(address)
        .ok_or_else(|| Error::Internal(format!("site 0x{address:x} is not in the file")))? as usize;
    if tactic == Tactic::Trap {
        *out.get_mut(off).ok_or_else(|| Error::Internal(format!("trap site 0x{address:x} leaves the file")))? = INT3;
        return Ok(());
    }
    let end = off + len as usize;
    if end > out.len() || elf.vaddr_to_offset(address + len - 1).is_none() {
        return Err(Error::Internal(format!("window 0x{address:x}+{len} leaves the file")));
    }
    if tactic == Tactic::TableJumps {
        let word = i32::try_from(target as i64)
            .map_err(|_| Error::Internal(format!("jump table entry 0x{address:x}: 0x{target:x} is no i32")))?;
        out[off..end].copy_from_slice(&word.to_le_bytes());
        return Ok(());
    }
    if tactic == Tactic::Retarget && len == JMP8_LEN {
        let rel = target as i64 - (address + len) as i64;
        let rel = i8::try_from(rel).map_err(|_| Error::Internal(format!("0x{address:x}: slot out of rel8 reach")))?;
        out[end - 1] = rel as u8;
        return Ok(());
    }
    if tactic == Tactic::Retarget {
        let rel = target as i64 - (address + len) as i64;
        let rel =
            i32::try_from(rel).map_err(|_| Error::NoRoom(format!("0x{address:x}: trampoline out of rel32 reach")))?;
        out[end - 4..end].copy_from_slice(&rel.to_le_bytes());
        return Ok(());
    }
    if tactic == Tactic::Rel8Slot {
        let rel = target as i64 - (address + JMP8_LEN) as i64;
        let rel = i8::try_from(rel).map_err(|_| Error::Internal(format!("0x{address:x}: slot out of rel8 reach")))?;
        out[off] = JMP_REL8;
        out[off + 1] = rel as u8;
        out[off + JMP8_LEN as usize..end].fill(INT3);
        return Ok(());
    }
    let rel = target as i64 - (address + JMP_LEN) as i64;
    let rel = i32::try_from(rel).map_err(|_| Error::NoRoom(format!("0x{address:x}: trampoline out of rel32 reach")))?;
    out[off] = JMP_REL32;
    out[off + 1..off + JMP_LEN as usize].copy_from_slice(&rel.to_le_bytes());
    out[off + JMP_LEN as usize..end].fill(INT3);
    Ok(())
}

/// `call rel32` (`E8 cd`), and the `nop` (`90`) put before it.
const CALL_REL32: u8 = 0xe8;
const NOP: u8 = 0x90;

/// Patch a GOT call site of a wrapped import (`plan::WrapSiteCall`) or an import call site
/// (`plan::ImportSite`): a call becomes `nop`s then `call rel32` ending where the original
/// call ended (the same return address); a tail jump becomes `jmp rel32` and `int3`s.
fn patch_wrap_call(elf: &InputElf, out: &mut [u8], w: &WrapCall) -> Result<()> {
    let WrapCall { address, len, call, target } = *w;
    let off = elf
        .vaddr_to_offset(address)
        .ok_or_else(|| Error::Internal(format!("wrap call site 0x{address:x} is not in the file")))?
        as usize;
    let end = off + len as usize;
    if len < JMP_LEN || end > out.len() || elf.vaddr_to_offset(address + len - 1).is_none() {
        return Err(Error::Internal(format!("wrap call site 0x{address:x}+{len} leaves the file")));
    }
    let (at, next) = if call { (end - JMP_LEN as usize, address + len) } else { (off, address + JMP_LEN) };
    let rel = i32::try_from(target as i64 - next as i64)
        .map_err(|_| Error::NoRoom(format!("0x{address:x}: wrapper thunk out of rel32 reach")))?;
    if call {
        out[off..at].fill(NOP);
        out[at] = CALL_REL32;
    } else {
        out[at] = JMP_REL32;
        out[at + JMP_LEN as usize..end].fill(INT3);
    }
    out[at + 1..at + JMP_LEN as usize].copy_from_slice(&rel.to_le_bytes());
    Ok(())
}

/// The output's program-header table: the data segment grown, the code segment in the spare
/// slot (or added, when the table moves) right after the last PT_LOAD so PT_LOADs stay
/// sorted by address, PT_PHDR following a moved table, PT_GNU_EH_FRAME at the new
/// `.eh_frame_hdr`.
fn program_headers(elf: &InputElf, placed: &Placement, seg_len: u64, eh: Option<&EhOut>) -> Vec<ProgramHeader64<LE>> {
    let file = |v: u64| v - placed.seg_vaddr + placed.seg_offset;
    let mut segs: Vec<Segment> = elf.segments.clone();
    for s in segs.iter_mut() {
        if s.index == placed.data_segment.index {
            s.memsz = placed.rw_end - s.vaddr;
        }
        if let (Some(at), elf::PT_PHDR) = (placed.moved_phdrs, s.p_type) {
            let len = placed.n_phdrs as u64 * PHDR_SIZE;
            (s.offset, s.vaddr, s.filesz, s.memsz) = (file(at), at, len, len);
        }
        if let (Some(eh), elf::PT_GNU_EH_FRAME) = (eh, s.p_type) {
            let len = eh.eh_frame_hdr.len() as u64;
            (s.offset, s.vaddr, s.filesz, s.memsz, s.align) = (file(eh.hdr_at), eh.hdr_at, len, len, 4);
        }
    }
    if let Some(slot) = placed.phdr_slot {
        segs.remove(slot);
    }
    let code = Segment {
        index: usize::MAX,
        p_type: elf::PT_LOAD,
        flags: elf::PF_R | elf::PF_X,
        offset: placed.seg_offset,
        vaddr: placed.seg_vaddr,
        filesz: seg_len,
        memsz: seg_len,
        align: PAGE,
    };
    let last_load = segs.iter().rposition(|s| s.is_load()).map_or(0, |i| i + 1);
    segs.insert(last_load, code);
    segs.iter()
        .map(|s| ProgramHeader64 {
            p_type: s.p_type.into_le(),
            p_flags: s.flags.into_le(),
            p_offset: s.offset.into_le(),
            p_vaddr: s.vaddr.into_le(),
            p_paddr: s.vaddr.into_le(),
            p_filesz: s.filesz.into_le(),
            p_memsz: s.memsz.into_le(),
            p_align: s.align.into_le(),
        })
        .collect()
}

/// The section-name table (to be written at `names_at`, the end of the output's segment) and
/// the section-header table after it, from the input's `out` (see the module documentation);
/// `None` for a file without section headers.
#[allow(clippy::type_complexity)]
fn section_headers(
    out: &[u8],
    placed: &Placement,
    seg_len: u64,
    eh: Option<&EhOut>,
    names_at: u64,
) -> Result<Option<(Vec<u8>, Vec<SectionHeader64<LE>>)>> {
    let (h, _) =
        pod::from_bytes::<FileHeader64<LE>>(out).map_err(|_| Error::Internal("output: no ELF header".into()))?;
    let (shoff, shentsize, shnum, shstrndx) =
        (h.e_shoff.get(LE) as usize, h.e_shentsize.get(LE), h.e_shnum.get(LE) as usize, h.e_shstrndx.get(LE) as usize);
    if shoff == 0 || shnum == 0 || shentsize as usize != std::mem::size_of::<SectionHeader64<LE>>() || shstrndx >= shnum
    {
        return Ok(None);
    }
    let mut table = out
        .get(shoff..)
        .and_then(|b| pod::slice_from_bytes::<SectionHeader64<LE>>(b, shnum).ok())
        .ok_or_else(|| Error::Malformed("section headers past the end".into()))?
        .0
        .to_vec();
    let strtab = table[shstrndx];
    let (str_off, str_size) = (strtab.sh_offset.get(LE) as usize, strtab.sh_size.get(LE) as usize);
    let mut names =
        out.get(str_off..str_off + str_size).ok_or_else(|| Error::Malformed(".shstrtab past the end".into()))?.to_vec();
    let file = |v: u64| v - placed.seg_vaddr + placed.seg_offset;
    for sh in table.iter_mut() {
        let name = names.get(sh.sh_name.get(LE) as usize..).unwrap_or(&[]);
        let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
        let moved = match (name, eh) {
            (b".eh_frame", Some(eh)) => Some((eh.eh_frame_at, eh.eh_frame.len() as u64)),
            (b".eh_frame_hdr", Some(eh)) => Some((eh.hdr_at, eh.eh_frame_hdr.len() as u64)),
            _ => None,
        };
        if let Some((addr, size)) = moved {
            sh.sh_addr.set(LE, addr);
            sh.sh_offset.set(LE, file(addr));
            sh.sh_size.set(LE, size);
        }
    }
    let bss_name = names.len() as u32;
    names.extend_from_slice(b".stint.bss\0");
    let code_name = names.len() as u32;
    names.extend_from_slice(b".stint\0");
    // The names go at the end of the file, the table after them.
    table[shstrndx].sh_offset.set(LE, names_at);
    table[shstrndx].sh_size.set(LE, names.len() as u64);
    let shdr = |name: u32, ty: u32, flags: u32, addr: u64, offset: u64, size: u64, align: u64| SectionHeader64 {
        sh_name: name.into_le(),
        sh_type: ty.into_le(),
        sh_flags: u64::from(flags).into_le(),
        sh_addr: addr.into_le(),
        sh_offset: offset.into_le(),
        sh_size: size.into_le(),
        sh_link: 0u32.into_le(),
        sh_info: 0u32.into_le(),
        sh_addralign: align.into_le(),
        sh_entsize: 0u64.into_le(),
    };
    let d = &placed.data_segment;
    let bss = d.vaddr + d.memsz;
    table.push(shdr(
        bss_name,
        elf::SHT_NOBITS,
        elf::SHF_ALLOC | elf::SHF_WRITE,
        bss,
        d.offset + d.memsz,
        placed.rw_end - bss,
        64,
    ));
    // `.stint` ends where `.eh_frame` begins, so no two sections overlap.
    let code_len = eh.map_or(seg_len, |eh| eh.eh_frame_at - placed.seg_vaddr);
    let ax = elf::SHF_ALLOC | elf::SHF_EXECINSTR;
    table.push(shdr(code_name, elf::SHT_PROGBITS, ax, placed.seg_vaddr, placed.seg_offset, code_len, PAGE));
    Ok(Some((names, table)))
}

/// The output's ELF header, to set fields through.
fn file_header(out: &mut [u8]) -> Result<&mut FileHeader64<LE>> {
    Ok(pod::from_bytes_mut::<FileHeader64<LE>>(out).map_err(|_| Error::Internal("output: no ELF header".into()))?.0)
}

/// A value as a little-endian ELF field.
trait IntoLe<T> {
    fn into_le(self) -> T;
}
impl IntoLe<object::U32<LE>> for u32 {
    fn into_le(self) -> object::U32<LE> {
        object::U32::new(LE, self)
    }
}
impl IntoLe<object::U64<LE>> for u64 {
    fn into_le(self) -> object::U64<LE> {
        object::U64::new(LE, self)
    }
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
    // A wrapper of an import with no PLT stub (window 0) patches only its GOT call sites.
    let sites = plan
        .points
        .iter()
        .filter(|p| p.import.is_none() && p.window_len > 0)
        .map(|p| (p.address, p.window_len, p.tactic));
    let exits = plan.exits.iter().filter(|x| !matches!(x.tactic, Tactic::EntryExit | Tactic::Retarget));
    let exits = exits.filter(|x| x.window_len > 0);
    let tactic = |x: &Exit| if x.slot.is_some() { Tactic::Rel8Slot } else { x.tactic };
    let sites = sites.chain(exits.map(|x| (x.address, x.window_len, tactic(x))));
    let retargets = plan.exits.iter().flat_map(|x| x.retargets.iter().map(|&(j, len)| (j, len, Tactic::Retarget)));
    let redirect = |r: &crate::plan::Redirect| match r.window.is_empty() {
        true => (r.jump, r.len, Tactic::Retarget),
        false => (r.patch().0, r.patch().1, Tactic::Window),
    };
    let entry_jumps = plan.entry_jumps.values().flatten();
    let redirects = plan.exits.iter().flat_map(|x| x.redirects.iter().filter(|r| !r.in_entry && r.table.is_none()));
    let redirects = redirects.chain(entry_jumps.clone()).map(redirect);
    // Jump-table entries lead into the new code segment.
    for r in plan.exits.iter().flat_map(|x| &x.redirects) {
        let Some(add) = r.table else { continue };
        let Some(&(v, _, _, off, _)) = loads.iter().find(|l| r.jump >= l.0 && r.jump + 4 <= l.0 + l.4) else {
            return bad(format!("jump table entry 0x{:x} is not in a file-backed segment", r.jump));
        };
        let o = (r.jump - v + off) as usize;
        let word = i32::from_le_bytes(out[o..o + 4].try_into().unwrap_or_default());
        if !(seg.0..seg.1).contains(&(word as i64 as u64).wrapping_add(add)) {
            return bad(format!("jump table entry 0x{:x} does not lead into the new code segment", r.jump));
        }
    }
    let sites = sites.chain(retargets).chain(redirects);
    let mut patched: Vec<(u64, u64)> = Vec::new();
    // Slots lie in dead bytes, possibly the tail of another window after its `jmp rel32`.
    let mut slots: Vec<u64> = Vec::new();
    let rel8_exits = plan.exits.iter().filter(|x| x.tactic == Tactic::Rel8Slot || x.slot.is_some());
    let exit_slots = rel8_exits.map(|x| x.slot.ok_or(x.site));
    let jump_slots = plan
        .exits
        .iter()
        .flat_map(|x| &x.redirects)
        .chain(entry_jumps)
        .filter(|r| r.len == JMP8_LEN && r.window.is_empty() && !r.in_entry);
    let jump_slots = jump_slots.map(|r| r.slot.ok_or(r.jump));
    let entry_slots = plan.entry_slots.values().map(|&s| Ok(s));
    for slot in exit_slots.chain(jump_slots).chain(entry_slots) {
        let slot = match slot {
            Ok(s) => s,
            Err(site) => return bad(format!("exit or jump 0x{site:x} has no slot")),
        };
        let Some(&(v, _, _, off, _)) = loads.iter().find(|l| slot >= l.0 && slot < l.0 + l.4) else {
            return bad(format!("slot 0x{slot:x} is not in a file-backed segment"));
        };
        let o = (slot - v + off) as usize;
        let rel = i32::from_le_bytes(out[o + 1..o + 5].try_into().unwrap_or_default()) as i64;
        let target = (slot as i64 + JMP_LEN as i64 + rel) as u64;
        if out[o] != JMP_REL32 || !(seg.0..seg.1).contains(&target) {
            return bad(format!("slot 0x{slot:x} does not jump into the new code segment"));
        }
        slots.push(slot);
    }
    // Wrapped GOT calls and import call sites: a call becomes a `call rel32` at its end.
    let wrap_calls = plan.wrap_sites.iter().map(|x| (x.address(), x.window_len(), x.is_call()));
    let import_calls = plan.import_sites.iter().map(|x| (x.address(), x.window_len(), true));
    for (address, len, is_call) in wrap_calls.chain(import_calls) {
        let Some(&(v, _, _, off, _)) = loads.iter().find(|l| address >= l.0 && address < l.0 + l.4) else {
            return bad(format!("wrap call site 0x{address:x} is not in a file-backed segment"));
        };
        let o = (address - v + off) as usize;
        let at = if is_call { o + (len - JMP_LEN) as usize } else { o };
        let op = if is_call { CALL_REL32 } else { JMP_REL32 };
        let rel = i32::from_le_bytes(out[at + 1..at + 5].try_into().unwrap_or_default()) as i64;
        let target = (address as i64 + (at - o) as i64 + JMP_LEN as i64 + rel) as u64;
        if out[at] != op || !(seg.0..seg.1).contains(&target) {
            return bad(format!("wrap call site 0x{address:x} does not lead into the new code segment"));
        }
        patched.push((address, len));
    }
    for (address, len, tactic) in sites {
        let Some(&(v, _, _, off, _)) = loads.iter().find(|l| address >= l.0 && address < l.0 + l.4) else {
            return bad(format!("window 0x{address:x} is not in a file-backed segment"));
        };
        let o = (address - v + off) as usize;
        if tactic == Tactic::Trap {
            if out[o] != INT3 {
                return bad(format!("trap site 0x{address:x} is not an int3"));
            }
        } else if tactic == Tactic::Retarget && len == JMP8_LEN {
            let target = (address as i64 + JMP8_LEN as i64 + out[o + 1] as i8 as i64) as u64;
            if !slots.contains(&target) {
                return bad(format!("jump 0x{address:x} does not lead to its slot"));
            }
        } else if tactic == Tactic::Retarget {
            let end = o + len as usize;
            let rel = i32::from_le_bytes(out[end - 4..end].try_into().unwrap_or_default()) as i64;
            let target = (address as i64 + len as i64 + rel) as u64;
            if !(seg.0..seg.1).contains(&target) {
                return bad(format!("jump 0x{address:x} does not lead into the new code segment"));
            }
        } else if tactic == Tactic::Rel8Slot {
            let target = (address as i64 + JMP8_LEN as i64 + out[o + 1] as i8 as i64) as u64;
            if out[o] != JMP_REL8 || !slots.contains(&target) {
                return bad(format!("exit 0x{address:x} does not jump to its slot"));
            }
        } else {
            let rel = i32::from_le_bytes(out[o + 1..o + 5].try_into().unwrap_or_default()) as i64;
            let target = (address as i64 + JMP_LEN as i64 + rel) as u64;
            if out[o] != JMP_REL32 || !(seg.0..seg.1).contains(&target) {
                return bad(format!("window 0x{address:x} does not jump into the new code segment"));
            }
        }
        patched.push((address, len));
    }
    // A slot in a window's tail overlaps only bytes after that window's `jmp rel32`; jumps to
    // one target may share a slot.
    slots.sort_unstable();
    slots.dedup();
    patched.sort_unstable();
    let in_tail = |s: u64| {
        let i = patched.partition_point(|&(a, _)| a <= s);
        i > 0 && {
            let (a, l) = patched[i - 1];
            s >= a + JMP_LEN && s + JMP_LEN <= a + l
        }
    };
    let free: Vec<(u64, u64)> = slots.iter().filter(|&&s| !in_tail(s)).map(|&s| (s, JMP_LEN)).collect();
    patched.extend(free);
    patched.sort_unstable();
    if let Some(w) = patched.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0) {
        return bad(format!("patches at 0x{:x} and 0x{:x} overlap", w[0].0, w[1].0));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
