//! Unwind information for everything the rewriter adds (DESIGN D5).
//!
//! libgcc's unwinder (C++ exceptions, `pthread_cancel`'s forced unwinding) finds FDEs through
//! `PT_GNU_EH_FRAME` and the binary-search table of the `.eh_frame_hdr` it points to; gdb reads
//! the section named `.eh_frame`. The output gets one new `.eh_frame` in the new code segment,
//! followed by a new `.eh_frame_hdr` whose table covers every FDE in it, and the writing pass
//! (`emit`) points `PT_GNU_EH_FRAME` and the `.eh_frame` / `.eh_frame_hdr` section headers at them.
//! The new `.eh_frame` holds, in this order:
//!
//! 1. A copy of the input's `.eh_frame` (up to its terminator) with every pc-relative pointer
//!    adjusted for the move: FDE initial locations, LSDA pointers in FDE augmentation data,
//!    personality pointers in CIE augmentation data. An `indirect` pointer keeps pointing at
//!    the same slot (the slot holds an absolute address, which does not move). The CIE pointer
//!    of an FDE is relative within the section and does not change; a pointer whose value is 0
//!    means "none" to libgcc and stays 0. Absolute pointers stay as they are in a non-PIE and
//!    are refused in a PIE (the dynamic relocations that fix them apply to the old copy only),
//!    as are encodings other than absolute and pc-relative. `DW_CFA_set_loc` inside CFA
//!    programs (emitted by no current toolchain) is not adjusted.
//! 2. A copy of rt-lib's `.eh_frame` (in the runtime image; `build.rs` checks that it uses
//!    pc-relative pointers only), adjusted the same way.
//! 3. One CIE for generated code and one FDE per generated [`Piece`] (stubs, timer routines,
//!    trampolines, thunks), whose CFI is computed from the machine code (below).
//! 4. A zero terminator, then (4-aligned) the `.eh_frame_hdr`: version 1, `eh_frame_ptr`
//!    pc-relative sdata4, `fde_count` udata4, a table of (initial location, FDE address) pairs
//!    relative to the header (datarel sdata4), sorted by initial location.
//!
//! The input's own `.eh_frame` and `.eh_frame_hdr` bytes stay where they were, unused. An input
//! without `PT_GNU_EH_FRAME` is left as it is ([`build`] returns `None`): without a header
//! there is no program header slot to point at the new table.
//!
//! # CFI of generated code
//!
//! A piece starts in a known state ([`Initial`]): entered by `call` (CFA = rsp+8, return
//! address at CFA-8), the process entry (no return address), or the state of the input's own
//! code at an address (its `.eh_frame` row there, evaluated with gimli; the state at a function
//! entry when no FDE covers the address). From there the instructions are followed along every
//! path (conditional branches to both successors, jumps inside the piece to their target;
//! `ret` and jumps out of the piece end a path; `call` leaves the state as it was), tracking
//! where rsp and rbp are relative to the CFA:
//!
//! - `push` / `pop` / `pushfq` / `popfq`, `sub` / `add rsp, imm`, `lea rsp, [rsp±d]` move rsp;
//!   a push of a general register that has no rule yet records "saved at CFA-n" for it, the
//!   pop from that slot removes the rule again;
//! - `mov rbp, rsp` notes where rbp is; a following `and rsp, -16` (rsp unknown after it)
//!   moves the CFA to rbp; `mov rsp, rbp` (and `leave`, `lea rsp, [rbp+d]`) makes rsp known
//!   again and the CFA goes back to rsp. A `pop rbp` while the CFA is rbp-based and rsp is
//!   not known assumes rsp = rbp, as compilers' own CFI does.
//! - any other write to rsp, rbp or the CFA register makes what it changed unknown; a CFA
//!   that can no longer be computed becomes "return address undefined" (the unwinder stops
//!   there instead of following garbage).
//!
//! A row is emitted at every instruction whose state differs from the previous row. Every
//! instruction reached by two paths must be reached in one state (the generated code keeps
//! the stack balanced on every path): a disagreement is an error in debug builds; release
//! builds keep the state of the first path.

use crate::error::{Error, Result};
use crate::input::{ElfKind, InputElf, Segment};
use gimli::{BaseAddresses, CfaRule, EhFrame, EhFrameOffset, LittleEndian, RegisterRule, UnwindContext, UnwindSection};
use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind,
    Register,
};
use object::elf;
use std::collections::{HashMap, VecDeque};

/// The CFA state a piece of generated code starts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Initial {
    /// Entered by `call`: CFA = rsp+8, the return address at CFA-8.
    Call,
    /// The process entry (`e_entry`): CFA = rsp+8, but there is no return address; unwinding
    /// stops here.
    Entry,
    /// The state of the input's code at this address (the row of its `.eh_frame` there;
    /// [`Initial::Call`] if no FDE covers it).
    At(u64),
}

/// A piece of generated code: its address in the output, its bytes, and its initial state.
#[derive(Clone, Debug)]
pub struct Piece {
    pub start: u64,
    pub code: Vec<u8>,
    pub initial: Initial,
}

/// The new `.eh_frame` and `.eh_frame_hdr`, laid out from `eh_frame_at` (see [`EhOut::bytes`]).
#[derive(Clone, Debug)]
pub struct EhOut {
    /// Virtual address of the new `.eh_frame`.
    pub eh_frame_at: u64,
    pub eh_frame: Vec<u8>,
    /// Virtual address of the new `.eh_frame_hdr`: `eh_frame_at + eh_frame.len()`, rounded up to 4.
    pub hdr_at: u64,
    pub eh_frame_hdr: Vec<u8>,
}

impl EhOut {
    /// The bytes to place at `eh_frame_at`: `.eh_frame`, padding, `.eh_frame_hdr`.
    pub fn bytes(&self) -> Vec<u8> {
        let mut v = self.eh_frame.clone();
        v.resize((self.hdr_at - self.eh_frame_at) as usize, 0);
        v.extend_from_slice(&self.eh_frame_hdr);
        v
    }

    /// The first address after the `.eh_frame_hdr`.
    pub fn end(&self) -> u64 {
        self.hdr_at + self.eh_frame_hdr.len() as u64
    }
}

/// DWARF register numbers (x86-64 psABI).
const RBP: u16 = 6;
const RSP: u16 = 7;
/// The return address column.
const RA: u16 = 16;

