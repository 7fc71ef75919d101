//! Names from separate debug info, found when a profile is READ (issue 11): a distribution
//! binary is stripped, so the rewriter could name its functions only `sub_<hex>` (D14), and
//! its lock objects are bare addresses. The meta keeps what identifies the input — its GNU
//! build-id, its `.gnu_debuglink` (file name + CRC-32) and its path — so the names can be
//! found later, on any machine that has the debug info:
//!
//! 1. `--symbols FILE` (the user names the file; a build-id that differs is a warning);
//! 2. by build-id under each debug root: `<root>/.build-id/xx/rest.debug` (root
//!    `/usr/lib/debug`, or the `:`-separated `STINT_DEBUG_ROOT`);
//! 3. by debuglink, as gdb looks: next to the input, in its `.debug/`, in `<root>/<input's
//!    directory>`; the file's CRC-32 must equal the link's;
//! 4. by debuginfod: `GET <url>/buildid/<hex>/debuginfo` for each of the space-separated
//!    `DEBUGINFOD_URLS`, cached in `$DEBUGINFOD_CACHE_PATH/<hex>/debuginfo` (else
//!    `$XDG_CACHE_HOME/stint/debuginfod`, else `~/.cache/stint/debuginfod`), timeout
//!    `DEBUGINFOD_TIMEOUT` seconds (default 30);
//! 5. the input itself, if it still exists with the same build-id and has a `.symtab`
//!    (an unstripped input: only its data symbols are new to the profile).
//!
//! A candidate is used only if its build-id matches the meta's (when both have one) and it
//! has symbols. Its `.symtab` (and `.dynsym`) give functions (`STT_FUNC`) and data
//! (`STT_OBJECT`) in the input's own address space, the one the meta's point addresses use;
//! [`Profile::resolve_names`] renames `sub_<hex>` points whose address starts a function and
//! names sync objects that lie in a data symbol (`big_lock`, `_PyRuntime+0x1a8`), after
//! taking the load bias the runtime recorded off their run-time address. Heap objects match
//! no symbol and stay addresses. Names are demangled as the rewriter does (D14).

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use object::{Object as _, ObjectSymbol as _, SymbolKind};
use thiserror::Error;

use crate::profile::{Profile, POINT_ENTRY};

/// Where debug info lives by default (Debian's `-dbgsym` packages install here).
pub const DEFAULT_DEBUG_ROOT: &str = "/usr/lib/debug";
/// Environment variable naming other debug roots (`:`-separated), for tests and for trees
/// unpacked elsewhere.
pub const DEBUG_ROOT_ENV: &str = "STINT_DEBUG_ROOT";
/// Default debuginfod timeout in seconds (connect and whole transfer).
pub const DEFAULT_DEBUGINFOD_TIMEOUT_S: u64 = 30;

/// Why a symbol file could not be used.
#[derive(Debug, Error)]
pub enum SymbolError {
    #[error("cannot read: {0}")]
    Read(std::io::Error),
    #[error("not an ELF file with symbols: {0}")]
    Elf(String),
    #[error("build-id {found} is not the profile's {expected}")]
    BuildId { found: String, expected: String },
    #[error("debuginfod {url}: {message}")]
    Debuginfod { url: String, message: String },
}

/// Where to look for names (see the module documentation for the order).
#[derive(Clone, Debug, Default)]
pub struct SymbolOptions {
    /// `--symbols FILE`.
    pub symbols: Option<PathBuf>,
    /// Debug roots for build-id and debuglink lookups.
    pub debug_roots: Vec<PathBuf>,
    /// debuginfod servers (empty: none asked).
    pub debuginfod_urls: Vec<String>,
    /// Where debuginfod downloads are kept.
    pub cache_dir: Option<PathBuf>,
    pub timeout: Duration,
}

impl SymbolOptions {
    /// The options of this environment: `STINT_DEBUG_ROOT` (else `/usr/lib/debug`),
    /// `DEBUGINFOD_URLS` unless `debuginfod` is false, the cache and timeout variables.
    pub fn from_env(symbols: Option<PathBuf>, debuginfod: bool) -> SymbolOptions {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let debug_roots = match var(DEBUG_ROOT_ENV) {
            Some(v) => v.split(':').filter(|s| !s.is_empty()).map(PathBuf::from).collect(),
            None => vec![PathBuf::from(DEFAULT_DEBUG_ROOT)],
        };
        let debuginfod_urls = if debuginfod {
            var("DEBUGINFOD_URLS")
                .map(|v| v.split_ascii_whitespace().map(|u| u.trim_end_matches('/').to_owned()).collect())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let cache_dir = var("DEBUGINFOD_CACHE_PATH").map(PathBuf::from).or_else(|| {
            let base = var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache")))?;
            Some(base.join("stint").join("debuginfod"))
        });
        let secs = var("DEBUGINFOD_TIMEOUT").and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_DEBUGINFOD_TIMEOUT_S);
        SymbolOptions { symbols, debug_roots, debuginfod_urls, cache_dir, timeout: Duration::from_secs(secs.max(1)) }
    }
}

