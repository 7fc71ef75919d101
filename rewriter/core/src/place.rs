//! Layout pass: an address for every block the rewriter adds (DESIGN D12), before any code is
//! generated, so the passes after it only fill in bytes at known places.
//!
//! Writable memory is the highest PT_LOAD's bss, grown (it must be a data segment): no new
//! writable segment and no file bytes.
//!
//! ```text
//! end of the last RW segment's memsz
//!   RtState                   64-aligned, RT_STATE_SIZE
//!   fork cookie               a page (the runtime makes it MADV_WIPEONFORK)
//!   control pages             page-aligned (the runtime maps the profile's control region
//!                             over them), ctl_len(n_points): gates first
//! guard page
//! new code segment            R E, page-aligned, after the input in memory and in the file
//!   SEGMENT_MAGIC             marks the output as rewritten (`input` refuses it)
//!   [program headers]         64-aligned; only when no program-header slot is spare
//!   RtConfig                  64-aligned
//!   meta JSON, initial gates, point infos, point names, program name
//!   runtime image             page-aligned (rt-lib, position-independent)
//!   entry stub                64-aligned; every piece of code below is followed by padding to 16
//!   slow stub, timer stub, timer enter, timer exit, trap stub
//!   per wrapped import        (8-aligned) its WrapSite and wrapper thunk
//!   per point                 its trampoline
//!   per exit                  its trampoline
//!   per import call site      its trampoline (D19)
//!   trap table                8-aligned: (site, trampoline) pairs relative to RtConfig, sorted
//!   .eh_frame, .eh_frame_hdr  8-aligned, last: the unwind pass decides their length
//! ```
//!
//! Code sizes come from a sizing run of [`codegen::piece`] at each piece's final address:
//! every piece refers only to blocks placed before it, to the program and to the writable
//! memory, so those bytes are final and the layout keeps them ([`Placement::code`]). The
//! per-point pieces (the bulk of the code) are encoded ahead on every core at a provisional
//! address and moved to their place ([`codegen::Movable`]), which gives the same bytes.
//!
//! Without a spare program-header slot (older toolchains emit no PT_GNU_PROPERTY), the table
//! moves into the new segment, and the segment gets the first PT_LOAD's vaddr − offset, so
//! AT_PHDR is right both on kernels that compute it from the first PT_LOAD and on those that
//! look for the PT_LOAD holding e_phoff (the file grows by the bss size in zeros for that).

use crate::codegen::{self, PieceAt, PieceKind, Targets};
use crate::error::{Error, Result};
use crate::input::{InputElf, Segment};
use crate::plan::{Plan, Tactic, JMP_LEN};
use crate::spec::Spec;
use crate::{rewrite_report, rtimage, Planned};
use object::elf;
use std::collections::BTreeMap;
use stint_layout::{
    align_up, ctl_len, RtConfig, WrapSite, CONFIG_MAGIC, CONFIG_VERSION, N_COUNTER_SLOTS, N_METRICS, PAGE,
    RT_STATE_SIZE, SEGMENT_MAGIC,
};

/// Program-header table entry size (ELF64).
pub const PHDR_SIZE: u64 = 56;

/// The data blocks of the new segment: what the runtime reads besides the code.
pub struct SegmentData<'a> {
    /// Self-description JSON for the profile file.
    pub meta_json: String,
    /// Program name for the default profile path.
    pub program: &'a str,
    /// Initial gate byte per point.
    pub gates: Vec<u8>,
    /// Per point: the `metric_bit`s it can measure | `POINT_INFO_WRAP`.
    pub info: Vec<u8>,
    /// Point names, each NUL-terminated, in point order (for the control file).
    pub names: Vec<u8>,
    /// fs-relative offset of libc's tid word (0: none).
    pub tid_offset: u32,
    /// `RtConfig::flags` (`CFG_*`).
    pub flags: u32,
}

