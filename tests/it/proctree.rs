//! Process trees (issue 18, DESIGN D22): every image of a program that forks, spawns and
//! execs itself gets a profile that names its parent, the program's output is untouched, and
//! `stint report --tree` puts the profiles back together.
//!
//! `testbins/proctree.c` makes, in one run: a fork child (fork_fn ×11), a fork child
//! (pre_exec_fn ×5) that execs itself (exec_fn ×13), a posix_spawn (spawn_fn ×17), a vfork +
//! exec (vfork_fn ×19), a fork from a non-main thread (thread_fork_fn ×23), a double-forked
//! setsid daemon (daemon_fn ×29, which the root waits for through a pipe), and finally an
//! exec of itself in place (reexec_fn ×31); the root calls root_fn ×3.
//!
//! | test | what it checks |
//! | --- | --- |
//! | `pattern_<variant>` | `STINT_PROFILE=dir/proctree.%p.stint`: same stdout, stderr and exit as the original; 9 profiles; every marked function's calls summed over them exact; one root, every other profile linked to its parent as the program made it; the cwd stays empty |
//! | `fixed_name` | the same with `STINT_PROFILE=dir/tree.stint`: every image takes the next free name (`tree.1.stint`, …) |
//! | `stint_dir` | the same with `STINT_DIR` |
//! | `no_variable` | the same with no `STINT_*` in an empty cwd (profiles in `$XDG_RUNTIME_DIR/stint`) |
//! | `control_file_reaches_every_image` | a `STINT_CONTROL` file selecting four functions holds in forked, spawned and exec'd images: only those are counted, exactly |
//! | `stint_log_takes_the_lost_measurement_line` | a refused profile directory: with `STINT_LOG` the one `stint:` line goes into that file and stderr is the original's |
//! | `report_tree_snapshot` | `stint report --tree` of a run, pids replaced by their order of appearance, times by `[t]` (insta) |
//! | `ends_are_recorded` | `testbins/proctree_end.c` (`STINT_DIR`): children that end by `exit(3)` from a thread (reaped by a raw system call: the child's own record), `return 5` from main, `_exit(7)`, SIGKILL and SIGSEGV (reaped by `waitpid`, `wait4`, `waitid`, `wait`: the parent's record) show exactly that in `--tree` JSON (`ended`, `exit_status`, `signal`) and in `stint report`'s header; the same output as the original |
//! | `main_returns_under_a_shell_<variant>` | `testbins/proctree_main.c` run by `sh -c` (a parent that is not rewritten) returning 0, 3, 256 and 300 from main: the same output and exit status as the original, and the profile's `ended` / `exit_status` (JSON) and report header exactly the status the shell saw (`& 0xff`); pie-O0 and a stripped pie-O2 |
//! | `exit_and_underscore_exit_under_a_shell` | the same program calling `exit(3)`, `_exit(300)` and `syscall(SYS_exit_group, 9)` |
//! | `static_<kind>_ends` | the same program built glibc `-static`, `-static-pie`, `musl-gcc -static`: main's return (0, 3, 256, 300), `exit(3)`, `_exit(300)` and `syscall(SYS_exit_group, 9)` recorded exactly (`exit`, `_exit`, `_Exit`, `__libc_start_main` and `syscall` are wrapped by name) |
//! | `static_glibc_stripped_main_returns` | glibc `-static`, stripped: main's return recorded (`__libc_start_main` found from `_start`) |
//! | `wait_wrapper_stack_is_small` | a thread with a `PTHREAD_STACK_MIN` stack forks a child and reaps it with `waitpid`: the child's `exit 7` is recorded, and the rewritten program uses at most 1 KiB more of that stack than the original |
//! | `fork_child_starts_on_its_own_stack` | a thread with a `PTHREAD_STACK_MIN` stack forks, and the child calls `main_fn` ×5: the same output and exit status as the original (before, the child's runtime start-up overflowed that stack), the child's profile counts `main_fn` exactly 5 times, and the child used at most 1 KiB more of the stack than the original's child |
//! | `exec_into_another_program_names_the_profile_it_replaced` | the same run's last child execs the rewritten `proctree` (another program name, another profile name): its profile's `exec_from` names the `proctree_end` profile it replaced, and the tree links them |
//! | `stint_run_records_the_root` | `stint run` records how the program it started ended (return 4 from main) in the root's profile |
//! | `children_off_measures_only_the_root` | a control file with `children: off`: only the root process measures (its first image and the one it execs in place); the output is the original's |
//! | `children_inherit_the_control_file` | without `children:` every image of the tree applies the parent's control file (`on: [calls]`, one function): exact counts in every image |
//! | `git_alias_runs_git_again` | `/usr/bin/git` rewritten, `git -c alias.x='!"$G" status --short; "$G" checkout nosuch' x` (git forks a shell that runs git twice, the second fails): the same stdout, stderr (git's error line) and exit status 1 as git's, four profiles in one tree, the inner gits children of the forked image, each image's exit status recorded |

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;

