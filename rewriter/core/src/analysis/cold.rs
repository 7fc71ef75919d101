//! Telling cold parts (`f.cold`) from functions; see the module documentation of `analysis`.

use super::code::{decode_function, Code, EdgeKind};
use super::unwind::Fde;
use super::{Cand, CodeMap, FuncIndex, FunctionKind, Loc};
use crate::input::InputElf;
use iced_x86::{FlowControl, Instruction, Mnemonic};
use std::collections::HashMap;

/// Imports that never return.
const NORETURN_IMPORTS: [&str; 34] = [
    "abort",
    "exit",
    "_exit",
    "_Exit",
    "quick_exit",
    "thrd_exit",
    "pthread_exit",
    "__stack_chk_fail",
    "__assert_fail",
    "__assert_perror_fail",
    "__assert",
    "__fortify_fail",
    "__chk_fail",
    "__libc_fatal",
    "__libc_start_main",
    "err",
    "errx",
    "verr",
    "verrx",
    "longjmp",
    "siglongjmp",
    "_longjmp",
    "__longjmp_chk",
    "__cxa_throw",
    "__cxa_rethrow",
    "__cxa_bad_cast",
    "__cxa_bad_typeid",
    "__cxa_throw_bad_array_new_length",
    "__cxa_pure_virtual",
    "__cxa_deleted_virtual",
    "__cxa_call_terminate",
    "_Unwind_Resume",
    "_ZSt9terminatev",
    "_ZSt17rethrow_exceptionNSt15__exception_ptr13exception_ptrE",
];

pub(crate) fn is_noreturn_import(name: &str) -> bool {
    NORETURN_IMPORTS.contains(&name) || (name.starts_with("_ZSt") && name.contains("__throw_"))
}

/// For each candidate named `p.cold…`: the candidate named `p` (if several, one that jumps
/// into the part; else the first).
pub(crate) fn name_parents(cands: &[Cand], code: &Code, index: &FuncIndex) -> Vec<Option<usize>> {
    let mut out = vec![None; cands.len()];
    // Only names with `.cold` have a parent: the base names they look for, and the jumps into
    // them, are all that is collected (a program has 10^5 names and 10^6 edges, few cold).
    let cold: Vec<(usize, &str)> = cands
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let raw = c.raw_name.as_deref()?;
            Some((i, &raw[..raw.find(".cold")?]))
        })
        .collect();
    if cold.is_empty() {
        return out;
    }
    let mut by_name: HashMap<&str, Vec<usize>> = cold.iter().map(|&(_, base)| (base, Vec::new())).collect();
    for (i, c) in cands.iter().enumerate() {
        if let Some(v) = c.raw_name.as_deref().and_then(|n| by_name.get_mut(n)) {
            v.push(i);
        }
    }
    // `containing` answers only inside its function's range: an edge into no cold part's
    // range cannot be a jump into one.
    let ranges = super::Extents::new(cold.iter().map(|&(i, _)| (cands[i].address, cands[i].end())).collect());
    let mut jumpers: HashMap<usize, Vec<usize>> = HashMap::new();
    for e in code.edges.iter().filter(|e| ranges.contains(e.target)) {
        if let Some(j) = index.containing(e.target) {
            jumpers.entry(j).or_default().push(e.src);
        }
    }
    for (i, base) in cold {
        let Some(cand) = by_name.get(base) else { continue };
        let cand: Vec<usize> = cand.iter().copied().filter(|&p| p != i).collect();
        let jumped = jumpers.get(&i);
        out[i] =
            cand.iter().copied().find(|p| jumped.is_some_and(|js| js.contains(p))).or_else(|| cand.first().copied());
    }
    out
}

/// Whether `x` is a call to a function that never returns.
pub(crate) fn call_noreturn(
    x: &Instruction,
    index: &FuncIndex,
    noreturn: &[bool],
    plt: &HashMap<u64, &str>,
    got_names: &HashMap<u64, String>,
) -> bool {
    match x.flow_control() {
        FlowControl::Call => {
            let t = x.near_branch_target();
            if let Some(name) = plt.get(&t) {
                return is_noreturn_import(name);
            }
            index.entry(t).is_some_and(|j| noreturn.get(j).copied().unwrap_or(false))
        }
        FlowControl::IndirectCall if x.is_ip_rel_memory_operand() => {
            got_names.get(&x.ip_rel_memory_address()).is_some_and(|n| is_noreturn_import(n))
        }
        _ => false,
    }
}