impl<'a> SegmentData<'a> {
    pub fn new(p: &Planned, program: &'a str, input: Option<&str>, spec: &Spec) -> Self {
        let on = spec.on_at_start_bits();
        let points = &p.plan.points;
        let gates = points.iter().map(|pt| pt.bits & (on | stint_layout::GATE_HOOK)).collect();
        let info = points
            .iter()
            .map(|pt| pt.bits | if pt.wrap.is_some() { stint_layout::POINT_INFO_WRAP } else { 0 })
            .collect();
        let mut names = Vec::new();
        for pt in points {
            names.extend(pt.name(&p.analysis).bytes().filter(|&b| b != 0));
            names.push(0);
        }
        SegmentData {
            meta_json: rewrite_report::meta_json(p, program, input),
            program,
            gates,
            info,
            names,
            tid_offset: p.elf.libc.tid_offset(),
            flags: if spec.call_paths { 0 } else { stint_layout::CFG_NO_CALL_PATHS }
                | if spec.sampling { 0 } else { stint_layout::CFG_NO_SAMPLING }
                | if points.iter().any(|pt| pt.bits & stint_layout::TIMER_BITS != 0) {
                    0
                } else {
                    stint_layout::CFG_NO_TIMERS
                }
                | if spec.sampling
                    || points.iter().any(|pt| pt.bits & stint_layout::metric_bit(stint_layout::METRIC_CPU_TIME) != 0)
                {
                    0
                } else {
                    stint_layout::CFG_NO_CPU_CLOCK
                },
        }
    }
}

/// A site of the program the writer patches, and where it leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    pub address: u64,
    pub len: u64,
    /// A window gets `jmp rel32` to `target`; a trap gets `int3` and a trap-table entry; a
    /// [`Tactic::Rel8Slot`] exit gets `jmp rel8` to its slot (`target`), a site of its own; a
    /// [`Tactic::Retarget`] site is a jump whose last 4 bytes (its rel32) get `target`, or
    /// with length 2 (a rel8 jump of [`Tactic::WindowJumps`]) whose last byte gets the rel8
    /// to `target`, its slot; a [`Tactic::TableJumps`] site is a 4-byte jump-table entry that
    /// gets `target` (an `i32`, sign-extended).
    pub tactic: Tactic,
    /// The trampoline or thunk.
    pub target: u64,
}

/// A `call`/`jmp [rip+slot]` of the program the writer turns into a direct `call`/`jmp` to a
/// wrapper thunk (`plan::WrapSiteCall`), or a call into an import the writer turns into a
/// `call` to its trampoline (`plan::ImportSite`); a call keeps its return address (`nop`s,
/// then the `call rel32` ending where the program's call ended).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrapCall {
    pub address: u64,
    pub len: u64,
    /// A call (else a tail jump).
    pub call: bool,
    /// The thunk.
    pub target: u64,
}

/// Where everything the rewriter adds goes (see the module documentation).
#[derive(Clone, Debug)]
pub struct Placement {
    /// The highest PT_LOAD, whose bss grows to `rw_end`.
    pub data_segment: Segment,
    pub state: u64,
    pub control: u64,
    pub control_len: u64,
    pub rw_end: u64,
    /// The program-header slot the new PT_LOAD takes; `None`: the table moves into it.
    pub phdr_slot: Option<usize>,
    /// Entries of the output's program-header table.
    pub n_phdrs: usize,
    /// Address of the moved program-header table (when `phdr_slot` is `None`).
    pub moved_phdrs: Option<u64>,
    /// The new code segment: address and file offset.
    pub seg_vaddr: u64,
    pub seg_offset: u64,
    pub config: u64,
    pub meta: u64,
    pub gates: u64,
    pub info: u64,
    pub names: u64,
    pub name: u64,
    pub image: u64,
    /// What generated code refers to (stubs, routines, config, control, image).
    pub targets: Targets,
    pub entry_stub: u64,
    pub trap_stub: u64,
    /// The calibration routine (`PieceKind::Calibration`; 0: none, a program without points).
    pub calibration: u64,
    /// Where the per-point pieces begin.
    pub trampolines: u64,
    /// Every piece of code, in address order.
    pub pieces: Vec<PieceAt>,
    /// The bytes of each piece of `pieces` from the sizing run (taken by the code generation
    /// pass: [`codegen::collect`]).
    pub code: Vec<Vec<u8>>,
    /// The CFI shape id of each piece of `pieces` encoded ahead and moved
    /// ([`codegen::Movable::shape`]; taken by [`codegen::collect`]).
    pub shapes: Vec<Option<u64>>,
    /// The `WrapSite` descriptors of wrapped imports, each at its address.
    pub wrap_sites: Vec<(u64, WrapSite)>,
    /// GOT call sites of wrapped imports, patched to call their thunk (`Plan::wrap_sites`),
    /// then the import call sites, patched to call their trampoline (`Plan::import_sites`).
    pub wrap_calls: Vec<WrapCall>,
    /// Every other patched site: points first, then exits.
    pub sites: Vec<Site>,
    pub trap_table: u64,
    /// Where the unwind pass puts `.eh_frame` (then `.eh_frame_hdr`); the segment ends there
    /// when the program has no PT_GNU_EH_FRAME.
    pub eh_frame: u64,
}