/// The marked functions and how often the whole tree calls each.
const MARKED: [(&str, u64); 9] = [
    ("root_fn", 3),
    ("fork_fn", 11),
    ("pre_exec_fn", 5),
    ("exec_fn", 13),
    ("spawn_fn", 17),
    ("vfork_fn", 19),
    ("thread_fork_fn", 23),
    ("daemon_fn", 29),
    ("reexec_fn", 31),
];

/// How each image of a run is linked to its parent, root first, in tree order: (link, the
/// marked function the image calls).
const TREE: [(&str, &str); 10] = [
    ("root", "root_fn"),
    ("fork", "fork_fn"),
    ("fork", "pre_exec_fn"),
    ("exec", "exec_fn"),
    ("child", "spawn_fn"),
    ("child", "vfork_fn"),
    ("fork", "thread_fork_fn"),
    // The daemon's first child calls no marked function, but fork and setsid are measured
    // import calls (library time, D19), so it is an image of the tree too.
    ("fork", ""),
    ("fork", "daemon_fn"),
    ("exec", "reexec_fn"),
];

/// The original and the rewritten proctree of `variant`.
fn programs(variant: Variant) -> (PathBuf, PathBuf) {
    let bin = build(&program("proctree"), variant);
    let out = run_root().join("proctree").join("rewritten").join(variant.name()).join("proctree");
    static REWRITE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = REWRITE.lock().unwrap_or_else(|e| e.into_inner());
    if !out.exists() {
        rewrite(&bin, &out);
    }
    (bin, out)
}

/// A private directory (0700), as the runtime wants for `STINT_DIR` and XDG.
fn private_dir(dir: &Path, name: &str) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    d
}

/// Run the original and the rewritten program in an empty cwd with `env`; they must behave
/// the same and leave the cwd empty. Returns the rewritten run.
fn run_both(dir: &Path, variant: Variant, env: &[(&str, &str)]) -> Outcome {
    let (bin, out) = programs(variant);
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let go = |p: &Path| {
        let mut r = Run::new(p, &cwd);
        for (k, v) in env {
            r = r.env(k, v);
        }
        r.run()
    };
    let orig = go(&bin);
    assert_eq!(orig.status, 5, "the original: {orig:?}");
    let rw = go(&out);
    assert!(rw.same_behaviour(&orig), "{}", describe_difference("original", &orig, "rewritten", &rw));
    assert_eq!(dir_entries(&cwd), Vec::<String>::new(), "the cwd must stay empty");
    rw
}

/// `stint report --tree DIR --format json`.
fn tree_json(dir: &Path) -> Value {
    let o = stint(&["report", "--tree", path_str(dir), "--format", "json"]);
    assert_eq!(o.status, 0, "stint report --tree: {o:?}");
    serde_json::from_slice(&o.stdout).expect("tree JSON")
}

/// The checks every variable setting shares: 10 profiles in `profiles`, exact sums, and the
/// tree the program made, each image linked to its parent.
fn check_tree(profiles: &Path, rw: &Outcome) {
    let files = dir_entries(profiles);
    assert_eq!(files.len(), TREE.len(), "one profile per image: {files:?}");
    let reports: BTreeMap<String, Value> = files.iter().map(|f| (f.clone(), report_json(&profiles.join(f)))).collect();
    for (name, want) in MARKED {
        let got: u64 = reports.values().map(|r| calls_of(r, name)).sum();
        assert_eq!(got, want, "{name}: calls summed over {files:?}");
    }
    let tree = tree_json(profiles);
    let procs = tree["processes"].as_array().expect("processes");
    let shape: Vec<(String, String)> = procs
        .iter()
        .map(|p| {
            let file = Path::new(p["file"].as_str().unwrap()).file_name().unwrap().to_string_lossy().into_owned();
            let marked = MARKED.iter().find(|(f, _)| calls_of(&reports[&file], f) > 0).map_or("", |m| m.0);
            (p["link"].as_str().unwrap().to_owned(), marked.to_owned())
        })
        .collect();
    let want: Vec<(String, String)> = TREE.iter().map(|(l, f)| (l.to_string(), f.to_string())).collect();
    assert_eq!(shape, want, "the process tree: {tree:#}");
    // Each profile names its parent: the root's parent is the test, every other image's
    // parent is an image of the tree, and the JSON keys agree with the tree.
    assert_eq!(procs[0]["pid"], rw.pid, "the root is the process the test started");
    for p in &procs[1..] {
        let parent = &procs[p["parent"].as_u64().expect("a parent") as usize];
        let file = Path::new(p["file"].as_str().unwrap()).file_name().unwrap().to_string_lossy().into_owned();
        let r = &reports[&file];
        assert_eq!(r["parent_pid"], r["ppid"], "{file}");
        match p["link"].as_str().unwrap() {
            "exec" => {
                assert_eq!(p["pid"], parent["pid"], "{file}: an exec keeps the pid");
                let from = r["exec_from"].as_str().expect("exec_from");
                assert!(parent["file"]
                    .as_str()
                    .unwrap()
                    .ends_with(Path::new(from).file_name().unwrap().to_str().unwrap()));
                let role = p["argv"][1].as_str().unwrap_or("");
                assert!(["exec-image", "reexec"].contains(&role), "{file}: an exec'd image has its own arguments");
            }
            "fork" => {
                let pp = r["parent_profile"].as_str().expect("parent_profile");
                assert!(parent["file"]
                    .as_str()
                    .unwrap()
                    .ends_with(Path::new(pp).file_name().unwrap().to_str().unwrap()));
            }
            _ => assert_eq!(r["parent_pid"], parent["pid"], "{file}: a spawned child's parent pid"),
        }
    }
    // Every image ended: the root and the fork child that exec'd by exec; every other child
    // by exit 0, recorded by itself (`_exit`, a return from main) or by the rewritten parent
    // that reaped it; the last image, whose parent is this test, returns 5 from main, which
    // its main thunk records.
    let ended: Vec<(&str, Value)> =
        procs.iter().map(|p| (p["ended"].as_str().unwrap_or("running"), p["exit_status"].clone())).collect();
    let exit0 = ("exit", Value::from(0));
    let exec = ("exec", Value::Null);
    let want = [exec.clone(), exit0.clone(), exec, exit0.clone(), exit0.clone(), exit0.clone(), exit0.clone()];
    let want: Vec<(&str, Value)> = want.into_iter().chain([exit0.clone(), exit0, ("exit", Value::from(5))]).collect();
    assert_eq!(ended, want, "{tree:#}");
}

