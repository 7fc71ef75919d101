//! Piece templates: the per-point pieces (entry, exit and import call-site trampolines, the
//! bulk of the code) come in a few shapes, and two pieces of one shape differ only in a
//! handful of fixed-size fields. The layout pass encodes them all at one provisional address
//! ([`super::Movable`]); there a piece whose shape was seen before is a copy of that shape's
//! bytes with its own values written into the fields, instead of being built from
//! `Instruction`s, encoded and decoded again.
//!
//! **A piece's shape** ([`Key`]) is its form (entry, exit, tail-call exit, import call site),
//! the point's metric bits, whether the last displaced call is emulated, which displaced
//! instruction is an exit (an entry with the entry+exit tactic), and its program
//! instructions (the displaced ones, or the import call) with their branch targets and
//! RIP-relative addresses taken out. Everything else a trampoline holds is the same for every
//! piece of the program (the stubs and timer routines it calls, the thread check).
//!
//! **Its values** are what the shape leaves out: the point's gate address, call counter offset
//! and id, and for each program instruction its branch target or RIP-relative address and the
//! address after it (where the copy jumps back, or an emulated call's return address); a list
//! of `u64` in the order [`GATE`], [`COUNTER`], [`ID`], then [`target_of`] and [`next_of`] of
//! each program instruction.
//!
//! **A template** is made by encoding the piece with every value replaced by a *sentinel*: an
//! address 512 MiB past the piece (each value its own, within a rel32's reach and far from
//! every real target, so every branch to it is near) or an unlikely 32-bit number (id,
//! counter). Decoding those bytes finds each field: a rel32 or RIP-relative disp32 whose target
//! is a sentinel address, an imm32 or absolute disp32 holding a sentinel number. Fields with
//! any other value (the stubs' addresses) are the same in every piece. A piece of that shape is
//! then the template's bytes with its own values written into the fields (a rel32 / disp32
//! relative to the end of its instruction, a 32-bit number as it is).
//!
//! **What a template cannot represent** goes the usual way ([`super::piece`]): a piece whose
//! branch out of it would be short (its target within a rel8's reach) or whose displacement
//! does not fit 32 bits (the encoder's choices depend on the distance there), a shape with a
//! field the sentinels do not account for, and the rare pieces whose displaced code is
//! redirected (wrapped imports' GOT calls, entry jumps into exit windows). A shape gets a
//! template only the second time it is seen on a thread, and that piece is encoded both ways:
//! if the two differ in any byte, field or CFI shape, the shape never uses its template. So
//! every piece is byte for byte what [`super::piece`] gives at that address (tests below,
//! over every per-point piece of a real program).

use super::encode::Fx;
use super::{
    exit_trampoline, import_trampoline, movable_fields, tail_call_trampoline, trampoline, Field, Movable, PieceKind,
    Targets, TrampolineEnv,
};
use crate::error::Result;
use crate::plan::{ExitKind, Plan, Point};
use crate::unwind::ShapeIds;
use iced_x86::{Decoder, DecoderOptions, Instruction, OpKind};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Where the sentinel addresses start, past the provisional address: within a rel32's reach
/// and past the end of any new segment.
const SENTINEL_BASE: u64 = 0x2000_0000;
/// The room of each sentinel address (an address after an instruction is the sentinel of its
/// address plus its length).
const SENTINEL_STEP: u64 = 0x10_0000;
/// The sentinel point id and counter offset (both fit an `i32`, as real ones do).
const SENTINEL_ID: u32 = 0x6b1d_5a3c;
const SENTINEL_COUNTER: u32 = 0x3c5a_1d6b;
/// Program instructions a shape may have (a window is at most a few).
const MAX_PROGRAM: usize = 16;
/// Shapes a thread keeps at most (bounding the table's memory).
const MAX_SHAPES: usize = 1 << 14;

/// Index of a value in a piece's values: the gate, the counter, the id, then per program
/// instruction `k` its target (`3 + 2k`) and the address after it (`4 + 2k`).
const GATE: usize = 0;
const COUNTER: usize = 1;
const ID: usize = 2;

fn target_of(k: usize) -> usize {
    3 + 2 * k
}

fn next_of(k: usize) -> usize {
    4 + 2 * k
}