impl Placement {
    /// The trap table: (site, trampoline) of every trap, sorted by site for the handler's
    /// binary search.
    pub fn traps(&self) -> Vec<(u64, u64)> {
        let mut t: Vec<(u64, u64)> =
            self.sites.iter().filter(|s| s.tactic == Tactic::Trap).map(|s| (s.address, s.target)).collect();
        t.sort_unstable();
        t
    }

    /// The `RtConfig` describing this layout to the runtime.
    pub fn config(&self, data: &SegmentData) -> RtConfig {
        let rel = |a: u64| a as i64 - self.config as i64;
        RtConfig {
            magic: CONFIG_MAGIC,
            version: CONFIG_VERSION,
            n_points: self.targets.n_points,
            n_metrics: N_METRICS,
            n_counter_slots: N_COUNTER_SLOTS,
            tid_offset: data.tid_offset,
            flags: data.flags,
            ctl_rel: rel(self.control),
            ctl_len: self.control_len,
            meta_rel: rel(self.meta),
            meta_len: data.meta_json.len() as u64,
            gates_rel: rel(self.gates),
            name_rel: rel(self.name),
            name_len: data.program.len() as u64,
            state_rel: rel(self.state),
            traps_rel: rel(self.trap_table),
            n_traps: self.traps().len() as u64,
            trap_handler_rel: rel(self.trap_stub),
            link_addr: self.config,
            info_rel: rel(self.info),
            names_rel: rel(self.names),
            names_len: data.names.len() as u64,
            calib_rel: if self.calibration == 0 { 0 } else { rel(self.calibration) },
        }
    }

    /// rt-lib's own `.eh_frame`: where it lies in the output, and its bytes.
    pub fn runtime_eh_frame(&self) -> (u64, &'static [u8]) {
        let (off, len) = (rtimage::EH_FRAME_OFFSET as usize, rtimage::EH_FRAME_LEN as usize);
        (self.image + rtimage::EH_FRAME_OFFSET, &rtimage::IMAGE[off..off + len])
    }
}

/// Blocks laid out one after the other from the start of the new segment.
struct Cursor {
    base: u64,
    len: u64,
    /// Pieces of code so far, and their bytes.
    pieces: Vec<PieceAt>,
    code: Vec<Vec<u8>>,
    shapes: Vec<Option<u64>>,
    /// Pieces encoded ahead at a provisional address ([`Cursor::encode_ahead`]).
    ahead: Ahead,
}

/// The per-point pieces encoded ahead ([`per_point_pieces`]), by their index in the plan's
/// points, exits and import sites (no hashing of a kind per piece).
#[derive(Default)]
struct Ahead {
    entries: Vec<Option<codegen::Movable>>,
    exits: Vec<Option<codegen::Movable>>,
    imports: Vec<Option<codegen::Movable>>,
}

impl Ahead {
    /// Where a piece of `kind` is kept; `None` for a kind never encoded ahead.
    fn slot(&mut self, kind: PieceKind) -> Option<&mut Option<codegen::Movable>> {
        match kind {
            PieceKind::Trampoline(i) => self.entries.get_mut(i),
            PieceKind::ExitTrampoline(i) => self.exits.get_mut(i),
            PieceKind::ImportTrampoline(i) => self.imports.get_mut(i),
            _ => None,
        }
    }

    fn take(&mut self, kind: PieceKind) -> Option<codegen::Movable> {
        self.slot(kind)?.take()
    }
}

impl Cursor {
    fn align(&mut self, a: u64) {
        self.len = align_up(self.len, a);
    }

