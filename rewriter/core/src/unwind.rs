//! Unwind information for everything the rewriter adds (DESIGN D5).
//!
//! libgcc's unwinder (C++ exceptions, `pthread_cancel`'s forced unwinding) finds FDEs through
//! `PT_GNU_EH_FRAME` and the binary-search table of the `.eh_frame_hdr` it points to; gdb reads
//! the section named `.eh_frame`. The output gets one new `.eh_frame` in the new code segment,
//! followed by a new `.eh_frame_hdr` whose table covers every FDE in it, and the writing pass
//! (`emit`) points `PT_GNU_EH_FRAME` and the `.eh_frame` / `.eh_frame_hdr` section headers at them.
//! All call frame information is read with gimli (through
//! [`EhFrameIn`](crate::analysis::unwind::EhFrameIn), the reader analysis uses too) and
//! written with gimli's `write::FrameTable`; only the `.eh_frame_hdr`, for which gimli has no
//! writer, is laid out here ([`build_hdr`]). The new `.eh_frame` holds, in this order:
//!
//! 1. The input's entries (its `.eh_frame` up to the terminator), converted for the new place.
//! 2. rt-lib's entries (the image's `.eh_frame`; `build.rs` checks that its pointers are
//!    pc-relative), converted the same way.
//! 3. One CIE for generated code and one FDE per generated [`Piece`] (stubs, timer routines,
//!    trampolines, thunks), whose CFI is computed from the machine code (below).
//! 4. A zero terminator, then (4-aligned) the `.eh_frame_hdr`: version 1, `eh_frame_ptr`
//!    pc-relative sdata4, `fde_count` udata4, a table of (initial location, FDE address) pairs
//!    relative to the header (datarel sdata4), sorted by initial location.
//!
//! # Converted, not copied
//!
//! Moving an entry changes every pc-relative pointer in it (FDE initial locations, LSDA
//! pointers in FDE augmentation data, personality pointers in CIE augmentation data), and
//! finding those fields means parsing every entry anyway. So each entry is read with gimli
//! (which resolves every pointer to the address it means) and written again by gimli's
//! writer for the new place, with the CIE's own pointer encodings, alignment factors and
//! CFA program (instruction by instruction, expressions byte for byte), so personality
//! routines and LSDAs of C++ code stay exact:
//!
//! - a pc-relative pointer is written relative to its new place; an `indirect` one keeps
//!   pointing at the same slot (the slot holds an absolute address, which does not move);
//! - an absolute pointer keeps its value in a non-PIE and is refused in a PIE (the dynamic
//!   relocations that fix it apply to the old copy only); text-, data- and function-relative
//!   and aligned pointers are refused;
//! - a null pointer (raw 0; for a pc-relative one gimli reads the address of the field
//!   itself, inside its own entry) means "none" to libgcc: a CIE's null personality is
//!   dropped, an FDE with a null LSDA gets its CIE without `L`, and an FDE whose initial
//!   location is null (it describes no code) is left out;
//! - `DW_CFA_set_loc` (emitted by no current toolchain) becomes an advance from the FDE's
//!   start, so it moves with the code's description;
//! - identical CIEs are written once, every entry in 32-bit DWARF format as CIE version 1
//!   (version 3 differs only in how the return address column is encoded, a ULEB128 that
//!   gimli writes for both), padded with `DW_CFA_nop` to 8 bytes.
//!
//! The header's table pairs each FDE's initial location, recorded as the FDE is added
//! ([`Frames`]), with the FDE's offset, found by walking the written entries' lengths
//! ([`hdr_index`]: gimli writes the FDEs in the order they were added; nothing is parsed
//! back). The input's own `.eh_frame` and `.eh_frame_hdr` bytes stay where they were, unused. An input without `PT_GNU_EH_FRAME` is left as it is ([`build`] returns
//! `None`): without a header there is no program header slot to point at the new table.
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
//! A row is emitted at every instruction whose state differs from the previous row, as the
//! `write::CallFrameInstruction`s that turn the previous row into it ([`diff`]). Every
//! instruction reached by two paths must be reached in one state (the generated code keeps
//! the stack balanced on every path): a disagreement is an error in debug builds; release
//! builds keep the state of the first path.

use crate::analysis::unwind::{Bytes, EhFrameIn, ReadFde};
use crate::error::{Error, Result};
use crate::input::{InputElf, Segment};
use crate::plan::SiteEh;
use gimli::write::{
    Address, CallFrameInstruction as Cfi, CieId, CommonInformationEntry, Expression, FrameDescriptionEntry, FrameTable,
};
use gimli::{
    constants, BaseAddresses, CfaRule, DwEhPe, EhFrameHdr, EhFrameOffset, Encoding, Format, LittleEndian, Pointer,
    RegisterRule, UnwindContext, UnwindSection,
};
use iced_x86::{
    Code, ConstantOffsets, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic,
    OpAccess, OpKind, Register,
};
use object::elf;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::ops::Range;

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
    /// Entered by a `call` that stands in for the input's call instruction at this address
    /// (an import call site's trampoline): the state there ([`Initial::At`]) with the return
    /// address pushed, rsp 8 lower.
    Called(u64),
}

/// A piece of generated code: its address in the output, its bytes, and its initial state.
#[derive(Clone, Debug)]
pub struct Piece {
    pub start: u64,
    pub code: Vec<u8>,
    pub initial: Initial,
    /// The id of its CFI shape ([`ShapeIds`]) where the layout pass found it while encoding
    /// the piece ahead (`None`: the shape is found here, by decoding the piece).
    pub shape: Option<u64>,
}

/// The exception tables of import trampolines, the new `.eh_frame` and `.eh_frame_hdr`, laid
/// out from `lsda_at` (see [`EhOut::bytes`]).
#[derive(Clone, Debug)]
pub struct EhOut {
    /// Virtual address of the exception tables ([`CalledEh`]), where these bytes start.
    pub lsda_at: u64,
    /// The exception tables, padded to `eh_frame_at` (empty when no trampoline needs one).
    pub lsda: Vec<u8>,
    /// Virtual address of the new `.eh_frame`.
    pub eh_frame_at: u64,
    pub eh_frame: Vec<u8>,
    /// Virtual address of the new `.eh_frame_hdr`: `eh_frame_at + eh_frame.len()`, rounded up to 4.
    pub hdr_at: u64,
    pub eh_frame_hdr: Vec<u8>,
}

