//! One module per subcommand that does more than call a library function.
pub mod ctl;
pub mod ls;
pub mod top;