    /// Reserve `n` bytes; their address.
    fn take(&mut self, n: u64) -> u64 {
        let at = self.base + self.len;
        self.len += n;
        at
    }

    /// Reserve a piece of code (sized by encoding it here, the bytes kept), then pad to 16.
    fn code(&mut self, plan: &Plan, kind: PieceKind, t: &Targets) -> Result<u64> {
        let at = self.base + self.len;
        let ahead = self.ahead.take(kind).and_then(|m| {
            let shape = m.shape;
            Some((m.moved(at)?, shape))
        });
        let (code, shape) = match ahead {
            Some(moved) => moved,
            None => (codegen::piece(plan, kind, at, t)?, None),
        };
        let len = code.len();
        self.pieces.push(PieceAt { kind, at, len });
        self.code.push(code);
        self.shapes.push(shape);
        self.len += len as u64;
        self.align(16);
        Ok(at)
    }

    /// Encode `kinds` on every core at the cursor's address, before their addresses are known:
    /// [`Cursor::code`] moves each to its place (or encodes it again where it cannot move).
    /// Only pieces whose every target is placed already may be encoded ahead.
    fn encode_ahead(&mut self, plan: &Plan, kinds: &[PieceKind], t: &Targets) {
        let at = self.base + self.len;
        let ids = crate::unwind::ShapeIds::default();
        let ready = crate::par::map(kinds, codegen::Templates::default, |templates, &kind| {
            codegen::Movable::with_templates(plan, kind, at, t, &ids, templates).ok()
        });
        // A piece that fails here is encoded again in its turn, which reports the error.
        self.ahead = Ahead {
            entries: std::iter::repeat_with(|| None).take(plan.points.len()).collect(),
            exits: std::iter::repeat_with(|| None).take(plan.exits.len()).collect(),
            imports: std::iter::repeat_with(|| None).take(plan.import_sites.len()).collect(),
        };
        for m in ready.into_iter().flatten() {
            if let Some(slot) = self.ahead.slot(m.kind) {
                *slot = Some(m);
            }
        }
    }
}

/// The per-point pieces the layout pass places after the wrapper thunks, in its order: entry
/// trampolines, exit trampolines, import call-site trampolines (only a speed-up: a piece left
/// out here is encoded in its turn).
fn per_point_pieces(plan: &Plan) -> Vec<PieceKind> {
    let entries = plan.points.iter().enumerate().filter(|(_, p)| p.import.is_none() && p.wrap.is_none());
    let exits = plan.exits.iter().enumerate().filter(|(_, x)| x.tactic != Tactic::EntryExit);
    entries
        .map(|(i, _)| PieceKind::Trampoline(i))
        .chain(exits.map(|(i, _)| PieceKind::ExitTrampoline(i)))
        .chain((0..plan.import_sites.len()).map(PieceKind::ImportTrampoline))
        .collect()
}

