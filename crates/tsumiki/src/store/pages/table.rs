//! The translation table's images: a base lists every page (id, low key, chain of image
//! addresses); a delta lists only what changed since the table before it, as edits of that
//! table's page list, and names it by address and checksum in its header. The master
//! record names the newest image; opening reads the chain back to its base (at most
//! [`TABLE_CHAIN`] images) and applies the deltas in order.
//!
//! Why deltas: a checkpoint that changes a few pages of a large store (an ascending fill, a
//! skewed workload), and the intermediate tables of a long checkpoint (milestones), would
//! otherwise each rewrite the whole table: ~80 bytes per page, 1.2 MB for 1M records.
//! A page that keeps its id and low key and only gains images (a checkpoint's delta, or a
//! new base) is written as a rechain: its new images and whether its old chain follows
//! them, about 21 bytes instead of its whole entry (under uniform overwrites, where every
//! checkpoint changes almost every page, the tables were a fifth of the updated bytes).
//!
//! Both kinds end with every segment the table names and the generation that last wrote
//! it.

use std::collections::HashSet;
use std::sync::Arc;

use super::{ImageRef, Page, MAX_CHAIN, REF_LEN};
use crate::decode::{DecodeError, Item, Reader, Reason};
use crate::index::MAX_KEY_LEN;

/// The longest chain of table images (a base and its deltas) that opening accepts.
pub(super) const TABLE_CHAIN: usize = 16;

/// The longest chain of table images this build writes. With rechains a delta is a few
/// bytes per page, so the byte limit (deltas up to the base) no longer ends a chain after
/// a delta or two. Each image keeps its segment from being freed: at 16, one-minute
/// overwrites ran with page-store files swinging up to 2.2x the data and commits waiting
/// for checkpoints 12-17 s against 3-5 s; at 4 the directory's mean is as before (1.86x).
pub(super) const WRITTEN_CHAIN: usize = 4;

/// One edit of a page list: `keep` pages copied, `remove` dropped, then `add` inserted.
/// With `rechain`, the pages of `add` replace the removed ones one for one, each the same
/// page (id, low key) with a new chain whose last `rechain[i]` images are the old chain.
pub(super) struct Edit {
    keep: u32,
    remove: u32,
    add: Vec<Arc<Page>>,
    rechain: Option<Vec<usize>>,
}

/// Set in an edit's page count when it is a rechain (see [`Edit`]). Builds before this one
/// read the count as too many pages for the bytes left and refuse the table rather than
/// misread it.
const RECHAIN: u32 = 1 << 31;

/// A rechain entry's byte: the new images' count (low bits), whether the old chain follows
/// them ([`KEEPS_OLD`]), whether dead bytes follow ([`HAS_DEAD`]).
const NEW_IMAGES: u8 = 0x3F;
/// See [`NEW_IMAGES`].
const KEEPS_OLD: u8 = 0x40;

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

/// The encoded length of a rechain entry whose last `kept` images are the old chain's.
fn rechain_len(p: &Page, kept: usize) -> usize {
    1 + (p.chain.len() - kept) * REF_LEN + if p.dead > 0 { 4 } else { 0 }
}

fn encode_rechain(p: &Page, kept: usize, body: &mut Vec<u8>) {
    let new = p.chain.len() - kept;
    body.push(new as u8 | if kept > 0 { KEEPS_OLD } else { 0 } | if p.dead > 0 { HAS_DEAD } else { 0 });
    for r in &p.chain[..new] {
        r.encode(body);
    }
    if p.dead > 0 {
        body.extend_from_slice(&p.dead.to_le_bytes());
    }
}

