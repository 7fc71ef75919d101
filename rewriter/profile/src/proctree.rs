//! Process trees (D22): the profiles of one run of a program that forks and execs, put
//! together as the tree of process images they came from, with per-image totals
//! (`stint report --tree`, `stint ls`, `stint run`).
//!
//! Every image that runs instrumented code has a profile of its own; the header says how it
//! is related to the others ([`crate::profile::ProcessInfo`]). An image's parent is, first
//! match wins:
//! 1. **exec**: the profile named by `exec_from` (the image it replaced in the same pid);
//! 2. **fork**: the profile named by `parent_profile` (recorded by a fork child of a
//!    rewritten program, which copies its parent's profile path; for the grandchild of a
//!    double fork whose middle process ran no instrumented code, the grandparent's);
//! 3. **child**: otherwise (a `posix_spawn`, a `vfork` + `exec`, a fork that ran no
//!    instrumented code before its `exec`) the newest image of process `ppid` that started
//!    before this one; none: the image is a root.
//!
//! Files are matched to recorded paths by file name (and, for `exec_from`, pid), so a tree still forms when the
//! profiles were moved or were created through a relative `STINT_PROFILE`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::json::process_json;
use crate::profile::Profile;
use crate::report::functions;

/// How an image is related to its parent in the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Link {
    /// No parent among the profiles.
    Root,
    /// Forked from the parent (recorded by the runtime).
    Fork,
    /// Replaced the parent by `exec` in the same process (recorded by the runtime).
    Exec,
    /// A child process of the parent's (inferred from the parent pid and the start times).
    Child,
}

impl Link {
    pub fn name(self) -> &'static str {
        match self {
            Link::Root => "root",
            Link::Fork => "fork",
            Link::Exec => "exec",
            Link::Child => "child",
        }
    }
}

/// One image of the tree.
#[derive(Clone, Debug)]
pub struct Node {
    pub path: PathBuf,
    pub profile: Profile,
    /// Index of the parent image in [`Tree::nodes`].
    pub parent: Option<usize>,
    pub link: Link,
    /// Indices of the children, by start time.
    pub children: Vec<usize>,
}

/// An image's totals: calls over its threads, and the inclusive times of each thread's
/// outermost timed function (the time spent in instrumented code), summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub calls: u64,
    pub cpu_ns: Option<u64>,
    pub wall_ns: Option<u64>,
}

impl Totals {
    fn add(&mut self, o: &Totals) {
        self.calls = self.calls.saturating_add(o.calls);
        let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        self.cpu_ns = sum(self.cpu_ns, o.cpu_ns);
        self.wall_ns = sum(self.wall_ns, o.wall_ns);
    }
}

/// The totals of profile `p`.
pub fn totals(p: &Profile) -> Totals {
    let mut t = Totals { calls: p.total_calls(), cpu_ns: None, wall_ns: None };
    for th in &p.threads {
        let rows = functions(p, th);
        let max = |f: fn(&crate::report::FunctionCalls) -> Option<u64>| rows.iter().filter_map(f).max();
        t.add(&Totals { calls: 0, cpu_ns: max(|r| r.cpu_ns), wall_ns: max(|r| r.wall_ns) });
    }
    t
}

/// Profiles arranged as process trees.
#[derive(Clone, Debug, Default)]
pub struct Tree {
    /// In input order.
    pub nodes: Vec<Node>,
    /// The images without a parent among the profiles, by start time.
    pub roots: Vec<usize>,
}

fn file_name(p: &str) -> Option<&std::ffi::OsStr> {
    Path::new(p).file_name()
}