impl EhOut {
    /// The bytes to place at `lsda_at`: the exception tables, `.eh_frame`, padding,
    /// `.eh_frame_hdr`.
    pub fn bytes(&self) -> Vec<u8> {
        let mut v = self.lsda.clone();
        v.extend_from_slice(&self.eh_frame);
        v.resize((self.hdr_at - self.lsda_at) as usize, 0);
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

/// pcrel | sdata4: the encoding of every pointer we write.
const PCREL_SDATA4: DwEhPe = DwEhPe(constants::DW_EH_PE_pcrel.0 | constants::DW_EH_PE_sdata4.0);
/// How every entry of the new `.eh_frame` is written.
const ENCODING: Encoding = Encoding { format: Format::Dwarf32, version: 1, address_size: 8 };
/// Data alignment factor of our CIE.
const DATA_ALIGN: i64 = -8;

/// Build the combined `.eh_frame` and its `.eh_frame_hdr`, placed from `at` (which must be
/// 4-aligned), after the exception tables of the import trampolines whose call site `called`
/// names ([`CalledEh`]): the input's FDEs, rt-lib's (`rt_eh`: the address where the image's
/// `.eh_frame` lies in the output, and its bytes) and one FDE per piece. `None` if the input
/// has no `PT_GNU_EH_FRAME` (see the module documentation).
pub fn build(
    elf: &InputElf,
    pieces: &[Piece],
    rt_eh: (u64, &[u8]),
    at: u64,
    called: &HashMap<u64, SiteEh>,
) -> Result<Option<EhOut>> {
    let Some(hdr_seg) = elf.segments.iter().find(|s| s.p_type == elf::PT_GNU_EH_FRAME) else {
        return Ok(None);
    };
    if !at.is_multiple_of(4) {
        return Err(Error::Internal(format!("unwind: .eh_frame at 0x{at:x} is not 4-aligned")));
    }
    let (in_addr, in_data) = input_eh_frame(elf, hdr_seg)?;
    let input = EhFrameIn::of_program(elf, in_addr, in_data);
    let pieces: Vec<&Piece> = pieces.iter().filter(|p| !p.code.is_empty()).collect();
    let lsdas = CalledEh::lay_out(&pieces, called, at, &|a| lsda_bytes(elf, a), elf.kind.is_position_independent())?;
    let (lsda_at, at) = (at, lsdas.end);
    let mut table = Frames::default();
    let mut index = Vec::new();
    let input_fdes = input.fdes().inspect(|f| {
        if let Ok(f) = f {
            index.push((f.initial_address(), f.initial_address().saturating_add(f.len()), f.offset()));
        }
    });
    Converter::new(&input, at, elf.kind.is_position_independent()).convert(input_fdes, &mut table)?;
    let rt = EhFrameIn::new(rt_eh.0, rt_eh.1, "rt-lib .eh_frame");
    Converter::new(&rt, at, true).convert(rt.fdes(), &mut table)?;

    // The FDE of every piece, its CFI traced on every core (each thread evaluates the input's
    // rows with its own context), added to the table in piece order with its CIE.
    index.sort_unstable();
    let fdes = crate::par::map(
        &pieces,
        || (InputRows::new(&input, &index), InstructionInfoFactory::new(), CfiMemo::default()),
        |(rows, info, memo), p| {
            let len = u32::try_from(p.code.len())
                .map_err(|_| Error::Internal(format!("unwind: piece at 0x{:x} too long", p.start)))?;
            let initial = match p.initial {
                Initial::Call => State::call(),
                Initial::Entry => State::entry(),
                Initial::At(a) => rows.state_at(a).unwrap_or_else(State::call),
                Initial::Called(a) => rows.state_at(a).unwrap_or_else(State::call).pushed(8),
            };
            let mut fde = FrameDescriptionEntry::new(Address::Constant(p.start.wrapping_sub(at)), len);
            for (offset, instruction) in memo.program(p.start, &p.code, p.shape, initial, info)? {
                fde.add_instruction(*offset, instruction.clone());
            }
            Ok(fde)
        },
    );
    let cie = table.add_cie(generated_cie());
    let mut personal = Personalities::new(&input, &index, at, elf.kind.is_position_independent());
    for (p, fde) in pieces.iter().zip(fdes) {
        let mut fde = fde?;
        let mut cie = cie;
        if let (Some(&lsda), Initial::Called(site)) = (lsdas.at.get(&p.start), p.initial) {
            // No personality where the caller is: the unwinder never read its LSDA either.
            if let Some(with) = personal.cie_at(site, &mut table)? {
                cie = with;
                fde.lsda = Some(Address::Constant(lsda.wrapping_sub(at)));
            }
        }
        table.add_fde(cie, fde, p.start);
    }
    // The input's FDEs grow by their relocated pointers at most; a piece's FDE is its CFA
    // program (a few rows) behind a 9-word header.
    let size_hint = in_data.len() + rt_eh.1.len() + pieces.len() * 64;
    let eh_frame = write_eh_frame(&table.table, at, size_hint)?;
    // The table's memory is freed on another thread, while this one goes on.
    let starts = std::mem::take(&mut table.starts);
    crate::drop_elsewhere(table);

    let index = hdr_index(&eh_frame, at, &starts)?;
    let hdr_at = (at + eh_frame.len() as u64).next_multiple_of(4);
    let eh_frame_hdr = build_hdr(at, hdr_at, index)?;
    Ok(Some(EhOut { lsda_at, lsda: lsdas.bytes, eh_frame_at: at, eh_frame, hdr_at, eh_frame_hdr }))
}

// ---------------------------------------------------------------------------------------
// Exception tables of import trampolines
// ---------------------------------------------------------------------------------------

/// The exception tables (LSDAs, in the GCC format every C++ and Rust personality routine
/// reads) of the import trampolines whose caller has one ([`SiteEh`]), laid out before the new
/// `.eh_frame`.
///
/// While a timed import runs, its return address is in the trampoline, so the unwinder asks
/// the trampoline's FDE, not the caller's, what to do. The trampoline makes the call with the
/// caller's registers and stack pointer, so its frame can answer for the caller: its FDE gets
/// the caller's personality routine (the caller's CIE's pointer, converted like any other)
/// and one of these tables, with the caller's answer for the whole trampoline:
/// - [`SiteEh::Terminate`] (no row covers the call): an empty call-site table, shared by all
///   such trampolines: the personality routine terminates, as the caller's would have;
/// - [`SiteEh::Cleanup`]: one row over the whole trampoline whose landing pad is the caller's
///   pad (action 0, no type table). The table's own `LPStart` (pc-relative, one byte before
///   the pad) makes the pad reachable from a table that is not the caller's;
/// - [`SiteEh::Catch`]: the same row with the caller's action chain and the part of its type
///   table the chain uses ([`CatchRow`]), so the personality routine picks the same handler
///   and hands the pad the same selector.
///
/// Trampolines of one length with the same answer share one table (a caller's calls covered
/// by one row, or any callers' calls into one pad). Other pieces get none: only import
/// trampolines call code that can throw.
struct CalledEh {
    /// The tables, padded to `end`.
    bytes: Vec<u8>,
    /// Each piece's table, by the piece's start.
    at: HashMap<u64, u64>,
    /// The first address after them, 8-aligned (`at` itself when there are none).
    end: u64,
}

/// DW_EH_PE_omit, DW_EH_PE_uleb128, DW_EH_PE_udata8 (absolute).
const EH_PE_OMIT: u8 = 0xff;
const EH_PE_ULEB128: u8 = 0x01;
const EH_PE_UDATA8: u8 = 0x04;
/// DW_EH_PE_indirect: the entry points at a slot holding the address.
const EH_PE_INDIRECT: u8 = 0x80;
/// Action records one restated chain may have (a chain longer than this is taken for a loop).
const MAX_ACTIONS: usize = 256;

impl CalledEh {
    /// The tables of `pieces` from `at`; `lsda` gives the bytes of a caller's LSDA (from its
    /// address to the end of its section) for [`SiteEh::Catch`] rows, in a program that is
    /// position-independent if `pie`.
    fn lay_out<'a>(
        pieces: &[&Piece],
        called: &HashMap<u64, SiteEh>,
        at: u64,
        lsda: &dyn Fn(u64) -> Option<&'a [u8]>,
        pie: bool,
    ) -> Result<CalledEh> {
        let mut out = CalledEh { bytes: Vec::new(), at: HashMap::new(), end: at };
        let mut shared: HashMap<(SiteEh, usize), u64> = HashMap::new();
        for p in pieces {
            let Initial::Called(site) = p.initial else { continue };
            let eh = match called.get(&site) {
                None | Some(SiteEh::Pass) => continue,
                Some(&eh) => eh,
            };
            // A Terminate table has no rows, so it fits trampolines of every length.
            let key = (eh, if eh == SiteEh::Terminate { 0 } else { p.code.len() });
            let table = match shared.get(&key) {
                Some(&t) => t,
                None => {
                    let t = at + out.bytes.len() as u64;
                    let bytes = match eh {
                        SiteEh::Pass => continue,
                        // LPStart omitted, no type table, ULEB128 call sites, an empty table.
                        SiteEh::Terminate => vec![EH_PE_OMIT, EH_PE_OMIT, EH_PE_ULEB128, 0],
                        SiteEh::Cleanup(pad) => CatchRow::cleanup().write(t, pad, p.code.len() as u64)?,
                        SiteEh::Catch { pad, lsda: l, action } => {
                            let data = lsda(l).ok_or_else(|| {
                                Error::Internal(format!(
                                    "unwind: the LSDA at 0x{l:x} of the call at 0x{site:x} is gone"
                                ))
                            })?;
                            let row = CatchRow::read(data, l, action, pie).map_err(|why| {
                                Error::Internal(format!("unwind: the LSDA at 0x{l:x} of the call at 0x{site:x}: {why}"))
                            })?;
                            row.write(t, pad, p.code.len() as u64)?
                        }
                    };
                    out.bytes.extend_from_slice(&bytes);
                    shared.insert(key, t);
                    t
                }
            };
            out.at.insert(p.start, table);
        }
        if !out.bytes.is_empty() {
            out.end = (at + out.bytes.len() as u64).next_multiple_of(8);
            out.bytes.resize((out.end - at) as usize, 0);
        }
        Ok(out)
    }
}

/// The bytes of the LSDA at `lsda` in the input: from there to the end of the section holding
/// it (`.gcc_except_table`); None if no allocated section with bits holds it.
pub(crate) fn lsda_bytes<'a>(elf: &InputElf<'a>, lsda: u64) -> Option<&'a [u8]> {
    let sec = elf.sections.iter().find(|s| s.is_alloc() && s.has_bits() && lsda >= s.addr && lsda - s.addr < s.size)?;
    elf.section_data(sec).get((lsda - sec.addr) as usize..)
}

