//! Function symbols, their merge with FDEs, and demangling.

use super::unwind::Fde;
use super::{Cand, CodeMap, FunctionSource};
use crate::error::{Error, Result};
use object::elf;
use object::read::elf::{ElfFile64, Sym as _};
use object::Endianness;
use std::collections::BTreeMap;

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

#[derive(Default)]
struct Slot<'a> {
    /// Best symbol: (source, rank, empty name, table order) ordering.
    best: Option<&'a SymFunc>,
    max_size: u64,
    fde: Option<usize>,
}

fn better(a: &SymFunc, b: &SymFunc) -> bool {
    // Is `a` a better name than `b`?
    (a.source, a.rank, a.raw.is_empty()) < (b.source, b.rank, b.raw.is_empty())
}

/// One candidate per address, sorted; see the module documentation of `analysis` for the rules.
pub(crate) fn merge(syms: &[SymFunc], fdes: &[Fde], code: &CodeMap) -> Vec<Cand> {
    let mut slots: BTreeMap<u64, Slot> = BTreeMap::new();
    for s in syms {
        let slot = slots.entry(s.address).or_default();
        slot.max_size = slot.max_size.max(s.size);
        if slot.best.is_none_or(|b| better(s, b)) {
            slot.best = Some(s);
        }
    }
    for (k, f) in fdes.iter().enumerate() {
        if !code.is_code(f.address) {
            continue;
        }
        let slot = slots.entry(f.address).or_default();
        // Two FDEs at one address: keep the longer.
        if slot.fde.is_none_or(|j| fdes.get(j).is_some_and(|g| g.len < f.len)) {
            slot.fde = Some(k);
        }
    }
    let mut out = Vec::with_capacity(slots.len());
    for (address, slot) in slots {
        let fde_len = slot.fde.and_then(|k| fdes.get(k)).map_or(0, |f| f.len);
        let size = match slot.best {
            Some(s) if s.size > 0 => s.size,
            _ if slot.max_size > 0 => slot.max_size,
            _ => fde_len,
        };
        // A size-0 `.symtab` symbol without an FDE makes no function (its address is still a
        // branch target); neither does a range that wraps around.
        if size == 0 || address.checked_add(size).is_none() {
            continue;
        }
        let (source, raw_name) = match slot.best {
            Some(s) if !s.raw.is_empty() => (s.source, Some(s.raw.clone())),
            _ => (FunctionSource::EhFrame, None),
        };
        out.push(Cand { address, size, source, raw_name, fde: slot.fde });
    }
    out
}

pub(crate) use stint_layout::meta::demangle;
