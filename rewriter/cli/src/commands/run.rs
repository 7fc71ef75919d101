//! `stint run -- PROG ARGS…`: rewrite PROG into the cache ([`crate::cache`]) unless it is
//! there already, run the rewritten copy as if it were PROG (argv[0], stdin, stdout, stderr,
//! signals sent to `stint run`, exit status or death by signal), with its profiles (and those
//! of its forked children and exec'd images) in a private temporary directory; then print
//! every profile of the run to stderr (or `-o FILE`), in the order of the process tree the
//! profiles record ([`proctree`]), after that tree, and exit as the program did.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use anyhow::{anyhow, Context};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;
use stint_profile::profile::Profile;
use stint_profile::{json, proctree, profile, report};

use crate::args::{RunArgs, RunFormat};
use crate::cache;
use crate::input::{program_name, read_input};

/// Signals `stint run` passes on to the program.
const FORWARDED: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    let argv0 = a.command[0].clone();
    let prog = resolve(&argv0)?;
    let spec_text = match &a.spec {
        Some(p) => std::fs::read_to_string(p).with_context(|| p.display().to_string())?,
        None => String::new(),
    };
    let spec = if a.spec.is_some() {
        stint_rewrite::spec::Spec::parse(&spec_text)
            .map_err(|e| anyhow!("{}: {e}", a.spec.as_ref().map(|p| p.display().to_string()).unwrap_or_default()))?
    } else {
        stint_rewrite::spec::Spec::default_spec()
    };
    let control = match &a.control {
        Some(c) => Some(std::path::absolute(c).with_context(|| c.display().to_string())?),
        None => None,
    };
    let rewritten = cached_rewrite(&prog, &spec_text, &spec, a.verbose)?;
    let program = program_name(&prog);
    let dir = private_temp_dir(&program)?;
    let result = run_program(&rewritten, &argv0, &a.command[1..], &dir, &program, control.as_deref());
    let status = match result {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    // The parent of the root records how it ended (D22), as a rewritten parent's wait does.
    let end = status.status.code().map(|c| proctree::End::Exit(c as u32 & 0xff));
    if let Some(end) = end.or(status.status.signal().map(|n| proctree::End::Signal(n as u32))) {
        let _ = proctree::record_end(&dir, status.pid, end);
    }
    if let Err(e) = print_profiles(&a, &dir, status.pid) {
        // The program ran; its exit status still wins, the report problem is said on stderr.
        eprintln!("stint: {}", crate::one_line(&e));
    }
    if a.keep {
        eprintln!("stint: profiles kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    exit_like(status.status)
}

/// PROG as a path: as given if it contains a `/`, else the first executable of that name in
/// `PATH`.
fn resolve(prog: &OsStr) -> anyhow::Result<PathBuf> {
    let shown = Path::new(prog).display().to_string();
    if prog.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(prog));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for d in std::env::split_paths(&path) {
        let d = if d.as_os_str().is_empty() { PathBuf::from(".") } else { d };
        let cand = d.join(prog);
        if let Ok(m) = std::fs::metadata(&cand) {
            if m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0 {
                return Ok(cand);
            }
        }
    }
    Err(anyhow!("{shown}: not found in PATH"))
}

/// The rewritten copy of `prog` in the cache: reused if present, else rewritten and written
/// atomically.
fn cached_rewrite(
    prog: &Path,
    spec_text: &str,
    spec: &stint_rewrite::spec::Spec,
    verbose: bool,
) -> anyhow::Result<PathBuf> {
    let data = read_input(prog)?;
    let program = program_name(prog);
    let dir = cache::cache_dir()?;
    let key = cache::key(&data, spec_text, false);
    let entry = cache::entry(&dir, &key, &program);
    if entry.is_file() {
        if verbose {
            eprintln!("stint: {}: cached rewrite {}", prog.display(), entry.display());
        }
        return Ok(entry);
    }
    let input = crate::input::absolute_input(prog);
    let opts = stint_rewrite::Options { program: &program, input: input.as_deref(), spec, traps: false };
    let (out, report) = stint_rewrite::rewrite(&data, &opts).map_err(|e| anyhow!("{}: {e}", prog.display()))?;
    cache::create_private_dir(entry.parent().expect("entry has a parent"))?;
    cache::write_atomically(&entry, &out, 0o700)?;
    if verbose {
        eprintln!(
            "stint: {}: rewrote into {} ({:.2}% of entries patched)",
            prog.display(),
            entry.display(),
            report.summary.entry_coverage_pct
        );
    }
    Ok(entry)
}

/// A new directory only we can read, for the profiles of this run.
fn private_temp_dir(program: &str) -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir();
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    for n in 0..100u32 {
        let dir = base.join(format!("stint-run-{program}-{}-{nanos:x}-{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(anyhow!("{}: cannot create directory: {e}", dir.display())),
        }
    }
    Err(anyhow!("{}: cannot create a temporary directory", base.display()))
}

struct Finished {
    pid: u32,
    status: ExitStatus,
}

/// Run the rewritten program and wait for it, passing on the signals `stint run` is sent.
fn run_program(
    exe: &Path,
    argv0: &OsStr,
    args: &[OsString],
    dir: &Path,
    program: &str,
    control: Option<&Path>,
) -> anyhow::Result<Finished> {
    // `%` in the directory is escaped so that only the file name's `%p` becomes the pid.
    let mut template = dir.as_os_str().as_bytes().iter().fold(Vec::new(), |mut v, &b| {
        v.push(b);
        if b == b'%' {
            v.push(b'%');
        }
        v
    });
    template.extend_from_slice(format!("/{program}.%p.stint").as_bytes());
    let mut cmd = std::process::Command::new(exe);
    cmd.arg0(argv0).args(args).env(stint_layout::ENV_PROFILE, OsStr::from_bytes(&template));
    match control {
        Some(c) => cmd.env(stint_layout::ENV_CONTROL, c),
        None => cmd.env_remove(stint_layout::ENV_CONTROL),
    };
    // Register the handlers before the program starts, so no signal is lost in between; the
    // program itself starts with default dispositions (exec resets caught signals).
    let mut signals =
        SignalsInfo::<WithOrigin>::new(FORWARDED).map_err(|e| anyhow!("cannot install signal handlers: {e}"))?;
    let handle = signals.handle();
    let mut child = cmd.spawn().map_err(|e| anyhow!("{}: cannot run: {e}", Path::new(argv0).display()))?;
    let pid = child.id();
    let forwarder = std::thread::spawn(move || {
        for info in signals.forever() {
            // A signal the kernel sent (a terminal's ^C, ^\ or hangup) went to the whole
            // foreground process group, the program included: passing it on would deliver it
            // twice. One sent to us alone (kill, a supervisor) is passed on.
            if matches!(info.cause, Cause::Kernel) {
                continue;
            }
            // SAFETY: kill(2) with a pid we started and have not reaped yet.
            unsafe {
                libc::kill(pid as libc::pid_t, info.signal);
            }
        }
    });
    let status = child.wait().map_err(|e| anyhow!("{}: wait: {e}", Path::new(argv0).display()));
    handle.close();
    let _ = forwarder.join();
    Ok(Finished { pid, status: status? })
}

/// Load every profile in `dir`, in process-tree order ([`proctree`]: each image after its
/// parent, by start time, the tree of `main_pid` first), with how each is related to its
/// parent.
fn load_profiles(dir: &Path, main_pid: u32) -> anyhow::Result<Vec<(PathBuf, Profile, Relation)>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| dir.display().to_string())? {
        let path = e.with_context(|| dir.display().to_string())?.path();
        if path.extension().is_some_and(|x| x == "stint") {
            let p = profile::load(&path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
            v.push((path, p));
        }
    }
    let mut tree = proctree::Tree::build(v);
    tree.roots.sort_by_key(|&r| tree.nodes[r].profile.pid != main_pid);
    let order = tree.walk();
    let relation = |i: usize| {
        let n = &tree.nodes[i];
        n.parent.map(|p| (n.link, tree.nodes[p].profile.pid))
    };
    let rel: Vec<Relation> = order.iter().map(|&(i, _)| relation(i)).collect();
    let mut nodes: Vec<Option<proctree::Node>> = tree.nodes.into_iter().map(Some).collect();
    Ok(order
        .iter()
        .zip(rel)
        .filter_map(|(&(i, _), r)| nodes.get_mut(i)?.take().map(|n| (n.path, n.profile, r)))
        .collect())
}

