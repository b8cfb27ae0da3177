//! The entries of a page image (a base's or a delta's): each key stored as the bytes it
//! shares with the previous key of the image and the rest, lengths as LEB128 varints.
//!
//! Entry: `shared` (varint: leading bytes equal to the previous key's; 0 for the first),
//! `rest` (varint: the key's remaining length), `vtag` (varint: 0 a delete, else the
//! value's length plus one), the key's remaining bytes, the value. Keys strictly increase.
//! A fill of 4-byte keys and 8-byte values took 21 bytes per entry with fixed `u32`
//! lengths and a tag byte; this takes 12, and a checkpoint writes that much less.

use super::{decode_corrupt, ImageRef, IMAGE_HEADER};
use crate::decode::{DecodeError, Item, Reader, Reason};
use crate::error::{Error, MAX_VALUE_LEN};
use crate::index::MAX_KEY_LEN;

/// A page image's (or the changes') entries in key order (`None`: a tombstone).
pub(super) type Layer<'a> = Vec<(&'a [u8], Option<&'a [u8]>)>;

fn put_varint(out: &mut Vec<u8>, mut n: u32) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn varint_len(n: u32) -> usize {
    match n {
        0..=0x7F => 1,
        0x80..=0x3FFF => 2,
        0x4000..=0x1F_FFFF => 3,
        0x20_0000..=0xFFF_FFFF => 4,
        _ => 5,
    }
}

fn shared_len(prev: &[u8], k: &[u8]) -> usize {
    prev.iter().zip(k).take_while(|(a, b)| a == b).count()
}

/// The encoded length of the entry `k`, `v` after the entry of key `prev` (empty for an
/// image's first).
pub(super) fn entry_len(prev: &[u8], k: &[u8], v: Option<&[u8]>) -> usize {
    let shared = shared_len(prev, k);
    let rest = k.len() - shared;
    let value = v.map_or(1, |v| varint_len(v.len() as u32 + 1) + v.len());
    varint_len(shared as u32) + varint_len(rest as u32) + rest + value
}

/// The encoded length of `items` (in key order) as one image's entries.
pub(super) fn entries_len<'a>(items: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>) -> usize {
    let mut prev: &[u8] = &[];
    items
        .map(|(k, v)| {
            let n = entry_len(prev, k, v);
            prev = k;
            n
        })
        .sum()
}

/// Encodes entries (in strictly increasing key order). Returns the count and the bytes.
pub(super) fn encode_entries<'a>(items: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>) -> (u32, Vec<u8>) {
    let mut out = Vec::new();
    let n = encode_entries_into(&mut out, items);
    (n, out)
}

/// [`encode_entries`] onto the end of `out`; returns the count.
pub(super) fn encode_entries_into<'a>(
    out: &mut Vec<u8>,
    items: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) -> u32 {
    let mut n = 0u32;
    let mut prev: &[u8] = &[];
    for (k, v) in items {
        n += 1;
        let shared = shared_len(prev, k);
        put_varint(out, shared as u32);
        put_varint(out, (k.len() - shared) as u32);
        put_varint(out, v.map_or(0, |v| v.len() as u32 + 1));
        out.extend_from_slice(&k[shared..]);
        if let Some(v) = v {
            out.extend_from_slice(v);
        }
        prev = k;
    }
    n
}