#[test]
fn pattern_pie_o0() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-pattern");
    let profiles = private_dir(&dir, "profiles");
    let rw = run_both(&dir, Variant::PieO0, &[("STINT_PROFILE", &profile_template(&profiles, "proctree"))]);
    check_tree(&profiles, &rw);
}

#[test]
fn pattern_nopie_o2() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-pattern-nopie");
    let profiles = private_dir(&dir, "profiles");
    let rw = run_both(&dir, Variant::NopieO2, &[("STINT_PROFILE", &profile_template(&profiles, "proctree"))]);
    check_tree(&profiles, &rw);
}

#[test]
fn fixed_name() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-fixed");
    let profiles = private_dir(&dir, "profiles");
    let rw = run_both(&dir, Variant::PieO0, &[("STINT_PROFILE", path_str(&profiles.join("tree.stint")))]);
    let mut want: Vec<String> = (1..TREE.len()).map(|k| format!("tree.{k}.stint")).collect();
    want.insert(0, "tree.stint".into());
    want.sort();
    assert_eq!(dir_entries(&profiles), want, "the next free name each time");
    check_tree(&profiles, &rw);
}

#[test]
fn stint_dir() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-dir");
    let profiles = dir.join("profiles"); // created by the runtime
    let rw = run_both(&dir, Variant::PieO0, &[("STINT_DIR", path_str(&profiles))]);
    check_tree(&profiles, &rw);
}

#[test]
fn no_variable() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-none");
    let xdg = private_dir(&dir, "xdg");
    let rw = run_both(&dir, Variant::PieO0, &[("XDG_RUNTIME_DIR", path_str(&xdg))]);
    check_tree(&xdg.join("stint"), &rw);
}

#[test]
fn control_file_reaches_every_image() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-control");
    let profiles = private_dir(&dir, "profiles");
    let control = dir.join("control.yaml");
    std::fs::write(&control, "on: [calls]\nfunctions: [root_fn, fork_fn, exec_fn, daemon_fn]\n").unwrap();
    run_both(
        &dir,
        Variant::PieO0,
        &[("STINT_PROFILE", &profile_template(&profiles, "proctree")), ("STINT_CONTROL", path_str(&control))],
    );
    let reports: Vec<Value> = dir_entries(&profiles).iter().map(|f| report_json(&profiles.join(f))).collect();
    for (name, n) in MARKED {
        let want = if ["root_fn", "fork_fn", "exec_fn", "daemon_fn"].contains(&name) { n } else { 0 };
        let got: u64 = reports.iter().map(|r| calls_of(r, name)).sum();
        assert_eq!(got, want, "{name}: the control file holds in every image");
    }
}

#[test]
fn stint_log_takes_the_lost_measurement_line() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-log");
    let open = dir.join("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let log = dir.join("stint.log");
    run_both(&dir, Variant::PieO0, &[("STINT_DIR", path_str(&open)), ("STINT_LOG", path_str(&log))]);
    let text = std::fs::read_to_string(&log).expect("the log");
    assert!(
        !text.is_empty()
            && text.lines().all(|l| l.starts_with("stint: proctree: profile directory is open to other users")),
        "{text}"
    );
    assert_eq!(dir_entries(&open), Vec::<String>::new(), "no profile in a refused directory");
}

/// The original and the rewritten proctree_end (pie-O0).
fn end_programs() -> (PathBuf, PathBuf) {
    let bin = build(&program("proctree_end"), Variant::PieO0);
    let out = run_root().join("proctree").join("rewritten").join("end").join("proctree_end");
    static REWRITE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = REWRITE.lock().unwrap_or_else(|e| e.into_inner());
    if !out.exists() {
        rewrite(&bin, &out);
    }
    (bin, out)
}

