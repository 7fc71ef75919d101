//! Input: validate an ELF and give the rest of the rewriter a checked view of it.
//!
//! Everything later (analysis, planning, emitting) reads the program through [`InputElf`], so
//! the bounds checks live here once: a region that runs past the file is an error here, never a
//! panic later. We parse the raw headers with `object::elf` types (the rewriter needs the exact
//! program-header table it will edit) and let `object::read` parse symbols and sections.

use crate::error::{Error, Result};
use object::elf;
use object::read::elf::{FileHeader as _, ProgramHeader as _, SectionHeader as _};
use object::{Endianness, LittleEndian};

/// The kind of executable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ElfKind {
    /// ET_EXEC with an interpreter: loaded at its link addresses.
    Exec,
    /// ET_DYN with an interpreter: position-independent executable.
    Pie,
    /// ET_EXEC without an interpreter: a static executable, loaded at its link addresses
    /// (glibc `-static`, musl, Debian's busybox). Its libc sets up TLS itself, after the
    /// entry stub ran.
    Static,
    /// ET_DYN without an interpreter, marked DF_1_PIE: glibc `-static-pie`. It relocates
    /// itself (`_dl_relocate_static_pie`) after the entry stub ran.
    StaticPie,
}

/// How `inspect` names the kind: "PIE", "non-PIE", "static", "static-PIE".
impl std::fmt::Display for ElfKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ElfKind::Exec => "non-PIE",
            ElfKind::Pie => "PIE",
            ElfKind::Static => "static",
            ElfKind::StaticPie => "static-PIE",
        })
    }
}

impl ElfKind {
    /// Loaded at a base chosen by the kernel (addresses in the file are offsets).
    pub fn is_position_independent(self) -> bool {
        matches!(self, ElfKind::Pie | ElfKind::StaticPie)
    }
    /// Linked without an interpreter: the libc inside sets up TLS after our entry stub.
    pub fn is_static(self) -> bool {
        matches!(self, ElfKind::Static | ElfKind::StaticPie)
    }
}

/// The C library the program runs on, which fixes where its thread control block keeps the
/// kernel thread id (the second word of the runtime's thread key, D8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Libc {
    /// glibc: `struct pthread`'s `tid` at `fs:[GLIBC_TID_OFFSET]` (dynamic and static alike).
    Glibc,
    /// musl: `struct pthread` is `self, dtv, prev, next, sysinfo, canary, tid, …` on x86-64,
    /// so the tid sits right after the stack canary, at `fs:[MUSL_TID_OFFSET]`.
    Musl,
    /// Something else: the key is the thread pointer alone.
    Other,
}

impl Libc {
    /// fs-relative offset of the libc's tid word, 0 when unknown.
    pub fn tid_offset(self) -> u32 {
        match self {
            Libc::Glibc => stint_layout::GLIBC_TID_OFFSET,
            Libc::Musl => stint_layout::MUSL_TID_OFFSET,
            Libc::Other => 0,
        }
    }
}

/// One program header, as in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub index: usize,
    pub p_type: u32,
    pub flags: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub align: u64,
}

impl Segment {
    pub fn is_load(&self) -> bool {
        self.p_type == elf::PT_LOAD
    }
    pub fn contains_vaddr(&self, a: u64) -> bool {
        a >= self.vaddr && a < self.vaddr + self.memsz
    }
}

/// One section header with its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub index: usize,
    pub name: String,
    pub sh_type: u32,
    pub flags: u64,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
}

impl Section {
    pub fn is_exec(&self) -> bool {
        self.flags & u64::from(elf::SHF_EXECINSTR) != 0 && self.flags & u64::from(elf::SHF_ALLOC) != 0
    }
    pub fn is_alloc(&self) -> bool {
        self.flags & u64::from(elf::SHF_ALLOC) != 0
    }
    /// File bytes backing this section (none for NOBITS).
    pub fn has_bits(&self) -> bool {
        self.sh_type != elf::SHT_NOBITS
    }
}

/// A validated x86-64 executable.
pub struct InputElf<'a> {
    pub data: &'a [u8],
    pub kind: ElfKind,
    /// Which C library's thread control block the program has.
    pub libc: Libc,
    pub entry: u64,
    pub interp: Option<String>,
    pub phoff: u64,
    pub phnum: usize,
    pub segments: Vec<Segment>,
    pub sections: Vec<Section>,
}

