//! The block encoder of the code generation pass: the bytes iced-x86's `BlockEncoder` gives
//! for a block of instructions at an address, without its cost (issue 14: the rewriter spent
//! most of its time in `BlockEncoder`, which boxes every instruction, encodes each at least
//! twice and allocates on every call, for pieces whose instructions are nearly all alike).
//!
//! Every piece the rewriter generates is a short list of instructions most of which recur in
//! every piece of its kind (`push rax`, the thread check, the gate test with another gate): a
//! per-thread table keeps the encoding of each instruction *shape* once (an instruction
//! without RIP-relative operand or branch as it is; a RIP-relative one with its displacement
//! 0; a branch with its target 0, in its short and near forms) with the offset of the field
//! that varies. A block is then laid out from those sizes and written by copying the bytes
//! and patching the fields: a template per instruction rather than per piece, so the
//! displaced program instructions, which differ from piece to piece, take the same path, and
//! no piece kind (nor a change of what a piece does) needs a template of its own.
//!
//! The layout is `BlockEncoder`'s own algorithm, step for step (iced-x86 1.22
//! `block_enc`): every branch starts at its longest size, then up to five passes walk the
//! block, each branch taking its short form when the target is within a rel8 of it (a
//! target further on counted as if the bytes gained so far in the pass were already gone),
//! its near form otherwise; the targets are where the last pass put them. Whatever that
//! algorithm would do differently from plain rel8/rel32 forms (a branch or RIP-relative
//! operand out of a rel32's reach, which it turns into an indirect branch or an EIP-relative
//! operand; `loop`/`jrcxz`/`xbegin` and 16/32-bit branch forms; an instruction the encoder
//! refuses) is left to `BlockEncoder` itself: [`encode`] returns `None` and the caller runs
//! it. Unit tests compare the two on every piece kind at many addresses, and under `cfg(test)`
//! every block is encoded both ways.

use iced_x86::{Code, Encoder, Instruction, OpKind, Register};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::LABEL_BASE;

/// `IcedConstants::MAX_INSTRUCTION_LENGTH`: a near branch whose rel8 distance is within this
/// many instructions' worth may still become short in a later pass.
const MAX_INSTRUCTION_LENGTH: i64 = 15;

/// The size `BlockEncoder` starts an indirect-capable branch at in 64-bit code
/// (`CALL_OR_JMP_POINTER_DATA_INSTRUCTION_SIZE64`, and 2 more for a `jcc`).
const POINTER_BRANCH: u32 = 6;

/// One instruction shape's encoding.
enum Shape {
    /// No field that depends on the address: these bytes anywhere.
    Fixed(Vec<u8>),
    /// A RIP-relative memory operand: the bytes with disp32 at `disp`.
    RipRel { bytes: Vec<u8>, disp: u8 },
    /// `jcc`/`jmp`: the short form (rel8 at its end) and the near form (rel32 at `near_imm`).
    Branch { short: Vec<u8>, near: Vec<u8>, near_imm: u8, jcc: bool },
    /// `call rel32`: rel32 at `imm`.
    Call { bytes: Vec<u8>, imm: u8 },
}

thread_local! {
    /// Shapes seen on this thread (a few hundred per program: the pieces' own instructions,
    /// and the displaced ones as they recur), and the scratch space of a block.
    static SHAPES: RefCell<Shapes> = RefCell::new(Shapes {
        enc: Encoder::new(64),
        index: HashMap::default(),
        all: Vec::new(),
        items: Vec::new(),
        ips: Vec::new(),
        at: Vec::new(),
    });
}

/// The shape table of a thread, and the scratch space of [`encode_with`].
struct Shapes {
    enc: Encoder,
    /// Normalised instruction → its shape in `all`.
    index: HashMap<Key, u32, BuildHasherDefault<Fx>>,
    all: Vec<Shape>,
    items: Vec<Item>,
    ips: Vec<u64>,
    /// Label offset ([`LABEL_BASE`]) → index of the instruction there + 1 (0: none).
    at: Vec<u32>,
}

