//! One module per subcommand: each takes its Args struct (`crate::args`), calls the
//! libraries, and prints. No command imports another; what two share is in `crate::fmt` or
//! `crate::input`.
pub mod batch;
pub mod ctl;
pub mod diff;
pub mod export;
pub mod inspect;
pub mod ls;
pub mod merge;
pub mod report;
pub mod rewrite;
pub mod run;
pub mod serve;
pub mod top;
