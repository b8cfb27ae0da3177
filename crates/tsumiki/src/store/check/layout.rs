//! The page store's on-disk layout, restated (see `store::pages`) and decoded here
//! independently of the page store's reader: a bug in one is not repeated in the other.

use std::collections::HashSet;

use crate::block::{BLOCK, PAYLOAD};
use crate::error::MAX_VALUE_LEN;
use crate::index::MAX_KEY_LEN;
use crate::store::pages::ImageRef;

// The page store's on-disk layout, restated (see `store::pages`): an independent reader.
/// Image header: crc (4), body length (4), kind (1), page id (8), previous image (20),
/// entry count (4).
pub(super) const IMAGE_HEADER: usize = 4 + 4 + 1 + 8 + REF_LEN + 4;
pub(super) const REF_LEN: usize = 4 + 8 + 4 + 4;
pub(super) const KIND_BASE: u8 = 1;
pub(super) const KIND_DELTA: u8 = 2;
pub(super) const KIND_TABLE: u8 = 3;
pub(super) const KIND_TABLE_DELTA: u8 = 4;
/// Images in a page's chain at most (`pages::MAX_CHAIN` deltas' limit plus the base).
pub(super) const MAX_PAGE_CHAIN: usize = crate::store::pages::MAX_CHAIN + 1;
/// Images in the table's chain at most (`pages::table::TABLE_CHAIN`).
pub(super) const MAX_TABLE_CHAIN: usize = 16;
/// The longest image the page store reads (`pages::MAX_IMAGE`).
pub(super) const MAX_IMAGE: usize = (MAX_VALUE_LEN + MAX_KEY_LEN + (64 << 10)) * 2;

/// A page of the translation table as decoded here.
#[derive(Debug, Clone)]
pub(super) struct TablePage {
    pub(super) pid: u64,
    pub(super) low: Vec<u8>,
    pub(super) chain: Vec<ImageRef>,
}

/// A decoded table: its pages, and its segments with the generation that last wrote
/// each.
pub(super) type Table = (Vec<TablePage>, Vec<(u32, u64)>);

/// The file offset of payload offset `off` of a page segment.
pub(super) fn file_offset(off: u64) -> u64 {
    off / PAYLOAD as u64 * BLOCK as u64 + off % PAYLOAD as u64
}

pub(super) fn decode_ref(b: &[u8]) -> ImageRef {
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    ImageRef {
        seg: u32_at(0),
        off: u64::from_le_bytes(b[4..12].try_into().expect("8 bytes")),
        len: u32_at(12),
        crc: u32_at(16),
    }
}

/// A bounded reader over an image's body.
pub(super) struct Reader<'a>(pub(super) &'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("an entry needs {n} bytes, {} are left", self.0.len()));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    /// A count of items of at least `each` bytes, bounded by what is left.
    fn count(&mut self, each: usize, what: &str) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n.saturating_mul(each) > self.0.len() {
            return Err(format!("{n} {what} announced in {} bytes", self.0.len()));
        }
        Ok(n)
    }
    /// A LEB128 varint of at most 32 bits.
    pub(super) fn varint(&mut self) -> Result<u32, String> {
        let mut n = 0u32;
        for i in 0..5 {
            let b = self.u8()?;
            if i == 4 && b > 0x0F {
                return Err("a length overflows 32 bits".into());
            }
            n |= u32::from(b & 0x7F) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Ok(n)
    }
}

pub(super) fn decode_table_page(r: &mut Reader<'_>) -> Result<TablePage, String> {
    let pid = r.u64()?;
    let l = r.u32()? as usize;
    if l > MAX_KEY_LEN {
        return Err(format!("page {pid}: a low key of {l} bytes"));
    }
    let low = r.take(l)?.to_vec();
    let c = r.u8()? as usize;
    if c > MAX_PAGE_CHAIN {
        return Err(format!("page {pid}: a chain of {c} images"));
    }
    let chain = (0..c).map(|_| r.take(REF_LEN).map(decode_ref)).collect::<Result<Vec<_>, _>>()?;
    Ok(TablePage { pid, low, chain })
}

