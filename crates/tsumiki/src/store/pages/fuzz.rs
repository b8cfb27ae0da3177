//! Entry points for fuzzing the page store's decoders (`tests/corruption.rs`): the page
//! image's header, its entries and the translation table, over arbitrary bytes. Each must
//! return an error or a decode, never panic, hang, or allocate more than the bytes describe.
//! Hidden from the documentation; not part of the API.

use std::sync::Arc;

use super::entries::{encode_entries, for_each_entry, merge_newest_first, Decoded};
use super::table;
use super::{
    corrupt, decode_corrupt, ImageRef, Page, IMAGE_HEADER, KIND_BASE, KIND_DELTA, KIND_TABLE, KIND_TABLE_DELTA,
};
use super::{MAX_IMAGE, REF_LEN};
use crate::decode::Reader;
use crate::error::Error;

/// Decodes `img` as the store does an image whose checksums passed (the CRC is not
/// checked here, so that mutated bytes reach the decoders): the header's lengths, the
/// previous image's address, then by kind a page's entries (streamed, and decoded for a
/// merge) or a translation table (a delta applied over the table base `base`, when given).
/// Returns the entries or pages decoded.
///
/// # Panics
/// When the two entry decoders disagree on a page image (a bug, which fuzzing reports).
pub fn decode_image(img: &[u8], base: Option<&[u8]>) -> Result<usize, Error> {
    if img.len() < IMAGE_HEADER || img.len() > MAX_IMAGE as usize {
        return Err(corrupt(format!("an image of {} bytes", img.len())));
    }
    let body = u32::from_le_bytes(img[4..8].try_into().expect("4 bytes"));
    if body as usize + 8 != img.len() {
        return Err(corrupt("an image's length disagrees with its header"));
    }
    let pid = u64::from_le_bytes(img[9..17].try_into().expect("8 bytes"));
    ImageRef::decode(&mut Reader::new(&img[17..17 + REF_LEN])).map_err(|e| decode_corrupt(None, 17, "an image", &e))?;
    match img[8] {
        KIND_BASE | KIND_DELTA => {
            let mut streamed = Vec::new();
            for_each_entry(img, None, pid, |k, v| {
                streamed.push((k.to_vec(), v.map(<[u8]>::to_vec)));
                Ok(())
            })?;
            let decoded = Decoded::new(img, None, pid, |_| Ok(()))?;
            let mut merged = Vec::new();
            merge_newest_first(&[decoded.layer()], |k, v| {
                merged.push((k.to_vec(), v.map(<[u8]>::to_vec)));
                Ok(())
            })?;
            assert_eq!(streamed, merged, "the entry decoders disagree on page {pid}");
            Ok(streamed.len())
        }
        KIND_TABLE => {
            let (pages, _) = table::decode(&img[IMAGE_HEADER..], None).map_err(table_corrupt)?;
            table::check(&pages, pid).map_err(|why| corrupt(format!("{TABLE}: {why}")))?;
            Ok(pages.len())
        }
        KIND_TABLE_DELTA => {
            let old = match base {
                Some(b) if b.len() >= IMAGE_HEADER && b[8] == KIND_TABLE => {
                    table::decode(&b[IMAGE_HEADER..], None).map_err(table_corrupt)?.0
                }
                _ => return Err(corrupt("a table delta without its base")),
            };
            let (pages, _) = table::decode(&img[IMAGE_HEADER..], Some(old)).map_err(table_corrupt)?;
            table::check(&pages, pid).map_err(|why| corrupt(format!("{TABLE}: {why}")))?;
            Ok(pages.len())
        }
        k => Err(corrupt(format!("an image of kind {k}"))),
    }
}

const TABLE: &str = "the translation table";

fn table_corrupt(e: crate::decode::DecodeError) -> Error {
    decode_corrupt(None, IMAGE_HEADER, TABLE, &e)
}

/// Valid images drawn from `seed`, to mutate: a page base, a page delta (with
/// tombstones), a table base, and a table delta over that base (decode it with the base
/// as `base`).
pub fn sample_images(seed: u64) -> [Vec<u8>; 4] {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |n: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s % n.max(1)
    };
    // Keys with shared prefixes, strictly increasing.
    let mut keys: Vec<Vec<u8>> =
        (0..1 + next(40)).map(|_| (0..next(12)).map(|_| b"aab"[next(3) as usize] ^ next(2) as u8).collect()).collect();
    keys.sort();
    keys.dedup();
    let values: Vec<Vec<u8>> = keys.iter().map(|_| (0..next(300)).map(|_| next(256) as u8).collect()).collect();
    let prev =
        ImageRef { seg: next(4) as u32, off: next(1 << 20), len: 100 + next(1000) as u32, crc: next(1 << 32) as u32 };
    let base_entries = encode_entries(keys.iter().zip(&values).map(|(k, v)| (k.as_slice(), Some(v.as_slice()))));
    let delta_entries =
        encode_entries(keys.iter().zip(&values).map(|(k, v)| (k.as_slice(), (next(3) > 0).then_some(v.as_slice()))));
    let pid = next(1000);
    let page_base = image(KIND_BASE, pid, ImageRef::default(), base_entries.0, &base_entries.1);
    let page_delta = image(KIND_DELTA, pid, prev, delta_entries.0, &delta_entries.1);

    let mut lows: Vec<Vec<u8>> = keys.clone();
    lows[0] = Vec::new();
    let pages: Vec<Arc<Page>> = lows
        .iter()
        .enumerate()
        .map(|(i, low)| {
            let chain = (0..1 + next(3)).map(|_| ImageRef { seg: next(8) as u32, ..prev }).collect();
            Arc::new(Page { low: low.clone(), pid: i as u64, chain, dead: 0 })
        })
        .collect();
    let segs: Vec<(u32, u64)> = (0..next(5) as u32).map(|n| (n, next(9))).collect();
    let mut body = Vec::new();
    table::encode_base(&pages, &segs, &mut body);
    let next_pid = pages.len() as u64 + 10;
    let table_base = image(KIND_TABLE, next_pid, ImageRef::default(), pages.len() as u32, &body);
    // The delta: every other page replaced, one added at the end.
    let mut new: Vec<Arc<Page>> =
        pages.iter().enumerate().map(|(i, p)| if i % 2 == 1 { Arc::new((**p).clone()) } else { p.clone() }).collect();
    new.push(Arc::new(Page { low: vec![0xff; 3], pid: next_pid - 1, chain: vec![prev], dead: 0 }));
    let edits = table::diff(&pages, &new).expect("the shared pages keep their order");
    let mut body = Vec::new();
    table::encode_delta(new.len(), &edits, &segs, &mut body);
    let table_delta = image(KIND_TABLE_DELTA, next_pid, prev, new.len() as u32, &body);
    [page_base, page_delta, table_base, table_delta]
}

/// An image as the store writes it (see `PageStore::append_image_with`).
fn image(kind: u8, pid: u64, prev: ImageRef, count: u32, body: &[u8]) -> Vec<u8> {
    let mut img = vec![0; 4];
    img.extend_from_slice(&((IMAGE_HEADER + body.len() - 8) as u32).to_le_bytes());
    img.push(kind);
    img.extend_from_slice(&pid.to_le_bytes());
    prev.encode(&mut img);
    img.extend_from_slice(&count.to_le_bytes());
    img.extend_from_slice(body);
    let crc = crc32c::crc32c(&img[4..]);
    img[..4].copy_from_slice(&crc.to_le_bytes());
    img
}
