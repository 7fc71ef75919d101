//! Typed errors of the rewrite core. Messages start with the subject (section, address,
//! function) and say what could not be done; the binary prefixes the file name (STYLE 10).

use thiserror::Error;

/// What went wrong, in a form callers can match on. Exit status 2 for all of them.
#[derive(Debug, Error)]
pub enum Error {
    /// Not an ELF file at all.
    #[error("not an ELF file")]
    NotElf,
    /// Shorter than its headers say.
    #[error("truncated ELF: {0}")]
    Truncated(String),
    /// An ELF for another machine or class.
    #[error("unsupported ELF: {0}; stint rewrites x86-64 (64-bit, little-endian) executables")]
    Foreign(String),
    /// An x86-64 ELF of a kind this version does not rewrite.
    #[error("{0}")]
    UnsupportedKind(String),
    /// Output of `stint rewrite` given again.
    #[error("already rewritten by stint; rewrite the original program instead")]
    AlreadyRewritten,
    /// Headers that contradict themselves.
    #[error("malformed ELF: {0}")]
    Malformed(String),
    /// The input is fine but has no room for what the rewriter must add.
    #[error("{0}")]
    NoRoom(String),
    /// A bad spec.
    #[error("spec: {0}")]
    Spec(String),
    /// Internal failure while generating code; a bug in stint.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The kind of an [`Error`], without its message: what callers match on (a `Copy` value that
/// stays the same when a message is reworded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    NotElf,
    Truncated,
    Foreign,
    UnsupportedKind,
    AlreadyRewritten,
    Malformed,
    NoRoom,
    Spec,
    Internal,
}

impl Error {
    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotElf => ErrorKind::NotElf,
            Error::Truncated(_) => ErrorKind::Truncated,
            Error::Foreign(_) => ErrorKind::Foreign,
            Error::UnsupportedKind(_) => ErrorKind::UnsupportedKind,
            Error::AlreadyRewritten => ErrorKind::AlreadyRewritten,
            Error::Malformed(_) => ErrorKind::Malformed,
            Error::NoRoom(_) => ErrorKind::NoRoom,
            Error::Spec(_) => ErrorKind::Spec,
            Error::Internal(_) => ErrorKind::Internal,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_the_variant_and_messages_stay() {
        assert_eq!(Error::NotElf.kind(), ErrorKind::NotElf);
        assert_eq!(Error::NoRoom("x".into()).kind(), ErrorKind::NoRoom);
        assert_eq!(Error::Spec("bad".into()).to_string(), "spec: bad");
        assert_eq!(Error::Truncated("t".into()).to_string(), "truncated ELF: t");
    }
}
