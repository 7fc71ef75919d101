//! Folded stacks (`thread;main;a;b 300`, the input of every flame-graph tool) and SVG flame
//! graphs rendered from them by inferno.
//!
//! One line per call path and thread, weighed by [`Weight`]: the leaf's calls or its self
//! (exclusive) CPU or wall time in ns, so a frame's width in the graph is its inclusive
//! figure. Paths that weigh 0 are left out (flame-graph tools drop them anyway). A `;` in a
//! name (none in C or C++ symbols) would split a frame, so it is replaced by `:`.

use indicatif::ProgressBar;
use inferno::flamegraph;
use stint_profile::profile::Profile;

use super::{all_paths, function_name, thread_label, Weight};

/// A frame name safe inside a folded line.
fn frame(s: &str) -> String {
    s.replace(';', ":").replace(['\n', '\r'], " ")
}

/// The folded lines, sorted (inferno wants equal stacks adjacent; sorted output is also
/// stable to diff). Equal stacks of several profiles are summed.
pub fn lines(profiles: &[Profile], weight: Weight, progress: &ProgressBar) -> Vec<String> {
    let mut sums: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for (p, t, paths) in all_paths(profiles, progress) {
        let thread = frame(&thread_label(p, t));
        for s in paths {
            let v = weight.of(p, &s);
            if v == 0 {
                continue;
            }
            let mut key = thread.clone();
            for &point in &s.stack {
                key.push(';');
                key.push_str(&frame(&function_name(p, point)));
            }
            let e = sums.entry(key).or_insert(0);
            *e = e.saturating_add(v);
        }
    }
    sums.into_iter().map(|(k, v)| format!("{k} {v}")).collect()
}

/// The folded text, one line per path.
pub fn render(profiles: &[Profile], weight: Weight, progress: &ProgressBar) -> Vec<u8> {
    let mut out = String::new();
    for l in lines(profiles, weight, progress) {
        out.push_str(&l);
        out.push('\n');
    }
    out.into_bytes()
}

/// An SVG flame graph of the folded lines. A profile with nothing to weigh gives inferno no
/// lines, which it reports as an error: the caller says what to try instead.
pub fn render_svg(profiles: &[Profile], weight: Weight, progress: &ProgressBar) -> Result<Vec<u8>, String> {
    let lines = lines(profiles, weight, progress);
    if lines.is_empty() {
        return Err(format!("nothing to draw: no call path has any {}", weight.unit()));
    }
    let programs: Vec<&str> = profiles.iter().map(|p| p.program.as_str()).collect();
    let mut opts = flamegraph::Options::default();
    opts.title = format!("{} — {}", programs.join(", "), weight.unit());
    opts.count_name = weight.unit().to_owned();
    opts.subtitle = Some("stint: exact figures per call path (width = inclusive)".to_owned());
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg).map_err(|e| e.to_string())?;
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::super::testing::tree_profile;
    use super::*;

    #[test]
    fn one_line_per_path_and_thread_weighed_by_self_figures() {
        let p = tree_profile();
        let ps = std::slice::from_ref(&p);
        let h = ProgressBar::hidden();
        let calls = lines(ps, Weight::Calls, &h);
        assert!(calls.contains(&"worker;main;a;b 3".to_owned()), "{calls:?}");
        assert!(calls.contains(&"100;main;c;b 5".to_owned()), "{calls:?}");
        assert_eq!(calls.len(), 10);
        let cpu = lines(ps, Weight::Cpu, &h);
        assert!(cpu.contains(&"worker;main 100".to_owned()) && cpu.contains(&"worker;main;c 50".to_owned()), "{cpu:?}");
        let wall = lines(ps, Weight::Wall, &h);
        assert!(wall.contains(&"worker;main 900".to_owned()), "{wall:?}");
    }

    #[test]
    fn svg_names_every_function() {
        let p = tree_profile();
        let svg =
            String::from_utf8(render_svg(std::slice::from_ref(&p), Weight::Calls, &ProgressBar::hidden()).unwrap())
                .unwrap();
        assert!(svg.starts_with("<?xml"), "{}", &svg[..100]);
        for f in ["<title>main ", "<title>a ", "<title>b ", "<title>c ", "<title>worker "] {
            assert!(svg.contains(f), "{f} missing");
        }
    }

    #[test]
    fn svg_of_nothing_is_an_error_not_an_empty_file() {
        let p = tree_profile();
        let e = render_svg(std::slice::from_ref(&p), Weight::Cpu, &ProgressBar::hidden());
        let mut q = p.clone();
        q.tsc_hz = 0;
        let e2 = render_svg(std::slice::from_ref(&q), Weight::Cpu, &ProgressBar::hidden()).unwrap_err();
        assert!(e.is_ok());
        assert!(e2.contains("no call path has any ns CPU"), "{e2}");
    }
}