const EHDR_SIZE: usize = 64;
const PHDR_SIZE: usize = 56;
/// End of the x86-64 user address space (47-bit addresses): no segment is loaded above it.
const USER_SPACE_END: u64 = 1 << 47;

impl<'a> InputElf<'a> {
    /// Validate `data` as an ELF executable this version can rewrite.
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        if data.len() < 4 || &data[..4] != b"\x7fELF" {
            return Err(Error::NotElf);
        }
        if data.len() < 6 {
            return Err(Error::Truncated("ELF identification is cut short".into()));
        }
        if data[4] != elf::ELFCLASS64 {
            return Err(Error::Foreign("32-bit ELF".into()));
        }
        if data[5] != elf::ELFDATA2LSB {
            return Err(Error::Foreign("big-endian ELF".into()));
        }
        if data.len() < EHDR_SIZE {
            return Err(Error::Truncated(format!("ELF header needs {EHDR_SIZE} bytes, file has {}", data.len())));
        }
        let hdr =
            elf::FileHeader64::<Endianness>::parse(data).map_err(|e| Error::Malformed(format!("ELF header: {e}")))?;
        let en = hdr.endian().map_err(|e| Error::Malformed(format!("ELF header: {e}")))?;
        let machine = hdr.e_machine(en);
        if machine != elf::EM_X86_64 {
            return Err(Error::Foreign(format!("machine {} ({})", machine, machine_name(machine))));
        }
        let e_type = hdr.e_type(en);
        let phoff = hdr.e_phoff(en);
        let phnum = hdr.e_phnum(en) as usize;
        if hdr.e_phentsize(en) as usize != PHDR_SIZE || phnum == 0 {
            return Err(Error::Malformed("program header table is missing or has a foreign entry size".into()));
        }
        let ph_end = phoff.checked_add((phnum * PHDR_SIZE) as u64);
        if ph_end.is_none_or(|end| end > data.len() as u64) {
            return Err(Error::Truncated("program header table runs past the end of the file".into()));
        }
        let phdrs = hdr.program_headers(en, data).map_err(|e| Error::Malformed(format!("program headers: {e}")))?;
        let mut segments = Vec::with_capacity(phnum);
        for (index, p) in phdrs.iter().enumerate() {
            let s = Segment {
                index,
                p_type: p.p_type(en),
                flags: p.p_flags(en),
                offset: p.p_offset(en),
                vaddr: p.p_vaddr(en),
                filesz: p.p_filesz(en),
                memsz: p.p_memsz(en),
                align: p.p_align(en),
            };
            if s.p_type == elf::PT_LOAD || s.p_type == elf::PT_INTERP || s.p_type == elf::PT_DYNAMIC {
                if s.offset.checked_add(s.filesz).is_none_or(|e| e > data.len() as u64) {
                    return Err(Error::Truncated(format!(
                        "segment {index} (file 0x{:x}+0x{:x}) runs past the end of the file (0x{:x} bytes)",
                        s.offset,
                        s.filesz,
                        data.len()
                    )));
                }
                if s.p_type == elf::PT_LOAD && s.memsz < s.filesz {
                    return Err(Error::Malformed(format!("segment {index} has p_memsz < p_filesz")));
                }
                // The kernel maps nothing above the user address space; everything after this
                // computes with `vaddr + memsz`.
                if s.p_type == elf::PT_LOAD && s.vaddr.checked_add(s.memsz).is_none_or(|e| e > USER_SPACE_END) {
                    return Err(Error::Malformed(format!(
                        "segment {index} (memory 0x{:x}+0x{:x}) lies outside the user address space",
                        s.vaddr, s.memsz
                    )));
                }
            }
            segments.push(s);
        }
        let interp = segments.iter().find(|s| s.p_type == elf::PT_INTERP).map(|s| {
            let b = &data[s.offset as usize..(s.offset + s.filesz) as usize];
            String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or(b)).into_owned()
        });
        let has_dynamic = segments.iter().any(|s| s.p_type == elf::PT_DYNAMIC);
        let dynamic = DynamicInfo::read(data, &segments);
        let kind = match (e_type, interp.is_some()) {
            (elf::ET_EXEC, true) => ElfKind::Exec,
            // A library that can also be run (libc.so.6 prints its version): it names itself
            // (DT_SONAME) and is not marked PIE. A PIE from a linker too old to set DF_1_PIE has
            // no SONAME, and stays an executable.
            (elf::ET_DYN, true) if dynamic.soname && !dynamic.pie => {
                return Err(Error::UnsupportedKind(
                    "shared library (it has a SONAME and no PIE flag, though it can be run): stint rewrites executables, not libraries"
                        .into(),
                ))
            }
            (elf::ET_DYN, true) => ElfKind::Pie,
            (elf::ET_EXEC, false) => ElfKind::Static,
            (elf::ET_DYN, false) if has_dynamic && !dynamic.pie => {
                return Err(Error::UnsupportedKind("shared library: stint rewrites executables, not libraries".into()))
            }
            (elf::ET_DYN, false) if has_dynamic => ElfKind::StaticPie,
            (elf::ET_DYN, false) => {
                return Err(Error::UnsupportedKind(
                    "position-independent file with neither an interpreter nor a dynamic section: not an executable stint can load".into(),
                ))
            }
            (elf::ET_REL, _) => {
                return Err(Error::UnsupportedKind("relocatable object file: link it into an executable first".into()))
            }
            (elf::ET_CORE, _) => return Err(Error::UnsupportedKind("core dump, not an executable".into())),
            (t, _) => return Err(Error::UnsupportedKind(format!("ELF type {t} is not an executable"))),
        };
        if !segments.iter().any(|s| s.is_load()) {
            return Err(Error::Malformed("no PT_LOAD segment".into()));
        }

        let mut sections = Vec::new();
        match hdr.sections(en, data) {
            Ok(table) => {
                for (i, sh) in table.iter().enumerate() {
                    let name =
                        table.section_name(en, sh).map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
                    let s = Section {
                        index: i,
                        name,
                        sh_type: sh.sh_type(en),
                        flags: sh.sh_flags(en),
                        addr: sh.sh_addr(en),
                        offset: sh.sh_offset(en),
                        size: sh.sh_size(en),
                    };
                    if s.has_bits()
                        && s.sh_type != elf::SHT_NULL
                        && s.offset.checked_add(s.size).is_none_or(|e| e > data.len() as u64)
                    {
                        return Err(Error::Truncated(format!("section {} runs past the end of the file", s.name)));
                    }
                    sections.push(s);
                }
            }
            Err(e) => return Err(Error::Malformed(format!("section headers: {e}"))),
        }
        let libc = match interp.as_deref() {
            Some(i) if i.contains("ld-linux-x86-64.so") => Libc::Glibc,
            Some(i) if i.contains("ld-musl") => Libc::Musl,
            Some(_) => Libc::Other,
            // glibc's crt1 carries the GNU ABI tag note into every program; musl's does not.
            None if has_gnu_abi_tag(data, &segments) => Libc::Glibc,
            None => Libc::Musl,
        };
        let me = InputElf { data, kind, libc, entry: hdr.e_entry(en), interp, phoff, phnum, segments, sections };
        if me.find_segment_magic() {
            return Err(Error::AlreadyRewritten);
        }
        if kind.is_static() && me.is_go() {
            return Err(Error::UnsupportedKind(
                "Go program: Go's runtime switches goroutine stacks and schedules its own threads, so per-thread entry/exit instrumentation cannot follow it".into(),
            ));
        }
        Ok(me)
    }

    /// A Go program: Go's linker writes `.go.buildinfo` and the `.note.go.buildid` note (both
    /// kept when stripped); `runtime.morestack` names it when the sections are gone.
    fn is_go(&self) -> bool {
        self.sections.iter().any(|s| s.name == ".go.buildinfo" || s.name == ".note.go.buildid")
            || self
                .segments
                .iter()
                .any(|s| s.p_type == elf::PT_NOTE && note_owners(self.data, s).any(|(o, _)| o == b"Go"))
            || self.data.windows(GO_MORESTACK.len()).any(|w| w == GO_MORESTACK)
    }

    /// True if some loadable segment starts with stint's segment marker.
    fn find_segment_magic(&self) -> bool {
        self.segments.iter().filter(|s| s.is_load()).any(|s| {
            let m = &stint_layout::SEGMENT_MAGIC;
            s.filesz >= m.len() as u64 && &self.data[s.offset as usize..s.offset as usize + m.len()] == m
        })
    }

    /// PT_LOAD segments in table order.
    pub fn loads(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter().filter(|s| s.is_load())
    }

    /// File offset of a virtual address backed by file bytes.
    pub fn vaddr_to_offset(&self, vaddr: u64) -> Option<u64> {
        self.loads().find(|s| vaddr >= s.vaddr && vaddr < s.vaddr + s.filesz).map(|s| vaddr - s.vaddr + s.offset)
    }

    /// `len` file-backed bytes at `vaddr`, or None if any of them is not in the file.
    pub fn bytes_at(&self, vaddr: u64, len: u64) -> Option<&'a [u8]> {
        let seg = self.loads().find(|s| vaddr >= s.vaddr && vaddr < s.vaddr + s.filesz)?;
        if vaddr.checked_add(len)? > seg.vaddr + seg.filesz {
            return None;
        }
        let off = (vaddr - seg.vaddr + seg.offset) as usize;
        self.data.get(off..off + len as usize)
    }

    /// The executable section containing `vaddr`.
    pub fn exec_section_at(&self, vaddr: u64) -> Option<&Section> {
        self.sections.iter().find(|s| s.is_exec() && vaddr >= s.addr && vaddr < s.addr + s.size)
    }

    /// A section by name.
    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// The file bytes of a section (empty for NOBITS).
    pub fn section_data(&self, s: &Section) -> &'a [u8] {
        if !s.has_bits() {
            return &[];
        }
        &self.data[s.offset as usize..(s.offset + s.size) as usize]
    }

    /// Whether the program's libc is glibc (glibc's ld.so, or linked statically with it).
    pub fn is_glibc(&self) -> bool {
        self.libc == Libc::Glibc
    }
}