/// What one row of a caller's LSDA does, read for restating it in a trampoline's own table:
/// the row's action chain (each record's filter: > 0 catches the type of that type-table
/// entry, 0 is a cleanup, < 0 is an exception specification at that byte offset after the
/// type table's base) and what the chain reads of the type table, re-encoded for a table at
/// another address.
///
/// Filter values stay as they are: the landing pad compares the selector it is handed with
/// constants compiled into it. So the type table keeps its indices (entries the chain does
/// not use are written as 0) and the exception specifications keep their offsets (the bytes
/// from the base to the end of the last list used are copied; their entries are type
/// indices). An entry is "none" (raw 0, `catch (...)`) or an address:
/// - pc-relative entries (GCC's and clang's `indirect|pcrel|sdata4` in PIC, pointing at a
///   `DW.ref` slot; or direct) are written pc-relative sdata4 from their new place, keeping
///   the indirection: the slot or `typeinfo` object does not move;
/// - absolute entries (non-PIC) are written as absolute udata8, keeping the indirection; in a
///   position-independent program they would need the dynamic relocations of the old table,
///   so they are refused;
/// - text-, data- and function-relative and aligned entries, and the variable-length
///   (LEB128) formats libgcc does not read in type tables, are refused: all of these only
///   when an entry the chain uses is not null.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CatchRow {
    filters: Vec<i64>,
    /// The encoding of the restated type table (`EH_PE_OMIT`: the chain reads no type).
    enc: u8,
    /// The type-table entries the chain uses, by index: None for null, else the address the
    /// caller's entry means (before any indirection).
    types: std::collections::BTreeMap<u64, Option<u64>>,
    /// The exception specifications, from the type table's base to the end of the last list
    /// the chain uses.
    specs: Vec<u8>,
}

/// A reader over an LSDA's bytes at `base`.
struct LsdaCursor<'a> {
    data: &'a [u8],
    pos: usize,
    base: u64,
}

impl LsdaCursor<'_> {
    fn at(&self) -> u64 {
        self.base.wrapping_add(self.pos as u64)
    }
    fn u8(&mut self) -> std::result::Result<u8, String> {
        let b = *self.data.get(self.pos).ok_or_else(|| format!("ends at 0x{:x}", self.at()))?;
        self.pos += 1;
        Ok(b)
    }
    fn leb(&mut self, signed: bool) -> std::result::Result<u64, String> {
        let mut r = gimli::EndianSlice::new(self.data.get(self.pos..).unwrap_or(&[]), LittleEndian);
        let len = r.len();
        let v = if signed {
            gimli::leb128::read::signed(&mut r).map(|v| v as u64)
        } else {
            gimli::leb128::read::unsigned(&mut r)
        };
        let v = v.map_err(|_| format!("bad LEB128 at 0x{:x}", self.at()))?;
        self.pos += len - r.len();
        Ok(v)
    }
    /// A value of DW_EH_PE format `enc & 0x0f`, raw (no application, no indirection).
    fn raw(&mut self, enc: u8) -> std::result::Result<u64, String> {
        let sext = |v: u64, bits: u32| ((v << (64 - bits)) as i64 >> (64 - bits)) as u64;
        let size = match enc & 0x0f {
            0x01 => return self.leb(false),
            0x09 => return self.leb(true),
            f => fixed_size(f).ok_or_else(|| format!("pointer encoding 0x{enc:02x} at 0x{:x}", self.at()))?,
        };
        let b = self.data.get(self.pos..self.pos + size).ok_or_else(|| format!("ends at 0x{:x}", self.at()))?;
        self.pos += size;
        let v = b.iter().rev().fold(0u64, |v, &x| v << 8 | u64::from(x));
        Ok(match enc & 0x0f {
            0x0a => sext(v, 16),
            0x0b => sext(v, 32),
            _ => v,
        })
    }
}

/// The size of a fixed-size DW_EH_PE format (`enc & 0x0f`), None for LEB128 or unknown.
fn fixed_size(format: u8) -> Option<usize> {
    match format {
        0x00 | 0x04 | 0x08 | 0x0c => Some(8),
        0x02 | 0x0a => Some(2),
        0x03 | 0x0b => Some(4),
        _ => None,
    }
}

impl CatchRow {
    /// A cleanup-only row: no chain (action 0), no type table.
    fn cleanup() -> CatchRow {
        CatchRow { filters: Vec::new(), enc: EH_PE_OMIT, types: Default::default(), specs: Vec::new() }
    }

    /// The row whose action is `action` (1 + the offset of its first record in the action
    /// table) of the LSDA whose bytes `data` lie at `lsda`, in a program that is
    /// position-independent if `pie`; or why it cannot be restated (see [`CatchRow`]).
    pub(crate) fn read(data: &[u8], lsda: u64, action: u64, pie: bool) -> std::result::Result<CatchRow, String> {
        let mut c = LsdaCursor { data, pos: 0, base: lsda };
        let lp_enc = c.u8()?;
        if lp_enc != EH_PE_OMIT {
            c.raw(lp_enc)?;
        }
        let tt_enc = c.u8()?;
        let tt_base = if tt_enc == EH_PE_OMIT {
            None
        } else {
            let off = c.leb(false)?;
            Some(usize::try_from(off).ok().and_then(|o| c.pos.checked_add(o)).ok_or("type table offset")?)
        };
        let _cs_enc = c.u8()?;
        let cs_len = c.leb(false)?;
        let actions =
            usize::try_from(cs_len).ok().and_then(|l| c.pos.checked_add(l)).ok_or("call-site table length")?;
        if action == 0 {
            return Err("action 0 is a cleanup".into());
        }
        // The chain.
        let mut filters = Vec::new();
        let mut pos = usize::try_from(action - 1).ok().and_then(|a| actions.checked_add(a)).ok_or("action offset")?;
        loop {
            if filters.len() == MAX_ACTIONS {
                return Err(format!("action chain longer than {MAX_ACTIONS} records"));
            }
            c.pos = pos;
            filters.push(c.leb(true)? as i64);
            let next_at = c.pos;
            let next = c.leb(true)? as i64;
            if next == 0 {
                break;
            }
            pos = next_at.checked_add_signed(next as isize).ok_or("action record offset")?;
        }
        // The type indices the chain uses, and the exception specifications.
        let mut indices: Vec<u64> = filters.iter().filter(|&&f| f > 0).map(|&f| f as u64).collect();
        let mut specs_end = None;
        for &f in filters.iter().filter(|&&f| f < 0) {
            let base = tt_base.ok_or("an exception specification without a type table")?;
            c.pos = base.checked_add(f.unsigned_abs() as usize - 1).ok_or("specification offset")?;
            loop {
                let i = c.leb(false)?;
                if i == 0 {
                    break;
                }
                indices.push(i);
            }
            specs_end = specs_end.max(Some(c.pos));
        }
        let specs = match (tt_base, specs_end) {
            (Some(b), Some(e)) => data[b..e].to_vec(),
            _ => Vec::new(),
        };
        if indices.is_empty() && specs.is_empty() {
            return Ok(CatchRow { filters, enc: EH_PE_OMIT, types: Default::default(), specs });
        }
        let base = tt_base.ok_or("a handler type without a type table")?;
        let size = fixed_size(tt_enc & 0x0f)
            .ok_or_else(|| format!("type table encoding 0x{tt_enc:02x} (variable-length or unknown)"))?;
        let mut types = std::collections::BTreeMap::new();
        for i in indices {
            let at = usize::try_from(i)
                .ok()
                .and_then(|i| i.checked_mul(size))
                .and_then(|d| base.checked_sub(d))
                .ok_or_else(|| format!("type index {i}"))?;
            c.pos = at;
            let field = c.at();
            let raw = c.raw(tt_enc)?;
            let meant = match tt_enc & 0x70 {
                _ if raw == 0 => None,
                0x00 => Some(raw),
                0x10 => Some(field.wrapping_add(raw)),
                a => return Err(format!("type table encoding 0x{tt_enc:02x} (application 0x{a:02x})")),
            };
            types.insert(i, meant);
        }
        let absolute = tt_enc & 0x70 == 0x00;
        let enc = if types.values().all(Option::is_none) {
            EH_PE_UDATA8 // zeros, whatever they were
        } else if absolute && pie {
            return Err(format!("type table encoding 0x{tt_enc:02x}: absolute in a position-independent program"));
        } else if absolute {
            EH_PE_UDATA8 | (tt_enc & EH_PE_INDIRECT)
        } else {
            PCREL_SDATA4.0 | (tt_enc & EH_PE_INDIRECT)
        };
        Ok(CatchRow { filters, enc, types, specs })
    }