/// proctree_end run (original, then rewritten) with `STINT_DIR` = `profiles`, its last
/// child exec'ing proctree (original or rewritten to match); returns the rewritten run.
fn run_ends(dir: &Path, profiles: &Path) -> Outcome {
    let (bin, out) = end_programs();
    let (other_bin, other_out) = programs(Variant::PieO0);
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let go =
        |p: &Path, other: &Path| Run::new(p, &cwd).args([path_str(other)]).env("STINT_DIR", path_str(profiles)).run();
    let orig = go(&bin, &other_bin);
    assert_eq!(orig.status, 4, "the original: {orig:?}");
    assert_eq!(
        orig.stdout_str(),
        "a: exit 3\nb: exit 5\nc: exit 7\nd: signal 9\ne: signal 11\nexec-image: 247\nf: exit 0\n",
        "{orig:?}"
    );
    let rw = go(&out, &other_out);
    assert!(rw.same_behaviour(&orig), "{}", describe_difference("original", &orig, "rewritten", &rw));
    assert_eq!(dir_entries(&cwd), Vec::<String>::new(), "the cwd must stay empty");
    rw
}

/// The image of `procs` (tree JSON) whose profile counts calls of `marked`.
fn image_calling<'a>(procs: &'a [Value], profiles: &Path, marked: &str) -> &'a Value {
    let found: Vec<&Value> = procs
        .iter()
        .filter(|p| {
            calls_of(&report_json(&profiles.join(Path::new(p["file"].as_str().unwrap()).file_name().unwrap())), marked)
                > 0
        })
        .collect();
    assert_eq!(found.len(), 1, "one image calls {marked}: {procs:#?}");
    found[0]
}

#[test]
fn ends_are_recorded() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-ends");
    let profiles = private_dir(&dir, "profiles");
    run_ends(&dir, &profiles);
    let tree = tree_json(&profiles);
    let procs = tree["processes"].as_array().expect("processes");
    assert_eq!(procs.len(), 8, "root, a–e, f and its exec'd image: {tree:#}");
    let end = |p: &Value| (p["ended"].clone(), p["exit_status"].clone(), p["signal"].clone());
    let exit = |s: u64| (Value::from("exit"), Value::from(s), Value::Null);
    let signal = |n: u64| (Value::from("signal"), Value::Null, Value::from(n));
    let want = [
        // The test reaps the root: its main thunk records its return from main.
        ("root_fn", exit(4)),
        ("a_fn", exit(3)),
        ("b_fn", exit(5)),
        ("c_fn", exit(7)),
        ("d_fn", signal(9)),
        ("e_fn", signal(11)),
        ("f_fn", (Value::from("exec"), Value::Null, Value::Null)),
        ("exec_fn", exit(0)),
    ];
    for (marked, want) in want {
        let p = image_calling(procs, &profiles, marked);
        assert_eq!(end(p), want, "{marked}: {p:#}");
    }
    // The report header and its JSON say the same.
    let killed = image_calling(procs, &profiles, "d_fn");
    let o = stint(&["report", killed["file"].as_str().unwrap()]);
    assert_eq!(o.status, 0, "{o:?}");
    assert!(o.stdout_str().contains("ended signal 9 (SIGKILL)"), "{}", o.stdout_str());
    let r = report_json(Path::new(image_calling(procs, &profiles, "c_fn")["file"].as_str().unwrap()));
    assert_eq!((r["ended"]["how"].as_str(), r["ended"]["exit_status"].as_u64()), (Some("exit"), Some(7)), "{r:#}");
    let root = image_calling(procs, &profiles, "root_fn");
    let o = stint(&["report", root["file"].as_str().unwrap()]);
    assert!(o.stdout_str().contains("ended exit 4"), "{}", o.stdout_str());
}

#[test]
fn exec_into_another_program_names_the_profile_it_replaced() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-other-exec");
    let profiles = private_dir(&dir, "profiles");
    run_ends(&dir, &profiles);
    let tree = tree_json(&profiles);
    let procs = tree["processes"].as_array().expect("processes");
    let before = image_calling(procs, &profiles, "f_fn");
    let after = image_calling(procs, &profiles, "exec_fn");
    assert_eq!((before["program"].as_str(), after["program"].as_str()), (Some("proctree_end"), Some("proctree")));
    assert_eq!(after["pid"], before["pid"], "an exec keeps the pid");
    let r = report_json(Path::new(after["file"].as_str().unwrap()));
    assert_eq!(r["exec_from"].as_str(), before["file"].as_str(), "{r:#}");
    assert_eq!(after["link"], "exec");
    assert_eq!(procs[after["parent"].as_u64().unwrap() as usize]["file"], before["file"], "{tree:#}");
}

#[test]
fn stint_run_records_the_root() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-run-end");
    let (bin, _) = end_programs();
    let json = dir.join("run.json");
    let o = Run::new(stint_bin(), &dir)
        .env("XDG_CACHE_HOME", path_str(&dir.join("cache")))
        .args(["run", "--format", "json", "-o", path_str(&json), "--", path_str(&bin)])
        .run();
    assert_eq!(o.status, 4, "stint run exits as the program did: {o:?}");
    let docs: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let docs = docs.as_array().expect("one document per image");
    assert_eq!(docs.len(), 6, "{docs:#?}");
    let root = &docs[0];
    assert_eq!(calls_of(root, "root_fn"), 1, "{root:#}");
    assert_eq!((root["ended"]["how"].as_str(), root["ended"]["exit_status"].as_u64()), (Some("exit"), Some(4)));
    assert_eq!(root["ended"]["signal"], Value::Null);
}

