//! The control file (`STINT_CONTROL`): which metrics are on when the program starts, and
//! which functions and threads they apply to. Parsed here, without allocation and without
//! panic paths, by the runtime at start (inside the freestanding image) and by the `stint`
//! commands alike, so the two can never disagree about what a file means.
//!
//! # Format
//! A small subset of YAML, chosen so that every file this parser accepts means the same
//! thing to a real YAML 1.2 parser (where they differ, this parser rejects the file):
//! ```yaml
//! # comment lines, and trailing " # comments"
//! on: [calls, cpu_time]          # metrics on at start; every other metric off. `on: []`: all off
//! functions: ["parse_*", main]   # only points whose function name matches one of these globs
//! threads:                       # only these threads: a number is a kernel tid,
//!   - worker*                    #   anything else a glob on the thread name
//!   - 4242
//! call_paths: false              # no calling-context trees in this run (`true`: trees, the default)
//! children: off                  # child processes do not measure (`on`: they do, the default)
//! ```
//! - The keys are `on`, `functions`, `threads`, `call_paths` and `children`, at column 0, each at most once, in any
//!   order, each written `key:` followed by a space or the end of the line. All are
//!   optional: without `on` the spec's `on_at_start` values stay; without `functions` or
//!   `threads` every function or thread is selected. An empty list (`functions: []`)
//!   selects nothing. `call_paths` takes one plain `true` or `false` (no list); without it the
//!   spec's `call_paths` and `STINT_CALLTREE_NODES` decide. `children` takes one plain `on`
//!   or `off` (words, the same to YAML 1.2, which reads them as strings): with `off`, a
//!   process whose ancestor measures with this file does not measure (D22: a child inherits
//!   its parent's control file setting unless the file says otherwise).
//! - A value is a flow list closed on the same line (`[a, "b", 'c']`, `[]`, a trailing comma
//!   allowed), a single item (`on: calls`, a one-item list), or nothing after the colon and
//!   then block items `- item`, one per line, all at the same indentation (0 or more spaces).
//! - An item is plain (`parse_*`: no spaces; in a flow list also no `,[]{}`), or quoted on
//!   one line. Items are borrowed from the text, so quotes cannot be unescaped: a `\` inside
//!   `"…"` and a `''` inside `'…'` are errors (write the other kind of quote, or `?` in a
//!   glob). A plain item may not start with a YAML indicator (`*&!|>%@#,]}` or a backquote):
//!   `*foo` is an alias in YAML, so write `"*foo"`.
//! - Threads: a plain decimal number (`4242`) is a kernel tid, 1 to `i32::MAX`, without
//!   leading zeros (YAML 1.1 reads those as octal); anything else, and any quoted item
//!   (`"4242"`), is a glob on the thread name of at most 23 bytes (it is stored NUL-padded
//!   in `ThreadRule::name`).
//! - Globs: `*` matches any run of bytes, `?` one byte, all else itself (see [`glob_match`]).
//!   Names are bytes: the file need not be UTF-8.
//! - Blank lines, comments, CRLF line ends, a UTF-8 byte order mark, trailing spaces and an
//!   opening `---` are fine. Tabs may separate but not indent (as in YAML). At most
//!   [`MAX_TEXT`] bytes, [`MAX_FUNCTIONS`] functions and `THREAD_RULES_CAP` threads.
//!
//! Errors carry the 1-based line and a short static message ([`ParseError`]). Parsing is one
//! pass over the lines with no recursion; no slice is indexed with `[]`.
pub use crate::glob::glob_match;
use crate::{metric_bit, metric_id, ThreadRule, THREAD_RULES_CAP};
use core::mem::{offset_of, size_of};

/// Most `functions:` globs a control file may list.
pub const MAX_FUNCTIONS: usize = 64;
/// Largest control file accepted, in bytes.
pub const MAX_TEXT: usize = 65536;
/// Longest thread-name glob: `ThreadRule::name` holds it with a NUL after it.
const MAX_THREAD_GLOB: usize = 23;
const _: () = assert!(MAX_THREAD_GLOB + 1 == size_of::<ThreadRule>() - offset_of!(ThreadRule, name));
// The messages below spell these numbers out.
const _: () = assert!(THREAD_RULES_CAP == 8 && MAX_FUNCTIONS == 64);

