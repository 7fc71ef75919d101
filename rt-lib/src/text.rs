//! Bounded byte strings without formatting machinery: the runtime's messages and paths.
//!
//! `core::fmt` would pull panic paths and relocated vtables into the image (build.rs rejects
//! both), so messages are byte slices concatenated into fixed buffers, truncated when they do
//! not fit, and written without indexing (no bounds-check panics). Pure code: no system
//! calls, no unsafe; it sits at the bottom of the module layering with `sys`.

/// Concatenate `parts` into `buf`, truncating; returns the length.
pub fn copy_into(buf: &mut [u8], parts: &[&[u8]]) -> usize {
    let mut w = Writer::new(buf);
    for part in parts {
        w.put(part);
    }
    w.len()
}

/// Copy `src` into `dst`, truncated so that a NUL stays at the end.
pub fn copy_str(dst: &mut [u8], src: &[u8]) {
    let keep = dst.len().saturating_sub(1);
    copy_into(dst.get_mut(..keep).unwrap_or(&mut []), &[src]);
}

/// `b` up to its first NUL.
pub fn trim_nul(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
    b.get(..end).unwrap_or(&[])
}

/// A bounded byte writer: what does not fit is dropped.
pub struct Writer<'a> {
    buf: &'a mut [u8],
    n: usize,
}

impl<'a> Writer<'a> {
    pub fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, n: 0 }
    }

    pub fn put(&mut self, s: &[u8]) {
        for &b in s {
            match self.buf.get_mut(self.n) {
                Some(d) => *d = b,
                None => return,
            }
            self.n += 1;
        }
    }

    /// `v` in decimal.
    pub fn num(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut k = 0;
        loop {
            if let Some(d) = digits.get_mut(k) {
                *d = b'0' + (v % 10) as u8;
            }
            k += 1;
            v /= 10;
            if v == 0 || k >= digits.len() {
                break;
            }
        }
        for i in (0..k).rev() {
            let d = digits.get(i).copied().unwrap_or(b'0');
            self.put(&[d]);
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.n
    }

    /// What was written.
    pub fn written(&self) -> &[u8] {
        self.buf.get(..self.n).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_into_truncates() {
        let mut b = [0u8; 5];
        assert_eq!(copy_into(&mut b, &[b"ab", b"cd", b"ef"]), 5);
        assert_eq!(&b, b"abcde");
        let mut b = [0u8; 8];
        assert_eq!(copy_into(&mut b, &[b"ab", b"", b"c"]), 3);
        assert_eq!(copy_into(&mut [], &[b"x"]), 0);
    }

    #[test]
    fn copy_str_keeps_a_nul() {
        let mut b = [0xffu8; 4];
        copy_str(&mut b, b"abcdef");
        assert_eq!(&b, b"abc\xff");
        let mut b = [0u8; 4];
        copy_str(&mut b, b"abcdef");
        assert_eq!(&b, b"abc\0");
        copy_str(&mut [], b"x");
    }

    #[test]
    fn writer_numbers_and_overflow() {
        let mut b = [0u8; 32];
        let mut w = Writer::new(&mut b);
        w.put(b"line ");
        w.num(0);
        w.put(b" ");
        w.num(u64::MAX);
        assert_eq!(w.written(), b"line 0 18446744073709551615");
        let mut b = [0u8; 3];
        let mut w = Writer::new(&mut b);
        w.num(12345);
        assert_eq!(w.written(), b"123");
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn trim_nul_stops_at_the_first_nul() {
        assert_eq!(trim_nul(b"ab\0cd"), b"ab");
        assert_eq!(trim_nul(b"abc"), b"abc");
        assert_eq!(trim_nul(b"\0"), b"");
    }
}
