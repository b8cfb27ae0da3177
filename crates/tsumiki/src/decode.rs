//! Bounded decoding of bytes read from disk: a [`Reader`] whose every read is checked
//! against the bytes left, and the [`DecodeError`] that says where in those bytes a decode
//! stopped and why. Decoders return it; their callers, who know which file the bytes came
//! from and where, turn it into [`Error::Corrupt`] naming that file and byte offset
//! ([`DecodeError::corrupt`]).
//!
//! Every length read from disk is bounded before use: [`Reader::len`] by a limit,
//! [`Reader::count`] by the bytes left, [`Reader::take`] by the bytes left.

use std::fmt;

use crate::error::{Corruption, Error};

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// A read needs more bytes than are left.
    Short {
        /// Bytes needed.
        need: usize,
        /// Bytes left.
        left: usize,
    },
    /// A length over its limit (`what`: "a key", "a low key", "a value").
    TooLong {
        /// What is too long.
        what: &'static str,
        /// Its length, in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A page's chain of images over its limit.
    LongChain {
        /// Images in the chain.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A count of items that cannot fit in the bytes left.
    TooMany {
        /// What is counted ("pages", "edits").
        what: &'static str,
        /// The count read.
        n: usize,
        /// Bytes left.
        left: usize,
    },
    /// A varint longer than 32 bits.
    VarintOverflow,
    /// Bytes after the end of what was decoded (`after`: "the segment list").
    Trailing {
        /// How many.
        bytes: usize,
        /// What they follow.
        after: &'static str,
    },
    /// Bytes after the last of an image's entries.
    AfterEntries {
        /// How many.
        bytes: usize,
        /// The image's entry count.
        count: u32,
    },
    /// An entry shares more bytes with the key before it than that key has.
    SharedPrefix {
        /// Bytes it shares.
        shared: usize,
        /// The previous key's length.
        key: usize,
    },
    /// Keys not strictly increasing.
    KeyOrder,
    /// A key outside the range of the page that holds it.
    KeyOutOfRange,
    /// A tombstone in a page's base image.
    TombstoneInBase,
    /// A delta of the translation table keeps and removes more pages than there are.
    Edit {
        /// Pages kept.
        keep: usize,
        /// Pages removed.
        remove: usize,
        /// Pages there are.
        pages: usize,
    },
    /// A delta of the translation table gives new chains to a different number of pages
    /// than it takes from the old table for them.
    Rechain {
        /// Old pages taken.
        removed: usize,
        /// New chains given.
        added: usize,
    },
    /// A table's page count after a delta's edits differs from the one it announces.
    PageCount {
        /// Pages after the edits.
        got: usize,
        /// Pages announced.
        announced: usize,
    },
    /// A table whose first page does not start at the empty key.
    NoFirstPage,
    /// Two pages of a table out of key order (`a`, then `b`).
    PageOrder {
        /// The first page's id.
        a: u64,
        /// The next page's id.
        b: u64,
    },
    /// A page id at or past the table's next page id.
    PagePastNext {
        /// The page id.
        pid: u64,
        /// The table's next page id.
        next: u64,
    },
    /// A page id twice in a table.
    PageTwice {
        /// The page id.
        pid: u64,
    },
    /// A log record the record decoder refused, in its words.
    Record(String),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Short { need, left } => write!(f, "an entry needs {need} bytes, {left} are left"),
            Reason::TooLong { what, len, max } => write!(f, "{what} of {len} bytes, over the limit of {max}"),
            Reason::LongChain { len, max } => write!(f, "a chain of {len} images, over the limit of {max}"),
            Reason::TooMany { what, n, left } => write!(f, "{n} {what} announced in {left} bytes"),
            Reason::VarintOverflow => f.write_str("a length overflows 32 bits"),
            Reason::Trailing { bytes, after } => write!(f, "{bytes} bytes after {after}"),
            Reason::AfterEntries { bytes, count } => write!(f, "{bytes} bytes after the last of {count} entries"),
            Reason::SharedPrefix { shared, key } => write!(f, "shares {shared} bytes with a key of {key}"),
            Reason::KeyOrder => f.write_str("keys out of order"),
            Reason::KeyOutOfRange => f.write_str("a key outside the page's range"),
            Reason::TombstoneInBase => f.write_str("a tombstone in a base"),
            Reason::Edit { keep, remove, pages } => {
                write!(f, "a delta keeps {keep} and removes {remove} of {pages} pages")
            }
            Reason::Rechain { removed, added } => {
                write!(f, "a delta gives {added} new chains to {removed} pages")
            }
            Reason::PageCount { got, announced } => {
                write!(f, "{got} pages after a delta's edits, {announced} announced")
            }
            Reason::NoFirstPage => f.write_str("no page starts at the empty key"),
            Reason::PageOrder { a, b } => write!(f, "pages {a} and {b} are out of key order"),
            Reason::PagePastNext { pid, next } => write!(f, "page {pid} is at or past the next page id {next}"),
            Reason::PageTwice { pid } => write!(f, "page id {pid} appears twice"),
            Reason::Record(why) => f.write_str(why),
        }
    }
}

/// The item of the decoded bytes a [`DecodeError`] lies in, where it is one of many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// Entry `n` (from 0) of a page image.
    Entry(u32),
    /// The page of this id in a translation table.
    Page(u64),
}