/// The piece's form: which trampoline builds it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Form {
    Entry,
    Exit,
    TailCall,
    Import,
}

/// A per-point piece taken apart into its shape's inputs ([`Key`]) and its values.
struct Parts<'a> {
    form: Form,
    /// The entry point (its bits, and for an entry the rest of the trampoline's input).
    point: &'a Point,
    /// The exit, for [`Form::Exit`] and [`Form::TailCall`].
    exit: Option<&'a crate::plan::Exit>,
    /// The displaced instructions, or the import call.
    program: &'a [Instruction],
    /// For an entry: the index in `program` of an exit instruction it holds (the entry+exit
    /// tactic, [`crate::plan::Plan::entry_exits`]).
    exit_at: Option<usize>,
    id: u32,
}

impl<'a> Parts<'a> {
    /// `kind` taken apart; `None` for a kind or a piece a template does not represent.
    /// `tail_sites`: the sites of the tail jumps into imports that are called
    /// ([`crate::plan::TailImport`]), built on first use.
    fn of(
        plan: &'a Plan,
        kind: PieceKind,
        t: &Targets,
        tail_sites: &mut Option<TailSites>,
    ) -> Result<Option<Parts<'a>>> {
        Ok(match kind {
            PieceKind::Trampoline(i) => {
                let Some(p) = plan.points.get(i) else { return Ok(None) };
                if super::redirect_wrapped(&p.displaced, &t.wrap_thunks)?.is_some()
                    || super::redirect_entry_jumps(&p.displaced, &t.entry_redirects).is_some()
                {
                    return Ok(None);
                }
                let exit_at = match plan.entry_exits.get(&p.id) {
                    None => None,
                    // Not in the window: `trampoline` reports it.
                    Some(&site) => match p.displaced.iter().position(|d| d.ip() == site) {
                        None => return Ok(None),
                        r => r,
                    },
                };
                Some(Parts { form: Form::Entry, point: p, exit: None, program: &p.displaced, exit_at, id: p.id })
            }
            PieceKind::ExitTrampoline(i) => {
                let Some(x) = plan.exits.get(i) else { return Ok(None) };
                let Some(p) = plan.points.get(x.point as usize) else { return Ok(None) };
                if super::redirect_wrapped(&x.displaced, &t.wrap_thunks)?.is_some() {
                    return Ok(None);
                }
                // As `piece` chooses (only a tail jump can be a tail call into an import).
                let tail = x.kind == ExitKind::TailJump
                    && tail_sites
                        .get_or_insert_with(|| {
                            plan.tail_imports.iter().filter(|ti| ti.called).map(|ti| ti.site).collect()
                        })
                        .contains(&x.site);
                let form = if tail { Form::TailCall } else { Form::Exit };
                Some(Parts { form, point: p, exit: Some(x), program: &x.displaced, exit_at: None, id: x.point })
            }
            PieceKind::ImportTrampoline(i) => {
                let Some(x) = plan.import_sites.get(i) else { return Ok(None) };
                let Some(p) = plan.points.get(x.point as usize) else { return Ok(None) };
                Some(Parts {
                    form: Form::Import,
                    point: p,
                    exit: None,
                    program: std::slice::from_ref(&x.call),
                    exit_at: None,
                    id: p.id,
                })
            }
            _ => None,
        })
    }

    /// The piece's values into `v` (in [`GATE`] … [`next_of`] order).
    fn values(&self, t: &Targets, v: &mut Vec<u64>) {
        let env = t.trampoline_env(self.id);
        v.clear();
        v.resize(next_of(self.program.len()) - 1, 0);
        v[GATE] = env.gate;
        v[COUNTER] = u64::from(env.counter);
        v[ID] = u64::from(self.id);
        for (k, ins) in self.program.iter().enumerate() {
            v[target_of(k)] = target(ins).unwrap_or(0);
            v[next_of(k)] = ins.next_ip();
        }
    }

    /// The piece encoded at `at` with `program` in place of its own, for point `id` with
    /// `env` (the sentinels, or its own values).
    fn encode(&self, program: &[Instruction], id: u32, env: TrampolineEnv, at: u64) -> Result<Vec<u8>> {
        let point = |displaced: Vec<Instruction>| Point { id, displaced, ..self.point.clone() };
        match (self.form, self.exit) {
            (Form::Entry, _) => {
                let exit = self.exit_at.and_then(|r| program.get(r)).map(Instruction::ip);
                trampoline(&point(program.to_vec()), env, at, exit)
            }
            (Form::Import, _) => import_trampoline(&program[0], &point(Vec::new()), env, at),
            (Form::Exit, Some(x)) => {
                exit_trampoline(&crate::plan::Exit { point: id, displaced: program.to_vec(), ..x.clone() }, env, at)
            }
            (Form::TailCall, Some(x)) => tail_call_trampoline(
                &crate::plan::Exit { point: id, displaced: program.to_vec(), ..x.clone() },
                env,
                at,
            ),
            (_, None) => Err(crate::error::Error::Internal("codegen: an exit piece without its exit".into())),
        }
    }
}

