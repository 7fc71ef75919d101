//! Short forms of numbers for the CLI's tables (`top`, `ls`): rates, percentages,
//! milliseconds, durations, and rows laid out in columns. Shared by the commands so that no
//! command imports another.

/// A rate per second, short: `-`, `0`, `4.2`, `87`, `12.3k`, `4.6M`, `1.2G`.
pub fn fmt_rate(r: Option<f64>) -> String {
    let Some(r) = r.filter(|r| r.is_finite() && *r >= 0.0) else { return "-".into() };
    if r < 0.05 {
        "0".into()
    } else if r < 9.95 {
        format!("{r:.1}")
    } else if r < 999.5 {
        format!("{r:.0}")
    } else if r < 999_950.0 {
        format!("{:.1}k", r / 1e3)
    } else if r < 999_950_000.0 {
        format!("{:.1}M", r / 1e6)
    } else {
        format!("{:.1}G", r / 1e9)
    }
}

/// A percentage with one decimal, `-` if unknown.
pub fn fmt_pct(p: Option<f64>) -> String {
    p.filter(|p| p.is_finite()).map_or("-".into(), |p| format!("{p:.1}"))
}

/// ns as milliseconds with one decimal, `-` if unknown.
pub fn fmt_ms(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |n| format!("{:.1}", n as f64 / 1e6))
}

/// A duration, short: `0.4 s`, `59.9 s`, `2m05s`, `3h07m`, `2d04h`.
pub fn fmt_duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "-".into();
    }
    if secs < 59.95 {
        return format!("{secs:.1} s");
    }
    let s = secs as u64;
    match s {
        0..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// Lay out rows of cells in columns two spaces apart, no indent; `right[i]` right-aligns
/// column `i`; trailing blanks trimmed (the layout of `report`'s tables).
pub fn layout_rows(rows: &[Vec<String>], right: &[bool]) -> String {
    stint_profile::report::columns(rows, right, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(fmt_rate(None), "-");
        assert_eq!(fmt_rate(Some(f64::NAN)), "-");
        assert_eq!(fmt_rate(Some(-1.0)), "-");
        assert_eq!(fmt_rate(Some(0.0)), "0");
        assert_eq!(fmt_rate(Some(0.04)), "0");
        assert_eq!(fmt_rate(Some(0.05)), "0.1");
        assert_eq!(fmt_rate(Some(4.2)), "4.2");
        assert_eq!(fmt_rate(Some(9.96)), "10");
        assert_eq!(fmt_rate(Some(87.4)), "87");
        assert_eq!(fmt_rate(Some(999.4)), "999");
        assert_eq!(fmt_rate(Some(999.6)), "1.0k");
        assert_eq!(fmt_rate(Some(12_345.0)), "12.3k");
        assert_eq!(fmt_rate(Some(4_560_000.0)), "4.6M");
        assert_eq!(fmt_rate(Some(1.2e9)), "1.2G");
    }

    #[test]
    fn percentages_times_and_durations() {
        assert_eq!(fmt_pct(None), "-");
        assert_eq!(fmt_pct(Some(0.0)), "0.0");
        assert_eq!(fmt_pct(Some(99.96)), "100.0");
        assert_eq!(fmt_pct(Some(153.25)), "153.2");
        assert_eq!(fmt_pct(Some(f64::INFINITY)), "-");
        assert_eq!(fmt_ms(None), "-");
        assert_eq!(fmt_ms(Some(1_250_000)), "1.2");
        assert_eq!(fmt_ms(Some(0)), "0.0");
        assert_eq!(fmt_duration(0.42), "0.4 s");
        assert_eq!(fmt_duration(59.9), "59.9 s");
        assert_eq!(fmt_duration(59.96), "0m59s");
        assert_eq!(fmt_duration(125.25), "2m05s");
        assert_eq!(fmt_duration(3600.0 * 3.0 + 7.0 * 60.0), "3h07m");
        assert_eq!(fmt_duration(86400.0 * 2.0 + 4.0 * 3600.0 + 5.0), "2d04h");
        assert_eq!(fmt_duration(-1.0), "-");
    }
}