impl Tree {
    /// Arrange `(path, profile)` pairs (see the module documentation).
    pub fn build(items: Vec<(PathBuf, Profile)>) -> Tree {
        let mut nodes: Vec<Node> = items
            .into_iter()
            .map(|(path, profile)| Node { path, profile, parent: None, link: Link::Root, children: Vec::new() })
            .collect();
        let find = |nodes: &[Node], recorded: &str, pid: u32| {
            nodes.iter().position(|n| n.profile.pid == pid && n.path.file_name() == file_name(recorded))
        };
        for i in 0..nodes.len() {
            let p = &nodes[i].profile;
            let exec = p.process.exec_from.as_deref().and_then(|r| find(&nodes, r, p.pid));
            // Not by pid: the recorded parent may be a grandparent (the middle process of a
            // double fork ran no instrumented code and has no profile).
            let fork =
                p.process.parent_profile.as_deref().and_then(|r| {
                    nodes.iter().position(|n| n.profile.pid != p.pid && n.path.file_name() == file_name(r))
                });
            let (parent, link) = match (exec, fork) {
                (Some(e), _) if e != i => (Some(e), Link::Exec),
                (_, Some(f)) if f != i => (Some(f), Link::Fork),
                _ => {
                    let start = p.start_realtime_ns;
                    let child = (0..nodes.len())
                        .filter(|&j| {
                            j != i && nodes[j].profile.pid == p.ppid && nodes[j].profile.start_realtime_ns <= start
                        })
                        .max_by_key(|&j| nodes[j].profile.start_realtime_ns);
                    (child, if child.is_some() { Link::Child } else { Link::Root })
                }
            };
            nodes[i].parent = parent;
            nodes[i].link = link;
        }
        // A cycle (only possible in hand-edited files) is broken by making its member a root.
        for i in 0..nodes.len() {
            let mut seen = 0;
            let mut cur = nodes[i].parent;
            while let Some(c) = cur {
                seen += 1;
                if c == i || seen > nodes.len() {
                    nodes[i].parent = None;
                    nodes[i].link = Link::Root;
                    break;
                }
                cur = nodes[c].parent;
            }
        }
        let by_start = |v: &mut Vec<usize>, nodes: &[Node]| {
            v.sort_by_key(|&j| (nodes[j].profile.start_realtime_ns, nodes[j].profile.start_monotonic_ns, j))
        };
        let mut roots = Vec::new();
        for i in 0..nodes.len() {
            match nodes[i].parent {
                Some(p) => nodes[p].children.push(i),
                None => roots.push(i),
            }
        }
        for i in 0..nodes.len() {
            let mut c = std::mem::take(&mut nodes[i].children);
            by_start(&mut c, &nodes);
            nodes[i].children = c;
        }
        by_start(&mut roots, &nodes);
        Tree { nodes, roots }
    }

    /// The images in tree order (each root, then its descendants depth first), with their
    /// depth.
    pub fn walk(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut stack: Vec<(usize, usize)> = self.roots.iter().rev().map(|&r| (r, 0)).collect();
        while let Some((i, d)) = stack.pop() {
            out.push((i, d));
            stack.extend(self.nodes[i].children.iter().rev().map(|&c| (c, d + 1)));
        }
        out
    }

    /// The paths of the images under (and including) root `r`.
    pub fn paths_under(&self, r: usize) -> Vec<PathBuf> {
        let mut out = vec![self.nodes[r].path.clone()];
        let mut i = 0;
        while i < out.len() {
            let n = self.nodes.iter().position(|n| n.path == out[i]);
            if let Some(n) = n {
                out.extend(self.nodes[n].children.iter().map(|&c| self.nodes[c].path.clone()));
            }
            i += 1;
        }
        out
    }
}

/// How a process ended, as its parent saw it (D22).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Exit status (0–255).
    Exit(u32),
    /// Killed by this signal.
    Signal(u32),
}