/// Calls `f` on every entry of a page image, checking lengths and that keys strictly
/// increase. The key is rebuilt in a buffer (valid during the call); values point into
/// the image. A damaged entry is [`Error::Corrupt`] naming the entry and, for an image
/// read from `src`, its segment file and the entry's byte there.
pub(super) fn for_each_entry<'a>(
    img: &'a [u8],
    src: Option<ImageRef>,
    pid: u64,
    mut f: impl FnMut(&[u8], Option<&'a [u8]>) -> Result<(), Error>,
) -> Result<(), Error> {
    let bad = |e: DecodeError| decode_corrupt(src, IMAGE_HEADER, &format!("page {pid}"), &e);
    let count = u32::from_le_bytes(img[IMAGE_HEADER - 4..IMAGE_HEADER].try_into().expect("4 bytes"));
    let mut r = Reader::new(&img[IMAGE_HEADER..]);
    let mut key: Vec<u8> = Vec::new();
    for i in 0..count {
        let at = r.pos();
        let entry = |e: DecodeError| bad(e.of(Item::Entry(i)));
        let fail = |reason: Reason| bad(DecodeError::new(at, reason).of(Item::Entry(i)));
        let shared = r.varint().map_err(entry)? as usize;
        let rest = r.varint().map_err(entry)? as usize;
        let vtag = r.varint().map_err(entry)? as usize;
        if shared > key.len() {
            return Err(fail(Reason::SharedPrefix { shared, key: key.len() }));
        }
        if shared + rest > MAX_KEY_LEN {
            return Err(fail(Reason::TooLong { what: "a key", len: shared + rest, max: MAX_KEY_LEN }));
        }
        if vtag > MAX_VALUE_LEN + 1 {
            return Err(fail(Reason::TooLong { what: "a value", len: vtag - 1, max: MAX_VALUE_LEN }));
        }
        let tail = r.take(rest).map_err(entry)?;
        // Both keys start with the same `shared` bytes: the rest decides their order.
        if i > 0 && tail <= &key[shared..] {
            return Err(fail(Reason::KeyOrder));
        }
        key.truncate(shared);
        key.extend_from_slice(tail);
        let v = match vtag {
            0 => None,
            n => Some(r.take(n - 1).map_err(entry)?),
        };
        f(&key, v)?;
    }
    if !r.is_empty() {
        return Err(bad(r.fail(Reason::AfterEntries { bytes: r.left(), count })));
    }
    Ok(())
}

/// An image's entries decoded for a merge: the keys in one buffer, each entry its key's
/// end in it and its value in the image.
pub(super) struct Decoded<'a> {
    keys: Vec<u8>,
    entries: Vec<(usize, Option<&'a [u8]>)>,
}

impl<'a> Decoded<'a> {
    /// Decodes `img`'s entries (read from `src`, if from a segment), each key passing
    /// `check`.
    pub(super) fn new(
        img: &'a [u8],
        src: Option<ImageRef>,
        pid: u64,
        mut check: impl FnMut(&[u8]) -> Result<(), Error>,
    ) -> Result<Self, Error> {
        let mut d = Decoded { keys: Vec::new(), entries: Vec::new() };
        for_each_entry(img, src, pid, |k, v| {
            check(k)?;
            d.keys.extend_from_slice(k);
            d.entries.push((d.keys.len(), v));
            Ok(())
        })?;
        Ok(d)
    }

    /// The entries as a layer of a merge.
    pub(super) fn layer(&self) -> Layer<'_> {
        let mut start = 0;
        self.entries
            .iter()
            .map(|&(end, v)| {
                let k = &self.keys[start..end];
                start = end;
                (k, v)
            })
            .collect()
    }
}

/// Calls `f` with every key of `layers` (each sorted by key, strictly) once, in key order,
/// with the value of the first layer that holds it.
pub(super) fn merge_newest_first<'a>(
    layers: &[Layer<'a>],
    mut f: impl FnMut(&'a [u8], Option<&'a [u8]>) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut at = vec![0usize; layers.len()];
    loop {
        let mut first: Option<(&[u8], Option<&[u8]>)> = None;
        for (l, &i) in layers.iter().zip(&at) {
            if let Some(&(k, v)) = l.get(i) {
                // A strictly smaller key only: on a tie the newer layer, met first, wins.
                if first.is_none_or(|(fk, _)| k < fk) {
                    first = Some((k, v));
                }
            }
        }
        let Some((k, v)) = first else { return Ok(()) };
        for (l, i) in layers.iter().zip(&mut at) {
            if l.get(*i).is_some_and(|e| e.0 == k) {
                *i += 1;
            }
        }
        f(k, v)?;
    }
}

/// Live entries (key, value) in key order, their bytes in one buffer: a consolidation
/// reads a page's entries, merges its changes in and writes bases, and an allocation per
/// key and per value was a fifth of a checkpoint's CPU under uniform overwrites. Offsets
/// are `usize`: one page's entries are bounded by its images' encoded bytes, but shared
/// key prefixes decode to many times those (a 4 KiB key can take six bytes of a delta).
#[derive(Default)]
pub(super) struct Entries {
    bytes: Vec<u8>,
    /// Each entry's key end and value end in `bytes` (its key starts where the previous
    /// entry's value ends).
    ends: Vec<(usize, usize)>,
}

impl Entries {
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Appends an entry (after every other in key order).
    pub(super) fn push(&mut self, k: &[u8], v: &[u8]) {
        self.bytes.extend_from_slice(k);
        let kend = self.bytes.len();
        self.bytes.extend_from_slice(v);
        self.ends.push((kend, self.bytes.len()));
    }