#[test]
fn children_off_measures_only_the_root() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-children-off");
    let profiles = private_dir(&dir, "profiles");
    let control = dir.join("control.yaml");
    std::fs::write(&control, "children: off\n").unwrap();
    run_both(
        &dir,
        Variant::PieO0,
        &[("STINT_PROFILE", &profile_template(&profiles, "proctree")), ("STINT_CONTROL", path_str(&control))],
    );
    let files = dir_entries(&profiles);
    assert_eq!(files.len(), 2, "the root's two images only: {files:?}");
    let reports: Vec<Value> = files.iter().map(|f| report_json(&profiles.join(f))).collect();
    for (name, n) in MARKED {
        let want = if ["root_fn", "reexec_fn"].contains(&name) { n } else { 0 };
        let got: u64 = reports.iter().map(|r| calls_of(r, name)).sum();
        assert_eq!(got, want, "{name}: only the root process measures");
    }
    let tree = tree_json(&profiles);
    let links: Vec<&str> = tree["processes"].as_array().unwrap().iter().map(|p| p["link"].as_str().unwrap()).collect();
    assert_eq!(links, ["root", "exec"], "{tree:#}");
}

#[test]
fn children_inherit_the_control_file() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-children-inherit");
    let profiles = private_dir(&dir, "profiles");
    let control = dir.join("control.yaml");
    std::fs::write(&control, "on: [calls]\nfunctions: [spawn_fn, thread_fork_fn]\nchildren: on\n").unwrap();
    run_both(
        &dir,
        Variant::PieO0,
        &[("STINT_PROFILE", &profile_template(&profiles, "proctree")), ("STINT_CONTROL", path_str(&control))],
    );
    let files = dir_entries(&profiles);
    // Every image an exec starts (the root, exec-image, spawned, vforked, reexec) and the one
    // fork child that calls a selected function (a fork child's profile starts at its first
    // measured event).
    assert_eq!(files.len(), 6, "{files:?}");
    let reports: Vec<Value> = files.iter().map(|f| report_json(&profiles.join(f))).collect();
    for (name, n) in MARKED {
        let want = if ["spawn_fn", "thread_fork_fn"].contains(&name) { n } else { 0 };
        let got: u64 = reports.iter().map(|r| calls_of(r, name)).sum();
        assert_eq!(got, want, "{name}: the spawned child and the fork child apply the root's control file");
    }
}