/// What the kind of an ET_DYN file depends on in its dynamic section.
#[derive(Default)]
struct DynamicInfo {
    /// DT_FLAGS_1 has DF_1_PIE (a PIE, or with no interpreter a static-pie).
    pie: bool,
    /// DT_SONAME is present (a shared library names itself).
    soname: bool,
}

impl DynamicInfo {
    /// Read from the PT_DYNAMIC segment (all false without one, or if it is unreadable).
    fn read(data: &[u8], segments: &[Segment]) -> DynamicInfo {
        let mut info = DynamicInfo::default();
        let Some(dynamic) = segments.iter().find(|s| s.p_type == elf::PT_DYNAMIC) else {
            return info;
        };
        let Some(b) = data.get(dynamic.offset as usize..dynamic.offset.saturating_add(dynamic.filesz) as usize) else {
            return info;
        };
        let n = b.len() / std::mem::size_of::<elf::Dyn64<LittleEndian>>();
        let Ok((entries, _)) = object::pod::slice_from_bytes::<elf::Dyn64<LittleEndian>>(b, n) else {
            return info;
        };
        for e in entries {
            let (tag, val) = (e.d_tag.get(LittleEndian), e.d_val.get(LittleEndian));
            match tag {
                t if t == u64::from(elf::DT_FLAGS_1) => info.pie = val & u64::from(elf::DF_1_PIE) != 0,
                t if t == u64::from(elf::DT_SONAME) => info.soname = true,
                t if t == u64::from(elf::DT_NULL) => break,
                _ => {}
            }
        }
        info
    }
}