/// Record how process `pid` ended in its profile among the files of `dir` (the newest one of
/// that pid whose image `exec` did not replace), as a rewritten parent's `wait` does: what
/// `stint run` does for the program it started. Returns the profile written, if any.
pub fn record_end(dir: &Path, pid: u32, end: End) -> std::io::Result<Option<PathBuf>> {
    use std::os::unix::fs::FileExt;
    use stint_layout::{FileHeader, Pod, ProcessEnd, FILE_MAGIC, FILE_VERSION};
    let mut best: Option<(u64, PathBuf)> = None;
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        if path.extension().is_none_or(|x| x != "stint") {
            continue;
        }
        let mut head = vec![0u8; std::mem::size_of::<FileHeader>()];
        let Ok(f) = std::fs::File::open(&path) else { continue };
        if f.read_exact_at(&mut head, 0).is_err() {
            continue;
        }
        let Some(h) = FileHeader::read_from(&head, 0) else { continue };
        let fits =
            h.magic == FILE_MAGIC && h.version == FILE_VERSION && h.pid == pid && h.end_how != ProcessEnd::Exec as u32;
        if fits && best.as_ref().is_none_or(|(t, _)| h.start_monotonic_ns > *t) {
            best = Some((h.start_monotonic_ns, path));
        }
    }
    let Some((_, path)) = best else { return Ok(None) };
    let (how, status) = match end {
        End::Exit(s) => (ProcessEnd::Exit, s),
        End::Signal(n) => (ProcessEnd::Signal, n),
    };
    let f = std::fs::OpenOptions::new().write(true).open(&path)?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    f.write_all_at(&status.to_le_bytes(), std::mem::offset_of!(FileHeader, end_status) as u64)?;
    f.write_all_at(&now.to_le_bytes(), std::mem::offset_of!(FileHeader, end_realtime_ns) as u64)?;
    f.write_all_at(&(how as u32).to_le_bytes(), std::mem::offset_of!(FileHeader, end_how) as u64)?;
    Ok(Some(path))
}

/// One image of the tree as the JSON of `stint report --tree --format json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeNodeJson {
    pub file: String,
    pub program: String,
    pub pid: u32,
    pub parent_pid: u32,
    /// Index of the parent image in `processes`; `null` for a root.
    pub parent: Option<usize>,
    pub link: Link,
    pub depth: usize,
    pub argv: Vec<String>,
    /// `null` while running, else `exec`, `exit`, `signal` or `gone` (no end recorded).
    pub ended: Option<String>,
    /// The exit status, when `ended` is `exit`.
    #[serde(default)]
    pub exit_status: Option<u32>,
    /// The signal that killed the process, when `ended` is `signal`.
    #[serde(default)]
    pub signal: Option<u32>,
    pub totals: Totals,
}

/// `stint-proctree/1`: the images in tree order, and the totals over all of them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeJson {
    pub schema: String,
    pub processes: Vec<TreeNodeJson>,
    pub totals: Totals,
}

/// `schema` of [`TreeJson`].
pub const TREE_SCHEMA: &str = "stint-proctree/1";

/// The tree as its JSON document.
pub fn to_json(t: &Tree) -> TreeJson {
    let order = t.walk();
    let pos = |i: usize| order.iter().position(|&(j, _)| j == i);
    let mut all = Totals::default();
    let processes = order
        .iter()
        .map(|&(i, depth)| {
            let n = &t.nodes[i];
            let tot = totals(&n.profile);
            all.add(&tot);
            let ended = process_json(&n.profile).ended;
            TreeNodeJson {
                file: n.path.display().to_string(),
                program: n.profile.program.clone(),
                pid: n.profile.pid,
                parent_pid: n.profile.ppid,
                parent: n.parent.and_then(pos),
                link: n.link,
                depth,
                argv: n.profile.process.argv.clone(),
                exit_status: ended.as_ref().and_then(|e| e.exit_status),
                signal: ended.as_ref().and_then(|e| e.signal),
                ended: ended.map(|e| e.how),
                totals: tot,
            }
        })
        .collect();
    TreeJson { schema: TREE_SCHEMA.to_owned(), processes, totals: all }
}

fn ms(ns: Option<u64>) -> String {
    ns.map_or_else(|| "-".to_owned(), |v| format!("{:.3}", v as f64 / 1e6))
}