/// Where in the bytes given to a decoder it stopped ([`DecodeError::at`]), in which item,
/// and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// The byte offset in the decoded bytes (of the read that failed, or of the item
    /// found wrong).
    pub at: usize,
    /// The entry or page it lies in, if any.
    pub item: Option<Item>,
    /// Why.
    pub reason: Reason,
}

impl DecodeError {
    /// A decode error at byte `at`.
    pub fn new(at: usize, reason: Reason) -> DecodeError {
        DecodeError { at, item: None, reason }
    }

    /// The same, said of `item` (kept if one is named already: the innermost).
    pub fn of(self, item: Item) -> DecodeError {
        DecodeError { item: self.item.or(Some(item)), ..self }
    }

    /// [`Error::Corrupt`] for bytes from `file` (where known) at byte `offset` of it, the
    /// reason led by `context` ("the translation table"), if not empty.
    pub fn corrupt(&self, file: Option<String>, offset: Option<u64>, context: &str) -> Error {
        let reason = if context.is_empty() { self.to_string() } else { format!("{context}: {self}") };
        Error::Corrupt(Corruption { file, offset, reason })
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.item {
            Some(Item::Entry(n)) => write!(f, "entry {n}: {}", self.reason),
            Some(Item::Page(pid)) => write!(f, "page {pid}: {}", self.reason),
            None => write!(f, "{}", self.reason),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A bounded reader over bytes from disk: every read checks the bytes left.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, pos: 0 }
    }

    /// Bytes read so far: the offset of the next read.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn left(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.left() == 0
    }

    /// A decode error at the next read.
    pub fn fail(&self, reason: Reason) -> DecodeError {
        DecodeError::new(self.pos, reason)
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.left() < n {
            return Err(self.fail(Reason::Short { need: n, left: self.left() }));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// A byte.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    /// A little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    /// A `u32` length of `what` ("a key"), at most `max`.
    pub fn len(&mut self, max: usize, what: &'static str) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.u32()? as usize;
        if n > max {
            return Err(DecodeError::new(at, Reason::TooLong { what, len: n, max }));
        }
        Ok(n)
    }

    /// A `u32` count of items of `what` whose bit `flag` marks a second form; each item at
    /// least `each` bytes, or `flagged_each` in that form: bounded by the bytes left.
    /// Returns the count without the flag, and whether it was set.
    pub fn flagged_count(
        &mut self,
        flag: u32,
        each: usize,
        flagged_each: usize,
        what: &'static str,
    ) -> Result<(usize, bool), DecodeError> {
        let at = self.pos;
        let raw = self.u32()?;
        let flagged = raw & flag != 0;
        let n = (raw & !flag) as usize;
        if n.saturating_mul(if flagged { flagged_each } else { each }) > self.left() {
            return Err(DecodeError::new(at, Reason::TooMany { what, n, left: self.left() }));
        }
        Ok((n, flagged))
    }

    /// A `u32` count of items of `what` ("pages"), each at least `each` bytes: bounded by
    /// the bytes left.
    pub fn count(&mut self, each: usize, what: &'static str) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.u32()? as usize;
        if n.saturating_mul(each) > self.left() {
            return Err(DecodeError::new(at, Reason::TooMany { what, n, left: self.left() }));
        }
        Ok(n)
    }

    /// A LEB128 varint of at most 32 bits.
    pub fn varint(&mut self) -> Result<u32, DecodeError> {
        let at = self.pos;
        let mut n = 0u32;
        for i in 0..5 {
            let b = self.u8()?;
            if i == 4 && b > 0x0F {
                return Err(DecodeError::new(at, Reason::VarintOverflow));
            }
            n |= u32::from(b & 0x7F) << (7 * i);
            if b & 0x80 == 0 {
                break;
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounded_and_errors_say_where() {
        let mut r = Reader::new(&[1, 2, 0, 0, 0, 9, 0, 0, 0, 0x81, 0x01]);
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.len(2, "a key"), Ok(2));
        let e = r.clone().len(8, "a key").unwrap_err();
        assert_eq!((e.at, e.reason.clone()), (5, Reason::TooLong { what: "a key", len: 9, max: 8 }));
        assert_eq!(e.to_string(), "a key of 9 bytes, over the limit of 8");
        let e = r.clone().count(1, "pages").unwrap_err();
        assert_eq!(e.to_string(), "9 pages announced in 2 bytes");
        r.take(4).unwrap();
        assert_eq!(r.varint(), Ok(0x81));
        assert!(r.is_empty());
        let e = r.u8().unwrap_err();
        assert_eq!((e.at, e.to_string()), (11, "an entry needs 1 bytes, 0 are left".to_string()));
        assert_eq!(Reader::new(&[0xFF, 0xFF, 0xFF, 0xFF, 0x7F]).varint().unwrap_err().reason, Reason::VarintOverflow);
        assert_eq!(Reader::new(&[0xFF, 0xFF, 0xFF, 0xFF, 0x0F]).varint(), Ok(u32::MAX));
        let e = DecodeError::new(3, Reason::KeyOrder).of(Item::Entry(2)).of(Item::Page(7));
        assert_eq!(e.to_string(), "entry 2: keys out of order");
        match e.corrupt(Some("pages-00000001.seg".into()), Some(4099), "page 7") {
            Error::Corrupt(c) => {
                assert_eq!(c.to_string(), "pages-00000001.seg at offset 4099: page 7: entry 2: keys out of order")
            }
            e => panic!("{e:?}"),
        }
    }
}
