//! Code pointers outside the code: dynamic relocations, data words (ET_EXEC), DT_INIT/DT_FINI;
//! and the imports behind the PLT stubs.

use super::{CodeMap, PltStub, PLT_SECTIONS};
use crate::error::{Error, Result};
use crate::input::InputElf;
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic};
use object::elf;
use object::read::elf::{ElfFile64, Sym as _};
use object::{Endianness, SymbolIndex};
use std::collections::HashMap;

pub(crate) struct DynRefs {
    /// `(where, value)` of every code address stored in data: by a dynamic relocation, or
    /// (ET_EXEC) as an aligned 8-byte word.
    pub refs: Vec<(u64, u64)>,
    /// The value each dynamic relocation stores at its offset (for reading absolute jump
    /// tables in PIE, whose file bytes may be zero).
    pub reloc_value: HashMap<u64, u64>,
    /// GOT slot → imported symbol (`GLOB_DAT`, `JUMP_SLOT`).
    pub got_names: HashMap<u64, String>,
    /// DT_INIT, DT_FINI.
    pub init_fini: Vec<u64>,
}

fn le64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    for (d, s) in a.iter_mut().zip(b) {
        *d = *s;
    }
    u64::from_le_bytes(a)
}

/// Sections whose words are not code pointers even when they look like ones.
const NOT_POINTER_DATA: [&str; 3] = [".eh_frame", ".eh_frame_hdr", ".gcc_except_table"];

pub(crate) fn collect(elf: &InputElf, file: &ElfFile64<Endianness>, code: &CodeMap) -> Result<DynRefs> {
    let en = file.endian();
    let dynsym = file.elf_dynamic_symbol_table();
    let mut out =
        DynRefs { refs: Vec::new(), reloc_value: HashMap::new(), got_names: HashMap::new(), init_fini: Vec::new() };
    for sec in elf.sections.iter().filter(|s| s.sh_type == elf::SHT_RELA && s.is_alloc() && s.has_bits()) {
        let data = elf.section_data(sec);
        if !data.chunks_exact(24).remainder().is_empty() {
            return Err(Error::Malformed(format!(
                "{}: size 0x{:x} is not a multiple of the 24-byte entry",
                sec.name, sec.size
            )));
        }
        for (k, e) in data.chunks_exact(24).enumerate() {
            let offset = le64(&e[0..8]);
            let info = le64(&e[8..16]);
            let addend = le64(&e[16..24]);
            let ty = (info & 0xffff_ffff) as u32;
            let symi = (info >> 32) as usize;
            // (value, defined, name) of the symbol.
            let sym = if symi == 0 {
                None
            } else {
                let s = dynsym.symbol(SymbolIndex(symi)).map_err(|err| {
                    Error::Malformed(format!("{}: relocation {k} names symbol {symi}: {err}", sec.name))
                })?;
                let name =
                    dynsym.symbol_name(en, s).map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
                Some((s.st_value(en), s.st_shndx(en) != elf::SHN_UNDEF, name))
            };
            let value = match ty {
                elf::R_X86_64_RELATIVE | elf::R_X86_64_IRELATIVE => Some(addend),
                elf::R_X86_64_64 => match &sym {
                    None => Some(addend),
                    Some((v, true, _)) => Some(v.wrapping_add(addend)),
                    Some(_) => None,
                },
                elf::R_X86_64_GLOB_DAT | elf::R_X86_64_JUMP_SLOT => {
                    if let Some((_, _, name)) = &sym {
                        if !name.is_empty() {
                            out.got_names.insert(offset, name.clone());
                        }
                    }
                    match &sym {
                        Some((v, true, _)) => Some(*v),
                        _ => None,
                    }
                }
                _ => None,
            };
            if let Some(v) = value {
                out.reloc_value.insert(offset, v);
                if code.is_exec(v) {
                    out.refs.push((offset, v));
                }
            }
        }
    }
    if !elf.kind.is_position_independent() {
        let data_types =
            [elf::SHT_PROGBITS, elf::SHT_INIT_ARRAY, elf::SHT_FINI_ARRAY, elf::SHT_PREINIT_ARRAY, elf::SHT_DYNAMIC];
        for sec in elf.sections.iter().filter(|s| {
            s.is_alloc()
                && s.has_bits()
                && !s.is_exec()
                && data_types.contains(&s.sh_type)
                && !NOT_POINTER_DATA.contains(&s.name.as_str())
        }) {
            let data = elf.section_data(sec);
            let skip = (sec.addr.wrapping_neg() & 7) as usize;
            let Some(aligned) = data.get(skip..) else { continue };
            for (k, w) in aligned.chunks_exact(8).enumerate() {
                let v = le64(w);
                if code.is_exec(v) {
                    out.refs.push((sec.addr.wrapping_add((skip + 8 * k) as u64), v));
                }
            }
        }
    }
    if let Some(d) = elf.segments.iter().find(|s| s.p_type == elf::PT_DYNAMIC) {
        let b = elf.data.get(d.offset as usize..d.offset.saturating_add(d.filesz) as usize).unwrap_or_default();
        for e in b.chunks_exact(16) {
            let tag = le64(&e[..8]);
            let val = le64(&e[8..]);
            if tag == u64::from(elf::DT_NULL) {
                break;
            }
            if (tag == u64::from(elf::DT_INIT) || tag == u64::from(elf::DT_FINI)) && code.is_exec(val) {
                out.init_fini.push(val);
            }
        }
    }
    Ok(out)
}

/// Decode the PLT sections; every `jmp [rip+slot]` whose slot has a named relocation is a
/// stub for that import.
pub(crate) fn plt_stubs(elf: &InputElf, got_names: &HashMap<u64, String>) -> Vec<PltStub> {
    let mut out = Vec::new();
    for sec in elf.sections.iter().filter(|s| s.is_exec() && PLT_SECTIONS.contains(&s.name.as_str())) {
        let data = elf.section_data(sec);
        let mut dec = Decoder::with_ip(64, data, sec.addr, DecoderOptions::NONE);
        let mut prev = Instruction::default();
        let mut ins = Instruction::default();
        while dec.can_decode() {
            dec.decode_out(&mut ins);
            if ins.flow_control() == FlowControl::IndirectBranch && ins.is_ip_rel_memory_operand() {
                let slot = ins.ip_rel_memory_address();
                if let Some(name) = got_names.get(&slot) {
                    let address = if prev.mnemonic() == Mnemonic::Endbr64 && prev.next_ip() == ins.ip() {
                        prev.ip()
                    } else {
                        ins.ip()
                    };
                    out.push(PltStub { address, got_slot: slot, name: name.clone() });
                }
            }
            prev = ins;
        }
    }
    out.sort_by_key(|s| s.address);
    out
}
