//! Fresh directories for the unit tests, removed when the test is done with them: the
//! tests build programs with gcc under the system temp dir, and a directory left behind by
//! every run would add up to thousands.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A directory that is removed (with what is in it) when dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty `<temp>/<prefix>-<pid>-<tag>-<n>`.
    pub(crate) fn new(prefix: &str, tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("{prefix}-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create temp dir");
        TempDir(d)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_temp_dir_is_removed_when_dropped() {
    let d = TempDir::new("stint-testdir", "drop");
    std::fs::write(d.join("f"), b"x").expect("write");
    let path = d.to_path_buf();
    assert!(path.join("f").exists());
    drop(d);
    assert!(!path.exists());
}