    /// The table at `t`: `LPStart` pc-relative one byte before `pad`, one row over
    /// `[0, len)` whose pad is `pad` and whose action is the chain (or 0 without one), the
    /// chain's records one after the other, the type table and the specifications.
    fn write(&self, t: u64, pad: u64, len: u64) -> Result<Vec<u8>> {
        let uleb = |out: &mut Vec<u8>, v: u64| gimli::leb128::write::unsigned(out, v).expect("a Vec takes every write");
        let sleb = |out: &mut Vec<u8>, v: i64| gimli::leb128::write::signed(out, v).expect("a Vec takes every write");
        let rel32 = |from: u64, to: u64, what: &str| {
            i32::try_from(to.wrapping_sub(from) as i64)
                .map_err(|_| Error::Internal(format!("unwind: {what} 0x{to:x} out of reach of 0x{from:x}")))
        };
        let mut out = vec![PCREL_SDATA4.0];
        out.extend_from_slice(&rel32(t + 1, pad.wrapping_sub(1), "landing pad")?.to_le_bytes());
        // After the type table's header: the call-site table and the action records.
        let mut rest = vec![EH_PE_ULEB128];
        let mut row = Vec::new();
        for v in [0, len, 1, u64::from(!self.filters.is_empty())] {
            uleb(&mut row, v);
        }
        uleb(&mut rest, row.len() as u64);
        rest.extend_from_slice(&row);
        for (k, &f) in self.filters.iter().enumerate() {
            sleb(&mut rest, f);
            // The next record follows this 1-byte displacement.
            sleb(&mut rest, i64::from(k + 1 < self.filters.len()));
        }
        if self.enc == EH_PE_OMIT {
            out.push(EH_PE_OMIT);
            out.extend_from_slice(&rest);
            return Ok(out);
        }
        let size = fixed_size(self.enc & 0x0f)
            .ok_or_else(|| Error::Internal(format!("unwind: restated type table encoding 0x{:02x}", self.enc)))?
            as u64;
        let count = self.types.keys().next_back().copied().unwrap_or(0);
        out.push(self.enc);
        uleb(&mut out, rest.len() as u64 + count * size);
        out.extend_from_slice(&rest);
        // Entry i lies i entries before the base.
        for i in (1..=count).rev() {
            let field = t + out.len() as u64;
            match self.types.get(&i).copied().flatten() {
                None => out.extend(std::iter::repeat_n(0, size as usize)),
                Some(a) if size == 8 => out.extend_from_slice(&a.to_le_bytes()),
                Some(a) => out.extend_from_slice(&rel32(field, a, "type-table entry")?.to_le_bytes()),
            }
        }
        out.extend_from_slice(&self.specs);
        Ok(out)
    }
}

/// CIEs for generated code with the personality routine of the input's code at an address.
struct Personalities<'e, 'a> {
    convert: Converter<'e, 'a>,
    index: &'e [(u64, u64, usize)],
    /// By the personality pointer's encoding and target.
    cies: HashMap<(u8, u64), CieId>,
}

impl<'e, 'a> Personalities<'e, 'a> {
    fn new(eh: &'e EhFrameIn<'a>, index: &'e [(u64, u64, usize)], at: u64, pie: bool) -> Self {
        Personalities { convert: Converter::new(eh, at, pie), index, cies: HashMap::new() }
    }

    /// The CIE of generated code with the personality of the FDE covering `addr` and a
    /// pc-relative LSDA pointer; None if no FDE covers it or its CIE has no personality.
    fn cie_at(&mut self, addr: u64, table: &mut Frames) -> Result<Option<CieId>> {
        let Some(fde) = fde_covering(self.convert.eh, self.index, addr) else { return Ok(None) };
        let cie = fde.cie();
        let Some((enc, p)) = cie.personality_with_encoding() else { return Ok(None) };
        let key = (enc.0, p.pointer());
        if let Some(id) = self.cies.get(&key) {
            return Ok(Some(*id));
        }
        let own = self.convert.entry_range(cie.offset(), cie.entry_len(), cie.encoding().format);
        let Some(personality) = self.convert.pointer(cie.offset(), &own, enc, p)? else { return Ok(None) };
        let mut out = generated_cie();
        out.personality = Some((enc, personality));
        out.lsda_encoding = Some(PCREL_SDATA4);
        let id = table.add_cie(out);
        self.cies.insert(key, id);
        Ok(Some(id))
    }
}

/// The input's FDE covering `addr`, found in `index` ((initial location, end, offset), sorted).
fn fde_covering<'a>(eh: &EhFrameIn<'a>, index: &[(u64, u64, usize)], addr: u64) -> Option<ReadFde<'a>> {
    fde_at(eh, covering(index, addr)?)
}

/// The offset of the FDE in `index` that covers `addr`.
fn covering(index: &[(u64, u64, usize)], addr: u64) -> Option<usize> {
    let i = index.partition_point(|f| f.0 <= addr);
    // FDEs do not nest; a few steps back cover zero-length and overlapping oddities.
    index[..i].iter().rev().take(4).find(|f| addr < f.1).map(|f| f.2)
}

/// The FDE at offset `off` of the input's `.eh_frame`, parsed (with its CIE).
fn fde_at<'a>(eh: &EhFrameIn<'a>, off: usize) -> Option<ReadFde<'a>> {
    eh.section.fde_from_offset(&eh.bases, EhFrameOffset(off), |s, b, o| s.cie_from_offset(b, o)).ok()
}

// ---------------------------------------------------------------------------------------
// The input's .eh_frame, and converting entries for the new .eh_frame
// ---------------------------------------------------------------------------------------

/// The input's `.eh_frame`: its address and bytes. Found by its section header, or (section
/// headers stripped) through the `eh_frame_ptr` of the `.eh_frame_hdr`; then the bytes run to
/// the end of the segment holding it, and gimli's reader stops at the terminator.
fn input_eh_frame<'a>(elf: &InputElf<'a>, hdr_seg: &Segment) -> Result<(u64, &'a [u8])> {
    if let Some(s) = elf.section(".eh_frame").filter(|s| s.is_alloc() && s.has_bits()) {
        return Ok((s.addr, elf.section_data(s)));
    }
    let bad = |m: String| Error::Malformed(format!(".eh_frame_hdr at 0x{:x}: {m}", hdr_seg.vaddr));
    let hdr = elf.bytes_at(hdr_seg.vaddr, hdr_seg.filesz).ok_or_else(|| bad("not in the file".into()))?;
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_seg.vaddr);
    let parsed = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).map_err(|e| bad(e.to_string()))?;
    let ptr = match parsed.eh_frame_ptr() {
        Pointer::Direct(p) => p,
        Pointer::Indirect(p) => return Err(bad(format!("indirect eh_frame_ptr (slot 0x{p:x})"))),
    };
    let seg = elf
        .loads()
        .find(|s| ptr >= s.vaddr && ptr < s.vaddr + s.filesz)
        .ok_or_else(|| bad(format!("eh_frame_ptr 0x{ptr:x} is not in the file")))?;
    let data = elf.bytes_at(ptr, seg.vaddr + seg.filesz - ptr).ok_or_else(|| bad("eh_frame_ptr".into()))?;
    Ok((ptr, data))
}