    /// Entry `i`'s key and value.
    pub(super) fn get(&self, i: usize) -> (&[u8], &[u8]) {
        let start = if i == 0 { 0 } else { self.ends[i - 1].1 };
        let (kend, vend) = self.ends[i];
        (&self.bytes[start..kend], &self.bytes[kend..vend])
    }

    pub(super) fn key(&self, i: usize) -> &[u8] {
        self.get(i).0
    }

    /// Entries `range`, as [`encode_entries`] takes them.
    pub(super) fn iter(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + Clone + '_ {
        range.map(|i| {
            let (k, v) = self.get(i);
            (k, Some(v))
        })
    }

    /// Drops the first `n` entries.
    pub(super) fn drop_front(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let cut = self.ends[n - 1].1;
        self.bytes.drain(..cut);
        self.ends.drain(..n);
        for e in &mut self.ends {
            *e = (e.0 - cut, e.1 - cut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An image of `body` with `count` entries (only the header's count matters here).
    fn image(count: u32, body: &[u8]) -> Vec<u8> {
        let mut img = vec![0u8; IMAGE_HEADER];
        img[IMAGE_HEADER - 4..].copy_from_slice(&count.to_le_bytes());
        img.extend_from_slice(body);
        img
    }

    /// Owned entries (`None`: a tombstone).
    type Owned = Vec<(Vec<u8>, Option<Vec<u8>>)>;

    fn decode(img: &[u8]) -> Result<Owned, Error> {
        let mut got = Vec::new();
        for_each_entry(img, None, 7, |k, v| {
            got.push((k.to_vec(), v.map(<[u8]>::to_vec)));
            Ok(())
        })?;
        Ok(got)
    }

    #[test]
    fn entries_round_trip_with_shared_prefixes() {
        let big = vec![0xAB; 300];
        let entries: Owned = vec![
            (b"".to_vec(), Some(b"empty key".to_vec())),
            (b"app".to_vec(), None),
            (b"apple".to_vec(), Some(big.clone())),
            (b"apply".to_vec(), Some(Vec::new())),
            (b"b".to_vec(), None),
            (vec![b'b'; 200], Some(b"x".to_vec())),
            (vec![b'c'; MAX_KEY_LEN], Some(big)),
        ];
        let items = || entries.iter().map(|(k, v)| (k.as_slice(), v.as_deref()));
        let (count, body) = encode_entries(items());
        assert_eq!(count, entries.len() as u32);
        assert_eq!(body.len(), entries_len(items()));
        assert_eq!(decode(&image(count, &body)).unwrap(), entries);
    }

    /// Ascending 4-byte keys with 8-byte values (paper 004's fill): 12 bytes an entry.
    #[test]
    fn a_fill_of_small_records_takes_twelve_bytes_an_entry() {
        let keys: Vec<[u8; 4]> = (1000u32..2000).map(u32::to_be_bytes).collect();
        let (_, body) = encode_entries(keys.iter().map(|k| (&k[..], Some(&[7u8; 8][..]))));
        // The first key is whole, and every 256th shares a byte less.
        assert!(body.len() <= 12 * keys.len() + 16, "{} bytes", body.len());
    }

    #[test]
    fn damaged_entries_are_errors() {
        let (count, body) = encode_entries([(&b"ab"[..], Some(&b"1"[..])), (b"ac", Some(b"2"))].into_iter());
        assert_eq!(body, [0, 2, 2, b'a', b'b', b'1', 1, 1, 2, b'c', b'2']);
        let cases: Vec<(u32, Vec<u8>, &str)> = vec![
            // The second key shares more than the first has.
            (count, vec![0, 2, 2, b'a', b'b', b'1', 3, 1, 2, b'c', b'2'], "shares 3 bytes"),
            // Out of order, and equal.
            (count, vec![0, 2, 2, b'a', b'b', b'1', 1, 1, 2, b'a', b'2'], "out of order"),
            (count, vec![0, 2, 2, b'a', b'b', b'1', 1, 1, 2, b'b', b'2'], "out of order"),
            // A value running past the image, a count past the entries, bytes left over.
            (count, vec![0, 2, 2, b'a', b'b', b'1', 1, 1, 9, b'c', b'2'], "are left"),
            (count + 1, body.clone(), "are left"),
            (count - 1, body.clone(), "bytes after the last of 1 entries"),
            // Lengths past the limits, and a varint past 32 bits.
            (1, vec![0, 0x81, 0x80, 0x80, 0x80, 0x01, 0], "over the limit"),
            (1, vec![0, 0, 0x82, 0x80, 0x80, 0x08], "over the limit"),
            (1, vec![0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F], "overflows"),
        ];
        for (count, body, want) in cases {
            let err = decode(&image(count, &body)).unwrap_err().to_string();
            assert!(err.contains(want), "{body:?}: {err}");
        }
    }

    /// Mutated encodings decode to an error or to entries, never a panic, and what
    /// decodes keeps keys strictly increasing and within the limits.
    #[test]
    fn mutated_entries_never_panic() {
        let keys: Vec<Vec<u8>> = (0u32..40).map(|i| format!("key{:05}", i * 37).into_bytes()).collect();
        let (count, body) = encode_entries(keys.iter().map(|k| (k.as_slice(), Some(&k[2..]))));
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut decoded = 0;
        for _ in 0..20_000 {
            let mut b = body.clone();
            for _ in 0..1 + next() % 3 {
                if b.is_empty() {
                    break;
                }
                let i = (next() % b.len() as u64) as usize;
                match next() % 3 {
                    0 => b[i] ^= 1 << (next() % 8),
                    1 => b[i] = next() as u8,
                    _ => b.truncate(i),
                }
            }
            if let Ok(got) = decode(&image(count, &b)) {
                decoded += 1;
                assert!(got.windows(2).all(|w| w[0].0 < w[1].0));
                assert!(got
                    .iter()
                    .all(|(k, v)| k.len() <= MAX_KEY_LEN && v.as_ref().is_none_or(|v| v.len() <= MAX_VALUE_LEN)));
            }
        }
        // Value bytes flipped still decode: the loop did reach the decoder's end.
        assert!(decoded > 0);
    }

    #[test]
    fn merge_keeps_the_newest_layer_per_key() {
        let newest: Layer<'_> = vec![(b"b", None), (b"d", Some(b"d2"))];
        let middle: Layer<'_> = vec![(b"a", Some(b"a1")), (b"d", Some(b"d1")), (b"e", None)];
        let oldest: Layer<'_> =
            vec![(b"a", Some(b"a0")), (b"b", Some(b"b0")), (b"c", Some(b"c0")), (b"e", Some(b"e0"))];
        let mut got = Vec::new();
        merge_newest_first(&[newest, Vec::new(), middle, oldest], |k, v| {
            got.push((k.to_vec(), v.map(<[u8]>::to_vec)));
            Ok(())
        })
        .unwrap();
        let want: Owned =
            [(&b"a"[..], Some(&b"a1"[..])), (b"b", None), (b"c", Some(b"c0")), (b"d", Some(b"d2")), (b"e", None)]
                .iter()
                .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                .collect();
        assert_eq!(got, want);
    }

    /// A base being cut keeps its later entries whole, and encodes as the owned pairs do.
    #[test]
    fn flat_entries_keep_keys_and_values_across_a_cut() {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> =
            (0u32..50).map(|i| (format!("key{i:03}").into_bytes(), vec![i as u8; i as usize % 7])).collect();
        let mut e = Entries::default();
        assert!(e.is_empty());
        for (k, v) in &pairs {
            e.push(k, v);
        }
        assert_eq!(e.len(), 50);
        for (i, (k, v)) in pairs.iter().enumerate() {
            assert_eq!(e.get(i), (k.as_slice(), v.as_slice()), "entry {i}");
        }
        let owned = encode_entries(pairs[..20].iter().map(|(k, v)| (k.as_slice(), Some(v.as_slice()))));
        assert_eq!(encode_entries(e.iter(0..20)), owned);
        e.drop_front(20);
        assert_eq!(e.len(), 30);
        for (i, (k, v)) in pairs[20..].iter().enumerate() {
            assert_eq!(e.get(i), (k.as_slice(), v.as_slice()), "entry {} after the cut", i + 20);
        }
        let mut body = b"before".to_vec();
        let n = encode_entries_into(&mut body, e.iter(0..e.len()));
        let rest = encode_entries(pairs[20..].iter().map(|(k, v)| (k.as_slice(), Some(v.as_slice()))));
        assert_eq!((n, &body[6..]), (rest.0, rest.1.as_slice()));
        e.drop_front(30);
        assert!(e.is_empty());
    }
}