/// The layout pass.
pub fn place(elf: &InputElf, plan: &Plan, data: &SegmentData) -> Result<Placement> {
    let n_points = plan.points.len() as u32;
    // Writable memory: grow the last RW segment's bss.
    let last = elf.loads().max_by_key(|s| s.vaddr + s.memsz).ok_or_else(|| Error::Malformed("no PT_LOAD".into()))?;
    if last.flags & elf::PF_W == 0 || last.flags & elf::PF_X != 0 {
        return Err(Error::NoRoom(format!(
            "the highest PT_LOAD (at 0x{:x}) is not a data segment; cannot add the runtime's data",
            last.vaddr
        )));
    }
    let state = align_up(last.vaddr + last.memsz, 64);
    // A page of its own before the control pages: the fork cookie (`stint_layout::cookie_addr`).
    let control = align_up(state + RT_STATE_SIZE, PAGE) + PAGE;
    let control_len = ctl_len(n_points);
    let rw_end = control + control_len;

    // The code segment: after everything, in memory and in the file.
    let phdr_slot = spare_phdr_slot(elf);
    let mut seg_offset = align_up(elf.data.len() as u64, PAGE);
    let mut seg_vaddr = align_up(rw_end, PAGE) + PAGE; // a guard page between data and code
    let first = elf.loads().next().ok_or_else(|| Error::Malformed("no PT_LOAD".into()))?;
    if phdr_slot.is_none() {
        // The moved table must sit where every kernel computes AT_PHDR: old kernels take
        // the first PT_LOAD's (vaddr - offset) + e_phoff, new ones use the PT_LOAD that
        // holds e_phoff. Give the new segment the first PT_LOAD's vaddr - offset.
        let delta = first.vaddr.wrapping_sub(first.offset);
        seg_offset = seg_offset.max(seg_vaddr.wrapping_sub(delta));
        seg_vaddr = seg_offset.wrapping_add(delta);
    }

    let mut c = Cursor {
        base: seg_vaddr,
        len: 0,
        pieces: Vec::new(),
        code: Vec::new(),
        shapes: Vec::new(),
        ahead: Ahead::default(),
    };
    c.take(SEGMENT_MAGIC.len() as u64);
    c.align(64);
    let n_phdrs = elf.segments.len() + phdr_slot.is_none() as usize;
    let moved_phdrs = phdr_slot.is_none().then(|| {
        let at = c.take(n_phdrs as u64 * PHDR_SIZE);
        c.align(64);
        at
    });
    let config = c.take(std::mem::size_of::<RtConfig>() as u64);
    let meta = c.take(data.meta_json.len() as u64);
    let gates = c.take(data.gates.len() as u64);
    let info = c.take(data.info.len() as u64);
    let names = c.take(data.names.len() as u64);
    let name = c.take(data.program.len() as u64);
    c.align(PAGE);
    let image = c.take(rtimage::IMAGE.len() as u64);
    c.align(64);

    // Code, each piece sized at its final address.
    let mut t = Targets {
        sampling: data.flags & stint_layout::CFG_NO_SAMPLING == 0,
        program_entry: elf.entry,
        config,
        image,
        control,
        n_points,
        tid_offset: data.tid_offset,
        ..Targets::default()
    };
    let entry_stub = c.code(plan, PieceKind::EntryStub, &t)?;
    t.slow_stub = c.code(plan, PieceKind::SlowStub, &t)?;
    t.timer_stub = c.code(plan, PieceKind::TimerStub, &t)?;
    t.timer_enter = c.code(plan, PieceKind::TimerEnter, &t)?;
    t.timer_exit = c.code(plan, PieceKind::TimerExit, &t)?;
    let trap_stub = c.code(plan, PieceKind::TrapStub, &t)?;
    c.align(64);
    let calibration = if n_points > 0 { c.code(plan, PieceKind::Calibration, &t)? } else { 0 };
    let trampolines = c.base + c.len;

    let mut sites = Vec::with_capacity(plan.points.len() + plan.exits.len());
    let mut wrap_sites = Vec::new();
    // The wrapper thunks first: trampolines whose displaced code calls a wrapped import
    // through the GOT call the thunk instead (`Targets::wrap_thunks`).
    let mut thunk_of = BTreeMap::new();
    for (i, p) in plan.points.iter().enumerate() {
        let Some(w) = &p.wrap else { continue };
        // A static program's function: its relocated entry window is the real one.
        let real = if w.got_slot == 0 { c.code(plan, PieceKind::WrapReal(i), &t)? } else { 0 };
        // The WrapSite descriptor, then the thunk the PLT stub's jmp and the patched GOT
        // call sites lead to.
        c.align(8);
        let site_at = c.take(std::mem::size_of::<WrapSite>() as u64);
        let (real_rel, indirect, lazy) = match real {
            0 => (w.got_slot as i64 - site_at as i64, 1, lazy_rel(elf, w.got_slot, site_at)),
            r => (r as i64 - site_at as i64, 0, 0),
        };
        wrap_sites.push((
            site_at,
            WrapSite {
                config_rel: config as i64 - site_at as i64,
                real_rel,
                indirect,
                func: w.func,
                point: p.id,
                lazy_rel: lazy,
            },
        ));
        let target = c.code(plan, PieceKind::WrapThunk { point: i, site: site_at, real }, &t)?;
        thunk_of.insert(p.id, target);
        if p.window_len > 0 {
            sites.push(Site { address: p.address, len: p.window_len, tactic: p.tactic, target });
        }
    }
    t.wrap_thunks = plan.wrap_slots.iter().filter_map(|(&slot, id)| Some((slot, *thunk_of.get(id)?))).collect();
    let mut wrap_calls = plan
        .wrap_sites
        .iter()
        .map(|x| {
            let target = *thunk_of
                .get(&x.point)
                .ok_or_else(|| Error::Internal(format!("place: no thunk of point {}", x.point)))?;
            Ok(WrapCall { address: x.address(), len: x.window_len(), call: x.is_call(), target })
        })
        .collect::<Result<Vec<_>>>()?;
    // Exit trampolines an entry trampoline jumps into (`Redirect::in_entry`) come first.
    let mut early: BTreeMap<usize, u64> = BTreeMap::new();
    for (i, x) in plan.exits.iter().enumerate().filter(|(_, x)| x.redirects.iter().any(|r| r.in_entry)) {
        let target = c.code(plan, PieceKind::ExitTrampoline(i), &t)?;
        early.insert(i, target);
        for r in x.redirects.iter().filter(|r| r.in_entry) {
            t.entry_redirects.insert(r.jump, codegen::exit_copy_at(plan, i, r.to, target, &t)?);
        }
    }
    c.encode_ahead(plan, &per_point_pieces(plan), &t);
    let mut jump_sites = Vec::new();
    for (i, p) in plan.points.iter().enumerate() {
        if p.import.is_some() || p.wrap.is_some() {
            continue; // an import patches nothing itself: its call sites below
        }
        if codegen::calls_only(p, plan.entry_exits.get(&p.id).copied()) {
            c.align(codegen::CALLS_ALIGN);
        }
        let target = c.code(plan, PieceKind::Trampoline(i), &t)?;
        match plan.entry_slots.get(&p.address) {
            // A `jmp rel8` entry: its slot (written after the windows whose tail it may lie in)
            // leads to the trampoline.
            Some(&slot) => {
                sites.push(Site { address: p.address, len: p.window_len, tactic: Tactic::Rel8Slot, target: slot });
                jump_sites.push(Site { address: slot, len: JMP_LEN, tactic: Tactic::Window, target });
            }
            None => sites.push(Site { address: p.address, len: p.window_len, tactic: p.tactic, target }),
        }
        entry_jump_sites(plan, i, &mut c, &t, &mut jump_sites)?;
    }
    // Runs moved out to make slots: before the exits, whose slots may lie in their tails.
    for (i, w) in plan.slot_windows.iter().enumerate() {
        let target = c.code(plan, PieceKind::SlotWindow(i), &t)?;
        let (address, len) = w.patch();
        sites.push(Site { address, len, tactic: Tactic::Window, target });
    }
    // After every entry window and slot window: a slot may lie in the tail of either.
    sites.append(&mut jump_sites);
    for (i, x) in plan.exits.iter().enumerate() {
        if x.tactic == Tactic::EntryExit {
            continue; // the entry trampoline runs it
        }
        let target = match early.get(&i) {
            Some(&target) => target,
            None => c.code(plan, PieceKind::ExitTrampoline(i), &t)?,
        };
        if x.tactic == Tactic::Retarget {
            for &(j, len) in &x.retargets {
                sites.push(Site { address: j, len, tactic: Tactic::Retarget, target });
            }
            continue;
        }
        // Jumps into the run lead to the trampoline's copy of their target, a rel8 one through
        // its slot.
        for (ri, r) in x.redirects.iter().enumerate() {
            let copy = codegen::exit_copy_at(plan, i, r.to, target, &t)?;
            match r.slot {
                _ if r.in_entry => {} // the entry trampoline's copy of the jump leads there
                // A jump table's entry gets the copy's offset from what the table adds.
                _ if r.table.is_some() => {
                    let add = r.table.unwrap_or_default();
                    let word = i32::try_from(copy as i64 - add as i64).map_err(|_| {
                        Error::NoRoom(format!("jump table entry 0x{:x}: trampoline out of reach", r.jump))
                    })?;
                    sites.push(Site { address: r.jump, len: r.len, tactic: Tactic::TableJumps, target: word as u64 });
                }
                _ if !r.window.is_empty() => {
                    let kind = PieceKind::JumpWindow { exit: i, redirect: ri, copy };
                    let piece = c.code(plan, kind, &t)?;
                    let (address, len) = r.patch();
                    sites.push(Site { address, len, tactic: Tactic::Window, target: piece });
                }
                Some(slot) => {
                    // Jumps to one target in reach of one slot share it.
                    if !x.redirects[..ri].iter().any(|o| o.slot == Some(slot)) {
                        sites.push(Site { address: slot, len: JMP_LEN, tactic: Tactic::Window, target: copy });
                    }
                    sites.push(Site { address: r.jump, len: r.len, tactic: Tactic::Retarget, target: slot });
                }
                None => sites.push(Site { address: r.jump, len: r.len, tactic: Tactic::Retarget, target: copy }),
            }
        }
        // The exit's own window with a slot is a `jmp rel8`, whatever its tactic.
        let tactic = if x.slot.is_some() { Tactic::Rel8Slot } else { x.tactic };
        match x.slot {
            // The slot (after the window whose tail it may lie in) leads to the trampoline,
            // the exit's `jmp rel8` to the slot.
            Some(slot) => {
                sites.push(Site { address: slot, len: JMP_LEN, tactic: Tactic::Window, target });
                sites.push(Site { address: x.address, len: x.window_len, tactic, target: slot });
            }
            None if x.window_len == 0 => {} // only jumps enter the run: nothing patched there
            None => sites.push(Site { address: x.address, len: x.window_len, tactic, target }),
        }
    }
    for (i, x) in plan.import_sites.iter().enumerate() {
        let target = c.code(plan, PieceKind::ImportTrampoline(i), &t)?;
        wrap_calls.push(WrapCall { address: x.address(), len: x.window_len(), call: true, target });
    }
    let n_traps = sites.iter().filter(|s| s.tactic == Tactic::Trap).count() as u64;
    c.align(8);
    let trap_table = c.take(n_traps * 16);
    c.align(8);
    let eh_frame = c.base + c.len;

    Ok(Placement {
        data_segment: *last,
        state,
        control,
        control_len,
        rw_end,
        phdr_slot,
        n_phdrs,
        moved_phdrs,
        seg_vaddr,
        seg_offset,
        config,
        meta,
        gates,
        info,
        names,
        name,
        image,
        targets: t,
        entry_stub,
        trap_stub,
        calibration,
        trampolines,
        pieces: c.pieces,
        code: c.code,
        shapes: c.shapes,
        wrap_sites,
        sites,
        wrap_calls,
        trap_table,
        eh_frame,
    })
}