const TOO_LARGE: &str = "control file larger than 64 KiB";
const LONE_CR: &str = "carriage return inside a line";
const TAB_INDENT: &str = "tab used for indentation";
const EXPECTED_KEY: &str = "expected `on:`, `functions:`, `threads:`, `call_paths:` or `children:` at column 0";
const SPACE_AFTER_COLON: &str = "expected a space after `:`";
const UNKNOWN_KEY: &str = "unknown key (expected on, functions, threads, call_paths or children)";
const EXPECTED_ON_OFF: &str = "expected `on` or `off`";
const EXPECTED_BOOL: &str = "expected `true` or `false`";
const DUPLICATE_KEY: &str = "duplicate key";
const SECOND_DOCUMENT: &str = "`---` is only allowed before the first key";
const NO_VALUE: &str = "key without a value (write `[]` for an empty list)";
const EXPECTED_DASH: &str = "expected `- item`";
const UNEXPECTED_INDENT: &str = "indented line outside a block list";
const UNEVEN_ITEMS: &str = "block list items must all have the same indentation";
const EMPTY_ITEM: &str = "empty item";
const UNTERMINATED_QUOTE: &str = "unterminated quote";
const UNTERMINATED_BRACKET: &str = "unterminated `[` (a flow list must close on its line)";
const EXPECTED_COMMA: &str = "expected `,` or `]` after an item";
const JUNK_AFTER_LIST: &str = "junk after the list";
const JUNK_AFTER_ITEM: &str = "junk after the item";
const DQ_ESCAPE: &str = "escapes are not supported; use single quotes";
const SQ_ESCAPE: &str = "`''` inside single quotes is not supported; use double quotes";
const NESTED_LIST: &str = "nested lists are not supported";
const MAPPING: &str = "mappings are not supported (quote an item containing `: `)";
const INDICATOR: &str = "an item starting with * & ! | > % @ # , ] } or ` must be quoted";
const UNKNOWN_METRIC: &str = "unknown metric";
const TOO_MANY_FUNCTIONS: &str = "too many functions (at most 64)";
const TOO_MANY_THREADS: &str = "too many threads (at most 8)";
const TID_RANGE: &str = "thread id must be between 1 and 2147483647";
const TID_LEADING_ZERO: &str = "thread id with a leading zero (octal in YAML 1.1)";
const NAME_TOO_LONG: &str = "thread name glob longer than 23 bytes";
const NAME_NUL: &str = "thread name glob contains a NUL byte";

/// One entry of `threads:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadSel<'a> {
    /// A kernel thread id (1 to `i32::MAX`).
    Tid(u32),
    /// A glob on the thread name (at most 23 bytes, no NUL).
    Name(&'a [u8]),
}

/// A parsed control file. Its names borrow from the text given to [`parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlFile<'a> {
    /// metric_bit mask of `on:`; None when the file has no `on:` key.
    pub on: Option<u8>,
    functions: [&'a [u8]; MAX_FUNCTIONS],
    n_functions: usize,
    /// The file has a `functions:` key (possibly an empty list, which selects nothing).
    has_functions: bool,
    threads: [ThreadSel<'a>; THREAD_RULES_CAP],
    n_threads: usize,
    /// The file has a `threads:` key (possibly an empty list, which selects nothing).
    has_threads: bool,
    /// `call_paths:`: whether threads keep calling-context trees; None without the key.
    pub call_paths: Option<bool>,
    /// `children:`: whether child processes measure (`off`: false); None without the key.
    pub children: Option<bool>,
}

impl Default for ControlFile<'_> {
    /// What an empty control file says: keep the spec's metrics, select everything.
    fn default() -> Self {
        ControlFile {
            on: None,
            functions: [&[]; MAX_FUNCTIONS],
            n_functions: 0,
            has_functions: false,
            threads: [ThreadSel::Tid(0); THREAD_RULES_CAP],
            n_threads: 0,
            has_threads: false,
            call_paths: None,
            children: None,
        }
    }
}

impl<'a> ControlFile<'a> {
    /// The `functions:` globs as written, quotes removed (empty without the key).
    pub fn functions(&self) -> &[&'a [u8]] {
        self.functions.get(..self.n_functions).unwrap_or(&[])
    }

    /// The `threads:` entries in file order (empty without the key).
    pub fn threads(&self) -> &[ThreadSel<'a>] {
        self.threads.get(..self.n_threads).unwrap_or(&[])
    }

    /// Whether the file has a `functions:` key; `functions: []` has one and selects nothing.
    pub fn has_functions(&self) -> bool {
        self.has_functions
    }

    /// Whether the file has a `threads:` key; `threads: []` has one and selects nothing.
    pub fn has_threads(&self) -> bool {
        self.has_threads
    }

    /// true if there is no `functions:` list or `name` matches one of its globs
    pub fn function_selected(&self, name: &[u8]) -> bool {
        !self.has_functions || self.functions().iter().any(|glob| glob_match(glob, name))
    }

    /// true if there is no `threads:` list or (tid, name) matches an entry
    pub fn thread_selected(&self, tid: u32, name: &[u8]) -> bool {
        !self.has_threads
            || self.threads().iter().any(|sel| match *sel {
                ThreadSel::Tid(t) => t == tid,
                ThreadSel::Name(glob) => glob_match(glob, name),
            })
    }
}

/// Why a control file was rejected: the 1-based line (0: the file as a whole) and what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: u32,
    pub what: &'static str,
}

impl core::fmt::Display for ParseError {
    /// `line 3: unknown metric`, or only the message for line 0.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.line == 0 {
            f.write_str(self.what)
        } else {
            write!(f, "line {}: {}", self.line, self.what)
        }
    }
}

impl core::error::Error for ParseError {}

/// Parses a control file (the format is in the module documentation).
pub fn parse(text: &[u8]) -> Result<ControlFile<'_>, ParseError> {
    if text.len() > MAX_TEXT {
        return Err(ParseError { line: 0, what: TOO_LARGE });
    }
    let body = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    let mut parser = Parser { cf: ControlFile::default(), seen: 0, pending: None, started: false };
    let mut line = 0u32;
    for raw in body.split(|&b| b == b'\n') {
        line = line.saturating_add(1);
        parser.line(raw, line)?;
    }
    parser.end_block()?;
    Ok(parser.cf)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    On,
    Functions,
    Threads,
    CallPaths,
    Children,
}

