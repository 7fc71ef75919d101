//! stint-profile: reads the profile files rewritten programs write (DESIGN D9) into a typed
//! model, and turns that model into reports: tables and the `stint-profile/1` JSON contract.
//!
//! The file layout itself is defined once, in `stint-layout`, which the runtime (the writer)
//! compiles too; this crate only reads it (and `synthetic` writes files like the runtime's
//! for tests, with the same layout computation).
#![deny(unsafe_code)]

pub mod profile;
pub mod report;
pub mod synthetic;