const DW_EH_PE_OMIT: u8 = 0xff;
const DW_EH_PE_PCREL: u8 = 0x10;
/// pcrel | sdata4: the encoding of every pointer we write.
const PCREL_SDATA4: u8 = 0x1b;

/// Build the combined `.eh_frame` (placed at `at`, which must be 4-aligned) and its
/// `.eh_frame_hdr`: the input's FDEs, rt-lib's (`rt_eh`: the address where the image's
/// `.eh_frame` lies in the output, and its bytes) and one FDE per piece. `None` if the input
/// has no `PT_GNU_EH_FRAME` (see the module documentation).
pub fn build(elf: &InputElf, pieces: &[Piece], rt_eh: (u64, &[u8]), at: u64) -> Result<Option<EhOut>> {
    let Some(hdr_seg) = elf.segments.iter().find(|s| s.p_type == elf::PT_GNU_EH_FRAME) else {
        return Ok(None);
    };
    if !at.is_multiple_of(4) {
        return Err(Error::Internal(format!("unwind: .eh_frame at 0x{at:x} is not 4-aligned")));
    }
    let (in_addr, in_data) = input_eh_frame(elf, hdr_seg)?;
    let pie = elf.kind == ElfKind::Pie;
    let mut eh: Vec<u8> = Vec::new();
    let mut table: Vec<(u64, u64)> = Vec::new();

    let input = relocate(in_data, in_addr, at, pie, ".eh_frame")?;
    table.extend(input.fdes.iter().map(|f| (f.begin, at + f.offset as u64)));
    eh.extend_from_slice(&input.bytes);

    let rt_at = at + eh.len() as u64;
    let rt = relocate(rt_eh.1, rt_eh.0, rt_at, true, "rt-lib .eh_frame")?;
    table.extend(rt.fdes.iter().map(|f| (f.begin, rt_at + f.offset as u64)));
    eh.extend_from_slice(&rt.bytes);

    let mut rows = InputRows::new(elf, in_addr, in_data, &input.fdes);
    let cie = push_cie(&mut eh);
    let mut info = InstructionInfoFactory::new();
    for p in pieces.iter().filter(|p| !p.code.is_empty()) {
        let initial = match p.initial {
            Initial::Call => State::call(),
            Initial::Entry => State::entry(),
            Initial::At(a) => rows.state_at(a).unwrap_or_else(State::call),
        };
        let program = cfi_program(p.start, &p.code, initial, &mut info)?;
        let off = push_fde(&mut eh, cie, at, p.start, p.code.len() as u64, &program)?;
        table.push((p.start, at + off as u64));
    }
    eh.extend_from_slice(&[0; 4]); // terminator

    let hdr_at = (at + eh.len() as u64).next_multiple_of(4);
    let eh_frame_hdr = build_hdr(at, hdr_at, table)?;
    Ok(Some(EhOut { eh_frame_at: at, eh_frame: eh, hdr_at, eh_frame_hdr }))
}

fn u32_at(b: &[u8], o: usize) -> Result<u32> {
    Ok(u32::from_le_bytes(field(b, o)?))
}
fn u64_at(b: &[u8], o: usize) -> Result<u64> {
    Ok(u64::from_le_bytes(field(b, o)?))
}
fn field<const N: usize>(b: &[u8], o: usize) -> Result<[u8; N]> {
    b.get(o..o + N)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| Error::Internal(format!("unwind: read of {N} bytes at 0x{o:x} past the end")))
}

// ---------------------------------------------------------------------------------------
// The input's .eh_frame and moving copies of .eh_frame data
// ---------------------------------------------------------------------------------------

/// The input's `.eh_frame`: its address and bytes. Found by its section header, or (section
/// headers stripped) through the `eh_frame_ptr` of the `.eh_frame_hdr`; then the bytes run to
/// the end of the segment holding it, and [`relocate`] stops at the terminator.
fn input_eh_frame<'a>(elf: &InputElf<'a>, hdr_seg: &Segment) -> Result<(u64, &'a [u8])> {
    if let Some(s) = elf.section(".eh_frame").filter(|s| s.is_alloc() && s.has_bits()) {
        return Ok((s.addr, elf.section_data(s)));
    }
    let bad = |m: String| Error::Malformed(format!(".eh_frame_hdr at 0x{:x}: {m}", hdr_seg.vaddr));
    let hdr = elf.bytes_at(hdr_seg.vaddr, 8).ok_or_else(|| bad("not in the file".into()))?;
    if hdr[0] != 1 {
        return Err(bad(format!("version {}, want 1", hdr[0])));
    }
    let raw = i32::from_le_bytes(hdr[4..8].try_into().unwrap_or_default());
    let ptr = match hdr[1] {
        0x1b => (hdr_seg.vaddr + 4).wrapping_add(raw as i64 as u64),
        0x03 => raw as u32 as u64,
        0x0b => raw as i64 as u64,
        e => return Err(bad(format!("eh_frame_ptr encoding 0x{e:02x}"))),
    };
    let seg = elf
        .loads()
        .find(|s| ptr >= s.vaddr && ptr < s.vaddr + s.filesz)
        .ok_or_else(|| bad(format!("eh_frame_ptr 0x{ptr:x} is not in the file")))?;
    let data = elf.bytes_at(ptr, seg.vaddr + seg.filesz - ptr).ok_or_else(|| bad("eh_frame_ptr".into()))?;
    Ok((ptr, data))
}

/// An FDE of a moved copy.
#[derive(Clone, Copy, Debug)]
struct FdeAt {
    /// Offset of the FDE (its length field) in the copy, and in the original.
    offset: usize,
    /// Initial location and length of the range it covers.
    begin: u64,
    len: u64,
}

/// A copy of `.eh_frame` entries made for a new address.
struct Moved {
    bytes: Vec<u8>,
    fdes: Vec<FdeAt>,
}

/// What an FDE needs from its CIE.
#[derive(Clone, Copy, Debug)]
struct CieInfo {
    /// Encoding of the initial location and (its format) the range length.
    fde_enc: u8,
    /// Encoding of the LSDA pointer, `DW_EH_PE_OMIT` for none.
    lsda_enc: u8,
    /// Augmentation data is present ("z").
    z: bool,
    /// The personality pointer: its offset in the section and encoding.
    personality: Option<(usize, u8)>,
}