/// A table image's body: a base (`old` is `None`) or a delta's edits of `old`; with the
/// segment list at its end.
pub(super) fn decode_table(body: &[u8], old: Option<Vec<TablePage>>) -> Result<Table, String> {
    let mut r = Reader(body);
    let pages = match old {
        None => {
            let n = r.count(13, "pages")?;
            (0..n).map(|_| decode_table_page(&mut r)).collect::<Result<Vec<_>, _>>()?
        }
        Some(old) => {
            let n = r.u32()? as usize;
            let edits = r.count(12, "edits")?;
            let mut old = old.into_iter();
            let mut out = Vec::new();
            for _ in 0..edits {
                let keep = r.u32()? as usize;
                let remove = r.u32()? as usize;
                let add = r.count(13, "pages")?;
                if old.len() < keep.saturating_add(remove) {
                    return Err(format!("a delta keeps {keep} and removes {remove} of {} pages", old.len()));
                }
                out.extend(old.by_ref().take(keep));
                old.by_ref().take(remove).for_each(drop);
                for _ in 0..add {
                    out.push(decode_table_page(&mut r)?);
                }
            }
            out.extend(old);
            if out.len() != n {
                return Err(format!("{} pages after a delta's edits, {n} announced", out.len()));
            }
            out
        }
    };
    let m = r.count(12, "segments")?;
    let segs = (0..m).map(|_| Ok((r.u32()?, r.u64()?))).collect::<Result<Vec<_>, String>>()?;
    if !r.0.is_empty() {
        return Err(format!("{} bytes after the segment list", r.0.len()));
    }
    Ok((pages, segs))
}

/// The page list: a first page at the empty key, low keys strictly increasing, page ids
/// unique and below the next one.
pub(super) fn check_page_list(pages: &[TablePage], next_pid: u64) -> Result<(), String> {
    if pages.first().is_none_or(|p| !p.low.is_empty()) {
        return Err("no page starts at the empty key".into());
    }
    if let Some(w) = pages.windows(2).find(|w| w[0].low >= w[1].low) {
        return Err(format!("pages {} and {} are out of key order", w[0].pid, w[1].pid));
    }
    let mut seen = HashSet::new();
    for p in pages {
        if p.pid >= next_pid {
            return Err(format!("page {} is at or past the next page id {next_pid}", p.pid));
        }
        if !seen.insert(p.pid) {
            return Err(format!("page id {} appears twice", p.pid));
        }
    }
    Ok(())
}

/// Calls `f` on each entry of a page image (see `pages::entries`): lengths bounded, keys
/// strictly increasing, nothing after the last entry.
pub(super) fn for_each_entry(
    img: &[u8],
    mut f: impl FnMut(&[u8], Option<&[u8]>) -> Result<(), String>,
) -> Result<(), String> {
    let count = u32::from_le_bytes(img[IMAGE_HEADER - 4..IMAGE_HEADER].try_into().expect("4 bytes"));
    let mut r = Reader(&img[IMAGE_HEADER..]);
    let mut key: Vec<u8> = Vec::new();
    for i in 0..count {
        let at = |m: String| format!("entry {i}: {m}");
        let shared = r.varint().map_err(at)? as usize;
        let rest = r.varint().map_err(at)? as usize;
        let vtag = r.varint().map_err(at)? as usize;
        if shared > key.len() {
            return Err(at(format!("shares {shared} bytes with a key of {}", key.len())));
        }
        if shared + rest > MAX_KEY_LEN {
            return Err(at(format!("a key of {} bytes", shared + rest)));
        }
        if vtag > MAX_VALUE_LEN + 1 {
            return Err(at(format!("a value of {} bytes", vtag - 1)));
        }
        let tail = r.take(rest).map_err(at)?;
        if i > 0 && tail <= &key[shared..] {
            return Err(at("keys out of order".into()));
        }
        key.truncate(shared);
        key.extend_from_slice(tail);
        let v = match vtag {
            0 => None,
            n => Some(r.take(n - 1).map_err(at)?),
        };
        f(&key, v).map_err(at)?;
    }
    if !r.0.is_empty() {
        return Err(format!("{} bytes after the last of {count} entries", r.0.len()));
    }
    Ok(())
}