/// How an image is related to the one it came from: (link, that image's pid); `None` for a
/// root.
type Relation = Option<(proctree::Link, u32)>;

fn print_profiles(a: &RunArgs, dir: &Path, main_pid: u32) -> anyhow::Result<()> {
    let profiles = load_profiles(dir, main_pid)?;
    if profiles.is_empty() {
        return Err(anyhow!("{}: the program wrote no profile", dir.display()));
    }
    let text = render(a.format, &profiles)?;
    match &a.output {
        Some(path) => cache::write_atomically(path, text.as_bytes(), 0o644),
        None => {
            let mut err = std::io::stderr().lock();
            err.write_all(text.as_bytes())?;
            Ok(err.flush()?)
        }
    }
}

/// The report of every profile of the run in `format`: JSON (one document, or an array in
/// tree order), CSV, or the tables, after the process tree when there is more than one image.
fn render(format: RunFormat, profiles: &[(PathBuf, Profile, Relation)]) -> anyhow::Result<String> {
    Ok(match format {
        RunFormat::Json => {
            let docs: Vec<_> = profiles.iter().map(|(_, p, _)| json::profile_json(p)).collect();
            let mut s = if docs.len() == 1 {
                serde_json::to_string_pretty(&docs[0])?
            } else {
                serde_json::to_string_pretty(&docs)?
            };
            s.push('\n');
            s
        }
        RunFormat::Table => {
            let mut s = String::new();
            if profiles.len() > 1 {
                let items = profiles.iter().map(|(f, p, _)| (f.clone(), p.clone())).collect();
                s.push_str(&proctree::to_table(&proctree::Tree::build(items)));
                s.push('\n');
            }
            for (i, (_, p, rel)) in profiles.iter().enumerate() {
                if i > 0 {
                    s.push('\n');
                }
                let role = match rel {
                    None => String::new(),
                    Some((proctree::Link::Exec, _)) => " (exec'd in the same process)".to_owned(),
                    Some((link, parent)) => format!(" (child of {parent}, {})", link.name()),
                };
                s.push_str(&format!("== {} pid {}{role} ==\n", p.program, p.pid));
                s.push_str(&report::to_table(p));
            }
            s
        }
        RunFormat::Csv => to_csv(profiles),
    })
}