/// The address an instruction refers to that a template takes out of its shape: a near
/// branch's target or a RIP-relative operand's address.
fn target(ins: &Instruction) -> Option<u64> {
    if ins.op_count() > 0 && ins.op0_kind() == OpKind::NearBranch64 {
        Some(ins.near_branch_target())
    } else if ins.is_ip_rel_memory_operand() {
        Some(ins.ip_rel_memory_address())
    } else {
        None
    }
}

/// `ins` with its [`target`] set to `to`.
fn retarget(ins: &Instruction, to: u64) -> Instruction {
    let mut x = *ins;
    if x.op_count() > 0 && x.op0_kind() == OpKind::NearBranch64 {
        x.set_near_branch64(to);
    } else if x.is_ip_rel_memory_operand() {
        x.set_memory_displacement64(to);
    }
    x
}

type TailSites = std::collections::HashSet<u64, BuildHasherDefault<Fx>>;

/// A piece's shape: what two pieces with the same template have in common (module doc).
/// Equality is `Instruction`'s (which ignores the address and the length).
#[derive(Clone, PartialEq, Eq)]
struct Key {
    form: Form,
    bits: u8,
    emulate_call: bool,
    exit_at: Option<usize>,
    program: Vec<Instruction>,
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let exit_at = self.exit_at.map_or(0, |r| r as u64 + 1);
        h.write_u64(self.form as u64 | u64::from(self.bits) << 8 | u64::from(self.emulate_call) << 16 | exit_at << 24);
        for x in &self.program {
            // The fields that tell instructions apart most (`Instruction`'s own hash feeds
            // every field one by one, which costs more than the rest of the lookup).
            let regs = u64::from(x.op0_register() as u8)
                | u64::from(x.op1_register() as u8) << 8
                | u64::from(x.memory_base() as u8) << 16
                | u64::from(x.memory_index() as u8) << 24;
            h.write_u64(u64::from(x.code() as u16) | regs << 16);
            h.write_u64(x.memory_displacement64() ^ x.immediate64());
        }
    }
}

