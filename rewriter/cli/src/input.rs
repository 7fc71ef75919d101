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

/// The bytes of the input executable: mapped read-only from the page cache where the file can
/// be mapped (no copy: 0.06–0.1 s of the calling thread for node's 99 MB), else read.
pub fn read_input(path: &Path) -> anyhow::Result<InputBytes> {
    let file = std::fs::File::open(path).with_context(|| path.display().to_string())?;
    if let Some(m) = Mapped::new(&file) {
        sigbus::guard(path);
        return Ok(InputBytes::Mapped(m));
    }
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut &file, &mut data).with_context(|| path.display().to_string())?;
    Ok(InputBytes::Read(data))
}

/// An input executable's bytes ([`read_input`]).
pub enum InputBytes {
    Mapped(Mapped),
    /// Read into memory: a file that cannot be mapped (empty, a pipe, a device).
    Read(Vec<u8>),
}

impl std::ops::Deref for InputBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            InputBytes::Mapped(m) => m.bytes(),
            InputBytes::Read(v) => v,
        }
    }
}

/// A regular file mapped read-only and private (`MAP_PRIVATE`: the program's bytes as they
/// were when mapped, as far as the kernel keeps them: a file truncated while mapped would
/// fault, so only commands that read their input once and at once use it).
pub struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapped {
    /// `None` where the file is not a non-empty regular file or the mapping fails.
    fn new(file: &std::fs::File) -> Option<Mapped> {
        use std::os::fd::AsRawFd;
        let meta = file.metadata().ok()?;
        let len = usize::try_from(meta.len()).ok()?;
        if !meta.is_file() || len == 0 {
            return None;
        }
        // SAFETY: a fresh read-only private mapping of an open file; nothing aliases it
        // mutably, and it is unmapped only in `drop`.
        let ptr =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
        (ptr != libc::MAP_FAILED).then_some(Mapped { ptr, len })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

/// A mapped input that another process truncates while it is read (`cp` over the file
/// rewrites it in place) raises SIGBUS at the next read of a page past its new end. This
/// turns that into the one-line error of every bad input, naming the file, removes the
/// temporary output being written (if any: [`sigbus::writing`]), and exits 2.
pub mod sigbus {
    use std::ffi::{c_char, c_int, CString};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::sync::atomic::{AtomicPtr, Ordering};

    static INPUT: AtomicPtr<c_char> = AtomicPtr::new(std::ptr::null_mut());
    static TEMP: AtomicPtr<c_char> = AtomicPtr::new(std::ptr::null_mut());

    /// A C string that lives as long as the process (the handler may read it at any time).
    fn leaked(path: &Path) -> *mut c_char {
        CString::new(path.as_os_str().as_bytes()).map_or(std::ptr::null_mut(), CString::into_raw)
    }

    /// Report a SIGBUS as the input `path` having changed (the handler is installed once).
    pub fn guard(path: &Path) {
        if INPUT.swap(leaked(path), Ordering::AcqRel).is_null() {
            // SAFETY: a handler that only calls async-signal-safe functions (write, unlink,
            // _exit) on strings that are never freed.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_sigbus as extern "C" fn(c_int) as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
            }
        }
    }

    /// The temporary file an output is being written to (`None` once it is renamed or removed).
    pub fn writing(tmp: Option<&Path>) {
        if !INPUT.load(Ordering::Acquire).is_null() {
            TEMP.store(tmp.map_or(std::ptr::null_mut(), leaked), Ordering::Release);
        }
    }

    fn put(s: &[u8]) {
        // SAFETY: write(2) of a valid buffer; a short or failed write only shortens the message.
        let _ = unsafe { libc::write(2, s.as_ptr().cast(), s.len()) };
    }

    extern "C" fn on_sigbus(_: c_int) {
        // The rewrite reads on every core: several threads can fault at once. The first
        // reports and ends the process; the others wait for that.
        static FIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if FIRED.swap(true, Ordering::AcqRel) {
            loop {
                // SAFETY: pause(2) only waits; the first thread's _exit ends this one too.
                unsafe { libc::pause() };
            }
        }
        let input = INPUT.load(Ordering::Acquire);
        if !input.is_null() {
            // SAFETY: a NUL-terminated string leaked by `guard`.
            put(unsafe { std::ffi::CStr::from_ptr(input) }.to_bytes());
        }
        put(b": the file changed while stint read it (truncated or rewritten by another process)\n");
        let tmp = TEMP.load(Ordering::Acquire);
        // SAFETY: a NUL-terminated string leaked by `writing`; then the process ends at once.
        unsafe {
            if !tmp.is_null() {
                libc::unlink(tmp);
            }
            libc::_exit(2);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of its own under the system's temporary directory, removed at the end.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, bytes: &[u8]) -> TempFile {
            let path = std::env::temp_dir().join(format!("stint-input-{}-{name}", std::process::id()));
            std::fs::write(&path, bytes).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn a_regular_input_is_mapped_with_the_files_bytes() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let f = TempFile::new("regular", &bytes);
        let input = read_input(&f.0).unwrap();
        assert!(matches!(input, InputBytes::Mapped(_)));
        assert_eq!(&*input, &bytes[..]);
    }

    #[test]
    fn an_empty_input_is_read_not_mapped() {
        let f = TempFile::new("empty", b"");
        let input = read_input(&f.0).unwrap();
        assert!(matches!(input, InputBytes::Read(_)));
        assert!(input.is_empty());
    }

    #[test]
    fn a_missing_input_is_an_error_naming_it() {
        let path = std::env::temp_dir().join(format!("stint-input-{}-missing", std::process::id()));
        let err = read_input(&path).err().expect("a missing file is an error");
        assert!(format!("{err:#}").starts_with(&path.display().to_string()), "{err:#}");
    }
}