/// The name of Go's stack-growth routine as its symbol string tables hold it.
const GO_MORESTACK: &[u8] = b"\0runtime.morestack\0";

/// The (owner, type) of every note in a PT_NOTE segment (stops at the first malformed one).
fn note_owners<'d>(data: &'d [u8], seg: &Segment) -> impl Iterator<Item = (&'d [u8], u32)> + 'd {
    let b = data.get(seg.offset as usize..seg.offset.saturating_add(seg.filesz) as usize).unwrap_or(&[]);
    let align = if seg.align == 8 { 8 } else { 4 };
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let word = |o: usize| b.get(o..o + 4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        let (namesz, descsz, ty) = (word(at)? as usize, word(at + 4)? as usize, word(at + 8)?);
        let name = b.get(at + 12..(at + 12).checked_add(namesz)?)?;
        let up = |n: usize| n.checked_add(align - 1).map(|n| n & !(align - 1));
        at = up(up(at + 12 + namesz)?.checked_add(descsz)?)?;
        Some((name.split(|&c| c == 0).next().unwrap_or(name), ty))
    })
}

/// A static program linked with glibc: its crt1 brings the NT_GNU_ABI_TAG note.
fn has_gnu_abi_tag(data: &[u8], segments: &[Segment]) -> bool {
    segments
        .iter()
        .filter(|s| s.p_type == elf::PT_NOTE)
        .any(|s| note_owners(data, s).any(|(o, t)| o == b"GNU" && t == elf::NT_GNU_ABI_TAG))
}