/// A field of a template.
#[derive(Clone, Copy, Debug)]
struct TField {
    /// Offset of the field in the piece.
    at: u32,
    /// Offset of the end of its instruction.
    end: u32,
    /// Which value goes in it (its index, [`GATE`] …); `None`: the same target in every piece.
    value: Option<u8>,
    /// For a constant field, its target.
    target: u64,
    kind: FieldKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FieldKind {
    /// rel32 / RIP-relative disp32 to the value; `may_shorten`: a jump or conditional branch,
    /// which the encoder makes short when its target is near.
    Relative { may_shorten: bool },
    /// The value's low 32 bits as they are (an imm32 or an absolute disp32).
    Absolute,
}

/// One shape's bytes and fields at the provisional address.
struct Template {
    at: u64,
    code: Vec<u8>,
    fields: Vec<TField>,
    /// The CFI shape id every piece of the shape has ([`crate::unwind::ShapeIds`]).
    shape: Option<u64>,
}

enum Entry {
    /// Seen once, encoded the usual way.
    Seen,
    Ready(Template),
    /// Its template disagreed with the usual encoding: always encoded the usual way.
    Refused,
}

/// The templates of one thread and its scratch space ([`Movable::with_templates`]).
#[derive(Default)]
pub struct Templates {
    shapes: HashMap<Key, Entry, BuildHasherDefault<Fx>>,
    key: Option<Key>,
    values: Vec<u64>,
    tail_sites: Option<TailSites>,
    /// The scratch buffer of [`Movable::new`].
    scratch: Vec<u8>,
    /// Pieces made from a template, and encoded the usual way (counted for tests).
    pub made: usize,
    pub encoded: usize,
}

impl Template {
    /// The template of `parts`' shape at `at`; `None` where the sentinels do not account for
    /// the bytes (a short field, a sentinel that is not found).
    fn new(parts: &Parts, at: u64, t: &Targets, ids: &ShapeIds, scratch: &mut Vec<u8>) -> Result<Option<Template>> {
        if parts.program.len() > MAX_PROGRAM {
            return Ok(None);
        }
        // The sentinel values, in the values' order.
        let base = at.wrapping_add(SENTINEL_BASE);
        let mut sentinels = vec![0; next_of(parts.program.len()) - 1];
        sentinels[GATE] = base;
        sentinels[COUNTER] = u64::from(SENTINEL_COUNTER);
        sentinels[ID] = u64::from(SENTINEL_ID);
        let mut program = Vec::with_capacity(parts.program.len());
        for (k, ins) in parts.program.iter().enumerate() {
            let to = base + SENTINEL_STEP * target_of(k) as u64;
            let mut x = retarget(ins, to);
            x.set_ip(base + SENTINEL_STEP * next_of(k) as u64);
            sentinels[target_of(k)] = to;
            sentinels[next_of(k)] = x.next_ip();
            program.push(x);
        }
        let env = TrampolineEnv { gate: base, counter: SENTINEL_COUNTER, ..t.trampoline_env(0) };
        let code = parts.encode(&program, SENTINEL_ID, env, at)?;
        scratch.clear();
        scratch.extend_from_slice(&code);
        let Some((moving, same_anywhere)) = movable_fields(&code, at, scratch) else { return Ok(None) };
        let shape = if same_anywhere { ids.id(scratch) } else { None };
        let relative = |v: u64| sentinels.iter().position(|&s| s == v).filter(|&j| j != COUNTER && j != ID);
        let mut fields: Vec<TField> = moving
            .iter()
            .map(|f| TField {
                at: f.at,
                end: f.end,
                value: relative(f.target).map(|j| j as u8),
                target: f.target,
                kind: FieldKind::Relative { may_shorten: f.may_shorten },
            })
            .collect();
        // The 32-bit numbers: an imm32 or an absolute disp32 holding the id or the counter.
        let mut d = Decoder::with_ip(64, &code, at, DecoderOptions::NONE);
        let mut ins = Instruction::default();
        let word = |off: usize| u32::from_le_bytes([code[off], code[off + 1], code[off + 2], code[off + 3]]);
        while d.can_decode() {
            d.decode_out(&mut ins);
            let start = (ins.ip() - at) as usize;
            let end = (start + ins.len()) as u32;
            let offsets = d.get_constant_offsets(&ins);
            let mut number = |off: usize, size: usize| {
                if size != 4 {
                    return;
                }
                let value = match word(start + off) {
                    SENTINEL_ID => ID,
                    SENTINEL_COUNTER => COUNTER,
                    _ => return,
                };
                let at = (start + off) as u32;
                fields.push(TField { at, end, value: Some(value as u8), target: 0, kind: FieldKind::Absolute });
            };
            let branch = ins.op_count() > 0
                && matches!(ins.op0_kind(), OpKind::NearBranch64 | OpKind::NearBranch32 | OpKind::NearBranch16);
            if offsets.has_displacement() && !ins.is_ip_rel_memory_operand() {
                number(offsets.displacement_offset(), offsets.displacement_size());
            }
            if offsets.has_immediate() && !branch {
                number(offsets.immediate_offset(), offsets.immediate_size());
            }
            if offsets.has_immediate2() {
                number(offsets.immediate_offset2(), offsets.immediate_size2());
            }
        }
        // A sentinel address left in a field the decoding did not see as one would be wrong
        // in every piece: the check against the usual encoding refuses the template then.
        Ok(Some(Template { at, code, fields, shape }))
    }