/// One `.eh_frame` entry's framing.
struct EntryHdr {
    /// Offset of the CIE id / CIE pointer field, its size (4, or 8 in 64-bit DWARF).
    id_pos: usize,
    id_size: usize,
    /// Offset of the next entry.
    next: usize,
    /// CIE id (0 for a CIE) or CIE pointer.
    id: u64,
}

fn entry_hdr(data: &[u8], pos: usize, what: &str) -> Result<Option<EntryHdr>> {
    let bad = || Error::Malformed(format!("{what}: entry at offset 0x{pos:x} runs past the end"));
    if pos + 4 > data.len() {
        return Ok(None);
    }
    let len32 = u32_at(data, pos).map_err(|_| bad())?;
    if len32 == 0 {
        return Ok(None); // terminator
    }
    let (id_pos, len, id_size) = if len32 == 0xffff_ffff {
        (pos + 12, u64_at(data, pos + 4).map_err(|_| bad())?, 8)
    } else {
        (pos + 4, u64::from(len32), 4)
    };
    let next = usize::try_from(len).ok().and_then(|l| id_pos.checked_add(l)).filter(|&n| n <= data.len());
    let next = next.ok_or_else(bad)?;
    if next < id_pos + id_size {
        return Err(bad());
    }
    let id = if id_size == 4 { u64::from(u32_at(data, id_pos)?) } else { u64_at(data, id_pos)? };
    Ok(Some(EntryHdr { id_pos, id_size, next, id }))
}

/// Reads DWARF fields from section bytes, with errors naming the section.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
    what: &'a str,
}

impl Reader<'_> {
    fn err(&self, m: &str) -> Error {
        Error::Malformed(format!("{}: at offset 0x{:x}: {m}", self.what, self.pos))
    }
    fn u8(&mut self) -> Result<u8> {
        if self.pos >= self.end {
            return Err(self.err("entry ends early"));
        }
        self.pos += 1;
        Ok(self.data[self.pos - 1])
    }
    fn leb(&mut self, signed: bool) -> Result<u64> {
        let bytes = self.data.get(self.pos..self.end).unwrap_or(&[]);
        let (v, n) = crate::analysis::unwind::read_leb128(bytes, signed).ok_or_else(|| self.err("bad LEB128"))?;
        self.pos += n;
        Ok(v)
    }
    fn uleb(&mut self) -> Result<u64> {
        self.leb(false)
    }
    fn sleb(&mut self) -> Result<i64> {
        Ok(self.leb(true)? as i64)
    }
    fn cstr(&mut self) -> Result<&[u8]> {
        if self.pos >= self.end {
            return Err(self.err("entry ends early"));
        }
        let s = self.data[self.pos..self.end]
            .iter()
            .position(|&c| c == 0)
            .ok_or_else(|| self.err("unterminated string"))?;
        let r = &self.data[self.pos..self.pos + s];
        self.pos += s + 1;
        Ok(r)
    }
    /// Size of the encoded pointer at the cursor (LEB128 formats are read to know it).
    fn ptr_size(&mut self, enc: u8) -> Result<usize> {
        Ok(match enc & 0x0f {
            0x00 | 0x04 | 0x0c => 8,
            0x02 | 0x0a => 2,
            0x03 | 0x0b => 4,
            0x01 | 0x09 => {
                let start = self.pos;
                self.uleb()?;
                let n = self.pos - start;
                self.pos = start;
                n
            }
            _ => return Err(self.err(&format!("unknown pointer encoding 0x{enc:02x}"))),
        })
    }
}

/// Parse the CIE at `pos`.
fn parse_cie(data: &[u8], pos: usize, what: &str) -> Result<CieInfo> {
    let h = entry_hdr(data, pos, what)?.ok_or_else(|| Error::Malformed(format!("{what}: no CIE at 0x{pos:x}")))?;
    if h.id != 0 {
        return Err(Error::Malformed(format!("{what}: entry at 0x{pos:x} is not a CIE")));
    }
    let mut r = Reader { data, pos: h.id_pos + h.id_size, end: h.next, what };
    let version = r.u8()?;
    if !matches!(version, 1 | 3) {
        return Err(r.err(&format!("CIE version {version}")));
    }
    let aug = r.cstr()?.to_vec();
    r.uleb()?; // code alignment
    r.sleb()?; // data alignment
    if version == 1 {
        r.u8()?;
    } else {
        r.uleb()?;
    }
    let mut info = CieInfo { fde_enc: 0, lsda_enc: DW_EH_PE_OMIT, z: false, personality: None };
    if aug.is_empty() {
        return Ok(info);
    }
    if aug[0] != b'z' {
        return Err(r.err(&format!("CIE augmentation {:?}", String::from_utf8_lossy(&aug))));
    }
    info.z = true;
    r.uleb()?;
    for &c in &aug[1..] {
        match c {
            b'R' => info.fde_enc = r.u8()?,
            b'L' => info.lsda_enc = r.u8()?,
            b'P' => {
                let enc = r.u8()?;
                info.personality = Some((r.pos, enc));
                r.pos += r.ptr_size(enc)?;
            }
            b'S' | b'B' | b'G' => {}
            _ => return Err(r.err(&format!("CIE augmentation {:?}", String::from_utf8_lossy(&aug)))),
        }
    }
    Ok(info)
}

