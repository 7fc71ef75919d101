//! The one reader of call frame information, and what analysis takes from it: `.eh_frame` FDEs
//! (function ranges, the frame state at their first byte) and the landing pads of their LSDAs.
//!
//! [`EhFrameIn`] wraps gimli's `.eh_frame` reader with the section's address and the base
//! addresses its pointers may be relative to. Analysis lists the input's FDEs with it
//! ([`read_fdes`]); `crate::unwind` converts the input's and rt-lib's entries into the output's
//! `.eh_frame` and evaluates the input's rows with it, and re-reads the section it wrote. The
//! LSDA (`.gcc_except_table`) is not call frame information and gimli has no reader for it:
//! [`call_sites`] reads its call-site table (landing pads, covered ranges) itself.

use crate::error::{Error, Result};
use crate::input::InputElf;
use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, EndianSlice, LittleEndian, RegisterRule, UnwindContext, UnwindSection,
};
use object::elf;

/// One FDE.
#[derive(Clone, Debug)]
pub(crate) struct Fde {
    pub address: u64,
    pub len: u64,
    /// At the first byte the CFA is not `rsp+8`, or a callee-saved register is already saved:
    /// the range starts in the middle of a frame.
    pub mid_frame: bool,
    /// Address of the LSDA.
    pub lsda: Option<u64>,
}

const RSP: u16 = 7;
/// DWARF numbers of rbx, rbp, r12–r15.
const CALLEE_SAVED: [u16; 6] = [3, 6, 12, 13, 14, 15];

/// gimli's reader type over section bytes.
pub(crate) type Bytes<'a> = EndianSlice<'a, LittleEndian>;
/// A parsed FDE (with its CIE).
pub(crate) type ReadFde<'a> = gimli::FrameDescriptionEntry<Bytes<'a>>;

/// An `.eh_frame` read with gimli: its address, bytes and the bases of its pointers.
pub(crate) struct EhFrameIn<'a> {
    /// Virtual address of the section.
    pub addr: u64,
    pub data: &'a [u8],
    pub section: EhFrame<Bytes<'a>>,
    pub bases: BaseAddresses,
    /// The section's name in messages (`.eh_frame`, `rt-lib .eh_frame`).
    pub what: &'static str,
}

impl<'a> EhFrameIn<'a> {
    /// The `.eh_frame` at `addr` whose pointers are pc-relative or absolute (no text, data or
    /// GOT bases: rt-lib's, or one we wrote).
    pub(crate) fn new(addr: u64, data: &'a [u8], what: &'static str) -> Self {
        let mut section = EhFrame::new(data, LittleEndian);
        section.set_address_size(8);
        EhFrameIn { addr, data, section, bases: BaseAddresses::default().set_eh_frame(addr), what }
    }

    /// The program's `.eh_frame` at `addr`, with the program's `.text`, `.got` and
    /// `.eh_frame_hdr` as bases.
    pub(crate) fn of_program(elf: &InputElf, addr: u64, data: &'a [u8]) -> Self {
        let mut eh = Self::new(addr, data, ".eh_frame");
        if let Some(t) = elf.section(".text") {
            eh.bases = eh.bases.set_text(t.addr);
        }
        let hdr = elf.segments.iter().find(|s| s.p_type == elf::PT_GNU_EH_FRAME).map(|s| s.vaddr);
        if let Some(h) = hdr.or_else(|| elf.section(".eh_frame_hdr").map(|s| s.addr)) {
            eh.bases = eh.bases.set_eh_frame_hdr(h);
        }
        if let Some(g) = elf.section(".got") {
            eh.bases = eh.bases.set_got(g.addr);
        }
        eh
    }

    /// The program's `.eh_frame` section, if it has one.
    pub(crate) fn section(elf: &InputElf<'a>) -> Option<Self> {
        let sec = elf.section(".eh_frame").filter(|s| s.is_alloc() && s.has_bits())?;
        Some(Self::of_program(elf, sec.addr, elf.section_data(sec)))
    }