/// One row per (process, thread, function): `pid,ppid,program,tid,thread,function,address,
/// calls,cpu_ns,wall_ns` (times empty where the function is not timed).
fn to_csv(profiles: &[(PathBuf, Profile, Relation)]) -> String {
    let mut s = String::from("pid,ppid,program,tid,thread,function,address,calls,cpu_ns,wall_ns\n");
    let opt = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or_default();
    for (_, p, _) in profiles {
        for t in &p.threads {
            let thread_name = t.name.clone().or_else(|| report::start_routine(p, t)).unwrap_or_default();
            for f in report::functions(p, t) {
                s.push_str(&stint_profile::csv::record(&[
                    p.pid.to_string(),
                    p.ppid.to_string(),
                    p.program.clone(),
                    t.tid.to_string(),
                    thread_name.clone(),
                    f.name.clone(),
                    f.address.clone(),
                    f.calls.to_string(),
                    opt(f.cpu_ns),
                    opt(f.wall_ns),
                ]));
            }
        }
    }
    s
}

/// Exit with the program's status, or die by the signal that killed it.
fn exit_like(status: ExitStatus) -> ! {
    let _ = std::io::stdout().flush();
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    if let Some(sig) = status.signal() {
        // SAFETY: restoring the default action and raising a signal in our own process.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            // No core file of stint: the program's own crash is what the user wants to see.
            let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::raise(sig);
        }
        std::process::exit(128 + sig);
    }
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_finds_programs_in_path() {
        let sh = resolve(OsStr::new("sh")).expect("sh in PATH");
        assert!(sh.is_absolute() || sh.starts_with("."), "{}", sh.display());
        assert_eq!(resolve(OsStr::new("./x")).unwrap(), PathBuf::from("./x"));
        let e = resolve(OsStr::new("no-such-program-stint")).unwrap_err().to_string();
        assert_eq!(e, "no-such-program-stint: not found in PATH");
    }
}