/// Adjust the pointer field at `pos` (encoding `enc`) of a copy moved by `delta` bytes.
/// Returns the address it points at (before any indirection), or None for a null pointer.
fn move_pointer(
    data: &[u8],
    out: &mut [u8],
    pos: usize,
    enc: u8,
    (old_base, delta): (u64, i64),
    pie: bool,
    what: &str,
) -> Result<Option<u64>> {
    let bad = |m: String| Error::Malformed(format!("{what}: pointer at offset 0x{pos:x}: {m}"));
    let (size, signed) = match enc & 0x0f {
        0x00 | 0x04 | 0x0c => (8, false),
        0x02 => (2, false),
        0x0a => (2, true),
        0x03 => (4, false),
        0x0b => (4, true),
        0x01 | 0x09 => (0, false),
        e => return Err(bad(format!("unknown pointer format 0x{e:x}"))),
    };
    if size == 0 {
        return Err(bad(format!("LEB128 pointer encoding 0x{enc:02x} cannot be moved")));
    }
    let raw = data.get(pos..pos + size).ok_or_else(|| bad("past the end".into()))?;
    let mut v = 0u64;
    for (i, &b) in raw.iter().enumerate() {
        v |= u64::from(b) << (8 * i);
    }
    if signed && size < 8 && v >> (8 * size - 1) & 1 == 1 {
        v |= u64::MAX << (8 * size);
    }
    if v == 0 {
        return Ok(None);
    }
    match enc & 0x70 {
        0x00 if pie => Err(bad(format!("absolute pointer (encoding 0x{enc:02x}) in a position-independent program"))),
        0x00 => Ok(Some(v)),
        DW_EH_PE_PCREL => {
            let target = (old_base + pos as u64).wrapping_add(v);
            let nv = (v as i64).wrapping_sub(delta);
            let fits = match (size, signed) {
                (8, _) => true,
                (n, true) => nv >= -(1i64 << (8 * n - 1)) && nv < 1i64 << (8 * n - 1),
                (n, false) => nv >= 0 && nv < 1i64 << (8 * n),
            };
            if !fits {
                return Err(bad(format!("pc-relative pointer to 0x{target:x} does not reach from the new place")));
            }
            out[pos..pos + size].copy_from_slice(&nv.to_le_bytes()[..size]);
            Ok(Some(target))
        }
        a => Err(bad(format!("pointer application 0x{a:02x} (encoding 0x{enc:02x}) is not supported"))),
    }
}

/// Copy the entries of `data` (an `.eh_frame` at `old`, up to its terminator) for address
/// `new`, adjusting every pc-relative pointer (see the module documentation).
fn relocate(data: &[u8], old: u64, new: u64, pie: bool, what: &str) -> Result<Moved> {
    let mut end = 0;
    while let Some(h) = entry_hdr(data, end, what)? {
        end = h.next;
    }
    let mut out = data[..end].to_vec();
    let moved = (old, new.wrapping_sub(old) as i64);
    let mut cies: HashMap<usize, CieInfo> = HashMap::new();
    let mut fdes = Vec::new();
    let mut pos = 0;
    while let Some(h) = entry_hdr(data, pos, what)? {
        if h.id == 0 {
            let cie = parse_cie(data, pos, what)?;
            if let Some((p, enc)) = cie.personality {
                move_pointer(data, &mut out, p, enc, moved, pie, what)?;
            }
            cies.insert(pos, cie);
        } else {
            let cie_pos = (h.id_pos as u64).checked_sub(h.id).map(|p| p as usize).filter(|&p| p < end);
            let cie_pos = cie_pos
                .ok_or_else(|| Error::Malformed(format!("{what}: FDE at 0x{pos:x} points before the section")))?;
            let cie = match cies.get(&cie_pos) {
                Some(c) => *c,
                None => {
                    let c = parse_cie(data, cie_pos, what)?;
                    cies.insert(cie_pos, c);
                    c
                }
            };
            if cie.fde_enc & 0x80 != 0 {
                return Err(Error::Malformed(format!("{what}: FDE at 0x{pos:x}: indirect initial location")));
            }
            let mut r = Reader { data, pos: h.id_pos + h.id_size, end: h.next, what };
            let at = r.pos;
            let begin = move_pointer(data, &mut out, at, cie.fde_enc, moved, pie, what)?;
            r.pos += r.ptr_size(cie.fde_enc)?;
            let range_size = r.ptr_size(cie.fde_enc & 0x0f)?;
            let mut len = 0u64;
            for i in 0..range_size.min(8) {
                len |= u64::from(r.u8()?) << (8 * i);
            }
            if cie.z {
                r.uleb()?;
                if cie.lsda_enc != DW_EH_PE_OMIT {
                    move_pointer(data, &mut out, r.pos, cie.lsda_enc, moved, pie, what)?;
                }
            }
            if let Some(begin) = begin {
                fdes.push(FdeAt { offset: pos, begin, len });
            }
        }
        pos = h.next;
    }
    Ok(Moved { bytes: out, fdes })
}

/// The `.eh_frame_hdr` at `hdr_at` for an `.eh_frame` at `eh_at`, with a table sorted by
/// initial location.
fn build_hdr(eh_at: u64, hdr_at: u64, mut table: Vec<(u64, u64)>) -> Result<Vec<u8>> {
    table.sort_unstable();
    let rel = |a: u64, what: &str| {
        i32::try_from(a.wrapping_sub(hdr_at) as i64)
            .map_err(|_| Error::NoRoom(format!(".eh_frame_hdr at 0x{hdr_at:x}: {what} 0x{a:x} is out of reach")))
    };
    let count = u32::try_from(table.len()).map_err(|_| Error::NoRoom(".eh_frame_hdr: too many FDEs".into()))?;
    let mut h = vec![1, PCREL_SDATA4, 0x03, 0x3b];
    h.extend_from_slice(&(rel(eh_at, ".eh_frame")?.wrapping_sub(4)).to_le_bytes());
    h.extend_from_slice(&count.to_le_bytes());
    for (pc, fde) in table {
        h.extend_from_slice(&rel(pc, "code")?.to_le_bytes());
        h.extend_from_slice(&rel(fde, "FDE")?.to_le_bytes());
    }
    Ok(h)
}

// ---------------------------------------------------------------------------------------
// The input's CFI rows
// ---------------------------------------------------------------------------------------

/// Evaluates the input's `.eh_frame` rows at addresses.
struct InputRows<'a> {
    eh: EhFrame<gimli::EndianSlice<'a, LittleEndian>>,
    data: &'a [u8],
    bases: BaseAddresses,
    ctx: UnwindContext<usize>,
    /// (initial location, end, offset of the FDE), sorted.
    index: Vec<(u64, u64, usize)>,
}