/// Writes the entries of one `.eh_frame` (read where it lies) into the frame table of the
/// new `.eh_frame` at `at` (see "Converted, not copied" in the module documentation).
struct Converter<'e, 'a> {
    eh: &'e EhFrameIn<'a>,
    /// Address of the new `.eh_frame`: the writer's offset 0, so a pc-relative pointer to `t`
    /// is given to it as `t - at`.
    at: u64,
    /// Refuse absolute pointers.
    pie: bool,
    /// Converted CIEs: by offset in the old section and whether the FDE's LSDA is null.
    cies: HashMap<(usize, bool), CieId>,
}

type ReadCie<'a> = gimli::CommonInformationEntry<Bytes<'a>>;

impl<'e, 'a> Converter<'e, 'a> {
    fn new(eh: &'e EhFrameIn<'a>, at: u64, pie: bool) -> Self {
        Converter { eh, at, pie, cies: HashMap::new() }
    }

    fn err(&self, offset: usize, m: impl std::fmt::Display) -> Error {
        let addr = self.eh.addr.wrapping_add(offset as u64);
        Error::Malformed(format!("{}: entry at 0x{addr:x} (offset 0x{offset:x}): {m}", self.eh.what))
    }

    /// The addresses an entry at `offset` with `entry_len` occupies.
    fn entry_range(&self, offset: usize, entry_len: usize, format: Format) -> Range<u64> {
        let start = self.eh.addr.wrapping_add(offset as u64);
        start..start.wrapping_add((format.initial_length_size() as usize + entry_len) as u64)
    }

    /// Pointer `p` of encoding `enc` in the entry at `offset` (occupying `own`), as the writer
    /// takes it; None for a null pointer.
    fn pointer(&self, offset: usize, own: &Range<u64>, enc: DwEhPe, p: Pointer) -> Result<Option<Address>> {
        let target = p.pointer();
        match enc.application() {
            constants::DW_EH_PE_absptr if target == 0 => Ok(None),
            constants::DW_EH_PE_absptr if self.pie => Err(self
                .err(offset, format!("absolute pointer (encoding 0x{:02x}) in a position-independent program", enc.0))),
            constants::DW_EH_PE_absptr => Ok(Some(Address::Constant(target))),
            constants::DW_EH_PE_pcrel if own.contains(&target) => Ok(None),
            constants::DW_EH_PE_pcrel => Ok(Some(Address::Constant(target.wrapping_sub(self.at)))),
            a => Err(self
                .err(offset, format!("pointer application 0x{:02x} (encoding 0x{:02x}) is not supported", a.0, enc.0))),
        }
    }

    /// Add every FDE of `fdes` (read from this section), with the CIEs they use.
    fn convert(&mut self, fdes: impl Iterator<Item = Result<ReadFde<'a>>>, table: &mut Frames) -> Result<()> {
        for fde in fdes {
            self.fde(&fde?, table)?;
        }
        Ok(())
    }

    fn fde(&mut self, fde: &ReadFde<'a>, table: &mut Frames) -> Result<()> {
        let offset = fde.offset();
        let cie = fde.cie();
        let own = self.entry_range(offset, fde.entry_len(), cie.encoding().format);
        let enc = cie.fde_address_encoding().unwrap_or(constants::DW_EH_PE_absptr);
        if enc.is_indirect() {
            return Err(self.err(offset, "indirect initial location"));
        }
        let Some(address) = self.pointer(offset, &own, enc, Pointer::Direct(fde.initial_address()))? else {
            return Ok(()); // describes no code
        };
        let lsda = match (fde.lsda(), cie.lsda_encoding()) {
            (Some(p), Some(enc)) => self.pointer(offset, &own, enc, p)?,
            _ => None,
        };
        let cie_id = self.cie(cie, lsda.is_none(), table)?;
        let len =
            u32::try_from(fde.len()).map_err(|_| self.err(offset, format!("range of 0x{:x} bytes", fde.len())))?;
        let mut out = FrameDescriptionEntry::new(address, len);
        out.lsda = lsda;
        let caf = u32::try_from(cie.code_alignment_factor()).unwrap_or(u32::MAX);
        let mut pc = 0u32;
        let mut program = fde.instructions(&self.eh.section, &self.eh.bases);
        loop {
            let instruction = match program.next() {
                Ok(Some(i)) => i,
                Ok(None) => break,
                Err(e) => return Err(self.err(offset, e)),
            };
            match instruction {
                gimli::CallFrameInstruction::AdvanceLoc { delta } => {
                    pc = delta
                        .checked_mul(caf)
                        .and_then(|d| pc.checked_add(d))
                        .ok_or_else(|| self.err(offset, "advance past 4 GiB"))?;
                }
                gimli::CallFrameInstruction::SetLoc { address } => {
                    pc = address
                        .checked_sub(fde.initial_address())
                        .and_then(|d| u32::try_from(d).ok())
                        .filter(|&d| d >= pc)
                        .ok_or_else(|| self.err(offset, format!("DW_CFA_set_loc to 0x{address:x}")))?;
                }
                gimli::CallFrameInstruction::Nop => {}
                i => out.add_instruction(pc, self.instruction(offset, cie, i)?),
            }
        }
        table.add_fde(cie_id, out, fde.initial_address());
        Ok(())
    }

    /// The CIE `cie` in the new table (without `L` when `no_lsda`: the FDE's LSDA is null).
    fn cie(&mut self, cie: &ReadCie<'a>, no_lsda: bool, table: &mut Frames) -> Result<CieId> {
        let offset = cie.offset();
        let key = (offset, no_lsda && cie.lsda_encoding().is_some());
        if let Some(id) = self.cies.get(&key) {
            return Ok(*id);
        }
        let own = self.entry_range(offset, cie.entry_len(), cie.encoding().format);
        // The writer divides by both factors.
        let caf = u8::try_from(cie.code_alignment_factor()).ok().filter(|&f| f != 0);
        let daf = i8::try_from(cie.data_alignment_factor()).ok().filter(|&f| f != 0);
        let (Some(caf), Some(daf)) = (caf, daf) else {
            let (c, d) = (cie.code_alignment_factor(), cie.data_alignment_factor());
            return Err(self.err(offset, format!("alignment factors {c} and {d} (want 1..=255, non-zero i8)")));
        };
        let mut out = CommonInformationEntry::new(ENCODING, caf, daf, cie.return_address_register());
        out.fde_address_encoding = cie.fde_address_encoding().unwrap_or(constants::DW_EH_PE_absptr);
        out.lsda_encoding = if key.1 { None } else { cie.lsda_encoding() };
        out.signal_trampoline = cie.is_signal_trampoline();
        if let Some((enc, p)) = cie.personality_with_encoding() {
            out.personality = self.pointer(offset, &own, enc, p)?.map(|a| (enc, a));
        }
        let mut program = cie.instructions(&self.eh.section, &self.eh.bases);
        loop {
            match program.next() {
                Ok(Some(gimli::CallFrameInstruction::Nop)) => {}
                Ok(Some(i)) => out.add_instruction(self.instruction(offset, cie, i)?),
                Ok(None) => break,
                Err(e) => return Err(self.err(offset, e)),
            }
        }
        let id = table.add_cie(out);
        self.cies.insert(key, id);
        Ok(id)
    }