/// A symbol: its address in the input's address space, size (0: unknown) and demangled name.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sym {
    address: u64,
    size: u64,
    local: bool,
    name: String,
}

/// The function and data symbols of one ELF file, sorted by address.
#[derive(Clone, Debug, Default)]
pub struct SymbolTable {
    functions: Vec<Sym>,
    data: Vec<Sym>,
    /// The file's build-id in hex, if it has one.
    pub build_id: Option<String>,
}

impl SymbolTable {
    /// The symbols of an ELF file (a debug file, or an unstripped executable).
    pub fn parse(bytes: &[u8]) -> Result<SymbolTable, SymbolError> {
        let file = object::File::parse(bytes).map_err(|e| SymbolError::Elf(e.to_string()))?;
        let build_id = file.build_id().ok().flatten().filter(|b| !b.is_empty()).map(hex);
        let mut t = SymbolTable { build_id, ..SymbolTable::default() };
        for sym in file.symbols().chain(file.dynamic_symbols()) {
            if !sym.is_definition() {
                continue;
            }
            let Ok(raw) = sym.name() else { continue };
            if raw.is_empty() {
                continue;
            }
            let list = match sym.kind() {
                SymbolKind::Text => &mut t.functions,
                SymbolKind::Data => &mut t.data,
                _ => continue,
            };
            list.push(Sym { address: sym.address(), size: sym.size(), local: !sym.is_global(), name: demangle(raw) });
        }
        for list in [&mut t.functions, &mut t.data] {
            // At one address: the larger symbol first (an alias of size 0 names less), globals
            // before locals, then by name, so the choice does not depend on the table order.
            list.sort_by(|a, b| {
                (a.address, std::cmp::Reverse(a.size), a.local, &a.name).cmp(&(
                    b.address,
                    std::cmp::Reverse(b.size),
                    b.local,
                    &b.name,
                ))
            });
            list.dedup_by(|a, b| a.address == b.address && a.name == b.name);
        }
        Ok(t)
    }

    /// Whether the file has any symbol this module uses.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty() && self.data.is_empty()
    }

    /// Number of (function, data) symbols.
    pub fn len(&self) -> (usize, usize) {
        (self.functions.len(), self.data.len())
    }

    /// The function that starts at `address` exactly.
    pub fn function_at(&self, address: u64) -> Option<&str> {
        let i = self.functions.partition_point(|s| s.address < address);
        self.functions.get(i).filter(|s| s.address == address).map(|s| s.name.as_str())
    }

    /// The data symbol `address` lies in: `name`, or `name+0x<offset>` inside it; a symbol
    /// of unknown size matches its own address only.
    pub fn data_at(&self, address: u64) -> Option<String> {
        let end = self.data.partition_point(|s| s.address <= address);
        // Nested symbols (a struct member with its own symbol): the nearest one that contains
        // the address, looking back over the symbols that start at or below it.
        // At one address the sort put the better name first, so the last one seen wins.
        let mut best: Option<&Sym> = None;
        for s in self.data[..end].iter().rev().take(64) {
            if best.is_some_and(|b| b.address != s.address) {
                break;
            }
            let off = address - s.address;
            if off == 0 || off < s.size {
                best = Some(s);
            }
        }
        let s = best?;
        let off = address - s.address;
        Some(if off == 0 { s.name.clone() } else { format!("{}+{off:#x}", s.name) })
    }
}

/// Names from debug info are demangled by the rule the rewriter writes the meta with (D14).
pub use stint_layout::meta::demangle;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a lookup found: the table and where it came from.
#[derive(Clone, Debug)]
pub struct Found {
    pub table: Rc<SymbolTable>,
    /// The file (or `debuginfod <url>` download) the names came from.
    pub source: String,
}

/// Lookups done so far: (build-id, input path) → what was found.
type Lookups = HashMap<(Option<String>, Option<String>), Option<Found>>;