impl<'a> InputRows<'a> {
    fn new(elf: &InputElf, addr: u64, data: &'a [u8], fdes: &[FdeAt]) -> Self {
        let mut eh = EhFrame::new(data, LittleEndian);
        eh.set_address_size(8);
        let mut bases = BaseAddresses::default().set_eh_frame(addr);
        if let Some(t) = elf.section(".text") {
            bases = bases.set_text(t.addr);
        }
        if let Some(g) = elf.section(".got") {
            bases = bases.set_got(g.addr);
        }
        if let Some(h) = elf.segments.iter().find(|s| s.p_type == elf::PT_GNU_EH_FRAME) {
            bases = bases.set_eh_frame_hdr(h.vaddr);
        }
        let mut index: Vec<_> = fdes.iter().map(|f| (f.begin, f.begin.saturating_add(f.len), f.offset)).collect();
        index.sort_unstable();
        InputRows { eh, data, bases, ctx: UnwindContext::new(), index }
    }

    /// The state at `addr`, or None when no FDE covers it or its CFI cannot be evaluated.
    fn state_at(&mut self, addr: u64) -> Option<State> {
        let i = self.index.partition_point(|f| f.0 <= addr);
        // FDEs do not nest; a few steps back cover zero-length and overlapping oddities.
        let &(_, _, off) = self.index[..i].iter().rev().take(4).find(|f| addr < f.1)?;
        let fde = self.eh.fde_from_offset(&self.bases, EhFrameOffset(off), |s, b, o| s.cie_from_offset(b, o)).ok()?;
        let row = fde.unwind_info_for_address(&self.eh, &self.bases, &mut self.ctx, addr).ok()?;
        let expr =
            |e: &gimli::UnwindExpression<usize>| self.data.get(e.offset..e.offset + e.length).map(<[u8]>::to_vec);
        let cfa = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => Cfa::Reg(register.0, *offset),
            CfaRule::Expression(e) => Cfa::Expr(expr(e)?),
        };
        let mut regs = Regs::default();
        for (reg, rule) in row.registers() {
            let r = reg.0;
            let rule = match rule {
                RegisterRule::SameValue => continue,
                RegisterRule::Offset(n) => Rule::Offset(*n),
                RegisterRule::Undefined => Rule::Raw(op_reg(0x07, r)),
                RegisterRule::ValOffset(n) => Rule::Raw(val_offset(r, *n)),
                RegisterRule::Register(r2) => {
                    let mut v = op_reg(0x09, r);
                    uleb(&mut v, u64::from(r2.0));
                    Rule::Raw(v)
                }
                RegisterRule::Expression(e) => Rule::Raw(with_expr(op_reg(0x10, r), &expr(e)?)),
                RegisterRule::ValExpression(e) => Rule::Raw(with_expr(op_reg(0x16, r), &expr(e)?)),
                _ => return None, // architectural / constant: nothing we can restate
            };
            regs.insert(r, rule);
        }
        let (sp, fp) = match cfa {
            Cfa::Reg(RSP, k) => (Some(k), None),
            Cfa::Reg(RBP, k) => (None, Some(k)),
            _ => (None, None),
        };
        Some(State { cfa, regs, sp, fp })
    }
}

// ---------------------------------------------------------------------------------------
// CFI of generated code
// ---------------------------------------------------------------------------------------

/// How to compute the CFA.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Cfa {
    /// register + offset
    Reg(u16, i64),
    /// A DWARF expression (copied from the input).
    Expr(Vec<u8>),
    /// Lost: the return address is marked undefined.
    Unknown,
}

/// Where a register's caller value is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Rule {
    /// Saved at CFA + n.
    Offset(i64),
    /// Another rule, as the complete CFA instruction that sets it.
    Raw(Vec<u8>),
}

/// Register rules (absent: same value). Offsets of the general registers and the return
/// address are kept in an array and everything else in a (usually empty) list, so that
/// copying a state, once per instruction, is small and allocates nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Regs {
    /// "Saved at CFA + n" of columns 0..=16, `NO_OFFSET` for none.
    off: [i32; 17],
    /// Other rules, sorted by column; a column is in `off` or here, never in both.
    other: Vec<(u16, Rule)>,
}

const NO_OFFSET: i32 = i32::MIN;

impl Default for Regs {
    fn default() -> Self {
        Regs { off: [NO_OFFSET; 17], other: Vec::new() }
    }
}

impl Regs {
    /// The offset rule of `r`, if that is its rule.
    fn offset(&self, r: u16) -> Option<i64> {
        match self.off.get(r as usize) {
            Some(&n) if n != NO_OFFSET => Some(i64::from(n)),
            _ => match self.other.iter().find(|x| x.0 == r) {
                Some((_, Rule::Offset(n))) => Some(*n),
                _ => None,
            },
        }
    }

    fn get(&self, r: u16) -> Option<Rule> {
        match self.off.get(r as usize) {
            Some(&n) if n != NO_OFFSET => Some(Rule::Offset(i64::from(n))),
            _ => self.other.iter().find(|x| x.0 == r).map(|x| x.1.clone()),
        }
    }

    fn insert(&mut self, r: u16, rule: Rule) {
        self.remove(r);
        if let (Some(slot), Rule::Offset(n)) = (self.off.get_mut(r as usize), &rule) {
            if let Ok(n) = i32::try_from(*n) {
                if n != NO_OFFSET {
                    *slot = n;
                    return;
                }
            }
        }
        let i = self.other.partition_point(|x| x.0 < r);
        self.other.insert(i, (r, rule));
    }

    fn remove(&mut self, r: u16) {
        if let Some(slot) = self.off.get_mut(r as usize) {
            *slot = NO_OFFSET;
        }
        if !self.other.is_empty() {
            self.other.retain(|x| x.0 != r);
        }
    }

    /// Every rule, by column.
    fn iter(&self) -> impl Iterator<Item = (u16, Rule)> + '_ {
        let low = self
            .off
            .iter()
            .enumerate()
            .filter(|(_, &n)| n != NO_OFFSET)
            .map(|(r, &n)| (r as u16, Rule::Offset(i64::from(n))));
        let mut all: Vec<(u16, Rule)> = low.chain(self.other.iter().cloned()).collect();
        all.sort_by_key(|x| x.0);
        all.into_iter()
    }

    fn of(rules: &[(u16, Rule)]) -> Self {
        let mut r = Regs::default();
        for (n, rule) in rules {
            r.insert(*n, rule.clone());
        }
        r
    }
}

/// What a row says: the CFA rule and the register rules.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    cfa: Cfa,
    regs: Regs,
}