    /// Every FDE, in section order (CIEs are reached through them); reading stops at the
    /// first error.
    pub(crate) fn fdes(&self) -> impl Iterator<Item = Result<ReadFde<'a>>> + '_ {
        let mut entries = self.section.entries(&self.bases);
        let mut last_ok = 0usize;
        let mut failed = false;
        std::iter::from_fn(move || loop {
            if failed {
                return None;
            }
            let partial = match entries.next() {
                Ok(None) => return None,
                Ok(Some(CieOrFde::Cie(cie))) => {
                    last_ok = cie.offset();
                    continue;
                }
                Ok(Some(CieOrFde::Fde(p))) => p,
                Err(e) => {
                    failed = true;
                    return Some(Err(Error::Malformed(format!(
                        "{}: entry after offset 0x{last_ok:x} (address 0x{:x}): {e}",
                        self.what,
                        self.addr.wrapping_add(last_ok as u64)
                    ))));
                }
            };
            let off = partial.offset();
            last_ok = off;
            let fde = partial.parse(|s, b, o| s.cie_from_offset(b, o)).map_err(|e| {
                Error::Malformed(format!(
                    "{}: FDE at 0x{:x} (offset 0x{off:x}): {e}",
                    self.what,
                    self.addr.wrapping_add(off as u64)
                ))
            });
            failed = fde.is_err();
            return Some(fde);
        })
    }

    /// The bytes of a DWARF expression in a CFA program.
    pub(crate) fn expression(&self, e: &gimli::UnwindExpression<usize>) -> Option<&'a [u8]> {
        self.data.get(e.offset..e.offset.checked_add(e.length)?)
    }
}

/// All FDEs of `.eh_frame` (none if there is no such section).
pub(crate) fn read_fdes(elf: &InputElf) -> Result<Vec<Fde>> {
    let Some(eh) = EhFrameIn::section(elf) else {
        return Ok(Vec::new());
    };
    let mut ctx = UnwindContext::new();
    let mut out = Vec::new();
    for fde in eh.fdes() {
        let fde = fde?;
        let address = fde.initial_address();
        let len = fde.len();
        let mid_frame = match fde.unwind_info_for_address(&eh.section, &eh.bases, &mut ctx, address) {
            Ok(row) => {
                let cfa_ok = matches!(row.cfa(), CfaRule::RegisterAndOffset { register, offset }
                    if register.0 == RSP && *offset == 8);
                let saved = row.registers().any(|(r, rule)| {
                    CALLEE_SAVED.contains(&r.0) && !matches!(rule, RegisterRule::Undefined | RegisterRule::SameValue)
                });
                !cfa_ok || saved
            }
            // No row (empty range) or CFI we cannot evaluate: no evidence either way.
            Err(_) => false,
        };
        let lsda = match fde.lsda() {
            Some(gimli::Pointer::Direct(a)) => Some(a),
            Some(gimli::Pointer::Indirect(a)) => {
                elf.bytes_at(a, 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
            }
            None => None,
        };
        out.push(Fde { address, len, mid_frame, lsda });
    }
    Ok(out)
}

const DW_EH_PE_OMIT: u8 = 0xff;

/// A cursor over LSDA bytes.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    /// Virtual address of `data[0]`.
    base: u64,
}