impl Key {
    fn from_name(name: &[u8]) -> Option<Key> {
        match name {
            b"on" => Some(Key::On),
            b"functions" => Some(Key::Functions),
            b"threads" => Some(Key::Threads),
            b"call_paths" => Some(Key::CallPaths),
            b"children" => Some(Key::Children),
            _ => None,
        }
    }

    fn bit(self) -> u8 {
        match self {
            Key::On => 1,
            Key::Functions => 2,
            Key::Threads => 4,
            Key::CallPaths => 8,
            Key::Children => 16,
        }
    }
}

/// A key whose value is a block list still being read.
struct Pending {
    key: Key,
    line: u32,
    items: u32,
    /// Indentation of its first item.
    indent: Option<usize>,
}

/// A scalar with its quotes removed.
#[derive(Clone, Copy)]
struct Item<'a> {
    text: &'a [u8],
    quoted: bool,
}

struct Parser<'a> {
    cf: ControlFile<'a>,
    /// `Key::bit`s of the keys met so far.
    seen: u8,
    pending: Option<Pending>,
    /// A `---` has been met.
    started: bool,
}

impl<'a> Parser<'a> {
    fn line(&mut self, raw: &'a [u8], n: u32) -> Result<(), ParseError> {
        let at = |what| ParseError { line: n, what };
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let l = trim_end(raw);
        if l.contains(&b'\r') {
            return Err(at(LONE_CR));
        }
        let (content, _) = skip_spaces(l);
        if content.is_empty() || content.first() == Some(&b'#') {
            return Ok(());
        }
        let indent = l.len() - content.len();
        if l.iter().take(indent).any(|&b| b == b'\t') {
            return Err(at(TAB_INDENT));
        }
        if self.pending.is_some() {
            if is_dash_item(content) {
                return self.block_item(content, indent).map_err(at);
            }
            if indent > 0 {
                return Err(at(EXPECTED_DASH));
            }
        } else if indent > 0 {
            return Err(at(UNEXPECTED_INDENT));
        }
        self.end_block()?;
        self.key_line(content, n).map_err(at)
    }

    /// Ends the block list being read, if any: it must have had an item.
    fn end_block(&mut self) -> Result<(), ParseError> {
        match self.pending.take() {
            Some(p) if p.items == 0 => Err(ParseError { line: p.line, what: NO_VALUE }),
            _ => Ok(()),
        }
    }