/// The unwind state before an instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
struct State {
    cfa: Cfa,
    regs: Regs,
    /// CFA - rsp, when known.
    sp: Option<i64>,
    /// CFA - rbp, when known.
    fp: Option<i64>,
}

impl State {
    fn call() -> Self {
        State { cfa: Cfa::Reg(RSP, 8), regs: Regs::of(&[(RA, Rule::Offset(-8))]), sp: Some(8), fp: None }
    }

    fn entry() -> Self {
        State { regs: Regs::of(&[(RA, Rule::Raw(op_reg(0x07, RA)))]), ..Self::call() }
    }

    /// The row this state stands for.
    fn row(&self) -> Row {
        match self.cfa {
            Cfa::Unknown => Row { cfa: Cfa::Reg(RSP, 8), regs: Regs::of(&[(RA, Rule::Raw(op_reg(0x07, RA)))]) },
            _ => Row { cfa: self.cfa.clone(), regs: self.regs.clone() },
        }
    }

    /// Whether this state stands for `row`.
    fn is_row(&self, row: &Row) -> bool {
        match self.cfa {
            Cfa::Unknown => *row == self.row(),
            _ => self.cfa == row.cfa && self.regs == row.regs,
        }
    }

    /// rsp moved (now CFA - `sp`, or unknown).
    fn set_sp(&mut self, sp: Option<i64>) {
        self.sp = sp;
        self.fix_cfa(RSP);
    }

    /// rbp changed (now CFA - `fp`, or unknown).
    fn set_fp(&mut self, fp: Option<i64>) {
        self.fp = fp;
        self.fix_cfa(RBP);
    }

    /// Register `r` was written: keep the CFA computable. A CFA based on rsp or rbp is
    /// restated on rsp whenever rsp is known (else on rbp), so equal states look equal.
    fn fix_cfa(&mut self, r: u16) {
        let depends = match &self.cfa {
            Cfa::Reg(c, _) => *c == r,
            Cfa::Expr(e) => expr_uses(e, r),
            Cfa::Unknown => false,
        };
        if depends || matches!(self.cfa, Cfa::Reg(RSP | RBP, _) | Cfa::Unknown) {
            self.cfa = match (self.sp, self.fp) {
                (Some(s), _) => Cfa::Reg(RSP, s),
                (_, Some(f)) => Cfa::Reg(RBP, f),
                _ => Cfa::Unknown,
            };
        }
    }

    /// The state after `ins`.
    fn step(&mut self, ins: &Instruction, info: &mut InstructionInfoFactory) {
        let op0 =
            if ins.op_count() > 0 && ins.op0_kind() == OpKind::Register { ins.op0_register() } else { Register::None };
        let op1 =
            if ins.op_count() > 1 && ins.op1_kind() == OpKind::Register { ins.op1_register() } else { Register::None };
        let imm = if ins.op_count() > 1 && is_imm(ins.op1_kind()) { Some(ins.immediate(1) as i64) } else { None };
        match ins.mnemonic() {
            Mnemonic::Push | Mnemonic::Pushfq | Mnemonic::Pushf => {
                let sp = self.sp.map(|s| s - i64::from(ins.stack_pointer_increment()));
                self.set_sp(sp);
                if let (Some(r), Some(s)) = (dwarf_gpr(op0), sp) {
                    if r != RSP && self.regs.get(r).is_none() {
                        self.regs.insert(r, Rule::Offset(-s));
                    }
                }
                return;
            }
            Mnemonic::Pop | Mnemonic::Popfq | Mnemonic::Popf => {
                let r = dwarf_gpr(op0);
                if r == Some(RBP) && self.sp.is_none() && matches!(self.cfa, Cfa::Reg(RBP, _)) {
                    self.sp = self.fp; // compilers' assumption: rsp = rbp here
                }
                if let (Some(r), Some(s)) = (r, self.sp) {
                    if self.regs.offset(r) == Some(-s) {
                        self.regs.remove(r);
                    }
                }
                let sp = self.sp.map(|s| s - i64::from(ins.stack_pointer_increment()));
                self.set_sp(sp);
                match r {
                    Some(RBP) => self.set_fp(None),
                    Some(r) => self.fix_cfa(r),
                    None => {}
                }
                return;
            }
            Mnemonic::Leave => {
                self.set_sp(self.fp);
                if let Some(s) = self.sp {
                    if self.regs.offset(RBP) == Some(-s) {
                        self.regs.remove(RBP);
                    }
                }
                self.set_sp(self.sp.map(|s| s - 8));
                self.set_fp(None);
                return;
            }
            Mnemonic::Call | Mnemonic::Ret | Mnemonic::Jmp => return,
            Mnemonic::Sub | Mnemonic::Add if op0 == Register::RSP && imm.is_some() => {
                let d = imm.unwrap_or(0);
                let d = if ins.mnemonic() == Mnemonic::Sub { d } else { -d };
                self.set_sp(self.sp.map(|s| s + d));
                return;
            }
            Mnemonic::Lea if op0 == Register::RSP || op0 == Register::RBP => {
                let d = ins.memory_displacement64() as i64;
                let base = if ins.memory_index() == Register::None { ins.memory_base() } else { Register::None };
                // CFA - (base + d)
                let at = match base {
                    Register::RSP => self.sp.map(|s| s - d),
                    Register::RBP => self.fp.map(|f| f - d),
                    b => match (&self.cfa, dwarf_gpr(b)) {
                        (Cfa::Reg(c, k), Some(r)) if *c == r => Some(k - d),
                        _ => None,
                    },
                };
                if op0 == Register::RSP {
                    self.set_sp(at);
                } else {
                    self.set_fp(at);
                }
                return;
            }
            Mnemonic::Mov if op0 == Register::RSP && op1 != Register::None => {
                let at = match (op1, &self.cfa, dwarf_gpr(op1)) {
                    (Register::RBP, _, _) => self.fp,
                    (_, Cfa::Reg(c, k), Some(r)) if *c == r => Some(*k),
                    _ => None,
                };
                self.set_sp(at);
                return;
            }
            Mnemonic::Mov if op0 == Register::RBP && op1 == Register::RSP => {
                self.set_fp(self.sp);
                return;
            }
            _ => {}
        }
        // Fast path: with the CFA on rsp or rbp, only a write of one of them matters, and
        // apart from the stack instructions above (and `enter`) they are written only as
        // explicit operands.
        if matches!(self.cfa, Cfa::Reg(RSP | RBP, _)) && ins.mnemonic() != Mnemonic::Enter {
            let names_sp_bp = (0..ins.op_count()).any(|k| {
                ins.op_kind(k) == OpKind::Register
                    && matches!(ins.op_register(k).full_register(), Register::RSP | Register::RBP)
            });
            if !names_sp_bp {
                return;
            }
        }
        let mut written = [None; 8];
        let used = info.info(ins).used_registers();
        let writes = used.iter().filter(|u| {
            matches!(u.access(), OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite)
        });
        for (slot, u) in written.iter_mut().zip(writes) {
            *slot = dwarf_gpr(u.register().full_register());
        }
        for r in written.into_iter().flatten() {
            match r {
                RSP => self.set_sp(None),
                RBP => self.set_fp(None),
                r => self.fix_cfa(r),
            }
        }
    }
}