    /// The piece with `values` at `at` (the template's address), or `None` where the
    /// encoder's choices could differ from the template's (module doc).
    fn make(&self, kind: PieceKind, at: u64, values: &[u64]) -> Option<Movable> {
        if at != self.at {
            return None;
        }
        let mut code = self.code.clone();
        let mut moving = Vec::with_capacity(self.fields.len());
        for f in &self.fields {
            let value = match f.value {
                Some(j) => *values.get(j as usize)?,
                None => f.target,
            };
            let field = &mut code[f.at as usize..f.at as usize + 4];
            match f.kind {
                FieldKind::Relative { may_shorten } => {
                    let disp = value.wrapping_sub(at.wrapping_add(u64::from(f.end))) as i64;
                    if may_shorten && (-256..256).contains(&disp) {
                        return None;
                    }
                    field.copy_from_slice(&i32::try_from(disp).ok()?.to_le_bytes());
                    moving.push(Field { at: f.at, end: f.end, target: value, may_shorten });
                }
                FieldKind::Absolute => {
                    // Real ids and counters fit an `i32` as the sentinels do.
                    let v = i32::try_from(value).ok()?;
                    field.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        Some(Movable { kind, at, code, fields: Some(moving), shape: self.shape })
    }
}

impl Movable {
    /// [`Movable::new`], from the template of the piece's shape where `templates` has one
    /// (see the module doc): the same bytes, fields and shape id.
    pub fn with_templates(
        plan: &Plan,
        kind: PieceKind,
        at: u64,
        t: &Targets,
        ids: &ShapeIds,
        templates: &mut Templates,
    ) -> Result<Movable> {
        let Some(parts) = Parts::of(plan, kind, t, &mut templates.tail_sites)? else {
            templates.encoded += 1;
            return Movable::new(plan, kind, at, t, ids, &mut templates.scratch);
        };
        let mut key = templates.key.take().unwrap_or(Key {
            form: parts.form,
            bits: 0,
            emulate_call: false,
            exit_at: None,
            program: Vec::new(),
        });
        key.form = parts.form;
        key.bits = parts.point.bits;
        key.emulate_call = parts.form == Form::Entry && parts.point.emulate_call;
        key.exit_at = parts.exit_at;
        key.program.clear();
        key.program.extend(parts.program.iter().map(|x| retarget(x, 0)));
        parts.values(t, &mut templates.values);
        let made = match templates.shapes.get(&key) {
            Some(Entry::Ready(tpl)) => tpl.make(kind, at, &templates.values),
            _ => None,
        };
        if let Some(m) = made {
            templates.key = Some(key);
            templates.made += 1;
            return Ok(m);
        }
        templates.encoded += 1;
        let usual = Movable::new(plan, kind, at, t, ids, &mut templates.scratch)?;
        let seen = match templates.shapes.get(&key) {
            None => None,
            Some(Entry::Seen) => Some(true),
            Some(_) => Some(false),
        };
        match seen {
            Some(false) => templates.key = Some(key),
            None => {
                if templates.shapes.len() >= MAX_SHAPES {
                    templates.shapes.clear();
                }
                templates.shapes.insert(key, Entry::Seen);
            }
            Some(true) => {
                // The second piece of this shape: its template, checked against it.
                let tpl = Template::new(&parts, at, t, ids, &mut templates.scratch)?;
                let entry = match tpl {
                    Some(tpl) if tpl.make(kind, at, &templates.values).is_some_and(|m| m.same(&usual)) => {
                        Entry::Ready(tpl)
                    }
                    _ => Entry::Refused,
                };
                templates.shapes.insert(key, entry);
            }
        }
        Ok(usual)
    }

    /// Equal bytes, fields and shape id.
    fn same(&self, other: &Movable) -> bool {
        self.code == other.code && self.fields == other.fields && self.shape == other.shape && self.at == other.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Tactic;
    use crate::spec::Spec;

    /// Every per-point piece of a real program (sqlite3 where the machine has it, else pigz
    /// or ls), each made twice in program order with one thread's templates, is what
    /// [`Movable::new`] gives: the same bytes, fields and CFI shape id, with and without traps.
    #[test]
    fn every_piece_from_a_template_is_the_usual_one() {
        let bin =
            ["/usr/bin/sqlite3", "/usr/bin/pigz", "/usr/bin/ls"].into_iter().find(|b| std::path::Path::new(b).exists());
        let data = std::fs::read(bin.expect("a program to rewrite")).expect("read program");
        let spec = Spec::default_spec();
        for traps in [false, true] {
            let p = crate::plan_program(&data, &spec, traps).expect("plan");
            let contents = crate::place::SegmentData::new(&p, "p", None, &spec);
            let placed = crate::place::place(&p.elf, &p.plan, &contents).expect("place");
            let per_point = |k: &PieceKind| {
                matches!(k, PieceKind::Trampoline(_) | PieceKind::ExitTrampoline(_) | PieceKind::ImportTrampoline(_))
            };
            let kinds: Vec<PieceKind> = placed.pieces.iter().map(|x| x.kind).filter(per_point).collect();
            let at = placed.pieces.iter().find(|x| per_point(&x.kind)).expect("per-point pieces").at;
            let (ids, mut templates) = (ShapeIds::default(), Templates::default());
            for round in 0..2 {
                for &kind in &kinds {
                    let t = &placed.targets;
                    let made = Movable::with_templates(&p.plan, kind, at, t, &ids, &mut templates).expect("template");
                    let usual = Movable::new(&p.plan, kind, at, t, &ids, &mut Vec::new()).expect("usual");
                    assert!(made.same(&usual), "traps {traps}, round {round}: {kind:?} at 0x{at:x}");
                }
            }
            assert_eq!(templates.made + templates.encoded, 2 * kinds.len(), "traps {traps}");
            // Pieces come in a few shapes: most are copies (the second round all but those
            // whose shape was seen once, or whose template was refused).
            assert!(templates.made > kinds.len(), "traps {traps}: {} of {} made", templates.made, 2 * kinds.len());
        }
    }

    /// Two entry points of one shape (a RIP-relative load and a call, emulated), the second
    /// piece made from the template with its own gate, counter, id, load address, callee
    /// and return address.
    fn two_points() -> (Plan, Targets) {
        let code = [0x48, 0x8b, 0x05, 0x00, 0x20, 0x00, 0x00, 0xe8, 0xf4, 0x0f, 0x00, 0x00];
        let point = |id: u32, ip: u64| Point {
            id,
            function: 0,
            address: ip,
            window_len: 12,
            displaced: Decoder::with_ip(64, &code, ip, DecoderOptions::NONE).into_iter().collect(),
            emulate_call: true,
            tactic: Tactic::Window,
            bits: 0x7,
            wrap: None,
            import: None,
        };
        let plan =
            Plan { points: vec![point(0, 0x40_1000), point(1, 0x45_3000), point(2, 0x48_0000)], ..Plan::default() };
        let t = Targets {
            control: 0x60_0000,
            n_points: 3,
            tid_offset: 0x2d0,
            slow_stub: 0x70_0000,
            timer_enter: 0x70_0100,
            timer_exit: 0x70_0200,
            ..Targets::default()
        };
        (plan, t)
    }

    #[test]
    fn the_third_piece_of_a_shape_is_a_copy_with_its_own_values() {
        let (plan, t) = two_points();
        let (ids, mut templates) = (ShapeIds::default(), Templates::default());
        for i in 0..3 {
            let made = Movable::with_templates(&plan, PieceKind::Trampoline(i), 0x80_0000, &t, &ids, &mut templates);
            let usual = Movable::new(&plan, PieceKind::Trampoline(i), 0x80_0000, &t, &ids, &mut Vec::new());
            assert!(made.unwrap().same(&usual.unwrap()), "point {i}");
        }
        // The first two encoded (the second also makes the template and checks it), the third
        // copied.
        assert_eq!((templates.encoded, templates.made), (2, 1));
    }

    /// A piece whose branch out of it would be short at the provisional address (its callee
    /// right after it) is encoded the usual way, not copied.
    #[test]
    fn a_piece_with_a_near_target_is_encoded_not_copied() {
        let (plan, t) = two_points();
        let (ids, mut templates) = (ShapeIds::default(), Templates::default());
        let at = 0x48_1000 - 0x40; // the third point's callee (0x481000) within a rel8
        for i in 0..3 {
            let made = Movable::with_templates(&plan, PieceKind::Trampoline(i), at, &t, &ids, &mut templates);
            let usual = Movable::new(&plan, PieceKind::Trampoline(i), at, &t, &ids, &mut Vec::new());
            assert!(made.unwrap().same(&usual.unwrap()), "point {i}");
        }
        assert_eq!((templates.encoded, templates.made), (3, 0));
    }
}
