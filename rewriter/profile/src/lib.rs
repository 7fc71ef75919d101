//! stint-profile: reads the profile files rewritten programs write (DESIGN D9) into a typed
//! model, and everything the tools do with that model (D18):
//!
//! - [`profile`]: the reader and the model (`Profile`, `ThreadProfile`, …);
//! - [`calltree`]: calling-context trees (D16) and the call paths views and exporters share;
//! - [`callviews`]: self time, `--calltree`, `--callers` / `--callees` from the trees;
//! - [`report`]: the tables of `stint report` and the queries they share with the JSON;
//! - [`csv`]: the `stint report` tables as CSV (RFC 4180);
//! - [`json`]: the `stint-profile/1` JSON contract as typed serde structs;
//! - [`diff`]: two runs side by side by function name, and the CI gate of `stint diff`;
//! - [`merge`]: many runs summed into one profile per program (`stint merge`);
//! - [`proctree`]: the profiles of a run that forks and execs, as a tree of process images;
//! - [`ctl`]: operations on a running program's file (enable, disable, snapshot, status),
//!   with a typed [`ctl::CtlError`];
//! - [`openmetrics`]: the OpenMetrics exposition for Prometheus (`stint serve`, `stint export`);
//! - [`symbols`]: names from separate debug info (build-id, debuglink, debuginfod), data
//!   symbols for sync objects, applied with [`profile::Profile::resolve_names`];
//! - [`discover`]: finding the live profiles of running processes through `/proc`;
//! - [`synthetic`]: profile files written like the runtime's, for tests.
//!
//! The file layout itself is defined once, in `stint-layout`, which the runtime (the writer)
//! compiles too; this crate only reads it (and [`synthetic`] writes files like the
//! runtime's for tests, with the same layout computation). No CLI or terminal crates here: the
//! `stint` binary prints what these modules return.
#![deny(unsafe_code)]

pub mod calltree;
pub mod callviews;
pub mod csv;
pub mod ctl;
pub mod diff;
pub mod discover;
pub mod json;
pub mod merge;
pub mod openmetrics;
pub mod proctree;
pub mod profile;
pub mod report;
pub mod symbols;
pub mod synthetic;
