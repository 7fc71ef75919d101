//! The self-description a profile file carries (`stint-meta/1`, DESIGN D9: reports need
//! neither the binary nor the spec): the program, its metrics and its points. The rewriter
//! serialises a [`Meta`] into the output (the runtime copies the bytes into the file without
//! reading them) and `stint-profile` deserialises the same type, so writer and reader cannot
//! disagree about a field.
//!
//! ```json
//! {"schema":"stint-meta/1","program":"pigz",
//!  "metrics":[{"name":"calls","kind":"counter","slot":0,"bit":0}, …],
//!  "points":[{"id":0,"kind":"entry","function":"main","address":"0x1189","bits":7,"size":52}]}
//! ```
//!
//! Compatibility: readers ignore fields they do not know, and every field added after the
//! first version is optional (`#[serde(default)]`), so an older or newer rewriter's meta
//! still reads. Only with the cargo feature `serde` (the runtime image is built without it).

extern crate alloc;

use crate::{MetricDef, METRICS};
use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// The `schema` of the meta this version writes and reads.
pub const META_SCHEMA: &str = "stint-meta/1";

/// `PointMeta::kind` of a function's entry point.
pub const POINT_ENTRY: &str = "entry";
/// `PointMeta::kind` of a wrapped thread-library function (`function` is its name, e.g.
/// `pthread_mutex_lock`).
pub const POINT_WRAP: &str = "wrap";

/// `PointMeta::kind` of an imported function timed at the program's calls into it (D19;
/// `function` is its demangled name, e.g. `deflate`, `address` its PLT stub's). Readers that
/// know only entries and wrappers keep it as a point of its own.
pub const POINT_IMPORT: &str = "import";

/// The whole self-description.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// [`META_SCHEMA`].
    pub schema: String,
    /// Program name given to the rewriter.
    pub program: String,
    /// Path of the input the rewriter read, if it names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// The input's GNU build-id (`NT_GNU_BUILD_ID`), lower-case hex: finds its separate debug
    /// info (`/usr/lib/debug/.build-id/xx/rest.debug`, debuginfod) when the profile is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    /// The input's `.gnu_debuglink`: the debug file's name and the CRC-32 of its contents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debuglink: Option<DebugLink>,
    pub metrics: Vec<MetricMeta>,
    /// Indexed by point id.
    pub points: Vec<PointMeta>,
    /// Thread-library calls no wrapper sees (one line each, from the rewriter): readers show
    /// them as warnings, since waits and thread records may be missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unwrapped: Vec<String>,
}

impl Meta {
    /// The meta of a program rewritten by this version: every metric of [`METRICS`].
    pub fn new(program: &str, points: Vec<PointMeta>) -> Meta {
        Meta {
            schema: META_SCHEMA.into(),
            program: program.into(),
            input: None,
            build_id: None,
            debuglink: None,
            metrics: METRICS.iter().map(MetricMeta::of).collect(),
            points,
            unwrapped: Vec::new(),
        }
    }
}

/// The `.gnu_debuglink` section of the input: where its stripped debug info lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebugLink {
    /// File name of the debug file (no directory).
    pub file: String,
    /// CRC-32 (IEEE, as `gnu_debuglink_crc32`) of the debug file's contents.
    pub crc: u32,
}

/// A metric as the meta describes it (a row of [`METRICS`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricMeta {
    pub name: String,
    /// `counter`, `timer`, `wait` or `trace` ([`crate::MetricKind`]).
    pub kind: String,
    /// Counter slot of the metric in each column, for metrics counted per point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// Metric id: its bit in a gate byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bit: Option<u32>,
    /// Unit of the values if not a count (`tsc`: TSC ticks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

impl MetricMeta {
    pub fn of(def: &MetricDef) -> MetricMeta {
        MetricMeta {
            name: def.name().into(),
            kind: def.kind.name().into(),
            slot: def.slot,
            bit: Some(def.id()),
            unit: def.unit.map(String::from),
        }
    }
}

/// An instrumentation point as the meta describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointMeta {
    /// Equal to the point's index in `Meta::points`.
    pub id: u32,
    /// [`POINT_ENTRY`], [`POINT_WRAP`] or [`POINT_IMPORT`] (a reader keeps kinds it does not
    /// know).
    pub kind: String,
    /// Demangled function name (D14).
    pub function: String,
    /// The function's address in the input ELF, as the rewriter wrote it (`0x1189`).
    pub address: String,
    /// `metric_bit`s of the metrics the point can measure.
    #[serde(default, skip_serializing_if = "is_zero_u8")]
    pub bits: u8,
    /// Size of the function in bytes (0: unknown).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub size: u64,
    /// Imports this function tail-jumps into (`jmp usleep@plt`): its times end at the jump,
    /// not when the import returns (D17); a report says so next to its times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tail_jumps_to: Vec<String>,
    /// The entry trampoline also runs the exit (tactic `entry+exit`, tiny functions): a
    /// timed call costs what the calibration's entry+exit callee measured (D21).
    #[serde(default, skip_serializing_if = "is_false")]
    pub entry_exit: bool,
}

impl PointMeta {
    /// `address` as a number, if it is `0x` followed by hex digits.
    pub fn address_value(&self) -> Option<u64> {
        let hex = self.address.strip_prefix("0x").or_else(|| self.address.strip_prefix("0X"))?;
        u64::from_str_radix(hex, 16).ok()
    }
}

fn is_false(x: &bool) -> bool {
    !*x
}

fn is_zero_u8(x: &u8) -> bool {
    *x == 0
}

fn is_zero_u64(x: &u64) -> bool {
    *x == 0
}

/// How a symbol name becomes the `function` of a [`PointMeta`] (D14), for the rewriter that
/// writes the meta and for readers that name functions later from debug info: Rust without
/// the hash, C++ without parameters or return type, GCC's clone suffixes (`.cold`, `.part.0`,
/// `.isra.0`, `.constprop.0`) kept visible so a cold part does not read like its parent;
/// anything else as it is.
pub fn demangle(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        return alloc::format!("{d:#}");
    }
    if raw.starts_with("_Z") {
        let (mangled, suffix) = raw.find('.').map_or((raw, ""), |p| raw.split_at(p));
        if let Ok(sym) = cpp_demangle::Symbol::new(mangled) {
            let opts = cpp_demangle::DemangleOptions::new().no_params().no_return_type();
            if let Ok(s) = sym.demangle(&opts) {
                return alloc::format!("{s}{suffix}");
            }
        }
    }
    String::from(raw)
}
