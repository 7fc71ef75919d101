//! What `run` and `batch` share: the content-hash cache of rewritten programs
//! (`$XDG_CACHE_HOME/stint`, else `~/.cache/stint`) and writing a file atomically with a mode.
//!
//! A cache entry is `<cache>/<key>/<program>`, where the key is the SHA-256 of the stint
//! version, the trap option, the spec text and the input bytes, so a new stint, another spec
//! or a rebuilt program never reuses a stale rewrite. The file keeps the program's name so
//! that the rewritten program's own name (`/proc/self/exe`, its profile name) stays the same.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use sha2::{Digest, Sha256};

/// The cache directory: `$XDG_CACHE_HOME/stint`, else `$HOME/.cache/stint`.
pub fn cache_dir() -> anyhow::Result<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(x) = nonempty("XDG_CACHE_HOME") {
        return Ok(x.join("stint"));
    }
    let home = nonempty("HOME")
        .ok_or_else(|| anyhow!("cannot find a cache directory: neither XDG_CACHE_HOME nor HOME is set"))?;
    Ok(home.join(".cache").join("stint"))
}

/// The cache key (64 hex digits) of rewriting `input` with `spec_text` (empty: the default spec).
pub fn key(input: &[u8], spec_text: &str, traps: bool) -> String {
    let mut h = Sha256::new();
    for part in [env!("CARGO_PKG_VERSION").as_bytes(), &[traps as u8], spec_text.as_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.update(input);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the rewrite of `program` with `key` lives in the cache.
pub fn entry(dir: &Path, key: &str, program: &str) -> PathBuf {
    dir.join(key).join(program)
}

/// Create `dir` and its missing parents with mode 0700.
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| anyhow!("{}: cannot create directory: {e}", dir.display()))
}

/// Write `bytes` to a temporary file beside `path` (created with `mode`) and rename it into
/// place, so a failed or concurrent run never leaves a half-written file at `path`.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.stint-tmp.{}.{:?}", std::process::id(), std::thread::current().id()));
    crate::input::sigbus::writing(Some(&tmp));
    let res = (|| -> std::io::Result<()> {
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        // The umask may have cleared bits of `mode`; the file must have exactly it.
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        std::fs::rename(&tmp, path)
    })();
    crate::input::sigbus::writing(None);
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(anyhow!("{}: cannot write: {e}", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_depends_on_input_spec_and_traps() {
        let k = key(b"elf", "", false);
        assert_eq!(k.len(), 64);
        assert_eq!(k, key(b"elf", "", false));
        assert_ne!(k, key(b"elg", "", false));
        assert_ne!(k, key(b"elf", "x", false));
        assert_ne!(k, key(b"elf", "", true));
        // The spec and the input are delimited: moving bytes between them changes the key.
        assert_ne!(key(b"ab", "", false), key(b"b", "a", false));
    }
}
