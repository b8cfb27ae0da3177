//! The translation table's images: a base lists every page (id, low key, chain of image
//! addresses); a delta lists only what changed since the table before it, as edits of that
//! table's page list, and names it by address and checksum in its header. The master
//! record names the newest image; opening reads the chain back to its base (at most
//! [`TABLE_CHAIN`] images) and applies the deltas in order.
//!
//! Why deltas: a checkpoint that changes a few pages of a large store (an ascending fill, a
//! skewed workload), and the intermediate tables of a long checkpoint (milestones), would
//! otherwise each rewrite the whole table: ~80 bytes per page, 1.2 MB for 1M records.
//!
//! Both kinds end with every segment the table names and the generation that last wrote
//! it.

use std::collections::HashSet;
use std::sync::Arc;

use super::{ImageRef, Page, MAX_CHAIN, REF_LEN};
use crate::decode::{DecodeError, Item, Reader, Reason};
use crate::index::MAX_KEY_LEN;

/// The longest chain of table images (a base and its deltas).
pub(super) const TABLE_CHAIN: usize = 16;

/// One edit of a page list: `keep` pages copied, `remove` dropped, then `add` inserted.
pub(super) struct Edit {
    keep: u32,
    remove: u32,
    add: Vec<Arc<Page>>,
}

/// Set in a page entry's chain-length byte when its dead bytes (`Page::dead`, a `u32`)
/// follow its chain. Pages without them are written as before, so a database that never
/// deleted keeps the older format; builds before this one refuse a table with the flag
/// (a chain longer than they accept) rather than misread it.
const HAS_DEAD: u8 = 0x80;

/// The encoded length of one page entry.
fn page_len(p: &Page) -> usize {
    8 + 4 + p.low.len() + 1 + p.chain.len() * REF_LEN + if p.dead > 0 { 4 } else { 0 }
}

fn encode_page(p: &Page, body: &mut Vec<u8>) {
    body.extend_from_slice(&p.pid.to_le_bytes());
    body.extend_from_slice(&(p.low.len() as u32).to_le_bytes());
    body.extend_from_slice(&p.low);
    body.push(p.chain.len() as u8 | if p.dead > 0 { HAS_DEAD } else { 0 });
    for r in &p.chain {
        r.encode(body);
    }
    if p.dead > 0 {
        body.extend_from_slice(&p.dead.to_le_bytes());
    }
}

fn segs_len(segs: usize) -> usize {
    4 + segs * (4 + 8)
}

fn encode_segs(segs: &[(u32, u64)], body: &mut Vec<u8>) {
    body.extend_from_slice(&(segs.len() as u32).to_le_bytes());
    for (n, gen) in segs {
        body.extend_from_slice(&n.to_le_bytes());
        body.extend_from_slice(&gen.to_le_bytes());
    }
}

/// The length of a base's body: page count, the pages, the segments.
pub(super) fn base_len(pages: &[Arc<Page>], segs: usize) -> usize {
    4 + pages.iter().map(|p| page_len(p)).sum::<usize>() + segs_len(segs)
}

/// Encodes a base's body.
pub(super) fn encode_base(pages: &[Arc<Page>], segs: &[(u32, u64)], body: &mut Vec<u8>) {
    body.extend_from_slice(&(pages.len() as u32).to_le_bytes());
    for p in pages {
        encode_page(p, body);
    }
    encode_segs(segs, body);
}

/// The edits turning `old` into `new`. Pages are compared by identity: a page the
/// checkpoint left alone is the same `Arc` in both lists (and keeps its order); any other
/// page of `new` is added, any other of `old` removed. `None` if the lists disagree on
/// the order of shared pages (never expected: the caller writes a base then).
pub(super) fn diff(old: &[Arc<Page>], new: &[Arc<Page>]) -> Option<Vec<Edit>> {
    let in_old: HashSet<*const Page> = old.iter().map(Arc::as_ptr).collect();
    let in_new: HashSet<*const Page> = new.iter().map(Arc::as_ptr).collect();
    let (mut i, mut j) = (0, 0);
    let mut edits = Vec::new();
    while i < old.len() || j < new.len() {
        let mut e = Edit { keep: 0, remove: 0, add: Vec::new() };
        while i < old.len() && j < new.len() && Arc::ptr_eq(&old[i], &new[j]) {
            e.keep += 1;
            i += 1;
            j += 1;
        }
        while i < old.len() && !in_new.contains(&Arc::as_ptr(&old[i])) {
            e.remove += 1;
            i += 1;
        }
        while j < new.len() && !in_old.contains(&Arc::as_ptr(&new[j])) {
            e.add.push(new[j].clone());
            j += 1;
        }
        if e.keep == 0 && e.remove == 0 && e.add.is_empty() {
            return None;
        }
        // A trailing run of kept pages is implied.
        if i == old.len() && j == new.len() && e.remove == 0 && e.add.is_empty() {
            break;
        }
        edits.push(e);
    }
    Some(edits)
}