/// A multiply-rotate hasher for the shape table (the standard SipHash cost a tenth of the
/// rewrite; nothing here needs resistance to chosen keys).
#[derive(Default)]
pub(super) struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        // Fold the high bits down: a table indexes by the low ones, which a multiply leaves
        // depending on the low bits of the input only (the templates' derived keys).
        self.0 ^ (self.0 >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// A normalised instruction as the shape table's key: equal as instructions are, hashed from
/// a few of the fields that equality compares (`Instruction`'s own hash feeds every field to
/// the hasher one by one, which cost more than the rest of the lookup).
#[derive(PartialEq, Eq)]
struct Key(Instruction);

impl std::hash::Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let x = &self.0;
        let regs = u64::from(x.op0_register() as u8)
            | u64::from(x.op1_register() as u8) << 8
            | u64::from(x.memory_base() as u8) << 16
            | u64::from(x.memory_index() as u8) << 24;
        let a = u64::from(x.code() as u16) | regs << 16;
        let b = x.memory_displacement64() ^ u64::from(x.immediate32()).rotate_left(29);
        // One folded 128-bit product: every input bit reaches the low bits the table indexes
        // by (the hasher's own step carries low bits upwards only).
        let m = u128::from(a ^ 0x9e37_79b9_7f4a_7c15) * u128::from(b ^ 0xd6e8_feb8_6659_fd93);
        h.write_u64(m as u64 ^ (m >> 64) as u64);
    }
}

/// How far the shape table may grow before it is emptied (displaced instructions of a large
/// program are mostly unique: their shapes are not worth keeping forever).
const MAX_SHAPES: usize = 1 << 14;

/// Where a branch leads.
#[derive(Clone, Copy)]
enum Target {
    /// The instruction at this index of the block.
    In(usize),
    /// An address outside the block.
    Out(u64),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// Not yet chosen (the initial, longest size).
    Unset,
    Short,
    Near,
}

/// One instruction of the block being laid out.
struct Item {
    shape: u32,
    size: u32,
    done: bool,
    form: Form,
    target: Target,
    /// The RIP-relative operand's address.
    mem: u64,
}

/// Encode `ins` at `rip` exactly as `BlockEncoder::encode(64, …, NONE)` would; `None` where
/// this encoder does not follow it (see the module documentation).
pub(super) fn encode(ins: &[Instruction], rip: u64) -> Option<Vec<u8>> {
    let out = SHAPES.with(|s| {
        let shapes = &mut *s.borrow_mut();
        if shapes.all.len() > MAX_SHAPES {
            shapes.index.clear();
            shapes.all.clear();
        }
        encode_with(shapes, ins, rip)
    });
    #[cfg(test)]
    if out.is_none() {
        LEFT_TO_ICED.with(|n| n.set(n.get() + 1));
    }
    out
}