/// Replace each whole-word number of `pids` by `[pN]` in order of first appearance, and
/// times (`0.123`) by `[t]`.
fn redact_tree(text: &str, tmp: &str) -> String {
    let mut seen: Vec<String> = Vec::new();
    text.replace(tmp, "[tmp]")
        .lines()
        .map(|l| {
            let mut words: Vec<String> = l.split(' ').map(str::to_owned).collect();
            for k in 1..words.len() {
                if words[k - 1] == "pid" {
                    let n = seen.iter().position(|s| *s == words[k]).unwrap_or_else(|| {
                        seen.push(words[k].clone());
                        seen.len() - 1
                    });
                    words[k] = format!("[p{}]", n + 1);
                }
                if words[k].contains('.') && words[k].chars().all(|c| c.is_ascii_digit() || c == '.') {
                    words[k] = "[t]".into();
                }
            }
            words.join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn report_tree_snapshot() {
    let _share = cpu_share();
    let dir = fresh_dir("proctree-snapshot");
    let profiles = private_dir(&dir, "profiles");
    run_both(&dir, Variant::PieO0, &[("STINT_PROFILE", &profile_template(&profiles, "proctree"))]);
    let o = stint(&["report", "--tree", path_str(&profiles)]);
    assert_eq!(o.status, 0, "{o:?}");
    let text = redact_tree(&o.stdout_str(), &run_root().to_string_lossy());
    insta::with_settings!({snapshot_path => "snapshots", prepend_module_to_snapshot => false, omit_expression => true}, {
        insta::assert_snapshot!("proctree_report_tree", text);
    });
}

#[test]
fn git_alias_runs_git_again() {
    let _share = cpu_share();
    let git = Path::new("/usr/bin/git");
    if !git.exists() {
        assert!(!under_ci(), "/usr/bin/git is missing (apt-get install git)");
        eprintln!("skipped: no /usr/bin/git");
        return;
    }
    let dir = fresh_dir("proctree-git");
    let rewritten = dir.join("bin").join("git");
    rewrite(git, &rewritten);
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let init = Run::new(git, &repo).args(["init", "-q"]).run();
    assert_eq!(init.status, 0, "{init:?}");
    std::fs::write(repo.join("file.txt"), "x\n").unwrap();
    let profiles = private_dir(&dir, "profiles");
    // The alias runs git twice; the second fails, so stderr has git's own error line and the
    // exit status is 1: both must be the original's, byte for byte.
    let go = |g: &Path| {
        Run::new(g, &repo)
            .args(["-c", "alias.x=!\"$G\" status --short; \"$G\" checkout nosuch", "x"])
            .env("G", path_str(g))
            .env("STINT_DIR", path_str(&profiles))
            .run()
    };
    let orig = go(git);
    assert_eq!(
        (orig.status, orig.stdout_str().as_str(), String::from_utf8_lossy(&orig.stderr).as_ref()),
        (1, "?? file.txt\n", "error: pathspec 'nosuch' did not match any file(s) known to git\n"),
        "{orig:?}"
    );
    let rw = go(&rewritten);
    assert!(rw.same_behaviour(&orig), "{}", describe_difference("git", &orig, "rewritten git", &rw));
    let tree = tree_json(&profiles);
    let procs = tree["processes"].as_array().unwrap();
    let shape: Vec<(&str, u64)> =
        procs.iter().map(|p| (p["link"].as_str().unwrap(), p["depth"].as_u64().unwrap())).collect();
    // git; its fork child (which runs the shell); the two gits the shell starts.
    assert_eq!(shape, [("root", 0), ("fork", 1), ("child", 2), ("child", 2)], "{tree:#}");
    assert_eq!(procs[0]["pid"], rw.pid);
    assert_eq!(procs[2]["argv"], serde_json::json!([path_str(&rewritten), "status", "--short"]), "{tree:#}");
    // git ends by calling exit (recorded by each image); the shell's end is recorded in the
    // fork image's profile by the git that reaped it.
    let ends: Vec<(&str, u64)> = procs
        .iter()
        .map(|p| (p["ended"].as_str().unwrap_or("running"), p["exit_status"].as_u64().unwrap_or(99)))
        .collect();
    assert_eq!(ends, [("exit", 1), ("exit", 1), ("exit", 0), ("exit", 1)], "{tree:#}");
    assert_eq!(dir_entries(&repo), [".git", "file.txt"], "nothing new in the work tree");
}

/// The original and the rewritten proctree_main of `variant`.
fn main_programs(variant: Variant) -> (PathBuf, PathBuf) {
    let bin = build(&program("proctree_main"), variant);
    let out = run_root().join("proctree").join("rewritten").join("main").join(variant.name()).join("proctree_main");
    static REWRITE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = REWRITE.lock().unwrap_or_else(|e| e.into_inner());
    if !out.exists() {
        rewrite(&bin, &out);
    }
    (bin, out)
}

/// `prog ARGS` run by `sh -c` (a parent that is not rewritten: the common case), with
/// `STINT_DIR` = `profiles`; the shell exits with the program's status.
fn under_shell(prog: &Path, args: &[&str], cwd: &Path, profiles: &Path) -> Outcome {
    let mut a = vec!["-c", "\"$0\" \"$@\"; exit $?", path_str(prog)];
    a.extend(args);
    Run::new(Path::new("/bin/sh"), cwd).args(a).env("STINT_DIR", path_str(profiles)).run()
}

/// Each case (arguments, the exit status the shell sees) run under a shell, original then
/// rewritten: the same behaviour, that status, one profile whose JSON (`ended`,
/// `exit_status`) and report header say exactly that status.
fn check_ends_under_a_shell(label: &str, bin: &Path, out: &Path, cases: &[(&[&str], i32)]) {
    let _share = cpu_share();
    for (k, (args, want)) in cases.iter().enumerate() {
        let dir = fresh_dir(&format!("proctree-main-{label}-{k}"));
        let cwd = dir.join("cwd");
        std::fs::create_dir_all(&cwd).unwrap();
        let profiles = private_dir(&dir, "profiles");
        let orig = under_shell(bin, args, &cwd, &profiles);
        assert_eq!(orig.status, *want, "{label} {args:?}: the original: {orig:?}");
        let rw = under_shell(out, args, &cwd, &profiles);
        assert!(
            rw.same_behaviour(&orig),
            "{label} {args:?}: {}",
            describe_difference("original", &orig, "rewritten", &rw)
        );
        let files = dir_entries(&profiles);
        assert_eq!(files.len(), 1, "{label} {args:?}: one profile: {files:?}");
        let file = profiles.join(&files[0]);
        let r = report_json(&file);
        let ended = (r["ended"]["how"].as_str(), r["ended"]["exit_status"].as_i64(), r["ended"]["signal"].as_u64());
        assert_eq!(ended, (Some("exit"), Some(*want as i64), None), "{label} {args:?}: {:#}", r["ended"]);
        let tree = tree_json(&profiles);
        let p = &tree["processes"][0];
        assert_eq!((p["ended"].as_str(), p["exit_status"].as_i64()), (Some("exit"), Some(*want as i64)), "{tree:#}");
        let o = stint(&["report", path_str(&file)]);
        assert!(o.stdout_str().contains(&format!("ended exit {want} ")), "{label} {args:?}: {}", o.stdout_str());
    }
}

/// main returns 0, 3, 256 (the shell sees 0) and 300 (44).
const MAIN_RETURNS: [(&[&str], i32); 4] = [(&["0"], 0), (&["3"], 3), (&["256"], 0), (&["300"], 44)];
/// exit(3), _exit(300) (the shell sees 44) and syscall(SYS_exit_group, 9).
const EXITS: [(&[&str], i32); 3] = [(&["exit", "3"], 3), (&["_exit", "300"], 44), (&["exit_group", "9"], 9)];

#[test]
fn main_returns_under_a_shell_pie_o0() {
    let (bin, out) = main_programs(Variant::PieO0);
    check_ends_under_a_shell("pie-O0", &bin, &out, &MAIN_RETURNS);
}

#[test]
fn main_returns_under_a_shell_pie_o2_stripped() {
    let (bin, out) = main_programs(Variant::PieO2Stripped);
    check_ends_under_a_shell("pie-O2-stripped", &bin, &out, &MAIN_RETURNS);
}

#[test]
fn exit_and_underscore_exit_under_a_shell() {
    let (bin, out) = main_programs(Variant::PieO0);
    check_ends_under_a_shell("pie-O0-exit", &bin, &out, &EXITS);
}

/// proctree_main built with `cc flags` (a static program), stripped if asked, and
/// rewritten; `None` after a loud message when the compiler is missing (a failure under CI).
fn static_main_programs(
    label: &str,
    cc: &str,
    flags: &[&str],
    package: &str,
    stripped: bool,
) -> Option<(PathBuf, PathBuf)> {
    if std::process::Command::new(cc).arg("--version").output().is_err() {
        assert!(!under_ci(), "{cc}: missing under CI; .ci/run must `apt-get install {package}`");
        eprintln!("\n!!!!!!!!!! SKIPPED: {cc} is not installed (apt-get install {package}); this test checks nothing here !!!!!!!!!!\n");
        return None;
    }
    let dir = fresh_dir(&format!("proctree-static-{label}"));
    let bin = dir.join("proctree_main");
    let src = testbins_dir().join("proctree_main.c");
    let mut args: Vec<&str> = flags.to_vec();
    args.extend(["-o", path_str(&bin), path_str(&src)]);
    tool(cc, &args);
    if stripped {
        tool("strip", &[path_str(&bin)]);
    }
    let out = dir.join("out").join("proctree_main");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    rewrite(&bin, &out);
    Some((bin, out))
}

fn static_ends(label: &str, cc: &str, flags: &[&str], package: &str) {
    let Some((bin, out)) = static_main_programs(label, cc, flags, package, false) else { return };
    let cases: Vec<(&[&str], i32)> = MAIN_RETURNS.iter().chain(EXITS.iter()).copied().collect();
    check_ends_under_a_shell(label, &bin, &out, &cases);
}

#[test]
fn static_glibc_ends() {
    static_ends("glibc-static", "gcc", &["-O2", "-static", "-pthread"], "gcc");
}

#[test]
fn static_glibc_pie_ends() {
    static_ends("glibc-static-pie", "gcc", &["-O2", "-fPIE", "-static-pie", "-pthread"], "gcc");
}

#[test]
fn static_musl_ends() {
    static_ends("musl-static", "musl-gcc", &["-O2", "-static"], "musl-tools");
}

#[test]
fn static_glibc_stripped_main_returns() {
    let flags = ["-O2", "-static", "-pthread"];
    let Some((bin, out)) = static_main_programs("glibc-static-stripped", "gcc", &flags, "gcc", true) else { return };
    check_ends_under_a_shell("glibc-static-stripped", &bin, &out, &MAIN_RETURNS);
}

/// The bytes of the small stack the program says it used ("stack: N").
fn stack_used(o: &Outcome) -> i64 {
    let text = o.stdout_str();
    let line = text.lines().find_map(|l| l.strip_prefix("stack: ")).unwrap_or_else(|| panic!("no stack line: {o:?}"));
    line.parse().unwrap()
}

#[test]
fn fork_child_starts_on_its_own_stack() {
    let _share = cpu_share();
    let (bin, out) = main_programs(Variant::PieO0);
    let dir = fresh_dir("proctree-fork-stack");
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let profiles = private_dir(&dir, "profiles");
    let orig = under_shell(&bin, &["forkstack"], &cwd, &profiles);
    assert_eq!(orig.status, 0, "{orig:?}");
    assert_eq!(orig.stdout_str().lines().nth(1), Some("child: exit 9"), "{orig:?}");
    let rw = under_shell(&out, &["forkstack"], &cwd, &profiles);
    assert_eq!((rw.status, rw.stderr.as_slice()), (orig.status, orig.stderr.as_slice()), "{rw:?}");
    // Line by line but for the stack figure: "child stack: N (35)", "child: exit 9".
    let strip = |o: &Outcome| -> Vec<String> {
        o.stdout_str().lines().map(|l| l.split_once(": ").map_or(l, |(_, v)| v).to_owned()).collect()
    };
    let (was, is) = (strip(&orig), strip(&rw));
    assert_eq!(was.len(), 2, "{orig:?}");
    assert_eq!(is.len(), 2, "{rw:?}");
    assert_eq!(is[1], was[1], "the child's exit");
    let used = |l: &str| -> i64 { l.split(' ').next().unwrap().parse().unwrap() };
    assert_eq!(is[0].split_once(' ').map(|p| p.1), was[0].split_once(' ').map(|p| p.1), "the child's result");
    let (was_used, is_used) = (used(&was[0]), used(&is[0]));
    assert!(
        is_used - was_used <= 1024,
        "the rewritten child used {is_used} bytes of the small stack, the original {was_used}"
    );
    // Two images: the root and its fork child, which counted main_fn exactly.
    let tree = tree_json(&profiles);
    let procs = tree["processes"].as_array().expect("processes");
    let links: Vec<(Option<&str>, Option<u64>)> =
        procs.iter().map(|p| (p["link"].as_str(), p["exit_status"].as_u64())).collect();
    assert_eq!(links, [(Some("root"), Some(0)), (Some("fork"), Some(9))], "{tree:#}");
    let child = report_json(Path::new(procs[1]["file"].as_str().unwrap()));
    assert_eq!(calls_of(&child, "main_fn"), 5, "{child:#}");
    let root = report_json(Path::new(procs[0]["file"].as_str().unwrap()));
    assert_eq!(calls_of(&root, "main_fn"), 1, "{root:#}");
}

#[test]
fn wait_wrapper_stack_is_small() {
    let _share = cpu_share();
    let (bin, out) = main_programs(Variant::PieO0);
    let dir = fresh_dir("proctree-main-stack");
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let profiles = private_dir(&dir, "profiles");
    let orig = under_shell(&bin, &["stack"], &cwd, &profiles);
    assert_eq!((orig.status, orig.stdout_str().lines().next()), (0, Some("child: exit 7")), "{orig:?}");
    let rw = under_shell(&out, &["stack"], &cwd, &profiles);
    assert_eq!((rw.status, rw.stdout_str().lines().next()), (0, Some("child: exit 7")), "{rw:?}");
    assert_eq!(rw.stderr, orig.stderr);
    let (was, is) = (stack_used(&orig), stack_used(&rw));
    assert!(is - was <= 1024, "the rewritten program used {is} bytes of the small stack, the original {was}");
    // The waitpid wrapper recorded the child's end; the root recorded its return from main.
    let tree = tree_json(&profiles);
    let procs = tree["processes"].as_array().expect("processes");
    let ended: Vec<(Option<&str>, Option<u64>, Option<&str>)> =
        procs.iter().map(|p| (p["link"].as_str(), p["exit_status"].as_u64(), p["ended"].as_str())).collect();
    assert_eq!(ended, [(Some("root"), Some(0), Some("exit")), (Some("fork"), Some(7), Some("exit"))], "{tree:#}");
}

/// `testbins/fork_calls.c` rewritten with a spec of calls only: the children of `fork()` and
/// of the raw `fork` system call (which leaves the parent's libc tid word in the child) each
/// count into a profile of their own, also the calls of the parent's function, and the parent
/// counts exactly its own (issue 14: the calls-only entry path tells a fork child by the fork
/// cookie, a page the kernel zeroes in the child; before it, the raw child's calls landed in
/// the parent's column). The output is the original's.
#[test]
fn calls_only_fork_children_count_into_their_own_profiles() {
    let dir = fresh_dir("fork-calls");
    // Not a `testbins/` program: with the default spec its raw fork child is the known gap
    // (README, Limits), which the behaviour tests of every testbin would have to expect.
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/it/src/fork_calls.c");
    let bin = dir.join("fork_calls.orig");
    let cc = std::process::Command::new("gcc")
        .args(["-O2", "-fPIE", "-pie", "-Wall", "-Werror", "-o", path_str(&bin), path_str(&src)])
        .output()
        .expect("gcc");
    assert!(cc.status.success(), "gcc fork_calls.c: {}", String::from_utf8_lossy(&cc.stderr));
    let spec = dir.join("calls.yaml");
    std::fs::write(&spec, "metrics: [{name: calls, kind: counter, at: entry, on_at_start: true}]\n").unwrap();
    let out = dir.join("fork_calls");
    let o = stint(&["rewrite", path_str(&bin), "-o", path_str(&out), "--spec", path_str(&spec), "-q"]);
    assert_eq!(o.status, 0, "stint rewrite --spec: {o:?}");
    let profiles = private_dir(&dir, "profiles");
    let cwd = private_dir(&dir, "cwd");
    let orig = Run::new(&bin, &cwd).run();
    assert_eq!(orig.status, 0, "the original: {orig:?}");
    let rw = Run::new(&out, &cwd).env("STINT_PROFILE", &profile_template(&profiles, "fork_calls")).run();
    assert!(rw.same_behaviour(&orig), "{}", describe_difference("original", &orig, "rewritten", &rw));
    let files = dir_entries(&profiles);
    assert_eq!(files.len(), 3, "the parent and its two children: {files:?}");
    let mut counts: Vec<[u64; 3]> = files
        .iter()
        .map(|f| {
            let r = report_json(&profiles.join(f));
            [calls_of(&r, "parent_fn"), calls_of(&r, "child_fn"), calls_of(&r, "raw_child_fn")]
        })
        .collect();
    counts.sort();
    assert_eq!(counts, [[7, 200, 0], [9, 0, 300], [150, 0, 0]], "(parent_fn, child_fn, raw_child_fn) per profile");
}