/// The length of a delta's body: new page count, edit count, the edits, the segments.
pub(super) fn delta_len(edits: &[Edit], segs: usize) -> usize {
    4 + 4 + edits.iter().map(|e| 12 + e.add.iter().map(|p| page_len(p)).sum::<usize>()).sum::<usize>() + segs_len(segs)
}

/// Encodes a delta's body.
pub(super) fn encode_delta(pages: usize, edits: &[Edit], segs: &[(u32, u64)], body: &mut Vec<u8>) {
    body.extend_from_slice(&(pages as u32).to_le_bytes());
    body.extend_from_slice(&(edits.len() as u32).to_le_bytes());
    for e in edits {
        body.extend_from_slice(&e.keep.to_le_bytes());
        body.extend_from_slice(&e.remove.to_le_bytes());
        body.extend_from_slice(&(e.add.len() as u32).to_le_bytes());
        for p in &e.add {
            encode_page(p, body);
        }
    }
    encode_segs(segs, body);
}

fn decode_page(r: &mut Reader<'_>) -> Result<Arc<Page>, DecodeError> {
    let pid = r.u64()?;
    let page = |e: DecodeError| e.of(Item::Page(pid));
    let low = r.len(MAX_KEY_LEN, "a low key").and_then(|l| r.take(l)).map_err(page)?.to_vec();
    let at = r.pos();
    let byte = r.u8()?;
    let c = (byte & !HAS_DEAD) as usize;
    if c > MAX_CHAIN + 1 {
        return Err(page(DecodeError::new(at, Reason::LongChain { len: c, max: MAX_CHAIN + 1 })));
    }
    let chain = (0..c).map(|_| ImageRef::decode(r)).collect::<Result<Vec<_>, _>>().map_err(page)?;
    let dead = if byte & HAS_DEAD != 0 { r.u32().map_err(page)? } else { 0 };
    Ok(Arc::new(Page { low, pid, chain, dead }))
}

/// A decoded table: its pages, and its segments with the generation that last wrote each.
pub(super) type Decoded = (Vec<Arc<Page>>, Vec<(u32, u64)>);