fn is_imm(k: OpKind) -> bool {
    matches!(k, OpKind::Immediate8 | OpKind::Immediate8to64 | OpKind::Immediate32to64 | OpKind::Immediate32)
}

/// DWARF number of a 64-bit general register.
fn dwarf_gpr(r: Register) -> Option<u16> {
    const ORDER: [Register; 16] = [
        Register::RAX,
        Register::RDX,
        Register::RCX,
        Register::RBX,
        Register::RSI,
        Register::RDI,
        Register::RBP,
        Register::RSP,
        Register::R8,
        Register::R9,
        Register::R10,
        Register::R11,
        Register::R12,
        Register::R13,
        Register::R14,
        Register::R15,
    ];
    ORDER.iter().position(|&x| x == r).map(|i| i as u16)
}

/// Whether a DWARF expression may read register `r` (conservative: a byte that could be the
/// opcode `DW_OP_reg<r>` / `DW_OP_breg<r>`, or any `DW_OP_regx` / `DW_OP_bregx`).
fn expr_uses(e: &[u8], r: u16) -> bool {
    r < 32 && e.iter().any(|&b| b == 0x50 + r as u8 || b == 0x70 + r as u8 || b == 0x90 || b == 0x92)
}

/// The CFA program of a piece: rows from its first byte on, starting from the CIE's state
/// ([`State::call`]).
fn cfi_program(start: u64, code: &[u8], initial: State, info: &mut InstructionInfoFactory) -> Result<Vec<u8>> {
    let ins: Vec<Instruction> = Decoder::with_ip(64, code, start, DecoderOptions::NONE).into_iter().collect();
    let states = trace(start, &ins, initial, cfg!(debug_assertions), info)?;
    let mut out = Vec::new();
    let mut row = State::call().row();
    let mut loc = start;
    for (i, s) in ins.iter().zip(&states) {
        let Some(s) = s else { continue };
        if !s.is_row(&row) {
            let new = s.row();
            advance(&mut out, i.ip() - loc);
            loc = i.ip();
            diff(&row, &new, &mut out);
            row = new;
        }
    }
    Ok(out)
}

/// The state before each instruction (None: not reached), following every path from the
/// first. Two states at one instruction: an error if `strict`, else the first one is kept.
fn trace(
    start: u64,
    ins: &[Instruction],
    initial: State,
    strict: bool,
    info: &mut InstructionInfoFactory,
) -> Result<Vec<Option<State>>> {
    let index = |ip: u64| ins.binary_search_by_key(&ip, |x| x.ip()).ok();
    let mut states: Vec<Option<State>> = vec![None; ins.len()];
    let mut work = VecDeque::new();
    if !ins.is_empty() {
        states[0] = Some(initial);
        work.push_back(0);
    }
    while let Some(i) = work.pop_front() {
        let x = &ins[i];
        let mut s = states[i].clone().expect("queued with a state");
        if x.code() == Code::INVALID {
            continue;
        }
        s.step(x, info);
        let target = || index(x.near_branch_target());
        let succ: [Option<usize>; 2] = match x.flow_control() {
            FlowControl::Next | FlowControl::Call | FlowControl::IndirectCall | FlowControl::XbeginXabortXend => {
                [Some(i + 1), None]
            }
            FlowControl::ConditionalBranch => [Some(i + 1), target()],
            FlowControl::UnconditionalBranch => [target(), None],
            _ => [None, None], // ret, indirect jump, int3, ud2: the path ends
        };
        for j in succ.into_iter().flatten().filter(|&j| j < ins.len()) {
            match &mut states[j] {
                None => {
                    states[j] = Some(s.clone());
                    work.push_back(j);
                }
                Some(old) => {
                    if old.cfa != s.cfa || old.regs != s.regs {
                        if strict {
                            return Err(Error::Internal(format!(
                                "unwind: generated code at 0x{start:x}: 0x{:x} is reached in two states: {old:?} and {s:?}",
                                ins[j].ip()
                            )));
                        }
                        continue; // keep the first path's state
                    }
                    let (sp, fp) = (old.sp.filter(|_| old.sp == s.sp), old.fp.filter(|_| old.fp == s.fp));
                    if (sp, fp) != (old.sp, old.fp) {
                        old.sp = sp;
                        old.fp = fp;
                        work.push_back(j);
                    }
                }
            }
        }
    }
    Ok(states)
}

// ---------------------------------------------------------------------------------------
// Encoding CFA instructions, the CIE and FDEs
// ---------------------------------------------------------------------------------------