/// Finds symbol tables for profiles, once per program (several profiles of one program, as
/// `stint merge` reads, share one lookup).
#[derive(Debug, Default)]
pub struct Resolver {
    /// `false`: find nothing (see [`Resolver::none`]).
    enabled: bool,
    opts: SymbolOptions,
    cache: RefCell<Lookups>,
}

impl Resolver {
    pub fn new(opts: SymbolOptions) -> Resolver {
        Resolver { enabled: true, opts, cache: RefCell::default() }
    }

    /// A resolver that finds nothing (names stay as the rewriter wrote them).
    pub fn none() -> Resolver {
        Resolver::default()
    }

    /// The symbols for profile `p`, and the problems met on the way (one line each, e.g. an
    /// unreachable debuginfod server, a `--symbols` file of another build).
    pub fn lookup(&self, p: &Profile, warnings: &mut Vec<String>) -> Option<Found> {
        if !self.enabled {
            return None;
        }
        let key = (p.build_id.clone(), p.input.clone());
        if let Some(f) = self.cache.borrow().get(&key) {
            return f.clone();
        }
        let found = self.find(p, warnings);
        self.cache.borrow_mut().insert(key, found.clone());
        found
    }

    fn find(&self, p: &Profile, warnings: &mut Vec<String>) -> Option<Found> {
        let want = p.build_id.as_deref();
        let try_file = |path: &Path, crc: Option<u32>, strict: bool, warnings: &mut Vec<String>| {
            let bytes = match std::fs::read(path) {
                Ok(b) => b,
                Err(e) if strict => {
                    warnings.push(format!("{}: {}", path.display(), SymbolError::Read(e)));
                    return None;
                }
                Err(_) => return None,
            };
            if crc.is_some_and(|c| crc32fast::hash(&bytes) != c) {
                return None;
            }
            match usable(&bytes, want) {
                Ok(table) => Some(Found { table: Rc::new(table), source: path.display().to_string() }),
                Err(e) => {
                    if strict {
                        warnings.push(format!("{}: {e}", path.display()));
                    }
                    None
                }
            }
        };
        if let Some(path) = &self.opts.symbols {
            // The user's choice wins even for another build, with a warning.
            let bytes = std::fs::read(path);
            match bytes.map_err(SymbolError::Read).and_then(|b| SymbolTable::parse(&b)) {
                Ok(t) => {
                    if let (Some(w), Some(f)) = (want, t.build_id.as_deref()) {
                        if w != f {
                            let e = SymbolError::BuildId { found: f.into(), expected: w.into() };
                            warnings.push(format!("{}: {e}; names may be wrong", path.display()));
                        }
                    }
                    return Some(Found { table: Rc::new(t), source: path.display().to_string() });
                }
                Err(e) => warnings.push(format!("{}: {e}", path.display())),
            }
        }
        if let Some(id) = want.filter(|id| id.len() > 2 && id.bytes().all(|b| b.is_ascii_hexdigit())) {
            for root in &self.opts.debug_roots {
                let path = root.join(".build-id").join(&id[..2]).join(format!("{}.debug", &id[2..]));
                if let Some(f) = try_file(&path, None, false, warnings) {
                    return Some(f);
                }
            }
        }
        let input_dir = p.input.as_deref().map(Path::new).and_then(Path::parent);
        if let (Some(link), Some(dir)) = (&p.debuglink, input_dir) {
            let mut dirs = vec![dir.to_path_buf(), dir.join(".debug")];
            for root in &self.opts.debug_roots {
                dirs.push(root.join(dir.strip_prefix("/").unwrap_or(dir)));
            }
            for d in dirs {
                if let Some(f) = try_file(&d.join(&link.file), Some(link.crc), false, warnings) {
                    return Some(f);
                }
            }
        }
        if let Some(id) = want {
            for url in &self.opts.debuginfod_urls {
                match self.debuginfod(url, id) {
                    Ok(Some((path, table))) => {
                        return Some(Found {
                            table: Rc::new(table),
                            source: format!("debuginfod {url} ({})", path.display()),
                        });
                    }
                    Ok(None) => {}
                    Err(e) => warnings.push(e.to_string()),
                }
            }
        }
        let input = p.input.as_deref().map(Path::new)?;
        try_file(input, None, false, warnings)
    }