/// The pages of a base's body (`body`), or of `pages` with a delta's edits applied; with
/// the segments listed at its end. Every count is bounded by what the rest of the body
/// could hold.
pub(super) fn decode(body: &[u8], pages: Option<Vec<Arc<Page>>>) -> Result<Decoded, DecodeError> {
    let mut r = Reader::new(body);
    let out = match pages {
        None => {
            let n = r.count(13, "pages")?;
            (0..n).map(|_| decode_page(&mut r)).collect::<Result<Vec<_>, _>>()?
        }
        Some(old) => {
            let n = r.u32()? as usize;
            let edits = r.count(12, "edits")?;
            let mut out = Vec::with_capacity(n.min(old.len() + body.len() / 13));
            let mut old = old.into_iter();
            for _ in 0..edits {
                let at = r.pos();
                let keep = r.u32()? as usize;
                let remove = r.u32()? as usize;
                let add = r.count(13, "pages")?;
                if old.len() < keep.saturating_add(remove) {
                    return Err(DecodeError::new(at, Reason::Edit { keep, remove, pages: old.len() }));
                }
                out.extend(old.by_ref().take(keep));
                old.by_ref().take(remove).for_each(drop);
                for _ in 0..add {
                    out.push(decode_page(&mut r)?);
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
    let mut segs = Vec::with_capacity(m);
    for _ in 0..m {
        let seg = r.u32()?;
        let gen = r.u64()?;
        segs.push((seg, gen));
    }
    if !r.is_empty() {
        return Err(r.fail(Reason::Trailing { bytes: r.left(), after: "the segment list" }));
    }
    Ok((out, segs))
}

/// Checks a decoded page list: not empty, the first page at the empty key, low keys
/// strictly increasing, page ids below `next_pid`.
pub(super) fn check(pages: &[Arc<Page>], next_pid: u64) -> Result<(), Reason> {
    if pages.first().is_none_or(|p| !p.low.is_empty()) {
        return Err(Reason::NoFirstPage);
    }
    if let Some(w) = pages.windows(2).find(|w| w[0].low >= w[1].low) {
        return Err(Reason::PageOrder { a: w[0].pid, b: w[1].pid });
    }
    if let Some(p) = pages.iter().find(|p| p.pid >= next_pid) {
        return Err(Reason::PagePastNext { pid: p.pid, next: next_pid });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(pid: u64, low: &str) -> Arc<Page> {
        let r = ImageRef { seg: pid as u32, off: pid * 7, len: 100, crc: pid as u32 };
        Arc::new(Page { low: low.as_bytes().to_vec(), pid, chain: vec![r], dead: 0 })
    }

    fn same(a: &[Arc<Page>], b: &[Arc<Page>]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| x.pid == y.pid && x.low == y.low && x.chain == y.chain && x.dead == y.dead)
    }

    /// Every edit a checkpoint makes (pages replaced, split, dropped, the first page's low
    /// key cleared) survives encoding and decoding: the delta over the old list gives the
    /// new one exactly.
    #[test]
    fn a_delta_over_the_old_table_gives_the_new_one() {
        let old: Vec<Arc<Page>> = ["", "b", "d", "f", "h", "j", "l"].iter().zip(0..).map(|(l, i)| page(i, l)).collect();
        let mut new = old.clone();
        new[1] = page(20, "b"); // a delta
        new.splice(3..4, [page(3, "f"), page(21, "g")]); // a split
        new.remove(6); // "j" dropped
        new.push(page(22, "m")); // past the end
        new[0] = page(23, ""); // the first page replaced
        let segs = vec![(1, 5), (9, 6)];
        let edits = diff(&old, &new).expect("shared pages keep their order");
        let mut body = Vec::new();
        encode_delta(new.len(), &edits, &segs, &mut body);
        assert_eq!(body.len(), delta_len(&edits, segs.len()));
        let (got, got_segs) = decode(&body, Some(old.clone())).unwrap();
        assert!(same(&got, &new));
        assert_eq!(got_segs, segs);
        check(&got, 24).unwrap();
        // Nothing changed: an empty delta.
        let edits = diff(&old, &old).unwrap();
        assert!(edits.is_empty());
        // A base round trip.
        let mut body = Vec::new();
        encode_base(&new, &segs, &mut body);
        assert_eq!(body.len(), base_len(&new, segs.len()));
        assert!(same(&decode(&body, None).unwrap().0, &new));
    }

    /// A delta applied to a table it was not made for, or damaged counts, is an error.
    #[test]
    fn a_delta_over_the_wrong_table_is_corrupt() {
        let old: Vec<Arc<Page>> = ["", "b", "d"].iter().zip(0..).map(|(l, i)| page(i, l)).collect();
        let mut new = old.clone();
        new.remove(2);
        let edits = diff(&old, &new).unwrap();
        let mut body = Vec::new();
        encode_delta(new.len(), &edits, &[], &mut body);
        // Over a shorter table: the edit removes a page that is not there.
        assert!(decode(&body, Some(old[..1].to_vec())).is_err());
        // Over a longer one: the page count does not match.
        let longer: Vec<Arc<Page>> = old.iter().cloned().chain([page(9, "z")]).collect();
        assert!(decode(&body, Some(longer)).is_err());
        // A page count past what the bytes could hold.
        let mut huge = body.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge, Some(old.clone())).is_err());
        // Out of key order, or an id past the next one.
        let swapped = vec![old[0].clone(), old[2].clone(), old[1].clone()];
        assert!(check(&swapped, 10).is_err());
        assert!(check(&old, 2).is_err());
    }

    /// A page's dead bytes survive a base and a delta of the table; a page without them
    /// is encoded as before they existed (the older builds' format).
    #[test]
    fn dead_bytes_survive_the_table_and_are_absent_without_deletes() {
        let old: Vec<Arc<Page>> = ["", "b", "d"].iter().zip(0..).map(|(l, i)| page(i, l)).collect();
        let mut plain = Vec::new();
        encode_base(&old, &[(1, 2)], &mut plain);
        assert_eq!(plain.len(), base_len(&old, 1));
        let mut new = old.clone();
        Arc::make_mut(&mut new[1]).dead = 1234;
        new[2] = Arc::new(Page { dead: u32::MAX, ..(*page(7, "d")).clone() });
        let mut body = Vec::new();
        encode_base(&new, &[(1, 2)], &mut body);
        assert_eq!(body.len(), base_len(&new, 1));
        assert_eq!(body.len(), plain.len() + 8, "four bytes per page with dead bytes");
        let (got, _) = decode(&body, None).unwrap();
        assert!(same(&got, &new));
        let edits = diff(&old, &new).unwrap();
        let mut body = Vec::new();
        encode_delta(new.len(), &edits, &[(1, 2)], &mut body);
        assert_eq!(body.len(), delta_len(&edits, 1));
        let (got, _) = decode(&body, Some(old.clone())).unwrap();
        assert!(same(&got, &new));
    }
}
