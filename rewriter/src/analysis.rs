//! Analysis: which functions the program has, where they start and end, and every address
//! that control flow can reach other than by falling through (the branch-target set, D2).
//!
//! (Being written: see the module plan in the issue note. The types below are the contract
//! the planner uses.)

use crate::error::Result;
use crate::input::InputElf;
use std::collections::BTreeSet;

/// Where a function was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FunctionSource {
    Symtab,
    Dynsym,
    EhFrame,
}

/// A function, or a split-off part of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum FunctionKind {
    /// Entered by calls (or tail calls): its entry is an instrumentation point.
    Function,
    /// A cold part (`f.cold`) entered only by jumps from its parent; never a point.
    ColdPart { parent: Option<u64> },
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Function {
    /// Demangled name, or `sub_<hex address>` for functions known only from `.eh_frame`.
    pub name: String,
    pub address: u64,
    pub size: u64,
    pub source: FunctionSource,
    pub kind: FunctionKind,
    /// Starts with `endbr64`.
    pub has_endbr: bool,
    /// Bytes of padding (nop / int3 / zero) after `address + size` that belong to no function
    /// and are no branch target, so a patch window may extend over them.
    pub padding: u64,
    /// Contains an indirect jump whose targets could not be resolved: all of its
    /// instruction starts are in the branch-target set.
    pub unresolved_indirect_jump: bool,
}

impl Function {
    pub fn end(&self) -> u64 {
        self.address + self.size
    }
    pub fn is_cold_part(&self) -> bool {
        matches!(self.kind, FunctionKind::ColdPart { .. })
    }
}

/// What analysis found.
#[derive(Debug, Default)]
pub struct Analysis {
    /// Sorted by address, one entry per address.
    pub functions: Vec<Function>,
    /// Every address that may be reached by a jump or call (direct targets, resolved jump
    /// tables, address-taken code, function entries).
    pub branch_targets: BTreeSet<u64>,
}

/// Analyse a validated executable.
pub fn analyze(_elf: &InputElf) -> Result<Analysis> {
    Ok(Analysis::default())
}