    /// `key: value` at column 0 (or the `---` that may open the file).
    fn key_line(&mut self, content: &'a [u8], n: u32) -> Result<(), &'static str> {
        if let Some(rest) = content.strip_prefix(b"---") {
            if rest.first().is_none_or(|&b| is_space(b)) {
                if self.started || self.seen != 0 {
                    return Err(SECOND_DOCUMENT);
                }
                self.started = true;
                return end_of_line(rest, JUNK_AFTER_ITEM);
            }
        }
        let name_len = content.iter().position(|&b| b == b':' || is_space(b)).unwrap_or(content.len());
        let (name, rest) = split(content, name_len);
        let rest = rest.strip_prefix(b":").ok_or(EXPECTED_KEY)?;
        if rest.first().is_some_and(|&b| !is_space(b)) {
            return Err(SPACE_AFTER_COLON);
        }
        let key = Key::from_name(name).ok_or(UNKNOWN_KEY)?;
        if self.seen & key.bit() != 0 {
            return Err(DUPLICATE_KEY);
        }
        self.seen |= key.bit();
        match key {
            Key::On => self.cf.on = Some(0),
            Key::Functions => self.cf.has_functions = true,
            Key::Threads => self.cf.has_threads = true,
            Key::CallPaths => {
                // One plain scalar, not a list.
                let (rest, _) = skip_spaces(rest);
                let (item, after) = parse_item(rest, false)?;
                self.cf.call_paths = match (item.quoted, item.text) {
                    (false, b"true") => Some(true),
                    (false, b"false") => Some(false),
                    _ => return Err(EXPECTED_BOOL),
                };
                return end_of_line(after, JUNK_AFTER_ITEM);
            }
            Key::Children => {
                let (rest, _) = skip_spaces(rest);
                let (item, after) = parse_item(rest, false)?;
                self.cf.children = match (item.quoted, item.text) {
                    (false, b"on") => Some(true),
                    (false, b"off") => Some(false),
                    _ => return Err(EXPECTED_ON_OFF),
                };
                return end_of_line(after, JUNK_AFTER_ITEM);
            }
        }
        let (rest, _) = skip_spaces(rest);
        match rest.split_first() {
            // Nothing (or a comment, necessarily after a space): block items follow.
            None | Some((b'#', _)) => {
                self.pending = Some(Pending { key, line: n, items: 0, indent: None });
                Ok(())
            }
            Some((b'[', tail)) => self.flow_list(key, tail),
            Some(_) => {
                let (item, after) = parse_item(rest, false)?;
                self.add(key, item)?;
                end_of_line(after, JUNK_AFTER_ITEM)
            }
        }
    }

    /// `- item` of the block list being read.
    fn block_item(&mut self, content: &'a [u8], indent: usize) -> Result<(), &'static str> {
        let Some(p) = self.pending.as_mut() else { return Err(UNEXPECTED_INDENT) };
        match p.indent {
            Some(first) if first != indent => return Err(UNEVEN_ITEMS),
            _ => p.indent = Some(indent),
        }
        p.items = p.items.saturating_add(1);
        let key = p.key;
        let (rest, _) = skip_spaces(content.get(1..).unwrap_or(&[]));
        if rest.is_empty() || rest.first() == Some(&b'#') {
            return Err(EMPTY_ITEM);
        }
        let (item, after) = parse_item(rest, false)?;
        self.add(key, item)?;
        end_of_line(after, JUNK_AFTER_ITEM)
    }

    /// The rest of `key: [a, b]` after the `[`.
    fn flow_list(&mut self, key: Key, mut rest: &'a [u8]) -> Result<(), &'static str> {
        // Every turn consumes at least one byte.
        loop {
            let (r, spaced) = skip_spaces(rest);
            match r.split_first() {
                None => return Err(UNTERMINATED_BRACKET),
                Some((b']', tail)) => {
                    rest = tail;
                    break;
                }
                Some((b',', _)) => return Err(EMPTY_ITEM),
                // A comment eats the rest of the line, `]` included.
                Some((b'#', _)) if spaced => return Err(UNTERMINATED_BRACKET),
                Some(_) => {}
            }
            let (item, after) = parse_item(r, true)?;
            self.add(key, item)?;
            let (after, spaced) = skip_spaces(after);
            match after.split_first() {
                Some((b',', tail)) => rest = tail,
                Some((b']', tail)) => {
                    rest = tail;
                    break;
                }
                None => return Err(UNTERMINATED_BRACKET),
                Some((b'#', _)) if spaced => return Err(UNTERMINATED_BRACKET),
                Some(_) => return Err(EXPECTED_COMMA),
            }
        }
        end_of_line(rest, JUNK_AFTER_LIST)
    }

    fn add(&mut self, key: Key, item: Item<'a>) -> Result<(), &'static str> {
        let cf = &mut self.cf;
        match key {
            Key::On => {
                let id = metric_id(item.text).filter(|&id| id < u8::BITS).ok_or(UNKNOWN_METRIC)?;
                cf.on = Some(cf.on.unwrap_or(0) | metric_bit(id));
            }
            Key::Functions => {
                let slot = cf.functions.get_mut(cf.n_functions).ok_or(TOO_MANY_FUNCTIONS)?;
                *slot = item.text;
                cf.n_functions += 1;
            }
            Key::Threads => {
                let sel = thread_sel(item)?;
                let slot = cf.threads.get_mut(cf.n_threads).ok_or(TOO_MANY_THREADS)?;
                *slot = sel;
                cf.n_threads += 1;
            }
            Key::CallPaths => return Err(EXPECTED_BOOL),
            Key::Children => return Err(EXPECTED_ON_OFF),
        }
        Ok(())
    }
}

/// A `threads:` item: a plain decimal is a tid, anything else a name glob.
fn thread_sel(item: Item<'_>) -> Result<ThreadSel<'_>, &'static str> {
    let text = item.text;
    let (negative, digits) = match text.split_first() {
        Some((b'-', d)) => (true, d),
        Some((b'+', d)) => (false, d),
        _ => (false, text),
    };
    if !item.quoted && !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
        if digits.len() > 1 && digits.first() == Some(&b'0') {
            return Err(TID_LEADING_ZERO);
        }
        let value =
            digits.iter().fold(0u64, |v, &d| v.saturating_mul(10).saturating_add(u64::from(d.wrapping_sub(b'0'))));
        return match u32::try_from(value) {
            Ok(tid) if !negative && tid != 0 && tid <= i32::MAX as u32 => Ok(ThreadSel::Tid(tid)),
            _ => Err(TID_RANGE),
        };
    }
    if text.len() > MAX_THREAD_GLOB {
        return Err(NAME_TOO_LONG);
    }
    if text.contains(&0) {
        return Err(NAME_NUL);
    }
    Ok(ThreadSel::Name(text))
}

/// One scalar at the start of `r` (which is not empty and does not start with a space), and
/// what follows it. `flow`: inside `[...]`, where `,[]{}` end a plain scalar.
fn parse_item(r: &[u8], flow: bool) -> Result<(Item<'_>, &[u8]), &'static str> {
    let Some((&first, tail)) = r.split_first() else { return Err(EMPTY_ITEM) };
    let next = tail.first().copied();
    let (text, after, quoted) = match first {
        b'\'' => {
            let end = tail.iter().position(|&b| b == b'\'').ok_or(UNTERMINATED_QUOTE)?;
            let (text, after) = split(tail, end);
            let after = after.get(1..).unwrap_or(&[]);
            if after.first() == Some(&b'\'') {
                return Err(SQ_ESCAPE);
            }
            (text, after, true)
        }
        b'"' => {
            let end = tail.iter().position(|&b| b == b'"' || b == b'\\').ok_or(UNTERMINATED_QUOTE)?;
            let (text, after) = split(tail, end);
            if after.first() == Some(&b'\\') {
                return Err(DQ_ESCAPE);
            }
            (text, after.get(1..).unwrap_or(&[]), true)
        }
        b'[' => return Err(NESTED_LIST),
        b'{' => return Err(MAPPING),
        b'-' if ends_plain(next, flow) => return Err(NESTED_LIST),
        b'?' | b':' if ends_plain(next, flow) => return Err(MAPPING),
        b']' | b'}' | b',' | b'#' | b'&' | b'*' | b'!' | b'|' | b'>' | b'%' | b'@' | b'`' => return Err(INDICATOR),
        _ => {
            let mut len = 0;
            for (i, &b) in r.iter().enumerate() {
                if is_space(b) || (flow && is_flow_indicator(b)) {
                    break;
                }
                if b == b':' && ends_plain(r.get(i + 1).copied(), flow) {
                    return Err(MAPPING);
                }
                len = i + 1;
            }
            let (text, after) = split(r, len);
            (text, after, false)
        }
    };
    if text.is_empty() {
        return Err(EMPTY_ITEM);
    }
    Ok((Item { text, quoted }, after))
}

/// Whether a `-`, `?` or `:` followed by `next` is an indicator rather than part of a plain
/// scalar (YAML: when a space, the line end or, in a flow list, a flow indicator follows).
fn ends_plain(next: Option<u8>, flow: bool) -> bool {
    next.is_none_or(|b| is_space(b) || (flow && is_flow_indicator(b)))
}

/// Only spaces and an optional comment may follow.
fn end_of_line(rest: &[u8], what: &'static str) -> Result<(), &'static str> {
    match skip_spaces(rest) {
        ([], _) | ([b'#', ..], true) => Ok(()),
        _ => Err(what),
    }
}

fn is_dash_item(content: &[u8]) -> bool {
    matches!(content, [b'-'] | [b'-', b' ' | b'\t', ..])
}

fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn is_flow_indicator(b: u8) -> bool {
    matches!(b, b',' | b'[' | b']' | b'{' | b'}')
}

/// `s` without its leading spaces and tabs, and whether there were any.
fn skip_spaces(s: &[u8]) -> (&[u8], bool) {
    let n = s.iter().take_while(|&&b| is_space(b)).count();
    (s.get(n..).unwrap_or(&[]), n > 0)
}

fn trim_end(s: &[u8]) -> &[u8] {
    let n = s.iter().rev().take_while(|&&b| is_space(b)).count();
    s.get(..s.len() - n).unwrap_or(s)
}

/// `s.split_at(i)` without a panic path (`i` is always in range here).
fn split(s: &[u8], i: usize) -> (&[u8], &[u8]) {
    s.split_at_checked(i).unwrap_or((s, &[]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::METRIC_NAMES;

    fn bit(name: &str) -> u8 {
        metric_bit(metric_id(name.as_bytes()).unwrap())
    }

    fn ok(text: &str) -> ControlFile<'_> {
        match parse(text.as_bytes()) {
            Ok(cf) => cf,
            Err(e) => panic!("{text:?}: {e}"),
        }
    }

    fn err(text: &str) -> (u32, &'static str) {
        match parse(text.as_bytes()) {
            Ok(cf) => panic!("{text:?} parsed: {cf:?}"),
            Err(e) => (e.line, e.what),
        }
    }

    fn names<'a>(list: &[&'a [u8]]) -> [&'a [u8]; 4] {
        let mut out: [&[u8]; 4] = [b"-"; 4];
        for (o, n) in out.iter_mut().zip(list) {
            *o = n;
        }
        out
    }

    #[test]
    fn empty_file_selects_everything() {
        for text in ["", "\n\n", "# only a comment\n", "\u{feff}", "---\n", "  \n\t\n"] {
            let cf = ok(text);
            assert_eq!(cf, ControlFile::default());
            assert_eq!(cf.on, None);
            assert!(!cf.has_functions() && !cf.has_threads());
            assert!(cf.function_selected(b"anything"));
            assert!(cf.thread_selected(7, b"any"));
        }
    }

    #[test]
    fn children_is_on_or_off() {
        assert_eq!(
            ok("children: off
")
            .children,
            Some(false)
        );
        assert_eq!(
            ok("on: [calls]
children: on # the default
")
            .children,
            Some(true)
        );
        assert_eq!(
            ok("on: [calls]
")
            .children,
            None
        );
        for bad in ["children: false", "children: [off]", "children: \"off\"", "children:", "children: off x"] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad}");
        }
        assert_eq!(parse(b"children: on\nchildren: off").unwrap_err().what, DUPLICATE_KEY);
    }

    #[test]
    fn call_paths_is_one_boolean() {
        assert_eq!(ok("call_paths: false\n").call_paths, Some(false));
        assert_eq!(ok("on: [calls]\ncall_paths: true # trees\n").call_paths, Some(true));
        assert_eq!(ok("on: [calls]\n").call_paths, None);
        for bad in
            ["call_paths: off", "call_paths: [false]", "call_paths: \"false\"", "call_paths:", "call_paths: false x"]
        {
            assert!(parse(bad.as_bytes()).is_err(), "{bad}");
        }
        assert_eq!(parse(b"call_paths: true\ncall_paths: false").unwrap_err().what, DUPLICATE_KEY);
    }

    #[test]
    fn flow_lists() {
        let cf = ok("on: [calls, cpu_time]\nfunctions: [\"parse_*\", main, 'a b']\nthreads: [worker*, 4242]\n");
        assert_eq!(cf.on, Some(bit("calls") | bit("cpu_time")));
        assert_eq!(cf.on, Some(0b11));
        assert_eq!(cf.functions(), &[&b"parse_*"[..], b"main", b"a b"]);
        assert_eq!(cf.threads(), &[ThreadSel::Name(b"worker*"), ThreadSel::Tid(4242)]);
        // Spacing, a trailing comma, and every metric.
        let cf = ok("on:   [ calls ,wall_time,lock_wait,lock_hold, state_trace, cpu_time , ]");
        assert_eq!(cf.on, Some(0b11_1111));
        assert_eq!(ok("on: [calls, calls]").on, Some(1));
    }

    #[test]
    fn on_empty_and_absent() {
        assert_eq!(ok("on: []").on, Some(0));
        assert_eq!(ok("on: [ ]  # all off").on, Some(0));
        assert_eq!(ok("functions: [f]").on, None);
    }

    #[test]
    fn empty_lists_select_nothing() {
        let cf = ok("functions: []\nthreads: []");
        assert!(cf.has_functions() && cf.has_threads());
        assert!(cf.functions().is_empty() && cf.threads().is_empty());
        assert!(!cf.function_selected(b"main"));
        assert!(!cf.thread_selected(1, b"main"));
    }

    #[test]
    fn block_lists() {
        let text = "on:\n  - calls\n  - 'wall_time'   # trailing\n\n  # comment between items\n  - \"cpu_time\"\nfunctions:   # a comment after the key\n    - main\n    -   \"*_locked\"\nthreads:\n- 12\n- 'w?'\n";
        let cf = ok(text);
        assert_eq!(cf.on, Some(bit("calls") | bit("wall_time") | bit("cpu_time")));
        assert_eq!(names(cf.functions()), [&b"main"[..], b"*_locked", b"-", b"-"]);
        assert_eq!(cf.threads(), &[ThreadSel::Tid(12), ThreadSel::Name(b"w?")]);
    }

    #[test]
    fn single_scalars() {
        let cf = ok("on: calls\nfunctions: 'ns::f*'\nthreads: 99 # tid");
        assert_eq!(cf.on, Some(1));
        assert_eq!(cf.functions(), &[&b"ns::f*"[..]]);
        assert_eq!(cf.threads(), &[ThreadSel::Tid(99)]);
        // Plain scalars may hold `#`, `:` and, outside flow lists, brackets and commas.
        let cf = ok("functions: a#b\nthreads: [\"12\"]");
        assert_eq!(cf.functions(), &[&b"a#b"[..]]);
        assert_eq!(cf.threads(), &[ThreadSel::Name(b"12")]);
        assert_eq!(ok("functions:\n - operator[]\n - f<a,b>").functions(), &[&b"operator[]"[..], b"f<a,b>"]);
        assert_eq!(ok("functions: [std::swap]").functions(), &[&b"std::swap"[..]]);
    }

    #[test]
    fn quotes() {
        let cf = ok(r##"functions: ['say "hi"', "it's", "a, b", '[x]', "#"]"##);
        assert_eq!(names(cf.functions()), [&b"say \"hi\""[..], b"it's", b"a, b", b"[x]"]);
        assert_eq!(cf.functions().get(4), Some(&&b"#"[..]));
    }

    #[test]
    fn crlf_bom_tabs_and_trailing_space() {
        let cf = ok("\u{feff}on: [calls]  \r\nfunctions:\r\n  - main\t\r\n  - f \r\nthreads:\t[7]\r\n");
        assert_eq!(cf.on, Some(1));
        assert_eq!(cf.functions(), &[&b"main"[..], b"f"]);
        assert_eq!(cf.threads(), &[ThreadSel::Tid(7)]);
        // The BOM does not shift line numbers.
        assert_eq!(err("\u{feff}on: [calls]\nbad: []"), (2, UNKNOWN_KEY));
    }

    #[test]
    fn names_are_bytes() {
        let cf = parse(b"functions: [caf\xe9, '\xff*']\nthreads: [\xc3\x28]").unwrap();
        assert_eq!(cf.functions(), &[&b"caf\xe9"[..], b"\xff*"]);
        assert_eq!(cf.threads(), &[ThreadSel::Name(b"\xc3\x28")]);
        assert!(cf.function_selected(b"\xff\x00"));
    }

    #[test]
    fn borrowed_from_the_text() {
        let text = b"functions: [main]";
        let cf = parse(text).unwrap();
        let f = cf.functions()[0];
        assert_eq!(f.as_ptr() as usize, text.as_ptr() as usize + 12);
    }

    #[test]
    fn errors_with_lines() {
        let cases: &[(&str, u32, &str)] = &[
            ("on: [calls]\nbogus: [x]", 2, UNKNOWN_KEY),
            ("on: [calls]\n\non: []", 3, DUPLICATE_KEY),
            ("functions: [a]\nthreads: [b]\nfunctions:\n  - c", 3, DUPLICATE_KEY),
            ("\non: [calls, cpu]", 2, UNKNOWN_METRIC),
            ("on: CALLS", 1, UNKNOWN_METRIC),
            ("on:\n  - calls\n  - nope", 3, UNKNOWN_METRIC),
            ("functions: ['abc]", 1, UNTERMINATED_QUOTE),
            ("functions:\n  - \"abc", 2, UNTERMINATED_QUOTE),
            ("functions: [a, b", 1, UNTERMINATED_BRACKET),
            ("functions: [a, b\n  , c]", 1, UNTERMINATED_BRACKET),
            ("functions: [a, b # ]", 1, UNTERMINATED_BRACKET),
            ("functions: [a, # b]", 1, UNTERMINATED_BRACKET),
            ("functions: [a] b", 1, JUNK_AFTER_LIST),
            ("functions: [a]]", 1, JUNK_AFTER_LIST),
            ("functions: [a]#c", 1, JUNK_AFTER_LIST),
            ("functions: [a b]", 1, EXPECTED_COMMA),
            ("functions: ['a'b]", 1, EXPECTED_COMMA),
            ("functions: main extra", 1, JUNK_AFTER_ITEM),
            ("functions:\n  - 'a' b", 2, JUNK_AFTER_ITEM),
            ("threads: [-3]", 1, TID_RANGE),
            ("threads: [0]", 1, TID_RANGE),
            ("threads: [2147483648]", 1, TID_RANGE),
            ("threads: [99999999999999999999999999]", 1, TID_RANGE),
            ("threads: [0123]", 1, TID_LEADING_ZERO),
            ("threads:\n  - abcdefghijklmnopqrstuvwx", 2, NAME_TOO_LONG),
            ("threads: [\"a\0b\"]", 1, NAME_NUL),
            ("threads: [1,2,3,4,5,6,7,8,9]", 1, TOO_MANY_THREADS),
            ("functions: [a, , b]", 1, EMPTY_ITEM),
            ("functions: [,]", 1, EMPTY_ITEM),
            ("functions: ['']", 1, EMPTY_ITEM),
            ("functions: \"\"", 1, EMPTY_ITEM),
            ("functions:\n  -\n", 2, EMPTY_ITEM),
            ("functions:\n  - # nothing\n", 2, EMPTY_ITEM),
            ("functions: [\"a\\\"b\"]", 1, DQ_ESCAPE),
            ("functions: [\"a\\\\b\"]", 1, DQ_ESCAPE),
            ("functions: ['it''s']", 1, SQ_ESCAPE),
            ("functions: [*x]", 1, INDICATOR),
            ("functions:\n  - *", 2, INDICATOR),
            ("functions: &anchor [a]", 1, INDICATOR),
            ("functions: [a, [b]]", 1, NESTED_LIST),
            ("functions:\n  - - a", 2, NESTED_LIST),
            ("functions: [a: b]", 1, MAPPING),
            ("functions:\n  - name: main", 2, MAPPING),
            ("functions: {a: b}", 1, MAPPING),
            ("on:[calls]", 1, SPACE_AFTER_COLON),
            ("on [calls]", 1, EXPECTED_KEY),
            ("on : [calls]", 1, EXPECTED_KEY),
            ("- calls", 1, EXPECTED_KEY),
            (" on: [calls]", 1, UNEXPECTED_INDENT),
            ("on: [calls]\n  - cpu_time", 2, UNEXPECTED_INDENT),
            ("on:\n  calls", 2, EXPECTED_DASH),
            ("on:\n  - calls\n    cpu_time", 3, EXPECTED_DASH),
            ("on:\n  - calls\n   - cpu_time", 3, UNEVEN_ITEMS),
            ("on:\n\t- calls", 2, TAB_INDENT),
            ("on:\n  \t- calls", 2, TAB_INDENT),
            ("on:\nfunctions: [a]", 1, NO_VALUE),
            ("on: [calls]\nthreads: # later\n\n", 2, NO_VALUE),
            ("on: [calls]\r\r\n", 1, LONE_CR),
            ("on: [calls]\n---", 2, SECOND_DOCUMENT),
            ("---\n---", 2, SECOND_DOCUMENT),
            ("--- [a]", 1, JUNK_AFTER_ITEM),
        ];
        for &(text, line, what) in cases {
            assert_eq!(err(text), (line, what), "{text:?}");
        }
        let mut buf = [0u8; 1024];
        let text = list_of(&mut buf, MAX_FUNCTIONS + 1);
        assert_eq!(parse(text).unwrap_err(), ParseError { line: 1, what: TOO_MANY_FUNCTIONS });
        assert_eq!(parse(list_of(&mut buf, MAX_FUNCTIONS)).unwrap().functions().len(), MAX_FUNCTIONS);
        assert_eq!(ok("threads: [1,2,3,4,5,6,7,8]").threads().len(), 8);
        assert_eq!(ok("threads: [abcdefghijklmnopqrstuvw]").threads(), &[ThreadSel::Name(b"abcdefghijklmnopqrstuvw")]);
        assert_eq!(ok("threads: [2147483647, +5]").threads(), &[ThreadSel::Tid(2147483647), ThreadSel::Tid(5)]);
    }

    /// `functions: [f, f, …]` with `n` items.
    fn list_of(buf: &mut [u8; 1024], n: usize) -> &[u8] {
        let mut len = 0;
        for chunk in [&b"functions: ["[..]].into_iter().chain(core::iter::repeat_n(&b"f,"[..], n)).chain([&b"]"[..]]) {
            buf[len..len + chunk.len()].copy_from_slice(chunk);
            len += chunk.len();
        }
        &buf[..len]
    }

    #[test]
    fn size_limit() {
        let mut text = [b'#'; MAX_TEXT + 1];
        assert_eq!(parse(&text).unwrap_err(), ParseError { line: 0, what: TOO_LARGE });
        assert_eq!(parse(&text[..MAX_TEXT]).unwrap(), ControlFile::default());
        text[MAX_TEXT - 1] = b'\n';
        assert_eq!(parse(&text[..MAX_TEXT]).unwrap().on, None);
    }

    #[test]
    fn display() {
        extern crate std;
        use std::string::ToString;
        assert_eq!(ParseError { line: 3, what: UNKNOWN_METRIC }.to_string(), "line 3: unknown metric");
        assert_eq!(ParseError { line: 0, what: TOO_LARGE }.to_string(), "control file larger than 64 KiB");
    }

    #[test]
    fn selection() {
        let cf = ok("functions: [\"parse_*\", main]\nthreads: [worker*, 4242, 'io-?']");
        assert!(cf.function_selected(b"parse_header"));
        assert!(cf.function_selected(b"main"));
        assert!(!cf.function_selected(b"mainly"));
        assert!(!cf.function_selected(b"parser"));
        assert!(cf.thread_selected(4242, b"anything"));
        assert!(cf.thread_selected(1, b"worker-3"));
        assert!(cf.thread_selected(1, b"io-7"));
        assert!(!cf.thread_selected(1, b"io-17"));
        assert!(!cf.thread_selected(4243, b"main"));
        // Only `threads:`: every function stays selected.
        let cf = ok("threads: [5]");
        assert!(cf.function_selected(b"f"));
        assert!(cf.thread_selected(5, b""));
        assert!(!cf.thread_selected(6, b""));
    }

    #[test]
    fn every_metric_name() {
        for (id, name) in METRIC_NAMES.iter().enumerate() {
            let mut buf = [0u8; 32];
            let text = b"on: ";
            buf[..4].copy_from_slice(text);
            buf[4..4 + name.len()].copy_from_slice(name.as_bytes());
            assert_eq!(parse(&buf[..4 + name.len()]).unwrap().on, Some(1 << id));
        }
    }

    /// Random files built from YAML-ish fragments never panic, errors point at a line of the
    /// file, and what parses keeps the invariants.
    #[test]
    fn fuzz() {
        const FRAGMENTS: &[&[u8]] = &[
            b"on:",
            b"functions:",
            b"threads:",
            b"on: ",
            b"functions: ",
            b"threads: ",
            b"bogus:",
            b"[",
            b"]",
            b"[]",
            b", ",
            b",",
            b"-",
            b"- ",
            b"  - ",
            b"'",
            b"\"",
            b"''",
            b"\\",
            b"#",
            b" # c",
            b"\n",
            b"\n",
            b"\n",
            b"\r\n",
            b"\r",
            b"\n  ",
            b" ",
            b"  ",
            b"\t",
            b"calls",
            b"cpu_time",
            b"wall_time",
            b"lock_wait",
            b"lock_hold",
            b"state_trace",
            b"0",
            b"7",
            b"4242",
            b"2147483647",
            b"2147483648",
            b"-1",
            b"+5",
            b"00",
            b"parse_*",
            b"*",
            b"?",
            b"worker",
            b"abcdefghijklmnopqrstuvwxyz",
            b":",
            b": ",
            b"::",
            b"---",
            b"{",
            b"}",
            b"&",
            b"\xEF\xBB\xBF",
            b"\0",
            b"\xff",
        ];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut buf = [0u8; 4096];
        let (mut parsed, mut rejected) = (0, 0);
        for _ in 0..20_000 {
            let mut len = 0;
            let pieces = next() % 48;
            for _ in 0..pieces {
                let r = next();
                if r % 8 == 0 {
                    // A few random bytes.
                    for k in 0..(r >> 8) % 4 {
                        buf[len] = (r >> (16 + 8 * k)) as u8;
                        len += 1;
                    }
                } else {
                    let f = FRAGMENTS[((r >> 8) % FRAGMENTS.len() as u64) as usize];
                    buf[len..len + f.len()].copy_from_slice(f);
                    len += f.len();
                }
            }
            let text = &buf[..len];
            let lines = text.iter().filter(|&&b| b == b'\n').count() as u32 + 1;
            match parse(text) {
                Ok(cf) => {
                    parsed += 1;
                    assert!(cf.functions().len() <= MAX_FUNCTIONS);
                    assert!(cf.threads().len() <= THREAD_RULES_CAP);
                    let inside = |s: &[u8]| {
                        let (a, b) = (text.as_ptr() as usize, s.as_ptr() as usize);
                        !s.is_empty() && b >= a && b + s.len() <= a + text.len()
                    };
                    assert!(cf.functions().iter().all(|f| inside(f)), "{text:?}");
                    for t in cf.threads() {
                        match *t {
                            ThreadSel::Tid(tid) => assert!((1..=i32::MAX as u32).contains(&tid)),
                            ThreadSel::Name(n) => assert!(inside(n) && n.len() <= 23 && !n.contains(&0)),
                        }
                    }
                    assert!(cf.on.unwrap_or(0) < 1 << crate::N_METRICS);
                }
                Err(e) => {
                    rejected += 1;
                    assert!(e.line >= 1 && e.line <= lines, "{text:?}: {e}");
                    assert!(!e.what.is_empty());
                }
            }
        }
        // The generator reaches both outcomes.
        assert!(parsed > 500 && rejected > 500, "parsed {parsed}, rejected {rejected}");
    }
}