#[cfg(test)]
thread_local! {
    /// Blocks this thread left to `BlockEncoder` (tests check the fast path was taken).
    pub(super) static LEFT_TO_ICED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn encode_with(shapes: &mut Shapes, ins: &[Instruction], rip: u64) -> Option<Vec<u8>> {
    // Instructions by IP (the block's labels, a few consecutive numbers from LABEL_BASE): a
    // branch to one of them stays in the block.
    let mut at = std::mem::take(&mut shapes.at);
    at.clear();
    for (i, x) in ins.iter().enumerate() {
        let k = usize::try_from(x.ip().checked_sub(LABEL_BASE)?).ok().filter(|&k| k < 1 << 16)?;
        if at.len() <= k {
            at.resize(k + 1, 0);
        }
        if at[k] != 0 {
            return None; // BlockEncoder refuses two instructions at one IP
        }
        at[k] = i as u32 + 1;
    }
    let find = |ip: u64| {
        let k = usize::try_from(ip.wrapping_sub(LABEL_BASE)).ok()?;
        at.get(k).copied().filter(|&i| i != 0).map(|i| i as usize - 1)
    };
    let mut items = std::mem::take(&mut shapes.items);
    items.clear();
    let mut ips = std::mem::take(&mut shapes.ips);
    ips.clear();
    let out = layout(shapes, ins, rip, &find, &mut items, &mut ips);
    shapes.at = at;
    shapes.items = items;
    shapes.ips = ips;
    out
}

fn layout(
    shapes: &mut Shapes,
    ins: &[Instruction],
    rip: u64,
    find: &dyn Fn(u64) -> Option<usize>,
    items: &mut Vec<Item>,
    ips: &mut Vec<u64>,
) -> Option<Vec<u8>> {
    for x in ins {
        let (shape, target, mem) = shape_of(shapes, x)?;
        let target = match target {
            Some(t) => match find(t) {
                Some(i) => Target::In(i),
                None => Target::Out(t),
            },
            None => Target::Out(0),
        };
        let s = &shapes.all[shape as usize];
        if matches!(s, Shape::RipRel { .. }) && find(mem).is_some() {
            return None; // a RIP-relative operand into the block: not what pieces do
        }
        let size = match s {
            Shape::Fixed(b) => b.len() as u32,
            // BlockEncoder sizes it EIP-relative first: one address-size prefix more.
            Shape::RipRel { bytes, .. } => bytes.len() as u32 + 1,
            Shape::Branch { near, jcc, .. } => (near.len() as u32).max(POINTER_BRANCH + if *jcc { 2 } else { 0 }),
            Shape::Call { bytes, .. } => (bytes.len() as u32).max(POINTER_BRANCH),
        };
        let done = matches!(s, Shape::Fixed(_));
        items.push(Item { shape, size, done, form: Form::Unset, target, mem });
    }

    // The initial addresses, then BlockEncoder's passes.
    let mut ip = rip;
    for it in items.iter() {
        ips.push(ip);
        ip = ip.wrapping_add(u64::from(it.size));
    }
    for _ in 0..5 {
        let mut updated = false;
        let mut gained = 0u64;
        let mut ip = rip;
        for i in 0..items.len() {
            ips[i] = ip;
            if !items[i].done {
                let old = items[i].size;
                optimize(&shapes.all, &mut items[i], ip, ips, i, gained)?;
                let new = items[i].size;
                if new < old {
                    gained += u64::from(old - new);
                    updated = true;
                }
            }
            ip = ip.wrapping_add(u64::from(items[i].size));
        }
        if !updated {
            break;
        }
    }

    // Write every instruction at its place, with its fields.
    let mut out = Vec::with_capacity(items.iter().map(|it| it.size as usize).sum());
    let mut ip = rip;
    for it in items.iter() {
        let start = out.len();
        let target = match it.target {
            Target::In(k) => ips[k],
            Target::Out(a) => a,
        };
        let rel = |end: u64, to: u64| to.wrapping_sub(end) as i64;
        match &shapes.all[it.shape as usize] {
            Shape::Fixed(b) => out.extend_from_slice(b),
            Shape::RipRel { bytes, disp } => {
                let d = i32::try_from(rel(ip.wrapping_add(bytes.len() as u64), it.mem)).ok()?;
                out.extend_from_slice(bytes);
                out[start + *disp as usize..start + *disp as usize + 4].copy_from_slice(&d.to_le_bytes());
            }
            Shape::Branch { short, near, near_imm, .. } => match it.form {
                Form::Short => {
                    let d = i8::try_from(rel(ip.wrapping_add(short.len() as u64), target)).ok()?;
                    out.extend_from_slice(short);
                    *out.last_mut()? = d as u8;
                }
                Form::Near => {
                    let d = i32::try_from(rel(ip.wrapping_add(near.len() as u64), target)).ok()?;
                    out.extend_from_slice(near);
                    let at = start + *near_imm as usize;
                    out[at..at + 4].copy_from_slice(&d.to_le_bytes());
                }
                Form::Unset => return None,
            },
            Shape::Call { bytes, imm } => {
                let d = i32::try_from(rel(ip.wrapping_add(bytes.len() as u64), target)).ok()?;
                out.extend_from_slice(bytes);
                out[start + *imm as usize..start + *imm as usize + 4].copy_from_slice(&d.to_le_bytes());
            }
        }
        if out.len() - start != it.size as usize {
            return None; // BlockEncoder reports an internal error here
        }
        ip = ip.wrapping_add(u64::from(it.size));
    }
    Some(out)
}

/// One pass's decision for a branch or RIP-relative instruction at `ip` (`BlockEncoder`'s
/// `try_optimize` of `JccInstr`, `JmpInstr`, `CallInstr`, `IpRelMemOpInstr`); `None` where it
/// would choose a form this encoder leaves to it.
fn optimize(all: &[Shape], it: &mut Item, ip: u64, ips: &[u64], me: usize, gained: u64) -> Option<()> {
    let (addr, in_block) = match it.target {
        Target::In(k) => (if k == me { ip } else { ips[k] }, true),
        Target::Out(a) => (a, false),
    };
    // A target further on in the block is counted as if the bytes gained in this pass were gone.
    let correct = |diff: i64| if in_block && diff >= 0 { diff - gained as i64 } else { diff };
    let fits32 = |d: i64| i32::try_from(d).is_ok();
    match &all[it.shape as usize] {
        Shape::Fixed(_) => {}
        Shape::RipRel { bytes, .. } => {
            let diff = it.mem.wrapping_sub(ip.wrapping_add(bytes.len() as u64)) as i64;
            if !fits32(diff) {
                return None; // BlockEncoder makes it EIP-relative or fails
            }
            it.size = bytes.len() as u32;
            it.done = true;
        }
        Shape::Call { bytes, .. } => {
            if !in_block && !fits32(addr.wrapping_sub(ip.wrapping_add(bytes.len() as u64)) as i64) {
                return None; // through a pointer
            }
            it.size = bytes.len() as u32;
            it.done = true;
        }
        Shape::Branch { short, near, .. } => {
            if it.form == Form::Short {
                it.done = true;
                return Some(());
            }
            let mut diff = correct(addr.wrapping_sub(ip.wrapping_add(short.len() as u64)) as i64);
            if i8::try_from(diff).is_ok() {
                it.form = Form::Short;
                it.size = short.len() as u32;
                it.done = true;
                return Some(());
            }
            if !in_block {
                diff = addr.wrapping_sub(ip.wrapping_add(near.len() as u64)) as i64;
                if !fits32(diff) {
                    return None; // through a pointer
                }
            }
            if !(MAX_INSTRUCTION_LENGTH * i64::from(i8::MIN)..=MAX_INSTRUCTION_LENGTH * i64::from(i8::MAX))
                .contains(&diff)
            {
                it.done = true;
            }
            it.form = Form::Near;
            it.size = near.len() as u32;
        }
    }
    Some(())
}

/// The shape of `x`, its branch target and its RIP-relative operand's address; `None` for an
/// instruction this encoder leaves to `BlockEncoder`.
fn shape_of(shapes: &mut Shapes, x: &Instruction) -> Option<(u32, Option<u64>, u64)> {
    let code = x.code();
    let branch_op =
        x.op_kinds().any(|k| matches!(k, OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64));
    let (key, target, mem) = if branch_op {
        let plain = x.op_count() == 1 && x.op0_kind() == OpKind::NearBranch64;
        let ok = plain && (code.is_jcc_short_or_near() || code.is_jmp_short_or_near() || code == Code::Call_rel32_64);
        if !ok {
            return None; // loop, jrcxz, xbegin, 16/32-bit forms
        }
        let mut k = *x;
        k.set_near_branch64(0);
        (k, Some(x.near_branch_target()), 0)
    } else if x.is_ip_rel_memory_operand() && x.op_kinds().any(|k| k == OpKind::Memory) {
        let mut k = *x;
        k.set_memory_base(Register::RIP);
        k.set_memory_displacement64(0);
        (k, None, x.ip_rel_memory_address())
    } else {
        (*x, None, 0)
    };
    let key = Key(key);
    if let Some(&s) = shapes.index.get(&key) {
        return Some((s, target, mem));
    }
    let shape = new_shape(&mut shapes.enc, &key.0, branch_op)?;
    let id = shapes.all.len() as u32;
    shapes.all.push(shape);
    shapes.index.insert(key, id);
    Some((id, target, mem))
}

/// Encode a shape (`key` normalised by [`shape_of`]) once.
fn new_shape(enc: &mut Encoder, key: &Instruction, branch: bool) -> Option<Shape> {
    let mut once = |x: &Instruction| -> Option<(Vec<u8>, iced_x86::ConstantOffsets)> {
        enc.encode(x, 0).ok()?;
        Some((enc.take_buffer(), enc.get_constant_offsets()))
    };
    if !branch {
        let (bytes, co) = once(key)?;
        if key.is_ip_rel_memory_operand() && key.op_kinds().any(|k| k == OpKind::Memory) {
            if co.displacement_size() != 4 {
                return None;
            }
            return Some(Shape::RipRel { bytes, disp: co.displacement_offset() as u8 });
        }
        return Some(Shape::Fixed(bytes));
    }
    let code = key.code();
    if code == Code::Call_rel32_64 {
        let (bytes, co) = once(key)?;
        return (co.immediate_size() == 4).then(|| Shape::Call { bytes, imm: co.immediate_offset() as u8 });
    }
    let mut s = *key;
    s.set_code(code.as_short_branch());
    let (short, sco) = once(&s)?;
    s.set_code(code.as_near_branch());
    let (near, nco) = once(&s)?;
    // The short form's rel8 is its last byte (iced's `Short` encoding, patched in place).
    if sco.immediate_size() != 1 || sco.immediate_offset() + 1 != short.len() || nco.immediate_size() != 4 {
        return None;
    }
    Some(Shape::Branch { short, near, near_imm: nco.immediate_offset() as u8, jcc: code.is_jcc_short_or_near() })
}
