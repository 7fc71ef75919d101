//! The one glob matcher of stint: spec globs (`functions:`/`exclude:` in a spec, compiled by
//! the rewriter), control-file globs (`functions:` and `threads:`, matched by the runtime
//! inside the freestanding image and by `stint ctl`) and thread-rule names all mean the same
//! thing because they all call [`glob_match`]. Names are bytes (a symbol need not be UTF-8),
//! so `?` matches one byte.

/// Glob match: `*` any run of bytes (also empty), `?` one byte, everything else literal;
/// whole-string match; iterative (backtracking on the last star only), O(len(pat)*len(s)) worst case.
///
/// Backtracking to the last star only is enough: whatever an earlier star could absorb
/// beyond its current choice, the last star can absorb instead.
pub fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    let mut p = 0;
    let mut i = 0;
    // After the last star met: where the pattern resumes and where in `s` that attempt began.
    let mut star: Option<(usize, usize)> = None;
    while let Some(&c) = s.get(i) {
        match pat.get(p) {
            Some(b'*') => {
                p += 1;
                star = Some((p, i));
            }
            Some(&q) if q == b'?' || q == c => {
                p += 1;
                i += 1;
            }
            _ => match star {
                // Let the star absorb one more byte and retry from there.
                Some((resume, from)) => {
                    p = resume;
                    i = from + 1;
                    star = Some((resume, from + 1));
                }
                None => return false,
            },
        }
    }
    pat.get(p..).unwrap_or(&[]).iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match(b"parse_*", b"parse_x"));
        assert!(glob_match(b"parse_*", b"parse_"));
        assert!(!glob_match(b"parse_*", b"parsex"));
        assert!(!glob_match(b"parse_*", b"xparse_x"));
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"*", b"anything"));
        assert!(glob_match(b"**", b""));
        assert!(glob_match(b"", b""));
        assert!(!glob_match(b"", b"a"));
        assert!(!glob_match(b"a", b""));
        assert!(glob_match(b"a*b*c", b"abc"));
        assert!(glob_match(b"a*b*c", b"aXbYc"));
        assert!(glob_match(b"a*b*c", b"abbbcbc"));
        assert!(!glob_match(b"a*b*c", b"acb"));
        assert!(!glob_match(b"a*b*c", b"abcd"));
        assert!(glob_match(b"?", b"x"));
        assert!(!glob_match(b"?", b""));
        assert!(!glob_match(b"?", b"xy"));
        assert!(glob_match(b"w?rker-*", b"worker-12"));
        assert!(glob_match(b"*?", b"x"));
        assert!(!glob_match(b"*?", b""));
        assert!(glob_match(b"*x*", b"aaxaa"));
        assert!(glob_match(b"main", b"main"));
        assert!(!glob_match(b"main", b"Main"));
        let long = [b'a'; 1000];
        assert!(!glob_match(b"a*a*a*a*b", &long));
        assert!(glob_match(b"a*a*a*a*a", &long));
        assert!(!glob_match(b"*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b*", &long));
    }

    /// `glob_match` agrees with a plain recursive matcher on every short pattern and string
    /// over a small alphabet.
    #[test]
    fn globs_against_reference() {
        fn reference(p: &[u8], s: &[u8]) -> bool {
            match p.split_first() {
                None => s.is_empty(),
                Some((b'*', rest)) => (0..=s.len()).any(|k| reference(rest, &s[k..])),
                Some((&c, rest)) => s.split_first().is_some_and(|(&d, t)| (c == b'?' || c == d) && reference(rest, t)),
            }
        }
        /// The `n`th string over `alphabet` (bijective numeration: every string once).
        fn nth(mut n: usize, alphabet: &[u8], out: &mut [u8; 8]) -> usize {
            let mut len = 0;
            while n > 0 {
                n -= 1;
                out[len] = alphabet[n % alphabet.len()];
                n /= alphabet.len();
                len += 1;
            }
            len
        }
        let (mut p, mut s) = ([0u8; 8], [0u8; 8]);
        for i in 0..1000 {
            let pl = nth(i, b"ab*?", &mut p);
            for j in 0..200 {
                let sl = nth(j, b"ab", &mut s);
                assert_eq!(
                    glob_match(&p[..pl], &s[..sl]),
                    reference(&p[..pl], &s[..sl]),
                    "{:?} {:?}",
                    &p[..pl],
                    &s[..sl]
                );
            }
        }
    }
}
