//! The page store's on-disk layout, restated (see `store::pages`) and decoded here
//! independently of the page store's reader: a bug in one is not repeated in the other.

use std::collections::HashSet;

use crate::block::{BLOCK, PAYLOAD};
use crate::decode::{DecodeError, Item, Reader, Reason};
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
/// Set in a table page's chain-length byte when a `u32` of dead bytes follows its chain
/// (`pages::table::HAS_DEAD`).
pub(super) const HAS_DEAD: u8 = 0x80;
/// Set in a table delta's page count when the edit gives new chains to the pages it
/// removes, one for one (`pages::table::RECHAIN`).
pub(super) const RECHAIN: u32 = 1 << 31;
/// A rechain entry's byte: the new images' count, and whether the old chain follows them
/// (`pages::table::NEW_IMAGES`, `KEEPS_OLD`); [`HAS_DEAD`] as in a page entry.
pub(super) const NEW_IMAGES: u8 = 0x3F;
/// See [`NEW_IMAGES`].
pub(super) const KEEPS_OLD: u8 = 0x40;
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

pub(super) fn decode_table_page(r: &mut Reader<'_>) -> Result<TablePage, DecodeError> {
    let pid = r.u64()?;
    let at = r.pos();
    let l = r.u32()? as usize;
    if l > MAX_KEY_LEN {
        return Err(
            DecodeError::new(at, Reason::TooLong { what: "a low key", len: l, max: MAX_KEY_LEN }).of(Item::Page(pid))
        );
    }
    let low = r.take(l).map_err(|e| e.of(Item::Page(pid)))?.to_vec();
    let at = r.pos();
    let byte = r.u8()?;
    let c = (byte & !HAS_DEAD) as usize;
    if c > MAX_PAGE_CHAIN {
        return Err(DecodeError::new(at, Reason::LongChain { len: c, max: MAX_PAGE_CHAIN }).of(Item::Page(pid)));
    }
    let chain = (0..c)
        .map(|_| r.take(REF_LEN).map(decode_ref))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.of(Item::Page(pid)))?;
    // The dead bytes are an estimate the page store acts on; any value is valid.
    if byte & HAS_DEAD != 0 {
        r.u32().map_err(|e| e.of(Item::Page(pid)))?;
    }
    Ok(TablePage { pid, low, chain })
}

/// A rechain entry of a table delta: page `old` with new images in front of its chain, or
/// a chain of new images only.
fn decode_rechain(r: &mut Reader<'_>, old: TablePage) -> Result<TablePage, DecodeError> {
    let pid = old.pid;
    let at = r.pos();
    let byte = r.u8().map_err(|e| e.of(Item::Page(pid)))?;
    let new = (byte & NEW_IMAGES) as usize;
    let kept = if byte & KEEPS_OLD != 0 { old.chain.len() } else { 0 };
    if new + kept > MAX_PAGE_CHAIN {
        return Err(
            DecodeError::new(at, Reason::LongChain { len: new + kept, max: MAX_PAGE_CHAIN }).of(Item::Page(pid))
        );
    }
    let mut chain = (0..new)
        .map(|_| r.take(REF_LEN).map(decode_ref))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.of(Item::Page(pid)))?;
    if kept > 0 {
        chain.extend(old.chain);
    }
    if byte & HAS_DEAD != 0 {
        r.u32().map_err(|e| e.of(Item::Page(pid)))?;
    }
    Ok(TablePage { pid, low: old.low, chain })
}