fn uleb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn sleb(out: &mut Vec<u8>, mut v: i64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if (v == 0 && b & 0x40 == 0) || (v == -1 && b & 0x40 != 0) {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// `op` followed by a register operand.
fn op_reg(op: u8, r: u16) -> Vec<u8> {
    let mut v = vec![op];
    uleb(&mut v, u64::from(r));
    v
}

/// `instr` followed by a length-prefixed expression.
fn with_expr(mut instr: Vec<u8>, e: &[u8]) -> Vec<u8> {
    uleb(&mut instr, e.len() as u64);
    instr.extend_from_slice(e);
    instr
}

/// Data alignment factor of our CIE.
const DATA_ALIGN: i64 = -8;

/// `DW_OP_call_frame_cfa; DW_OP_consts n; DW_OP_plus`: CFA + n, for offsets the data
/// alignment cannot express.
fn cfa_plus(n: i64) -> Vec<u8> {
    let mut e = vec![0x9c, 0x11];
    sleb(&mut e, n);
    e.push(0x22);
    e
}

/// The rule "saved at CFA + n".
fn offset_rule(r: u16, n: i64) -> Vec<u8> {
    if n % DATA_ALIGN != 0 {
        return with_expr(op_reg(0x10, r), &cfa_plus(n));
    }
    let f = n / DATA_ALIGN;
    match (r, f >= 0) {
        (0..=63, true) => {
            let mut v = vec![0x80 | r as u8]; // DW_CFA_offset
            uleb(&mut v, f as u64);
            v
        }
        (_, true) => {
            let mut v = op_reg(0x05, r); // DW_CFA_offset_extended
            uleb(&mut v, f as u64);
            v
        }
        (_, false) => {
            let mut v = op_reg(0x11, r); // DW_CFA_offset_extended_sf
            sleb(&mut v, f);
            v
        }
    }
}

/// The rule "the caller's value is CFA + n".
fn val_offset(r: u16, n: i64) -> Vec<u8> {
    if n % DATA_ALIGN != 0 {
        return with_expr(op_reg(0x16, r), &cfa_plus(n));
    }
    let mut v = op_reg(0x15, r); // DW_CFA_val_offset_sf
    sleb(&mut v, n / DATA_ALIGN);
    v
}

fn advance(out: &mut Vec<u8>, delta: u64) {
    match delta {
        0 => {}
        1..=0x3f => out.push(0x40 | delta as u8),
        0x40..=0xff => out.extend_from_slice(&[0x02, delta as u8]),
        0x100..=0xffff => {
            out.push(0x03);
            out.extend_from_slice(&(delta as u16).to_le_bytes());
        }
        _ => {
            out.push(0x04);
            out.extend_from_slice(&(delta as u32).to_le_bytes());
        }
    }
}

/// CFA instructions that turn row `from` into row `to`.
fn diff(from: &Row, to: &Row, out: &mut Vec<u8>) {
    match (&from.cfa, &to.cfa) {
        (a, b) if a == b => {}
        (Cfa::Reg(r0, _), Cfa::Reg(r1, k)) if r0 == r1 && *k >= 0 => {
            out.push(0x0e); // DW_CFA_def_cfa_offset
            uleb(out, *k as u64);
        }
        (Cfa::Reg(_, k0), Cfa::Reg(r1, k1)) if k0 == k1 => out.extend(op_reg(0x0d, *r1)), // DW_CFA_def_cfa_register
        (_, Cfa::Reg(r, k)) if *k >= 0 => {
            out.extend(op_reg(0x0c, *r)); // DW_CFA_def_cfa
            uleb(out, *k as u64);
        }
        (_, Cfa::Reg(r, k)) => {
            // DW_CFA_def_cfa_expression: DW_OP_bregx r k
            let mut e = op_reg(0x92, *r);
            sleb(&mut e, *k);
            out.extend(with_expr(vec![0x0f], &e));
        }
        (_, Cfa::Expr(e)) => out.extend(with_expr(vec![0x0f], e)),
        (_, Cfa::Unknown) => unreachable!("rows never hold an unknown CFA"),
    }
    for (r, rule) in to.regs.iter() {
        if from.regs.get(r).as_ref() != Some(&rule) {
            match rule {
                Rule::Offset(n) => out.extend(offset_rule(r, n)),
                Rule::Raw(v) => out.extend_from_slice(&v),
            }
        }
    }
    for (r, _) in from.regs.iter().filter(|(r, _)| to.regs.get(*r).is_none()) {
        if r == RA {
            out.extend(op_reg(0x08, RA)); // DW_CFA_same_value
        } else if r < 64 {
            out.push(0xc0 | r as u8); // DW_CFA_restore: no rule in our CIE
        } else {
            out.extend(op_reg(0x06, r)); // DW_CFA_restore_extended
        }
    }
}

/// Pad an entry that started at `start` with `DW_CFA_nop` to a multiple of 8 bytes, and fill
/// in its length.
fn finish_entry(eh: &mut Vec<u8>, start: usize) {
    while !(eh.len() - start).is_multiple_of(8) {
        eh.push(0);
    }
    let len = (eh.len() - start - 4) as u32;
    eh[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// The CIE of generated code: "zR", code alignment 1, data alignment -8, return address
/// column 16, FDE pointers pcrel|sdata4; CFA = rsp+8, return address at CFA-8. Returns its offset.
fn push_cie(eh: &mut Vec<u8>) -> usize {
    let start = eh.len();
    eh.extend_from_slice(&[0; 4]); // length
    eh.extend_from_slice(&[0; 4]); // CIE id
    eh.push(1); // version
    eh.extend_from_slice(b"zR\0");
    uleb(eh, 1);
    sleb(eh, DATA_ALIGN);
    eh.push(RA as u8);
    uleb(eh, 1); // augmentation data length
    eh.push(PCREL_SDATA4);
    eh.extend_from_slice(&[0x0c, RSP as u8, 8]); // DW_CFA_def_cfa rsp, 8
    eh.extend(offset_rule(RA, -8));
    finish_entry(eh, start);
    start
}

/// An FDE for [start, start+len) with CFA program `program`. Returns its offset.
fn push_fde(eh: &mut Vec<u8>, cie: usize, eh_at: u64, start: u64, len: u64, program: &[u8]) -> Result<usize> {
    let at = eh.len();
    eh.extend_from_slice(&[0; 4]); // length
    eh.extend_from_slice(&((at + 4 - cie) as u32).to_le_bytes()); // CIE pointer
    let field = eh_at + eh.len() as u64;
    let rel = i32::try_from(start.wrapping_sub(field) as i64)
        .map_err(|_| Error::NoRoom(format!("unwind: code at 0x{start:x} is out of reach of its FDE")))?;
    eh.extend_from_slice(&rel.to_le_bytes());
    let len = u32::try_from(len).map_err(|_| Error::Internal(format!("unwind: piece at 0x{start:x} too long")))?;
    eh.extend_from_slice(&len.to_le_bytes());
    uleb(eh, 0); // augmentation data length
    eh.extend_from_slice(program);
    finish_entry(eh, at);
    Ok(at)
}

#[cfg(test)]
mod tests;
