//! What `rewrite` and `inspect` both read from disk: the input executable, its program name,
//! and the metric spec. The rewriting library does no file I/O (STYLE 2); errors here name
//! the file.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use stint_rewrite::spec::Spec;

/// The spec at `path`, or the built-in default.
pub fn load_spec(path: &Option<PathBuf>) -> anyhow::Result<Spec> {
    match path {
        None => Ok(Spec::default_spec()),
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
            Spec::parse(&text).map_err(|e| anyhow!("{}: {e}", p.display()))
        }
    }
}

/// The bytes of the input executable.
pub fn read_input(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| path.display().to_string())
}

/// The program's name as the rewriter records it: the file name of `path`.
pub fn program_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "program".into())
}

/// `path` made absolute (not canonicalised: a symlink keeps the name the user gave), as the
/// meta records the input for finding its `.gnu_debuglink` file later; `None` if it is not
/// valid UTF-8 or the current directory is unknown.
pub fn absolute_input(path: &Path) -> Option<String> {
    std::path::absolute(path).ok()?.to_str().map(String::from)
}
