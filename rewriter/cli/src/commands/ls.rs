//! `stint ls`: the live profile files of this user's processes, found by
//! [`stint_profile::discover`], printed as a table or as JSON. The table shows process trees
//! ([`stint_profile::proctree`]): a child's row follows its parent's, its program indented
//! under it and marked `(fork)`, `(exec)` or `(child)`.

use std::io::Write;

use stint_profile::discover::{scan, Entry, EntryJson};
use stint_profile::proctree;

use crate::args::LsArgs;
use crate::fmt::{fmt_duration, layout_rows};

pub fn run(args: LsArgs) -> anyhow::Result<()> {
    let (entries, warnings) = scan(args.all);
    for w in &warnings {
        eprintln!("stint ls: {w}");
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &to_json(&entries))?;
        writeln!(out)?;
    } else if !entries.is_empty() {
        write!(out, "{}", to_table(&in_tree_order(entries.clone())))?;
    }
    if entries.is_empty() {
        eprintln!("no live stint profiles");
    }
    Ok(())
}

/// The document of `stint ls --json`: an array, by pid.
fn to_json(entries: &[Entry]) -> Vec<EntryJson> {
    entries.iter().map(EntryJson::from).collect()
}

/// The entries with the program column showing the tree: children after their parent,
/// indented by depth and marked with how they are related (the profiles are read again for
/// their lineage; one that cannot be read keeps its place as a root).
fn in_tree_order(entries: Vec<Entry>) -> Vec<Entry> {
    let mut items = Vec::new();
    let mut unread = Vec::new();
    for e in entries {
        match stint_profile::profile::load(&e.path) {
            Ok(p) => items.push((e, p)),
            Err(_) => unread.push(e),
        }
    }
    let (mut entries, profiles): (Vec<Option<Entry>>, Vec<_>) =
        items.into_iter().map(|(e, p)| (Some(e.clone()), (e.path, p))).unzip();
    let tree = proctree::Tree::build(profiles);
    let mut out: Vec<Entry> = tree
        .walk()
        .into_iter()
        .filter_map(|(i, depth)| {
            let mut e = entries.get_mut(i)?.take()?;
            let n = &tree.nodes[i];
            if n.link != proctree::Link::Root {
                e.program = format!("{}{} ({})", "  ".repeat(depth), e.program, n.link.name());
                e.fork_child = false; // said by the mark
            }
            Some(e)
        })
        .collect();
    out.extend(unread);
    out
}

/// The table of `stint ls`.
///
/// ```text
/// PID    PPID   PROGRAM          UPTIME  THREADS  PATH
/// 41230  41100  server           2m05s   9/12     /tmp/server.41230.stint
/// 41377  41230  server (fork)    0.4 s   1/1      /tmp/server.41377.stint
/// ```
fn to_table(entries: &[Entry]) -> String {
    let mut rows = vec![["PID", "PPID", "PROGRAM", "UPTIME", "THREADS", "PATH"].map(String::from).to_vec()];
    for e in entries {
        rows.push(vec![
            e.pid.to_string(),
            e.ppid.to_string(),
            if e.fork_child { format!("{} (fork)", e.program) } else { e.program.clone() },
            e.uptime_s.map_or("-".into(), fmt_duration),
            format!("{}/{}", e.threads_live, e.threads),
            e.path.display().to_string(),
        ]);
    }
    layout_rows(&rows, &[false, false, false, true, true, false])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;
    use stint_profile::synthetic::{patch_header, synthetic_meta, write_synthetic};

    #[test]
    fn children_follow_their_parent_indented_and_marked() {
        let dir = std::env::temp_dir().join(format!("stint-ls-tree-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let meta = synthetic_meta("server", &[("main", "0x1000")]);
        let file = |pid: u32, ppid: u32, start: u64, parent: &str| {
            let mut b = write_synthetic(&meta, &[(pid, vec![(0, 1)])]);
            patch_header(&mut b, |h| {
                h.ppid = ppid;
                h.start_realtime_ns = start;
                stint_layout::set_text_field(&mut h.parent_profile, parent.as_bytes());
            });
            let path = dir.join(format!("server.{pid}.stint"));
            std::fs::write(&path, b).unwrap();
            path
        };
        let entry = |pid: u32, path: PathBuf| Entry {
            pid,
            ppid: 1,
            fork_child: false,
            program: "server".into(),
            path,
            uptime_s: None,
            threads: 1,
            threads_live: 1,
            alive: true,
        };
        // By pid, as `scan` lists them: the child (a lower pid, recycled) before its parent.
        let child = entry(7, file(7, 9, 2, "/elsewhere/server.9.stint"));
        let other = entry(8, file(8, 1, 3, ""));
        let parent = entry(9, file(9, 1, 1, ""));
        let order = in_tree_order(vec![child, other, parent]);
        std::fs::remove_dir_all(&dir).unwrap();
        let shown: Vec<(u32, &str)> = order.iter().map(|e| (e.pid, e.program.as_str())).collect();
        assert_eq!(shown, [(9, "server"), (7, "  server (fork)"), (8, "server")]);
    }

    #[test]
    fn table_and_json() {
        let e = |pid, fork_child| Entry {
            pid,
            ppid: 100,
            fork_child,
            program: "server".into(),
            path: PathBuf::from(format!("/tmp/server.{pid}.stint")),
            uptime_s: Some(125.25),
            threads: 12,
            threads_live: 9,
            alive: true,
        };
        let entries = [e(41230, false), e(41377, true)];
        assert_eq!(
            to_table(&entries),
            "PID    PPID  PROGRAM        UPTIME  THREADS  PATH\n\
             41230  100   server          2m05s     9/12  /tmp/server.41230.stint\n\
             41377  100   server (fork)   2m05s     9/12  /tmp/server.41377.stint\n"
        );
        let j = serde_json::to_value(to_json(&entries)).unwrap();
        assert_eq!(
            j[1],
            json!({"pid": 41377, "ppid": 100, "program": "server", "path": "/tmp/server.41377.stint",
                   "uptime_s": 125.25, "threads": 12, "threads_live": 9, "alive": true, "fork_child": true})
        );
        // The field order is the contract's.
        let keys: Vec<&String> = j[1].as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["pid", "ppid", "program", "path", "uptime_s", "threads", "threads_live", "alive", "fork_child"]
        );
        assert_eq!(serde_json::to_value(to_json(&[])).unwrap(), json!([]));
    }
}