    /// A CFA instruction of the entry at `offset` (not an advance), for the writer: offsets
    /// unfactored (the writer factors them again by the same CIE's factors), expressions as
    /// their bytes.
    fn instruction(&self, offset: usize, cie: &ReadCie<'a>, i: gimli::CallFrameInstruction<usize>) -> Result<Cfi> {
        use gimli::CallFrameInstruction as R;
        let daf = cie.data_alignment_factor();
        let int = |v: i64| i32::try_from(v).map_err(|_| self.err(offset, format!("CFA offset {v} out of range")));
        let factored = |f: i64| int(f.wrapping_mul(daf));
        let expr = |e: &gimli::UnwindExpression<usize>| {
            let bytes = self.eh.expression(e).ok_or_else(|| self.err(offset, "expression past the end"))?;
            Ok::<_, Error>(Expression::raw(bytes.to_vec()))
        };
        Ok(match i {
            R::DefCfa { register, offset: o } => Cfi::Cfa(register, int(o as i64)?),
            R::DefCfaSf { register, factored_offset } => Cfi::Cfa(register, factored(factored_offset)?),
            R::DefCfaRegister { register } => Cfi::CfaRegister(register),
            R::DefCfaOffset { offset: o } => Cfi::CfaOffset(int(o as i64)?),
            R::DefCfaOffsetSf { factored_offset } => Cfi::CfaOffset(factored(factored_offset)?),
            R::DefCfaExpression { expression } => Cfi::CfaExpression(expr(&expression)?),
            R::Undefined { register } => Cfi::Undefined(register),
            R::SameValue { register } => Cfi::SameValue(register),
            R::Offset { register, factored_offset } => Cfi::Offset(register, factored(factored_offset as i64)?),
            R::OffsetExtendedSf { register, factored_offset } => Cfi::Offset(register, factored(factored_offset)?),
            R::ValOffset { register, factored_offset } => Cfi::ValOffset(register, factored(factored_offset as i64)?),
            R::ValOffsetSf { register, factored_offset } => Cfi::ValOffset(register, factored(factored_offset)?),
            R::Register { dest_register, src_register } => Cfi::Register(dest_register, src_register),
            R::Expression { register, expression } => Cfi::Expression(register, expr(&expression)?),
            R::ValExpression { register, expression } => Cfi::ValExpression(register, expr(&expression)?),
            R::Restore { register } => Cfi::Restore(register),
            R::RememberState => Cfi::RememberState,
            R::RestoreState => Cfi::RestoreState,
            R::ArgsSize { size } => Cfi::ArgsSize(
                u32::try_from(size).map_err(|_| self.err(offset, format!("DW_CFA_GNU_args_size {size}")))?,
            ),
            other => return Err(self.err(offset, format!("CFA instruction {other:?} is not supported"))),
        })
    }
}

/// The frame table of the new `.eh_frame`, and the initial location of each FDE in the order
/// added, which is the order gimli writes them in (each CIE before its first FDE): the
/// `.eh_frame_hdr` table is built from these ([`hdr_index`]), not by parsing the section back.
#[derive(Default)]
struct Frames {
    table: FrameTable,
    starts: Vec<u64>,
}

impl Frames {
    fn add_cie(&mut self, cie: CommonInformationEntry) -> CieId {
        self.table.add_cie(cie)
    }

    /// Add `fde`, which describes the code from `start` (its initial location as written).
    fn add_fde(&mut self, cie: CieId, fde: FrameDescriptionEntry, start: u64) {
        self.table.add_fde(cie, fde);
        self.starts.push(start);
    }
}