/// The tree as text: one line per image, indented under its parent, with how it is linked,
/// its pid, its totals, how it ended and its arguments after `argv[0]`; then the totals.
///
/// ```text
/// process tree: 3 profiles, 1 root
/// root  proctree  pid 100  calls 4  cpu ms -  wall ms -  ended exec
/// ├─ fork  proctree  pid 101  calls 12  cpu ms -  wall ms -  ended signal 9 (SIGKILL)
/// └─ exec  proctree  pid 100  calls 32  cpu ms -  wall ms -  ended exit 5  args: reexec
/// total  calls 48  cpu ms -  wall ms -
/// ```
pub fn to_table(t: &Tree) -> String {
    let mut out = String::new();
    let roots = t.roots.len();
    let _ = writeln!(
        out,
        "process tree: {} profile{}, {roots} root{}",
        t.nodes.len(),
        if t.nodes.len() == 1 { "" } else { "s" },
        if roots == 1 { "" } else { "s" }
    );
    let order = t.walk();
    // For each depth, whether the ancestor at that depth has later siblings (draw `│`).
    let mut open: Vec<bool> = Vec::new();
    let mut all = Totals::default();
    for (k, &(i, depth)) in order.iter().enumerate() {
        let n = &t.nodes[i];
        let last = !order[k + 1..].iter().take_while(|&&(_, d)| d >= depth).any(|&(_, d)| d == depth);
        open.truncate(depth);
        let mut prefix = String::new();
        if depth > 0 {
            for &o in open.iter().skip(1) {
                prefix.push_str(if o { "│  " } else { "   " });
            }
            prefix.push_str(if last { "└─ " } else { "├─ " });
        }
        open.push(!last);
        let tot = totals(&n.profile);
        all.add(&tot);
        let p = &n.profile;
        let ended = process_json(p).ended.map_or_else(|| "no (running)".to_owned(), |e| e.label());
        let _ = write!(
            out,
            "{prefix}{}  {}  pid {}  calls {}  cpu ms {}  wall ms {}  ended {ended}",
            n.link.name(),
            p.program,
            p.pid,
            tot.calls,
            ms(tot.cpu_ns),
            ms(tot.wall_ns)
        );
        let args = p.process.argv.get(1..).unwrap_or(&[]);
        if !args.is_empty() {
            let _ = write!(out, "  args: {}", args.join(" "));
        }
        out.push('\n');
    }
    let _ = writeln!(out, "total  calls {}  cpu ms {}  wall ms {}", all.calls, ms(all.cpu_ns), ms(all.wall_ns));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::ProcessInfo;

    fn prof(pid: u32, ppid: u32, start: u64, process: ProcessInfo) -> Profile {
        let b = crate::synthetic::write_synthetic(
            &crate::synthetic::synthetic_meta("synthetic", &[("main", "0x1000")]),
            &[],
        );
        let mut p = crate::profile::parse_with(&b, &crate::profile::Observer::ENDED).unwrap();
        p.pid = pid;
        p.ppid = ppid;
        p.start_realtime_ns = start;
        p.process = process;
        p
    }

    #[test]
    fn exec_fork_and_inferred_children_form_one_tree() {
        let exec_of = |f: &str| ProcessInfo { exec_from: Some(format!("/elsewhere/{f}")), ..Default::default() };
        let fork_of = |f: &str| ProcessInfo { parent_profile: Some(format!("rel/{f}")), ..Default::default() };
        let items = vec![
            (PathBuf::from("d/p.10.1.stint"), prof(10, 1, 50, exec_of("p.10.stint"))),
            (PathBuf::from("d/p.10.stint"), prof(10, 1, 1, ProcessInfo::default())),
            (PathBuf::from("d/p.11.stint"), prof(11, 10, 2, fork_of("p.10.stint"))),
            (PathBuf::from("d/p.12.stint"), prof(12, 10, 3, ProcessInfo::default())),
            (PathBuf::from("d/q.99.stint"), prof(99, 1, 4, ProcessInfo::default())),
        ];
        let t = Tree::build(items);
        let links: Vec<(u32, Link, Option<usize>)> =
            t.nodes.iter().map(|n| (n.profile.pid, n.link, n.parent)).collect();
        assert_eq!(
            links,
            vec![
                (10, Link::Exec, Some(1)),
                (10, Link::Root, None),
                (11, Link::Fork, Some(1)),
                (12, Link::Child, Some(1)),
                (99, Link::Root, None)
            ]
        );
        assert_eq!(t.roots, vec![1, 4]);
        assert_eq!(t.walk(), vec![(1, 0), (2, 1), (3, 1), (0, 1), (4, 0)]);
        assert_eq!(t.paths_under(1).len(), 4);
        let text = to_table(&t);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "process tree: 5 profiles, 2 roots");
        assert!(lines[1].starts_with("root  synthetic  pid 10  calls 0"), "{text}");
        assert!(lines[2].starts_with("├─ fork  synthetic  pid 11"), "{text}");
        assert!(lines[3].starts_with("├─ child  synthetic  pid 12"), "{text}");
        assert!(lines[4].starts_with("└─ exec  synthetic  pid 10"), "{text}");
        assert!(lines[5].starts_with("root  synthetic  pid 99"), "{text}");
        let j = to_json(&t);
        assert_eq!(j.processes.iter().map(|p| p.parent).collect::<Vec<_>>(), [None, Some(0), Some(0), Some(0), None]);
    }

    #[test]
    fn ends_show_their_status_or_signal() {
        let ended = |end: &str, status: u32| ProcessInfo { end: end.into(), end_status: status, ..Default::default() };
        let items = vec![
            (PathBuf::from("p.10.stint"), prof(10, 1, 1, ended("exit", 3))),
            (PathBuf::from("p.11.stint"), prof(11, 10, 2, ended("signal", 9))),
            (PathBuf::from("p.12.stint"), prof(12, 10, 3, ended("signal", 64))),
            (PathBuf::from("p.13.stint"), prof(13, 10, 4, ended("running", 0))),
        ];
        let t = Tree::build(items);
        let j = to_json(&t);
        let ends: Vec<(Option<&str>, Option<u32>, Option<u32>)> =
            j.processes.iter().map(|p| (p.ended.as_deref(), p.exit_status, p.signal)).collect();
        assert_eq!(
            ends,
            [
                (Some("exit"), Some(3), None),
                (Some("signal"), None, Some(9)),
                (Some("signal"), None, Some(64)),
                (Some("gone"), None, None)
            ]
        );
        let text = to_table(&t);
        let tails: Vec<&str> = text.lines().skip(1).take(4).map(|l| l.split("  ended ").nth(1).unwrap_or("")).collect();
        assert_eq!(
            tails,
            ["exit 3", "signal 9 (SIGKILL)", "signal 64", "unrecorded (killed, or returned from main unseen)"],
            "{text}"
        );
    }

    #[test]
    fn record_end_writes_the_newest_image_of_the_pid() {
        let dir = std::env::temp_dir().join(format!("stint-record-end-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let meta = crate::synthetic::synthetic_meta("p", &[("main", "0x1000")]);
        let write = |name: &str, pid: u32, start: u64, end_how: u32| {
            let mut b = crate::synthetic::write_synthetic(&meta, &[]);
            crate::synthetic::patch_header(&mut b, |h| {
                h.pid = pid;
                h.start_monotonic_ns = start;
                h.end_how = end_how;
            });
            std::fs::write(dir.join(name), b).unwrap();
        };
        write("p.7.stint", 7, 1, stint_layout::ProcessEnd::Exec as u32); // replaced by exec
        write("q.7.stint", 7, 2, 0); // the image that ran last
        write("q.7.1.stint", 7, 0, 0); // an older one of a recycled pid
        write("p.8.stint", 8, 3, 0);
        let got = record_end(&dir, 7, End::Signal(11)).unwrap();
        assert_eq!(got, Some(dir.join("q.7.stint")));
        let read = |name: &str| {
            let b = std::fs::read(dir.join(name)).unwrap();
            crate::profile::parse_with(&b, &crate::profile::Observer::ENDED).unwrap()
        };
        let p = read("q.7.stint");
        assert_eq!((p.process.end.as_str(), p.process.end_status), ("signal", 11));
        assert_ne!(p.process.end_realtime_ns, 0);
        assert_eq!(read("q.7.1.stint").process.end, "running");
        assert_eq!(read("p.7.stint").process.end, "exec");
        assert_eq!(record_end(&dir, 9, End::Exit(0)).unwrap(), None, "no profile of pid 9");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_pid_parent_that_started_later_is_not_the_parent() {
        let items = vec![
            (PathBuf::from("p.10.stint"), prof(10, 1, 100, ProcessInfo::default())),
            (PathBuf::from("p.11.stint"), prof(11, 10, 5, ProcessInfo::default())),
        ];
        let t = Tree::build(items);
        assert_eq!(t.roots.len(), 2, "a recycled pid 10 that started after 11 is not its parent");
    }
}