    /// The debug file of build-id `id` from server `url` (cached), `None` if the server does
    /// not have it.
    fn debuginfod(&self, url: &str, id: &str) -> Result<Option<(PathBuf, SymbolTable)>, SymbolError> {
        let err = |message: String| SymbolError::Debuginfod { url: url.to_owned(), message };
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let cached = self.opts.cache_dir.as_ref().map(|d| d.join(id).join("debuginfo"));
        if let Some(path) = &cached {
            if let Ok(bytes) = std::fs::read(path) {
                if let Ok(t) = usable(&bytes, Some(id)) {
                    return Ok(Some((path.clone(), t)));
                }
            }
        }
        let agent = ureq::AgentBuilder::new().timeout_connect(self.opts.timeout).timeout(self.opts.timeout).build();
        let resp = match agent.get(&format!("{url}/buildid/{id}/debuginfo")).call() {
            Ok(r) => r,
            Err(ureq::Error::Status(404, _)) => return Ok(None),
            Err(ureq::Error::Status(code, r)) => return Err(err(format!("HTTP {code} {}", r.status_text()))),
            Err(e) => return Err(err(e.to_string())),
        };
        let mut bytes = Vec::new();
        resp.into_reader().read_to_end(&mut bytes).map_err(|e| err(format!("download cut short: {e}")))?;
        let table = usable(&bytes, Some(id)).map_err(|e| err(e.to_string()))?;
        let path = match cached {
            Some(path) => match store(&path, &bytes) {
                Ok(()) => path,
                // The names are still good without the cache.
                Err(_) => PathBuf::from(format!("{url}/buildid/{id}/debuginfo")),
            },
            None => PathBuf::from(format!("{url}/buildid/{id}/debuginfo")),
        };
        Ok(Some((path, table)))
    }
}

/// `bytes` as a symbol table, if it has symbols and its build-id is `want` (when both are
/// known).
fn usable(bytes: &[u8], want: Option<&str>) -> Result<SymbolTable, SymbolError> {
    let t = SymbolTable::parse(bytes)?;
    if let (Some(w), Some(f)) = (want, t.build_id.as_deref()) {
        if w != f {
            return Err(SymbolError::BuildId { found: f.into(), expected: w.into() });
        }
    }
    if t.is_empty() {
        return Err(SymbolError::Elf("no function or data symbols".into()));
    }
    Ok(t)
}

/// Writes a download into the cache: a private directory, a temporary name, then rename, so a
/// reader never sees half a file.
fn store(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    let dir = path.parent().ok_or_else(|| std::io::Error::other("no parent"))?;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let tmp = dir.join(format!(".debuginfo.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

impl Profile {
    /// Gives the profile the names its debug info has (see the module documentation):
    /// `sub_<hex>` entry points get their function's name, sync objects in a data symbol get
    /// [`crate::profile::ObjectProfile::symbol`]. Returns where the names came from; problems
    /// go to [`Profile::warnings`]. Call once, right after loading.
    pub fn resolve_names(&mut self, r: &Resolver) -> Option<String> {
        let mut warnings = Vec::new();
        let found = r.lookup(self, &mut warnings);
        self.warnings.extend(warnings);
        let found = found?;
        let t = &found.table;
        for pm in self.points.iter_mut().filter(|pm| pm.kind == POINT_ENTRY && pm.function.starts_with("sub_")) {
            if let Some(name) = pm.address_value().and_then(|a| t.function_at(a)) {
                pm.function = name.to_owned();
            }
        }
        if let Some(bias) = self.load_bias {
            for o in self.objects.iter_mut().filter(|o| o.kind != stint_layout::OBJ_THREAD) {
                o.symbol = t.data_at(o.address.wrapping_sub(bias));
            }
        }
        Some(found.source.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_like_the_rewriter() {
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar");
        assert_eq!(demangle("_ZN3foo3barEv.cold"), "foo::bar.cold");
        assert_eq!(demangle("big_lock"), "big_lock");
    }

    #[test]
    fn data_symbols_are_size_aware() {
        let t = SymbolTable {
            functions: vec![],
            data: vec![
                Sym { address: 0x1000, size: 0x40, local: false, name: "big_lock".into() },
                Sym { address: 0x2000, size: 0x400, local: false, name: "_PyRuntime".into() },
                Sym { address: 0x3000, size: 0, local: true, name: "end_marker".into() },
            ],
            build_id: None,
        };
        assert_eq!(t.data_at(0x1000).as_deref(), Some("big_lock"));
        assert_eq!(t.data_at(0x21a8).as_deref(), Some("_PyRuntime+0x1a8"));
        assert_eq!(t.data_at(0x1040), None);
        assert_eq!(t.data_at(0x3000).as_deref(), Some("end_marker"));
        assert_eq!(t.data_at(0x3001), None);
        assert_eq!(t.data_at(0x10), None);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(SymbolTable::parse(b"not an elf"), Err(SymbolError::Elf(_))));
    }
}