/// The (initial location, FDE address) pairs of the `.eh_frame` written at `at`: the FDEs are
/// found by walking the entries' lengths (an entry whose CIE pointer is not 0 is an FDE), and
/// the k-th FDE has the k-th of `starts`, the initial locations in the order they were added.
fn hdr_index(eh: &[u8], at: u64, starts: &[u64]) -> Result<Vec<(u64, u64)>> {
    let bad = |m: String| Error::Internal(format!("unwind: the new .eh_frame at 0x{at:x}: {m}"));
    let word = |o: usize| eh.get(o..o + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let mut index = Vec::with_capacity(starts.len());
    let mut next = starts.iter();
    let mut o = 0usize;
    while let Some(len) = word(o) {
        if len == 0 {
            break; // the terminator
        }
        let id = word(o + 4).ok_or_else(|| bad(format!("entry at offset 0x{o:x} is cut off")))?;
        if id != 0 {
            let start = next.next().ok_or_else(|| bad("more FDEs written than added".into()))?;
            index.push((*start, at + o as u64));
        }
        o = o
            .checked_add(4 + len as usize)
            .filter(|&e| e <= eh.len())
            .ok_or_else(|| bad(format!("entry at offset 0x{o:x} runs past the end")))?;
    }
    if index.len() != starts.len() {
        return Err(bad(format!("{} FDEs written, {} added", index.len(), starts.len())));
    }
    Ok(index)
}

/// Write `table` as the `.eh_frame` at `at`, with its terminator (gimli writes none).
fn write_eh_frame(table: &FrameTable, at: u64, size_hint: usize) -> Result<Vec<u8>> {
    let mut w = gimli::write::EhFrame(Prealloc(Vec::with_capacity(size_hint + 4)));
    table.write_eh_frame(&mut w).map_err(|e| match e {
        gimli::write::Error::ValueTooLarge => {
            Error::NoRoom(format!("unwind: .eh_frame at 0x{at:x}: a pointer does not reach its target from there"))
        }
        e => Error::Internal(format!("unwind: .eh_frame at 0x{at:x}: {e}")),
    })?;
    let mut eh = w.0 .0;
    eh.extend_from_slice(&[0; 4]);
    Ok(eh)
}

/// gimli's `EndianVec` writing into a buffer allocated once: a large program's `.eh_frame`
/// (tens of MB) grew by doubling, each step copying what was written. Capacity not written
/// is never touched, so an estimate on the high side costs no memory.
struct Prealloc(Vec<u8>);

impl gimli::write::Writer for Prealloc {
    type Endian = LittleEndian;

    fn endian(&self) -> LittleEndian {
        LittleEndian
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn write(&mut self, bytes: &[u8]) -> gimli::write::Result<()> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }

    fn write_at(&mut self, offset: usize, bytes: &[u8]) -> gimli::write::Result<()> {
        let to = self.0.get_mut(offset..).ok_or(gimli::write::Error::OffsetOutOfBounds)?;
        let to = to.get_mut(..bytes.len()).ok_or(gimli::write::Error::LengthOutOfBounds)?;
        to.copy_from_slice(bytes);
        Ok(())
    }
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
    let datarel_sdata4 = constants::DW_EH_PE_datarel.0 | constants::DW_EH_PE_sdata4.0;
    let mut h = vec![1, PCREL_SDATA4.0, constants::DW_EH_PE_udata4.0, datarel_sdata4];
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
struct InputRows<'e, 'a> {
    eh: &'e EhFrameIn<'a>,
    ctx: UnwindContext<usize>,
    /// (initial location, end, offset of the FDE), sorted.
    index: &'e [(u64, u64, usize)],
    /// The FDE (its offset) of the last lookup.
    last: Option<usize>,
    /// The rows of the FDE at `rows_of` (start, end, state), evaluated in full when a second
    /// lookup in a row falls in the same FDE: an exit's trampoline, an import call site's,
    /// the next exit or call site of the same function (each lookup alone would evaluate
    /// the FDE's program from its start again).
    rows_of: Option<usize>,
    rows: Vec<(u64, u64, Option<State>)>,
}

impl<'e, 'a> InputRows<'e, 'a> {
    fn new(eh: &'e EhFrameIn<'a>, index: &'e [(u64, u64, usize)]) -> Self {
        InputRows { eh, ctx: UnwindContext::new(), index, last: None, rows_of: None, rows: Vec::new() }
    }

    /// The state at `addr`, or None when no FDE covers it or its CFI cannot be evaluated.
    fn state_at(&mut self, addr: u64) -> Option<State> {
        let eh = self.eh;
        let off = covering(self.index, addr)?;
        if self.rows_of == Some(off) {
            // The first row that holds `addr`, as gimli's `unwind_info_for_address` finds it.
            return self.rows.iter().find(|r| r.0 <= addr && addr < r.1).and_then(|r| r.2.clone());
        }
        let fde = fde_at(eh, off)?;
        if self.last == Some(off) {
            self.rows.clear();
            self.rows_of = Some(off);
            let mut table = fde.rows(&eh.section, &eh.bases, &mut self.ctx).ok()?;
            // Rows up to an error are kept: a lookup past it finds none, as gimli's does.
            while let Ok(Some(row)) = table.next_row() {
                self.rows.push((row.start_address(), row.end_address(), row_state(eh, row)));
            }
            return self.rows.iter().find(|r| r.0 <= addr && addr < r.1).and_then(|r| r.2.clone());
        }
        self.last = Some(off);
        let row = fde.unwind_info_for_address(&eh.section, &eh.bases, &mut self.ctx, addr).ok()?;
        row_state(eh, row)
    }
}

/// The state a row of the input's CFI describes; None where it cannot be restated.
fn row_state(eh: &EhFrameIn, row: &gimli::UnwindTableRow<usize>) -> Option<State> {
    let expr = |e: &gimli::UnwindExpression<usize>| eh.expression(e).map(<[u8]>::to_vec);
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => Cfa::Reg(register.0, *offset),
        CfaRule::Expression(e) => Cfa::Expr(expr(e)?),
    };
    let mut regs = Regs::default();
    for (reg, rule) in row.registers() {
        let reg = *reg;
        let rule = match rule {
            RegisterRule::SameValue => continue,
            RegisterRule::Offset(n) => Rule::Offset(*n),
            RegisterRule::Undefined => Rule::Other(Cfi::Undefined(reg)),
            RegisterRule::ValOffset(n) => Rule::Other(val_offset_rule(reg.0, *n)),
            RegisterRule::Register(r2) => Rule::Other(Cfi::Register(reg, *r2)),
            RegisterRule::Expression(e) => Rule::Other(Cfi::Expression(reg, Expression::raw(expr(e)?))),
            RegisterRule::ValExpression(e) => Rule::Other(Cfi::ValExpression(reg, Expression::raw(expr(e)?))),
            _ => return None, // architectural / constant: nothing we can restate
        };
        regs.insert(reg.0, rule);
    }
    let (sp, fp) = match cfa {
        Cfa::Reg(RSP, k) => (Some(k), None),
        Cfa::Reg(RBP, k) => (None, Some(k)),
        _ => (None, None),
    };
    Some(State { cfa, regs, sp, fp })
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
    /// Another rule, as the CFA instruction that sets it.
    Other(Cfi),
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
        // Both are sorted by column and share none: merge them.
        let (mut low, mut high) = (low.peekable(), self.other.iter().peekable());
        std::iter::from_fn(move || match (low.peek(), high.peek()) {
            (Some(a), Some(b)) if a.0 < b.0 => low.next(),
            (_, Some(_)) => high.next().cloned(),
            (Some(_), None) => low.next(),
            (None, None) => None,
        })
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
        State { regs: Regs::of(&[(RA, Rule::Other(Cfi::Undefined(gimli::Register(RA))))]), ..Self::call() }
    }

    /// This state with `n` more bytes pushed (rsp lower, the CFA where it was).
    fn pushed(mut self, n: i64) -> Self {
        let sp = self.sp.map(|s| s + n);
        self.set_sp(sp);
        self
    }

    /// The row this state stands for.
    fn row(&self) -> Row {
        match self.cfa {
            Cfa::Unknown => {
                Row { cfa: Cfa::Reg(RSP, 8), regs: Regs::of(&[(RA, Rule::Other(Cfi::Undefined(gimli::Register(RA))))]) }
            }
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

/// The CFA programs of pieces already traced on this thread, by the piece's *shape*: its
/// bytes with every field [`State::step`] and [`trace`] do not read zeroed (the rel32 of a
/// branch out of the piece, every displacement but a `lea` into rsp/rbp's, every immediate
/// but an `add`/`sub` of rsp's), with the boundaries and fields of its instructions. Pieces
/// of one kind differ mostly in such fields (their gate, point id, counter, the program's
/// addresses), so a piece whose shape and initial state were traced before takes that
/// program (issue 14: one CFI template per trampoline shape, found rather than declared).
#[derive(Default)]
struct CfiMemo {
    /// Shape → (initial state, program) of each piece of that shape traced.
    programs: HashMap<Vec<u8>, Vec<(State, CfiProgram)>, BuildHasherDefault<ShapeHasher>>,
    /// The same by shape id, for pieces whose shape the layout pass found ([`ShapeIds`]).
    by_id: HashMap<u64, Vec<(State, CfiProgram)>, BuildHasherDefault<ShapeHasher>>,
    /// Programs kept (the tables are emptied past [`CfiMemo::MAX`], bounding their memory).
    kept: usize,
    /// The last piece's instructions and shape (reused: no allocation per piece).
    ins: Vec<Instruction>,
    shape: Vec<u8>,
}

impl CfiMemo {
    const MAX: usize = 1 << 12;

    /// [`cfi_program`], from the memo when it has the piece's shape (or shape id) and initial
    /// state. A piece with a shape id is decoded only when its program is traced.
    fn program(
        &mut self,
        start: u64,
        code: &[u8],
        id: Option<u64>,
        initial: State,
        info: &mut InstructionInfoFactory,
    ) -> Result<&CfiProgram> {
        if let Some(id) = id {
            let known = self.by_id.get(&id).and_then(|v| v.iter().position(|(s, _)| *s == initial));
            if let Some(k) = known {
                return Ok(&self.by_id[&id][k].1);
            }
        } else {
            decode_shape(start, code, &mut self.ins, &mut self.shape);
            let known = self.programs.get(&self.shape).and_then(|v| v.iter().position(|(s, _)| *s == initial));
            if let Some(k) = known {
                return Ok(&self.programs[&self.shape][k].1);
            }
        }
        if id.is_some() {
            decode_shape(start, code, &mut self.ins, &mut self.shape);
        }
        let program = program_of(start, &self.ins, initial.clone(), info)?;
        if self.kept >= Self::MAX {
            self.programs.clear();
            self.by_id.clear();
            self.kept = 0;
        }
        self.kept += 1;
        let v = match id {
            Some(id) => self.by_id.entry(id).or_default(),
            None => self.programs.entry(self.shape.clone()).or_default(),
        };
        v.push((initial, program));
        Ok(&v[v.len() - 1].1)
    }
}

/// Shape ids: the layout pass, which decodes every piece it encodes ahead to move it
/// ([`crate::codegen::Movable`]), finds each one's CFI shape ([`CfiMemo`]) in the same decoding
/// and hands on a 64-bit id instead of the bytes, so that [`build`] need not decode the piece
/// again to find its program. The id is the shape's hash; the table keeps the first shape seen
/// under each id and gives no id to a different shape with the same hash, so one id is one
/// shape. (Which of two colliding shapes gets the id depends on the threads' order; the other
/// is decoded here, which gives the same program: the output does not depend on it.)
#[derive(Default)]
pub struct ShapeIds(std::sync::Mutex<HashMap<u64, Vec<u8>, BuildHasherDefault<ShapeHasher>>>);

impl ShapeIds {
    /// Shapes kept at most (bounding the table's memory).
    const MAX: usize = 1 << 14;

    /// The id of `shape` (see [`ShapeIds`]).
    pub(crate) fn id(&self, shape: &[u8]) -> Option<u64> {
        use std::hash::{BuildHasher, Hasher};
        let mut h = BuildHasherDefault::<ShapeHasher>::default().build_hasher();
        h.write(shape);
        let id = h.finish() ^ (shape.len() as u64).rotate_left(48);
        let mut table = self.0.lock().ok()?;
        match table.get(&id) {
            Some(s) if s.as_slice() == shape => Some(id),
            Some(_) => None,
            // Past the bound a new shape gets no id (its piece is decoded in `build`): exit
            // trampolines carry the program's instructions, so a large program has many.
            None if table.len() >= Self::MAX => None,
            None => {
                table.insert(id, shape.to_vec());
                Some(id)
            }
        }
    }
}

/// A multiply-rotate hasher over 8-byte words for [`CfiMemo`]'s shapes (SipHash cost more
/// than the lookup saved; nothing here needs resistance to chosen keys).
#[derive(Default)]
struct ShapeHasher(u64);

impl std::hash::Hasher for ShapeHasher {
    fn finish(&self) -> u64 {
        // The product's high half, the better mixed, folded into the low bits the table
        // indexes by.
        self.0 ^ (self.0 >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.write_u64(u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]));
        }
        let mut last = [0u8; 8];
        last[..words.remainder().len()].copy_from_slice(words.remainder());
        self.write_u64(u64::from_le_bytes(last));
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// A piece's CFA instructions, each at its offset from the piece's start.
type CfiProgram = Vec<(u32, Cfi)>;

/// The instructions of a piece at `start` into `ins` and its shape (see [`CfiMemo`]) into
/// `shape`.
pub(crate) fn decode_shape(start: u64, code: &[u8], ins: &mut Vec<Instruction>, shape: &mut Vec<u8>) {
    let end = start.wrapping_add(code.len() as u64);
    let mut d = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    ins.clear();
    shape.clear();
    shape.extend_from_slice(code);
    let mut x = Instruction::default();
    while d.can_decode() {
        d.decode_out(&mut x);
        shape_step(shape, &x, &d.get_constant_offsets(&x), start, end);
        ins.push(x);
    }
}

/// One instruction `x` of a piece `[start, end)` into its `shape` (which starts as the
/// piece's bytes): its fields zeroed but those the CFI reads (an `add`/`sub` of rsp's, an
/// `lea` into rsp or rbp, a branch inside the piece), its boundaries and fields appended.
/// Whether the shape stays the same wherever the piece is moved (an `lea` into rsp or rbp
/// that is rip-relative does not).
pub(crate) fn shape_step(shape: &mut Vec<u8>, x: &Instruction, co: &ConstantOffsets, start: u64, end: u64) -> bool {
    let at = (x.ip() - start) as usize;
    let op0 = if x.op_count() > 0 && x.op0_kind() == OpKind::Register { x.op0_register() } else { Register::None };
    let branch =
        x.op_count() > 0 && matches!(x.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64);
    let keep_disp = x.mnemonic() == Mnemonic::Lea && matches!(op0, Register::RSP | Register::RBP);
    let keep_imm = if branch {
        (start..end).contains(&x.near_branch_target())
    } else {
        matches!(x.mnemonic(), Mnemonic::Add | Mnemonic::Sub) && op0 == Register::RSP
    };
    let mut zero = |off: usize, size: usize| shape[at + off..at + off + size].fill(0);
    if co.has_displacement() && !keep_disp {
        zero(co.displacement_offset(), co.displacement_size());
    }
    if co.has_immediate() && !keep_imm {
        zero(co.immediate_offset(), co.immediate_size());
    }
    if co.has_immediate2() && !keep_imm {
        zero(co.immediate_offset2(), co.immediate_size2());
    }
    // The boundaries and fields, so that equal shapes are equal instruction by instruction.
    shape.extend_from_slice(&[
        x.len() as u8,
        co.displacement_offset() as u8,
        co.displacement_size() as u8,
        co.immediate_offset() as u8,
        co.immediate_size() as u8,
        co.immediate_offset2() as u8,
        co.immediate_size2() as u8,
        u8::from(keep_disp) | u8::from(keep_imm) << 1,
    ]);
    !(keep_disp && x.is_ip_rel_memory_operand())
}

/// The CFA program of a piece: the instructions at each offset from its first byte that
/// turn the CIE's row ([`State::call`]) into the rows of the piece.
#[cfg(test)]
fn cfi_program(start: u64, code: &[u8], initial: State, info: &mut InstructionInfoFactory) -> Result<Vec<(u32, Cfi)>> {
    let ins: Vec<Instruction> = Decoder::with_ip(64, code, start, DecoderOptions::NONE).into_iter().collect();
    program_of(start, &ins, initial, info)
}

/// [`cfi_program`] of the decoded instructions `ins` of a piece at `start`.
fn program_of(
    start: u64,
    ins: &[Instruction],
    initial: State,
    info: &mut InstructionInfoFactory,
) -> Result<Vec<(u32, Cfi)>> {
    let states = trace(start, ins, initial, cfg!(debug_assertions), info)?;
    let mut out = Vec::new();
    let mut row = State::call().row();
    for (i, s) in ins.iter().zip(&states) {
        let Some(s) = s else { continue };
        if !s.is_row(&row) {
            let new = s.row();
            let offset = u32::try_from(i.ip() - start)
                .map_err(|_| Error::Internal(format!("unwind: piece at 0x{start:x} too long")))?;
            out.extend(diff(&row, &new).into_iter().map(|x| (offset, x)));
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
// The CFA instructions, CIE and FDEs of generated code
// ---------------------------------------------------------------------------------------

/// `DW_OP_call_frame_cfa; DW_OP_consts n; DW_OP_plus`: CFA + n, for offsets the data
/// alignment cannot express.
fn cfa_plus(n: i64) -> Expression {
    let mut e = Expression::new();
    e.op(constants::DW_OP_call_frame_cfa);
    e.op_consts(n);
    e.op(constants::DW_OP_plus);
    e
}

/// `n` as a CFA instruction offset, if our CIE's data alignment can express it.
fn factorable(n: i64) -> Option<i32> {
    i32::try_from(n).ok().filter(|_| n % DATA_ALIGN == 0)
}

/// The rule "saved at CFA + n".
fn offset_rule(r: u16, n: i64) -> Cfi {
    match factorable(n) {
        Some(n) => Cfi::Offset(gimli::Register(r), n),
        None => Cfi::Expression(gimli::Register(r), cfa_plus(n)),
    }
}

/// The rule "the caller's value is CFA + n".
fn val_offset_rule(r: u16, n: i64) -> Cfi {
    match factorable(n) {
        Some(n) => Cfi::ValOffset(gimli::Register(r), n),
        None => Cfi::ValExpression(gimli::Register(r), cfa_plus(n)),
    }
}

/// CFA instructions that turn row `from` into row `to`.
fn diff(from: &Row, to: &Row) -> Vec<Cfi> {
    let mut out = Vec::new();
    let reg = gimli::Register;
    let unsigned = |k: i64| i32::try_from(k).ok().filter(|&k| k >= 0);
    match (&from.cfa, &to.cfa) {
        (a, b) if a == b => {}
        (Cfa::Reg(r0, _), Cfa::Reg(r1, k)) if r0 == r1 && unsigned(*k).is_some() => {
            out.push(Cfi::CfaOffset(*k as i32));
        }
        (Cfa::Reg(_, k0), Cfa::Reg(r1, k1)) if k0 == k1 => out.push(Cfi::CfaRegister(reg(*r1))),
        (_, Cfa::Reg(r, k)) if unsigned(*k).is_some() => out.push(Cfi::Cfa(reg(*r), *k as i32)),
        (_, Cfa::Reg(r, k)) => {
            let mut e = Expression::new();
            e.op_breg(reg(*r), *k);
            out.push(Cfi::CfaExpression(e));
        }
        (_, Cfa::Expr(e)) => out.push(Cfi::CfaExpression(Expression::raw(e.clone()))),
        (_, Cfa::Unknown) => unreachable!("rows never hold an unknown CFA"),
    }
    if from.regs == to.regs {
        return out; // most rows move the CFA only
    }
    for (r, rule) in to.regs.iter() {
        if from.regs.get(r).as_ref() != Some(&rule) {
            out.push(match rule {
                Rule::Offset(n) => offset_rule(r, n),
                Rule::Other(i) => i,
            });
        }
    }
    for (r, _) in from.regs.iter().filter(|(r, _)| to.regs.get(*r).is_none()) {
        // Our CIE has a rule for the return address only: restore anything else to it.
        out.push(if r == RA { Cfi::SameValue(reg(RA)) } else { Cfi::Restore(reg(r)) });
    }
    out
}

/// The CIE of generated code: "zR", code alignment 1, data alignment -8, return address
/// column 16, FDE pointers pcrel|sdata4; CFA = rsp+8, return address at CFA-8.
fn generated_cie() -> CommonInformationEntry {
    let mut cie = CommonInformationEntry::new(ENCODING, 1, DATA_ALIGN as i8, gimli::Register(RA));
    cie.fde_address_encoding = PCREL_SDATA4;
    cie.add_instruction(Cfi::Cfa(gimli::Register(RSP), 8));
    cie.add_instruction(offset_rule(RA, -8));
    cie
}

#[cfg(test)]
mod tests;
