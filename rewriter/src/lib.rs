//! stint: a static binary rewriter that measures every thread.
//!
//! The rewrite core takes bytes and a spec and returns bytes and a report; it does no file
//! I/O (DESIGN.md, "Data flows one way"). The passes, in order:
//!
//! 1. [`input`]    validate the ELF and give a bounds-checked view of it
//! 2. [`analysis`] functions (symbols, `.eh_frame`), cold parts, branch targets
//! 3. [`plan`]     instrumentation points and the tactic chosen for each
//! 4. [`codegen`]  trampolines, the init stub and the slow-path stub
//! 5. [`emit`]     the runtime image, new segments, patched windows: the output ELF
//!
//! The readers of profile files ([`profile`], [`report`]) share the file layout with the
//! runtime through the `stint-layout` crate.
#![deny(unsafe_code)]

pub mod analysis;
pub mod error;
pub mod input;
pub mod rtimage;