fn machine_name(m: u16) -> &'static str {
    match m {
        elf::EM_386 => "i386",
        elf::EM_ARM => "arm",
        elf::EM_AARCH64 => "aarch64",
        elf::EM_RISCV => "riscv",
        elf::EM_PPC64 => "ppc64",
        elf::EM_S390 => "s390",
        _ => "not x86-64",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PT_NOTE segment over `notes` at file offset 0.
    fn note_segment(notes: &[u8], align: u64) -> Segment {
        Segment {
            index: 0,
            p_type: elf::PT_NOTE,
            flags: elf::PF_R,
            offset: 0,
            vaddr: 0,
            filesz: notes.len() as u64,
            memsz: notes.len() as u64,
            align,
        }
    }

    /// One note: namesz, descsz, type, name (NUL-terminated, padded to 4), desc.
    fn note(name: &[u8], ty: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend(((name.len() + 1) as u32).to_le_bytes());
        v.extend((desc.len() as u32).to_le_bytes());
        v.extend(ty.to_le_bytes());
        v.extend(name);
        v.push(0);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v.extend(desc);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn gnu_abi_tag_tells_glibc_from_musl() {
        let mut notes = note(b"GNU", elf::NT_GNU_BUILD_ID, &[1; 20]);
        notes.extend(note(b"GNU", elf::NT_GNU_ABI_TAG, &[0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]));
        let seg = note_segment(&notes, 4);
        assert!(has_gnu_abi_tag(&notes, &[seg]), "the second note is the ABI tag");
        let build_id_only = note(b"GNU", elf::NT_GNU_BUILD_ID, &[1; 20]);
        assert!(!has_gnu_abi_tag(&build_id_only, &[note_segment(&build_id_only, 4)]), "a build id is no ABI tag");
        let go = note(b"Go", 4, b"buildid");
        assert_eq!(
            note_owners(&go, &note_segment(&go, 4)).map(|(o, _)| o.to_vec()).collect::<Vec<_>>(),
            [b"Go".to_vec()]
        );
    }

    #[test]
    fn malformed_notes_end_the_walk_without_panicking() {
        let mut notes = note(b"GNU", elf::NT_GNU_ABI_TAG, &[0; 16]);
        notes[0..4].copy_from_slice(&u32::MAX.to_le_bytes()); // namesz runs past the segment
        assert_eq!(note_owners(&notes, &note_segment(&notes, 4)).count(), 0);
        let short = [1u8, 0, 0];
        assert_eq!(note_owners(&short, &note_segment(&short, 8)).count(), 0);
    }

    #[test]
    fn tid_offsets_per_libc() {
        assert_eq!(Libc::Glibc.tid_offset(), 0x2d0);
        assert_eq!(Libc::Musl.tid_offset(), 0x30);
        assert_eq!(Libc::Other.tid_offset(), 0);
        assert!(ElfKind::StaticPie.is_position_independent() && ElfKind::StaticPie.is_static());
        assert!(!ElfKind::Static.is_position_independent() && ElfKind::Static.is_static());
        assert!(ElfKind::Pie.is_position_independent() && !ElfKind::Pie.is_static());
    }

    #[test]
    fn kinds_are_named_as_users_say_them() {
        let names: Vec<String> =
            [ElfKind::Exec, ElfKind::Pie, ElfKind::Static, ElfKind::StaticPie].iter().map(|k| k.to_string()).collect();
        assert_eq!(names, ["non-PIE", "PIE", "static", "static-PIE"]);
    }
}
