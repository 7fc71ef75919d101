//! Function symbols, their merge with FDEs, and demangling.

use super::unwind::Fde;
use super::{Cand, CodeMap, FunctionSource};
use crate::error::{Error, Result};
use object::elf;
use object::read::elf::{ElfFile64, Sym as _};
use object::Endianness;

/// A defined function symbol in code.
#[derive(Clone, Debug)]
pub(crate) struct SymFunc {
    pub address: u64,
    pub size: u64,
    pub raw: String,
    /// 0 GLOBAL, 1 WEAK, 2 LOCAL, 3 other: lower wins.
    pub rank: u8,
    pub source: FunctionSource,
}

/// Defined `STT_FUNC`/`STT_GNU_IFUNC` symbols of `.symtab` and `.dynsym` that lie in code
/// outside the PLT.
pub(crate) fn collect(file: &ElfFile64<Endianness>, code: &CodeMap) -> Result<Vec<SymFunc>> {
    let en = file.endian();
    let mut out = Vec::new();
    let tables = [
        (file.elf_symbol_table(), FunctionSource::Symtab, ".symtab"),
        (file.elf_dynamic_symbol_table(), FunctionSource::Dynsym, ".dynsym"),
    ];
    for (table, source, what) in tables {
        for sym in table.iter() {
            let ty = sym.st_type();
            if ty != elf::STT_FUNC && ty != elf::STT_GNU_IFUNC {
                continue;
            }
            if sym.st_shndx(en) == elf::SHN_UNDEF {
                continue;
            }
            let address = sym.st_value(en);
            if !code.is_code(address) {
                continue;
            }
            let name = table
                .symbol_name(en, sym)
                .map_err(|e| Error::Malformed(format!("{what}: name of the symbol at 0x{address:x}: {e}")))?;
            let rank = match sym.st_bind() {
                elf::STB_GLOBAL | elf::STB_GNU_UNIQUE => 0,
                elf::STB_WEAK => 1,
                elf::STB_LOCAL => 2,
                _ => 3,
            };
            out.push(SymFunc {
                address,
                size: sym.st_size(en),
                raw: String::from_utf8_lossy(name).into_owned(),
                rank,
                source,
            });
        }
    }
    Ok(out)
}

fn better(a: &SymFunc, b: &SymFunc) -> bool {
    // Is `a` a better name than `b`?
    (a.source, a.rank, a.raw.is_empty()) < (b.source, b.rank, b.raw.is_empty())
}

/// One candidate per address, sorted; see the module documentation of `analysis` for the rules.
///
/// The symbols and the FDEs in code are sorted by (address, table order) and walked together,
/// one address at a time: a large program has 10^5 of each, and a sorted `Vec` costs a
/// fraction of a map's inserts. Within an address the table order decides ties, as it did.
pub(crate) fn merge(syms: &[SymFunc], fdes: &[Fde], code: &CodeMap) -> Vec<Cand> {
    let mut by_sym: Vec<(u64, usize)> = syms.iter().enumerate().map(|(i, s)| (s.address, i)).collect();
    by_sym.sort_unstable();
    let mut by_fde: Vec<(u64, usize)> =
        fdes.iter().enumerate().filter(|(_, f)| code.is_code(f.address)).map(|(k, f)| (f.address, k)).collect();
    by_fde.sort_unstable();
    let (mut si, mut fi) = (0, 0);
    let mut out = Vec::with_capacity(by_sym.len().max(by_fde.len()));
    loop {
        let address = match (by_sym.get(si), by_fde.get(fi)) {
            (Some(a), Some(b)) => a.0.min(b.0),
            (Some(a), None) => a.0,
            (None, Some(b)) => b.0,
            (None, None) => break,
        };
        // The best symbol ((source, rank, empty name), then table order) and the largest size.
        let (mut best, mut max_size): (Option<&SymFunc>, u64) = (None, 0);
        while let Some(&(_, i)) = by_sym.get(si).filter(|e| e.0 == address) {
            let s = &syms[i];
            max_size = max_size.max(s.size);
            if best.is_none_or(|b| better(s, b)) {
                best = Some(s);
            }
            si += 1;
        }
        // Two FDEs at one address: keep the longer (the first of equals).
        let mut fde: Option<usize> = None;
        while let Some(&(_, k)) = by_fde.get(fi).filter(|e| e.0 == address) {
            if fde.is_none_or(|j| fdes[j].len < fdes[k].len) {
                fde = Some(k);
            }
            fi += 1;
        }
        let fde_len = fde.map_or(0, |k| fdes[k].len);
        let size = match best {
            Some(s) if s.size > 0 => s.size,
            _ if max_size > 0 => max_size,
            _ => fde_len,
        };
        // A size-0 `.symtab` symbol without an FDE makes no function (its address is still a
        // branch target); neither does a range that wraps around.
        if size == 0 || address.checked_add(size).is_none() {
            continue;
        }
        let (source, raw_name) = match best {
            Some(s) if !s.raw.is_empty() => (s.source, Some(s.raw.clone())),
            _ => (FunctionSource::EhFrame, None),
        };
        out.push(Cand { address, size, source, raw_name, fde });
    }
    out
}

pub(crate) use stint_layout::meta::demangle;