impl Cursor<'_> {
    fn u8(&mut self) -> Option<u8> {
        let b = *self.data.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }
    fn fixed(&mut self, n: usize) -> Option<u64> {
        let b = self.data.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        let mut v = 0u64;
        for (i, &x) in b.iter().enumerate() {
            v |= u64::from(x) << (8 * i);
        }
        Some(v)
    }
    fn uleb(&mut self) -> Option<u64> {
        self.leb128(false)
    }
    fn sleb(&mut self) -> Option<u64> {
        self.leb128(true)
    }
    /// LEB128, sign-extended from its last byte's bit 6 when `signed`.
    fn leb128(&mut self, signed: bool) -> Option<u64> {
        let (v, n) = read_leb128(self.data.get(self.pos..)?, signed)?;
        self.pos += n;
        Some(v)
    }
    fn sext(v: u64, bits: u32) -> u64 {
        let s = 64 - bits;
        (((v << s) as i64) >> s) as u64
    }
    /// A DW_EH_PE-encoded value. `pcrel` is applied; `indirect` is not supported.
    fn encoded(&mut self, enc: u8) -> Option<u64> {
        let at = self.base.wrapping_add(self.pos as u64);
        let v = match enc & 0x0f {
            0x00 => self.fixed(8)?,
            0x01 => self.uleb()?,
            0x02 => self.fixed(2)?,
            0x03 => self.fixed(4)?,
            0x04 => self.fixed(8)?,
            0x09 => self.sleb()?,
            0x0a => Self::sext(self.fixed(2)?, 16),
            0x0b => Self::sext(self.fixed(4)?, 32),
            0x0c => self.fixed(8)?,
            _ => return None,
        };
        match enc & 0x70 {
            0x00 => {}
            0x10 => return Some(v.wrapping_add(at)),
            _ => return None,
        }
        if enc & 0x80 != 0 {
            return None;
        }
        Some(v)
    }
}

/// The LEB128 number at the start of `bytes` (gimli's decoder; signed ones sign-extended to
/// 64 bits) and its length in bytes.
fn read_leb128(bytes: &[u8], signed: bool) -> Option<(u64, usize)> {
    let mut r = gimli::EndianSlice::new(bytes, LittleEndian);
    let v = if signed {
        gimli::leb128::read::signed(&mut r).ok()? as u64
    } else {
        gimli::leb128::read::unsigned(&mut r).ok()?
    };
    Some((v, bytes.len() - r.len()))
}

/// One row of an LSDA's call-site table: the code range `[start, end)`, its landing pad
/// (None: the unwinder passes through without stopping, no cleanup, no handler) and its
/// action (0: the pad is a cleanup only; else 1 + the offset of the first action record, which
/// names the types the pad catches or an exception specification).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LsdaCallSite {
    pub start: u64,
    pub end: u64,
    pub pad: Option<u64>,
    pub action: u64,
}

impl LsdaCallSite {
    /// The row covering `pc` in `sites`, if any.
    pub fn covering(sites: &[LsdaCallSite], pc: u64) -> Option<&LsdaCallSite> {
        sites.iter().find(|s| s.start <= pc && pc < s.end)
    }
}

/// The call-site table of the GCC-format LSDA at `lsda` for the function starting at `func`,
/// with absolute addresses, or None if it cannot be parsed.
pub(crate) fn call_sites(elf: &InputElf, lsda: u64, func: u64) -> Option<Vec<LsdaCallSite>> {
    let sec = elf.sections.iter().find(|s| s.is_alloc() && s.has_bits() && lsda >= s.addr && lsda - s.addr < s.size)?;
    let data = elf.section_data(sec).get((lsda - sec.addr) as usize..)?;
    let mut c = Cursor { data, pos: 0, base: lsda };
    let lp_enc = c.u8()?;
    let lp_start = if lp_enc == DW_EH_PE_OMIT { func } else { c.encoded(lp_enc)? };
    let tt_enc = c.u8()?;
    if tt_enc != DW_EH_PE_OMIT {
        c.uleb()?;
    }
    let cs_enc = c.u8()?;
    let cs_len = c.uleb()?;
    let cs_end = c.pos.checked_add(usize::try_from(cs_len).ok()?)?;
    if cs_end > data.len() {
        return None;
    }
    let mut sites = Vec::new();
    while c.pos < cs_end {
        let start = func.wrapping_add(c.encoded(cs_enc)?);
        let len = c.encoded(cs_enc)?;
        let pad = c.encoded(cs_enc)?;
        let action = c.uleb()?;
        sites.push(LsdaCallSite {
            start,
            end: start.wrapping_add(len),
            pad: (pad != 0).then(|| lp_start.wrapping_add(pad)),
            action,
        });
    }
    Some(sites)
}