/// How many of `new`'s last images are `old`'s whole chain (0 unless it only gained images
/// in front), when `new` is `old` rewritten: the same id and low key.
fn kept_images(old: &Page, new: &Page) -> Option<usize> {
    (old.pid == new.pid && old.low == new.low).then(|| {
        if new.chain.len() > old.chain.len() && new.chain.ends_with(&old.chain) {
            old.chain.len()
        } else {
            0
        }
    })
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
/// checkpoint left alone is the same `Arc` in both lists (and keeps its order); a changed
/// page with its id and low key kept is rechained, any other page of `new` is added, any
/// other of `old` removed. `None` if the lists disagree on the order of shared pages
/// (never expected: the caller writes a base then).
pub(super) fn diff(old: &[Arc<Page>], new: &[Arc<Page>]) -> Option<Vec<Edit>> {
    let in_old: HashSet<*const Page> = old.iter().map(Arc::as_ptr).collect();
    let in_new: HashSet<*const Page> = new.iter().map(Arc::as_ptr).collect();
    let gone = |i: usize| i < old.len() && !in_new.contains(&Arc::as_ptr(&old[i]));
    let fresh = |j: usize| j < new.len() && !in_old.contains(&Arc::as_ptr(&new[j]));
    let rechained = |i: usize, j: usize| if gone(i) && fresh(j) { kept_images(&old[i], &new[j]) } else { None };
    let (mut i, mut j) = (0, 0);
    let mut edits = Vec::new();
    loop {
        let mut e = Edit { keep: 0, remove: 0, add: Vec::new(), rechain: None };
        while i < old.len() && j < new.len() && Arc::ptr_eq(&old[i], &new[j]) {
            e.keep += 1;
            i += 1;
            j += 1;
        }
        // A trailing run of kept pages is implied.
        if i == old.len() && j == new.len() {
            break;
        }
        let mut kept = Vec::new();
        while let Some(k) = rechained(i, j) {
            kept.push(k);
            e.remove += 1;
            e.add.push(new[j].clone());
            i += 1;
            j += 1;
        }
        if !kept.is_empty() {
            e.rechain = Some(kept);
            edits.push(e);
            continue;
        }
        // Removed and added pages, in key order, up to a kept or rechained page.
        while rechained(i, j).is_none() {
            let (r, a) = (gone(i), fresh(j));
            if r && (!a || old[i].low <= new[j].low) {
                e.remove += 1;
                i += 1;
            } else if a {
                e.add.push(new[j].clone());
                j += 1;
            } else {
                break;
            }
        }
        if e.remove == 0 && e.add.is_empty() {
            return None;
        }
        edits.push(e);
    }
    Some(edits)
}

/// The length of a delta's body: new page count, edit count, the edits, the segments.
pub(super) fn delta_len(edits: &[Edit], segs: usize) -> usize {
    let edit_len = |e: &Edit| match &e.rechain {
        Some(kept) => e.add.iter().zip(kept).map(|(p, &k)| rechain_len(p, k)).sum::<usize>(),
        None => e.add.iter().map(|p| page_len(p)).sum::<usize>(),
    };
    4 + 4 + edits.iter().map(|e| 12 + edit_len(e)).sum::<usize>() + segs_len(segs)
}

/// Encodes a delta's body.
pub(super) fn encode_delta(pages: usize, edits: &[Edit], segs: &[(u32, u64)], body: &mut Vec<u8>) {
    body.extend_from_slice(&(pages as u32).to_le_bytes());
    body.extend_from_slice(&(edits.len() as u32).to_le_bytes());
    for e in edits {
        body.extend_from_slice(&e.keep.to_le_bytes());
        body.extend_from_slice(&e.remove.to_le_bytes());
        let flag = if e.rechain.is_some() { RECHAIN } else { 0 };
        body.extend_from_slice(&(e.add.len() as u32 | flag).to_le_bytes());
        match &e.rechain {
            Some(kept) => e.add.iter().zip(kept).for_each(|(p, &k)| encode_rechain(p, k, body)),
            None => e.add.iter().for_each(|p| encode_page(p, body)),
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

/// A rechain entry (see [`Edit`]) of page `old`.
fn decode_rechain(r: &mut Reader<'_>, old: &Page) -> Result<Arc<Page>, DecodeError> {
    let page = |e: DecodeError| e.of(Item::Page(old.pid));
    let at = r.pos();
    let byte = r.u8().map_err(page)?;
    let new = (byte & NEW_IMAGES) as usize;
    let kept = if byte & KEEPS_OLD != 0 { old.chain.len() } else { 0 };
    if new + kept > MAX_CHAIN + 1 {
        return Err(page(DecodeError::new(at, Reason::LongChain { len: new + kept, max: MAX_CHAIN + 1 })));
    }
    let mut chain = (0..new).map(|_| ImageRef::decode(r)).collect::<Result<Vec<_>, _>>().map_err(page)?;
    chain.extend_from_slice(&old.chain[old.chain.len() - kept..]);
    let dead = if byte & HAS_DEAD != 0 { r.u32().map_err(page)? } else { 0 };
    Ok(Arc::new(Page { low: old.low.clone(), pid: old.pid, chain, dead }))
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
                let add_at = r.pos();
                // Each entry takes at least 13 bytes, a rechain's 1.
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
                        out.push(decode_rechain(&mut r, &o)?);
                    }
                } else {
                    old.by_ref().take(remove).for_each(drop);
                    for _ in 0..add {
                        out.push(decode_page(&mut r)?);
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

    /// Pages that keep their id and low key are written as rechains: a new delta image
    /// in front of the old chain, or a new base alone, in far fewer bytes than their whole
    /// entries; mixed with splits, drops and untouched pages, the delta over the old list
    /// still gives the new one exactly, dead bytes included.
    #[test]
    fn pages_that_only_gain_images_are_written_as_rechains() {
        let old: Vec<Arc<Page>> = ["", "b", "d", "f", "h", "j"].iter().zip(0..).map(|(l, i)| page(i, l)).collect();
        let img = |n: u64| ImageRef { seg: 9, off: n * 4096, len: 700, crc: n as u32 };
        let grown = |p: &Arc<Page>, n: u64| {
            let mut chain = vec![img(n)];
            chain.extend_from_slice(&p.chain);
            Arc::new(Page { chain, ..(**p).clone() })
        };
        let mut new = old.clone();
        new[0] = grown(&old[0], 1); // a delta
        new[1] = Arc::new(Page { chain: vec![img(2)], dead: 77, ..(*old[1]).clone() }); // a new base
        new[2] = grown(&grown(&old[2], 3), 4); // two deltas
        new.splice(3..4, [Arc::new(Page { chain: vec![img(5)], ..(*old[3]).clone() }), page(30, "g")]); // a split
        new[5] = grown(&old[4], 6);
        new.remove(6); // "j" dropped
        let segs = vec![(1, 5)];
        let edits = diff(&old, &new).expect("shared pages keep their order");
        assert_eq!(edits.iter().filter(|e| e.rechain.is_some()).map(|e| e.add.len()).sum::<usize>(), 5);
        let mut body = Vec::new();
        encode_delta(new.len(), &edits, &segs, &mut body);
        assert_eq!(body.len(), delta_len(&edits, segs.len()));
        let (got, _) = decode(&body, Some(old.clone())).unwrap();
        assert!(same(&got, &new));
        check(&got, 31).unwrap();
        // Every page gained two images (and nothing else changed): one edit, and per page a
        // byte and the two new references, not its whole entry.
        let all: Vec<Arc<Page>> = old.iter().zip(10..).map(|(p, n)| grown(&grown(p, n), n + 100)).collect();
        let edits = diff(&old, &all).unwrap();
        assert_eq!(delta_len(&edits, 0), 4 + 4 + 12 + old.len() * (1 + 2 * REF_LEN) + segs_len(0));
        let mut body = Vec::new();
        encode_delta(all.len(), &edits, &[], &mut body);
        assert!(same(&decode(&body, Some(old.clone())).unwrap().0, &all));
        // A rechain over a table it was not made for: its page count differs, or the chain
        // it extends grows past the limit.
        assert!(decode(&body, Some(old[..5].to_vec())).is_err());
        let long: Vec<Arc<Page>> =
            old.iter().map(|p| Arc::new(Page { chain: vec![img(0); MAX_CHAIN], ..(**p).clone() })).collect();
        assert!(decode(&body, Some(long)).is_err());
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