/// Functions that never return: no `ret`, no indirect jump, every jump out goes into another
/// function's interior (a cold part) or to a function that never returns, and the last
/// instruction does not fall through. Iterated to a fixpoint.
pub(crate) fn noreturn_functions(
    code: &Code,
    cands: &[Cand],
    index: &FuncIndex,
    plt: &HashMap<u64, &str>,
    got_names: &HashMap<u64, String>,
) -> Vec<bool> {
    let n = cands.len();
    let mut disq: Vec<bool> = (0..n)
        .map(|i| {
            code.failed.get(i).copied().unwrap_or(true)
                || code.has_ret.get(i).copied().unwrap_or(true)
                || code.has_indirect.get(i).copied().unwrap_or(true)
                || code.last.get(i).is_none_or(|l| l.is_none())
        })
        .collect();
    let mut needs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for e in code.edges.iter().filter(|e| e.direct()) {
        if let Some(name) = plt.get(&e.target) {
            if !is_noreturn_import(name) {
                disq[e.src] = true;
            }
            continue;
        }
        match index.locate(e.target) {
            Loc::Entry(j) => needs[e.src].push(j),
            Loc::Interior(_) => {}
            Loc::Outside => disq[e.src] = true,
        }
    }
    let mut nr = vec![false; n];
    for _round in 0..16 {
        let mut changed = false;
        for i in 0..n {
            if nr[i] || disq[i] || !needs[i].iter().all(|&j| nr[j]) {
                continue;
            }
            let Some(Some(last)) = code.last.get(i) else { continue };
            let ends = matches!(last.flow_control(), FlowControl::UnconditionalBranch | FlowControl::Exception)
                || last.mnemonic() == Mnemonic::Hlt
                || call_noreturn(last, index, &nr, plt, got_names);
            if ends {
                nr[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    nr
}

pub(crate) struct Inputs<'a> {
    pub cands: &'a [Cand],
    pub fdes: &'a [Fde],
    pub index: &'a FuncIndex,
    pub code: &'a Code,
    /// Address-taken code, sorted.
    pub taken: &'a [u64],
    pub name_parent: &'a [Option<usize>],
    pub noreturn: &'a [bool],
    pub plt: &'a HashMap<u64, &'a str>,
    pub got_names: &'a HashMap<u64, String>,
    /// `.comment` names an LLVM-based compiler, which emits conditional tail calls.
    pub llvm: bool,
    pub elf: &'a InputElf<'a>,
    pub codemap: &'a CodeMap,
}

/// Whether the straight-line path from the first instruction (stepping over calls that
/// return) ends in `ud2`/`hlt` or a call that never returns.
fn starts_noreturn(ins: &[Instruction], inp: &Inputs) -> bool {
    for x in ins {
        if x.mnemonic() == Mnemonic::Hlt {
            return true;
        }
        match x.flow_control() {
            FlowControl::Next => {}
            FlowControl::Exception => return true,
            FlowControl::Call | FlowControl::IndirectCall => {
                if call_noreturn(x, inp.index, inp.noreturn, inp.plt, inp.got_names) {
                    return true;
                }
            }
            _ => return false,
        }
    }
    false
}

/// 16-byte aligned and at least 64 bytes long: GCC emits cold parts without alignment, and
/// hand-written assembly (OpenSSL's perlasm) dispatches with conditional jumps and shares
/// code between its aligned functions.
fn looks_handwritten(c: &Cand) -> bool {
    c.address & 15 == 0 && c.size >= 64
}

/// The kind of every candidate.
pub(crate) fn classify(inp: &Inputs) -> Vec<FunctionKind> {
    let cands = inp.cands;
    let n = cands.len();
    let code = inp.code;
    let called: Vec<bool> = cands.iter().map(|c| code.calls.binary_search(&c.address).is_ok()).collect();
    let taken: Vec<bool> = cands.iter().map(|c| inp.taken.binary_search(&c.address).is_ok()).collect();
    let named_cold: Vec<bool> =
        cands.iter().map(|c| c.raw_name.as_deref().is_some_and(|r| r.contains(".cold"))).collect();
    let definite: Vec<bool> =
        (0..n).map(|i| called[i] || taken[i] || (cands[i].raw_name.is_some() && !named_cold[i])).collect();

    // Who jumps where (edges leave their source function).
    let mut into_entry: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut into_interior: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut out_interior: Vec<Vec<usize>> = vec![Vec::new(); n];
    // Where each function's jumps out lead: the function whose interior a direct jump enters,
    // `None` for any other edge (a tail call, a table entry, a landing pad elsewhere).
    let mut out_to: Vec<Vec<Option<usize>>> = vec![Vec::new(); n];
    for e in &code.edges {
        if e.src < n {
            let into = match inp.index.locate(e.target) {
                Loc::Interior(j) if e.direct() && j != e.src => Some(j),
                _ => None,
            };
            out_to[e.src].push(into);
        }
        match inp.index.locate(e.target) {
            Loc::Entry(j) if j != e.src => into_entry[j].push(e.src),
            Loc::Interior(j) if j != e.src => {
                into_interior[j].push(e.src);
                if e.direct() {
                    out_interior[e.src].push(j);
                }
            }
            _ => {}
        }
    }
    let enters_entry = |a: usize, b: usize| into_entry[b].contains(&a);
    // Entered (at its entry or inside) only by conditional jumps, and by at least one.
    let mut only_cond = vec![true; n];
    let mut any_in = vec![false; n];
    for e in &code.edges {
        if let Some(j) = inp.index.containing(e.target).filter(|&j| j != e.src) {
            any_in[j] = true;
            if e.kind != EdgeKind::CondJump {
                only_cond[j] = false;
            }
        }
    }
    for (o, a) in only_cond.iter_mut().zip(&any_in) {
        *o &= *a;
    }

    let mut cold = vec![false; n];
    for i in 0..n {
        let c = &cands[i];
        cold[i] = if c.raw_name.is_some() {
            named_cold[i]
        } else if called[i] {
            false
        } else if c.fde.and_then(|k| inp.fdes.get(k)).is_some_and(|f| f.mid_frame) {
            true // (b)
        } else if taken[i] {
            false
        } else if !looks_handwritten(c)
            && out_interior[i].iter().any(|&f| f != i && (definite[f] || enters_entry(f, i)))
        {
            true // (a)
        } else {
            let mut srcs: Vec<usize> = into_entry[i].iter().chain(&into_interior[i]).copied().collect();
            srcs.sort_unstable();
            srcs.dedup();
            // (c)
            let rule_c = srcs.len() == 1 && !code.has_ret.get(i).copied().unwrap_or(true) && {
                let mut ins = Vec::new();
                decode_function(inp.elf, inp.codemap, c, &mut ins);
                starts_noreturn(&ins, inp)
            };
            // (d)
            let d = !inp.llvm && !looks_handwritten(c) && srcs.len() == 1 && only_cond[i];
            // (e)
            let e = !looks_handwritten(c) && srcs.len() == 1 && !into_interior[i].is_empty();
            // (f)
            let f = srcs.len() == 1
                && definite[srcs[0]]
                && !into_interior[i].is_empty()
                && !code.has_ret.get(i).copied().unwrap_or(true)
                && !code.has_indirect.get(i).copied().unwrap_or(true)
                && !out_to[i].is_empty()
                && out_to[i].iter().all(|&t| t == Some(srcs[0]));
            rule_c || d || e || f
        };
    }

    // Parents.
    let pick = |srcs: &[usize], want_cold: bool| -> Option<usize> {
        let mut counts: HashMap<usize, usize> = HashMap::new();
        for &s in srcs {
            if cold[s] == want_cold {
                *counts.entry(s).or_default() += 1;
            }
        }
        counts.into_iter().max_by_key(|&(s, k)| (k, std::cmp::Reverse(cands[s].address))).map(|(s, _)| s)
    };
    let mut parent: Vec<Option<usize>> = vec![None; n];
    for i in (0..n).filter(|&i| cold[i]) {
        parent[i] = inp
            .name_parent
            .get(i)
            .copied()
            .flatten()
            .filter(|&p| !cold[p])
            .or_else(|| pick(&into_entry[i], false))
            .or_else(|| pick(&into_interior[i], false))
            .or_else(|| pick(&out_interior[i], false));
    }
    // A part entered only from other parts: their parent.
    for i in 0..n {
        if !cold[i] || parent[i].is_some() {
            continue;
        }
        let via = pick(&into_entry[i], true).or_else(|| pick(&into_interior[i], true));
        parent[i] = via.and_then(|v| parent[v]);
    }
    (0..n)
        .map(|i| {
            if cold[i] {
                FunctionKind::ColdPart { parent: parent[i].map(|p| cands[p].address) }
            } else {
                FunctionKind::Function
            }
        })
        .collect()
}