/// The entry tails of point `i` whose window holds branch targets (`Plan::entry_jumps`), one
/// per target, and the sites of the jumps that lead there: a rel32 jump's displacement, a
/// rel8 one's slot (shared by jumps to one target in its reach) or its own window.
fn entry_jump_sites(plan: &Plan, i: usize, c: &mut Cursor, t: &Targets, sites: &mut Vec<Site>) -> Result<()> {
    let Some(redirects) = plan.entry_jumps.get(&plan.points[i].id) else { return Ok(()) };
    let mut tails: BTreeMap<u64, u64> = BTreeMap::new();
    for (ri, r) in redirects.iter().enumerate() {
        let copy = match tails.get(&r.to) {
            Some(&copy) => copy,
            None => {
                let copy = c.code(plan, PieceKind::EntryTail { point: i, to: r.to }, t)?;
                tails.insert(r.to, copy);
                copy
            }
        };
        match r.slot {
            _ if !r.window.is_empty() => {
                let piece = c.code(plan, PieceKind::EntryJumpWindow { point: i, redirect: ri, copy }, t)?;
                let (address, len) = r.patch();
                sites.push(Site { address, len, tactic: Tactic::Window, target: piece });
            }
            Some(slot) => {
                if !redirects[..ri].iter().any(|o| o.slot == Some(slot)) {
                    sites.push(Site { address: slot, len: JMP_LEN, tactic: Tactic::Window, target: copy });
                }
                sites.push(Site { address: r.jump, len: r.len, tactic: Tactic::Retarget, target: slot });
            }
            None => sites.push(Site { address: r.jump, len: r.len, tactic: Tactic::Retarget, target: copy }),
        }
    }
    Ok(())
}

/// The index of a program header we may turn into the new PT_LOAD: a PT_NOTE duplicating
/// PT_GNU_PROPERTY (the kernel and ld.so read the property through PT_GNU_PROPERTY), or a
/// PT_NULL. `None`: the table must move.
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