/// A table image's body: a base (`old` is `None`) or a delta's edits of `old`; with the
/// segment list at its end.
pub(super) fn decode_table(body: &[u8], old: Option<Vec<TablePage>>) -> Result<Table, DecodeError> {
    let mut r = Reader::new(body);
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
                let at = r.pos();
                let keep = r.u32()? as usize;
                let remove = r.u32()? as usize;
                let add_at = r.pos();
                let (add, rechain) = r.flagged_count(RECHAIN, 13, 1, "pages")?;
                if old.len() < keep.saturating_add(remove) {
                    return Err(DecodeError::new(at, Reason::Edit { keep, remove, pages: old.len() }));
                }
                if rechain && add != remove {
                    return Err(DecodeError::new(add_at, Reason::Rechain { removed: remove, added: add }));
                }
                out.extend(old.by_ref().take(keep));
                if rechain {
                    for o in old.by_ref().take(remove) {
                        out.push(decode_rechain(&mut r, o)?);
                    }
                } else {
                    old.by_ref().take(remove).for_each(drop);
                    for _ in 0..add {
                        out.push(decode_table_page(&mut r)?);
                    }
                }
            }
            out.extend(old);
            if out.len() != n {
                return Err(DecodeError::new(0, Reason::PageCount { got: out.len(), announced: n }));
            }
            out
        }
    };
    let m = r.count(12, "segments")?;
    let segs = (0..m).map(|_| Ok((r.u32()?, r.u64()?))).collect::<Result<Vec<_>, DecodeError>>()?;
    if !r.is_empty() {
        return Err(r.fail(Reason::Trailing { bytes: r.left(), after: "the segment list" }));
    }
    Ok((pages, segs))
}

/// The page list: a first page at the empty key, low keys strictly increasing, page ids
/// unique and below the next one.
pub(super) fn check_page_list(pages: &[TablePage], next_pid: u64) -> Result<(), Reason> {
    if pages.first().is_none_or(|p| !p.low.is_empty()) {
        return Err(Reason::NoFirstPage);
    }
    if let Some(w) = pages.windows(2).find(|w| w[0].low >= w[1].low) {
        return Err(Reason::PageOrder { a: w[0].pid, b: w[1].pid });
    }
    let mut seen = HashSet::new();
    for p in pages {
        if p.pid >= next_pid {
            return Err(Reason::PagePastNext { pid: p.pid, next: next_pid });
        }
        if !seen.insert(p.pid) {
            return Err(Reason::PageTwice { pid: p.pid });
        }
    }
    Ok(())
}

/// Calls `f` on each entry of a page image (see `pages::entries`): lengths bounded, keys
/// strictly increasing, nothing after the last entry. An error's offset is in the image.
pub(super) fn for_each_entry(
    img: &[u8],
    mut f: impl FnMut(&[u8], Option<&[u8]>) -> Result<(), Reason>,
) -> Result<(), DecodeError> {
    let count = u32::from_le_bytes(img[IMAGE_HEADER - 4..IMAGE_HEADER].try_into().expect("4 bytes"));
    let mut r = Reader::new(img);
    r.take(IMAGE_HEADER)?;
    let mut key: Vec<u8> = Vec::new();
    for i in 0..count {
        let at = r.pos();
        let entry = |e: DecodeError| e.of(Item::Entry(i));
        let bad = |reason: Reason| DecodeError::new(at, reason).of(Item::Entry(i));
        let shared = r.varint().map_err(entry)? as usize;
        let rest = r.varint().map_err(entry)? as usize;
        let vtag = r.varint().map_err(entry)? as usize;
        if shared > key.len() {
            return Err(bad(Reason::SharedPrefix { shared, key: key.len() }));
        }
        if shared + rest > MAX_KEY_LEN {
            return Err(bad(Reason::TooLong { what: "a key", len: shared + rest, max: MAX_KEY_LEN }));
        }
        if vtag > MAX_VALUE_LEN + 1 {
            return Err(bad(Reason::TooLong { what: "a value", len: vtag - 1, max: MAX_VALUE_LEN }));
        }
        let tail = r.take(rest).map_err(entry)?;
        if i > 0 && tail <= &key[shared..] {
            return Err(bad(Reason::KeyOrder));
        }
        key.truncate(shared);
        key.extend_from_slice(tail);
        let v = match vtag {
            0 => None,
            n => Some(r.take(n - 1).map_err(entry)?),
        };
        f(&key, v).map_err(bad)?;
    }
    if !r.is_empty() {
        return Err(r.fail(Reason::AfterEntries { bytes: r.left(), count }));
    }
    Ok(())
}
