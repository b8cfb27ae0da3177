//! The page store: the translation table, every image it names, their entries, and
//! every other block of every segment; then a second reading through the page store itself.

use std::collections::{HashMap, HashSet};

use super::layout::*;
use super::{scan_blocks, Bad, Checker};
use crate::block::{open_block, BLOCK, PAYLOAD};
use crate::decode::Reason;
use crate::error::Error;
use crate::storage::{Storage, StorageFile};
use crate::store::master::Master;
use crate::store::pages::{segment_file, ImageRef, PageStore, STORE_LANE};
use crate::wal::recovery;

impl Checker {
    /// Page segment `n`, opened once (`None` when missing or unreadable).
    pub(super) fn segment(&mut self, n: u32) -> Option<&dyn StorageFile> {
        let storage = &self.storage;
        self.files.entry(n).or_insert_with(|| storage.open(&segment_file(n), false).ok()).as_deref()
    }

    /// Reads the image at `r`, verifying each block that holds it and the image's own
    /// checksum and length.
    pub(super) fn read_image(&mut self, r: ImageRef) -> Result<Vec<u8>, Bad> {
        let name = segment_file(r.seg);
        let at = file_offset(r.off);
        let bad = |offset: u64, what: String| Bad { file: name.clone(), offset: Some(offset), what };
        if (r.len as usize) < IMAGE_HEADER || r.len as usize > MAX_IMAGE {
            return Err(bad(at, format!("the table names an image of an impossible length, {} bytes", r.len)));
        }
        let first = r.off / PAYLOAD as u64;
        let end = (r.off + u64::from(r.len)).div_ceil(PAYLOAD as u64);
        let Some(f) = self.segment(r.seg) else {
            return Err(Bad {
                file: name.clone(),
                offset: None,
                what: "the translation table names an image in this file, which is missing or unreadable".into(),
            });
        };
        let mut raw = vec![0u8; (end - first) as usize * BLOCK];
        let mut got = 0;
        while got < raw.len() {
            match f.read_at(&mut raw[got..], first * BLOCK as u64 + got as u64) {
                Ok(0) => {
                    let len = f.len().unwrap_or(0);
                    return Err(bad(
                        len,
                        format!(
                            "the file ends at byte {len}, inside the image of {} bytes at byte {at} (truncated?)",
                            r.len
                        ),
                    ));
                }
                Ok(n) => got += n,
                Err(e) => return Err(bad(first * BLOCK as u64 + got as u64, format!("read error: {e}"))),
            }
        }
        let mut img = Vec::with_capacity(r.len as usize);
        let mut skip = (r.off % PAYLOAD as u64) as usize;
        for (i, block) in raw.chunks(BLOCK).enumerate() {
            let b = first + i as u64;
            let boff = b * BLOCK as u64;
            let t = match open_block(block, 0) {
                None => return Err(bad(boff, format!("block {b} (of an image the table names) fails its checksum"))),
                Some(t) if t.lane != STORE_LANE => {
                    return Err(bad(boff, format!("block {b} belongs to log lane {}, not to the page store", t.lane)))
                }
                Some(t) if u64::from(t.seq) != b => {
                    return Err(bad(boff, format!("block {b} says it is block {} (a block moved or copied)", t.seq)))
                }
                Some(t) => t,
            };
            let want = (r.len as usize - img.len()).min(PAYLOAD - skip);
            if (t.used as usize) < skip + want {
                return Err(bad(boff, format!("block {b} uses {} bytes, and the image needs {}", t.used, skip + want)));
            }
            img.extend_from_slice(&block[skip..skip + want]);
            skip = 0;
        }
        self.report.images += 1;
        let stored = u32::from_le_bytes(img[0..4].try_into().expect("4 bytes"));
        let body = u32::from_le_bytes(img[4..8].try_into().expect("4 bytes")) as usize;
        if stored != r.crc {
            return Err(bad(
                at,
                "the image is not the one the table names (its checksum differs): stale or foreign".into(),
            ));
        }
        if crc32c::crc32c(&img[4..]) != stored {
            return Err(bad(at, "the image fails its checksum".into()));
        }
        if body + 8 != img.len() {
            return Err(bad(at, format!("the image says its body is {body} bytes; it is {}", img.len() - 8)));
        }
        Ok(img)
    }

    /// The translation table, every image it names, and every block of every segment.
    pub(super) fn check_pages(&mut self, m: Option<&Master>, segments: &[u32]) -> Result<(), Error> {
        // Blocks the table names, by segment: checked as images; the rest below.
        let mut named: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        let mut table_ok = false;
        let table = m.and_then(|m| m.table).map(|(seg, off, len, crc)| ImageRef { seg, off, len, crc });
        let mut pages: Vec<TablePage> = Vec::new();
        if let (Some(t), Some(m)) = (table, m) {
            match self.read_table(t) {
                Ok(((p, segs), chain)) => {
                    for r in &chain {
                        named.entry(r.seg).or_default().push((r.off, r.off + u64::from(r.len)));
                    }
                    pages = p;
                    table_ok = true;
                    self.check_segment_list(&pages, &segs, &chain, m);
                }
                Err(b) => self.bad(b),
            }
        }
        self.report.pages = pages.len() as u64;
        let mut damaged_pages: HashSet<usize> = HashSet::new();
        let mut counts: Vec<u64> = vec![0; pages.len()];
        for i in 0..pages.len() {
            for r in &pages[i].chain {
                named.entry(r.seg).or_default().push((r.off, r.off + u64::from(r.len)));
            }
            let high = pages.get(i + 1).map(|p| p.low.clone());
            match self.check_page(&pages[i], high.as_deref()) {
                Ok((n, kb, vb)) => {
                    counts[i] = n;
                    self.report.records += n;
                    self.report.key_bytes += kb;
                    self.report.value_bytes += vb;
                }
                Err(b) => {
                    damaged_pages.insert(i);
                    self.bad(b);
                }
            }
        }
        self.check_overlaps(&mut named);
        if let (Some(t), true) = (table, table_ok) {
            self.second_opinion(t, &pages, &counts, &damaged_pages);
            if let Some(m) = m {
                self.check_newer_writes(m, t)?;
            }
        } else if let Some(m) = m.filter(|m| m.table.is_none()) {
            // An empty database: no segment may hold a later generation's first block.
            for &n in segments {
                if let Some(w) = self.first_block_generation(n, 0)? {
                    self.newer_write(m, w, segment_file(n), 0)?;
                }
            }
        }
        // Without a readable table, which blocks are in use is unknown: no warning then
        // about the others (the damage is reported).
        let known = table.is_none() || table_ok;
        for &n in segments {
            self.check_segment_blocks(n, named.get(&n).map_or(&[][..], |v| v.as_slice()), known)?;
        }
        Ok(())
    }

    /// Reads the table's chain back to its base and decodes it; returns the pages, the
    /// segment list and the chain's images.
    pub(super) fn read_table(&mut self, t: ImageRef) -> Result<(Table, Vec<ImageRef>), Bad> {
        let ctx = |b: Bad| Bad { what: format!("the translation table: {}", b.what), ..b };
        let mut chain = vec![t];
        let mut imgs = vec![self.read_image(t).map_err(ctx)?];
        let at = |r: &ImageRef, what: String| Bad {
            file: segment_file(r.seg),
            offset: Some(file_offset(r.off)),
            what: format!("the translation table: {what}"),
        };
        loop {
            let r = *chain.last().expect("one image");
            let img = imgs.last().expect("one image");
            match img[8] {
                KIND_TABLE => break,
                KIND_TABLE_DELTA if chain.len() < MAX_TABLE_CHAIN => {
                    let prev = decode_ref(&img[17..17 + REF_LEN]);
                    imgs.push(self.read_image(prev).map_err(ctx)?);
                    chain.push(prev);
                }
                KIND_TABLE_DELTA => return Err(at(&r, format!("a chain of over {MAX_TABLE_CHAIN} images"))),
                k => return Err(at(&r, format!("the master record names an image of kind {k}, not a table"))),
            }
        }
        let mut pages: Option<Vec<TablePage>> = None;
        let mut segs = Vec::new();
        for (img, r) in imgs.iter().zip(&chain).rev() {
            let (p, s) = decode_table(&img[IMAGE_HEADER..], pages.take()).map_err(|e| at(r, e.to_string()))?;
            pages = Some(p);
            segs = s;
        }
        let pages = pages.expect("a base at least");
        let next_pid = u64::from_le_bytes(imgs[0][9..17].try_into().expect("8 bytes"));
        check_page_list(&pages, next_pid).map_err(|e| at(&t, e.to_string()))?;
        Ok(((pages, segs), chain))
    }

    /// The table's segment list against the images it names: each image's segment is
    /// listed, and no segment was written by a generation after the master record's.
    pub(super) fn check_segment_list(
        &mut self,
        pages: &[TablePage],
        listed: &[(u32, u64)],
        chain: &[ImageRef],
        m: &Master,
    ) {
        let t = chain[0];
        let list: HashMap<u32, u64> = listed.iter().copied().collect();
        if list.len() != listed.len() {
            self.damage(segment_file(t.seg), Some(file_offset(t.off)), "the translation table lists a segment twice");
        }
        let mut missing: Vec<u32> = pages
            .iter()
            .flat_map(|p| p.chain.iter())
            .chain(chain)
            .map(|r| r.seg)
            .filter(|s| !list.contains_key(s))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        for s in missing {
            self.damage(
                segment_file(t.seg),
                Some(file_offset(t.off)),
                format!("the translation table names images in {} but does not list that segment", segment_file(s)),
            );
        }
        for (&s, &gen) in &list {
            // A recovery writes as generation + 1 before its master record; a table is
            // always named by a record of its generation or the one before.
            if gen > m.generation.saturating_add(2) {
                self.damage(
                    segment_file(s),
                    None,
                    format!("the table says generation {gen} wrote this segment, after MASTER's {}", m.generation),
                );
            }
        }
    }

    /// One page: each image of its chain, their links, and their entries; returns the
    /// live records, their key bytes and value bytes.
    pub(super) fn check_page(&mut self, page: &TablePage, high: Option<&[u8]>) -> Result<(u64, u64, u64), Bad> {
        // Every entry of the chain, with its image's place (0: the newest).
        let mut entries: Vec<(Vec<u8>, usize, Option<u64>)> = Vec::new();
        for (w, &r) in page.chain.iter().enumerate() {
            let img = self
                .read_image(r)
                .map_err(|b| Bad { what: format!("page {} (image {w} of its chain): {}", page.pid, b.what), ..b })?;
            let at = |what: String| Bad {
                file: segment_file(r.seg),
                offset: Some(file_offset(r.off)),
                what: format!("page {} (image {w} of its chain): {what}", page.pid),
            };
            let pid = u64::from_le_bytes(img[9..17].try_into().expect("8 bytes"));
            if pid != page.pid {
                return Err(at(format!("the image belongs to page {pid}")));
            }
            let last = w + 1 == page.chain.len();
            let prev = decode_ref(&img[17..17 + REF_LEN]);
            match img[8] {
                KIND_BASE if last => {}
                KIND_DELTA if !last && prev == page.chain[w + 1] => {}
                KIND_DELTA if !last => {
                    return Err(at("the delta does not name the image after it in the chain".into()))
                }
                k => {
                    return Err(at(format!(
                        "an image of kind {k} where a {} belongs",
                        if last { "base" } else { "delta" }
                    )))
                }
            }
            for_each_entry(&img, |k, v| {
                if k < page.low.as_slice() || high.is_some_and(|h| k >= h) {
                    return Err(Reason::KeyOutOfRange);
                }
                if last && v.is_none() {
                    return Err(Reason::TombstoneInBase);
                }
                entries.push((k.to_vec(), w, v.map(|v| v.len() as u64)));
                Ok(())
            })
            .map_err(|e| at(e.to_string()))?;
        }
        // The newest image holding a key decides it.
        entries.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        entries.dedup_by(|later, first| later.0 == first.0);
        let (mut n, mut kb, mut vb) = (0, 0, 0);
        for (k, _, v) in &entries {
            if let Some(v) = v {
                n += 1;
                kb += k.len() as u64;
                vb += v;
            }
        }
        Ok((n, kb, vb))
    }

    /// No two named images share a byte.
    pub(super) fn check_overlaps(&mut self, named: &mut HashMap<u32, Vec<(u64, u64)>>) {
        let mut segs: Vec<u32> = named.keys().copied().collect();
        segs.sort_unstable();
        for s in segs {
            let spans = named.get_mut(&s).expect("listed");
            spans.sort_unstable();
            spans.dedup();
            let overlap = spans.windows(2).find(|w| w[1].0 < w[0].1).map(|w| (w[0], w[1]));
            if let Some((a, b)) = overlap {
                self.damage(
                    segment_file(s),
                    Some(file_offset(b.0)),
                    format!("two images the table names overlap (payload bytes {}..{} and {}..{})", a.0, a.1, b.0, b.1),
                );
            }
        }
    }

    /// Reads every page again through the page store itself: it must read what was
    /// verified here, and count the same records.
    pub(super) fn second_opinion(
        &mut self,
        t: ImageRef,
        pages: &[TablePage],
        counts: &[u64],
        damaged: &HashSet<usize>,
    ) {
        let table = segment_file(t.seg);
        let store = match PageStore::open(self.storage.clone(), 4 << 20, Some(t), false) {
            Ok(s) => s,
            Err(e) => {
                self.damage(table, Some(file_offset(t.off)), format!("the page store cannot read the table: {e}"));
                return;
            }
        };
        let reads = store.reads();
        for (i, page) in pages.iter().enumerate() {
            if damaged.contains(&i) {
                continue;
            }
            let high = pages.get(i + 1).map(|p| p.low.as_slice());
            match reads.load_range(&page.low, high, &mut |_, _| Ok(())) {
                Ok(n) if n == counts[i] => {}
                Ok(n) => self.damage(
                    table.clone(),
                    None,
                    format!("page {}: the page store reads {n} records, this check {}", page.pid, counts[i]),
                ),
                Err(e) => self.damage(table.clone(), None, format!("page {}: the page store fails: {e}", page.pid)),
            }
        }
    }

    /// The generation in the trailer of block `block` of segment `n`, if it is a valid
    /// page-store block there.
    pub(super) fn first_block_generation(&mut self, n: u32, block: u64) -> Result<Option<u64>, Error> {
        let Some(f) = self.segment(n) else { return Ok(None) };
        let mut b = vec![0u8; BLOCK];
        let got = f.read_at(&mut b, block * BLOCK as u64).map_err(|e| Error::io(segment_file(n), e))?;
        Ok((got == BLOCK)
            .then(|| open_block(&b, 0))
            .flatten()
            .filter(|t| t.lane == STORE_LANE && u64::from(t.seq) == block)
            .map(|t| t.lo))
    }

    /// The block after the table, where the next checkpoint writes first: a write of a
    /// later generation there means a later checkpoint finished after this master record
    /// (it was put back), unless an unfinished one left it (as the page store decides at
    /// open).
    pub(super) fn check_newer_writes(&mut self, m: &Master, t: ImageRef) -> Result<(), Error> {
        let end = (t.off + u64::from(t.len)).div_ceil(PAYLOAD as u64);
        if let Some(w) = self.first_block_generation(t.seg, end)? {
            self.newer_write(m, w, segment_file(t.seg), end * BLOCK as u64)?;
        }
        Ok(())
    }

    pub(super) fn newer_write(&mut self, m: &Master, w: u64, file: String, offset: u64) -> Result<(), Error> {
        let unfinished = w <= m.generation.saturating_add(2) && recovery::has_logs(&*self.storage, m.generation)?;
        if w > m.generation && !unfinished {
            self.damage(
                file,
                Some(offset),
                format!(
                    "the page store holds writes of generation {w}, newer than MASTER's {}: MASTER is older than the database",
                    m.generation
                ),
            );
        }
        Ok(())
    }

    /// Every block of segment `n` outside the named images (`spans`, payload offsets):
    /// valid, zero, or (a warning, when which blocks are used is `known`) stale bytes no
    /// state uses.
    pub(super) fn check_segment_blocks(&mut self, n: u32, spans: &[(u64, u64)], known: bool) -> Result<(), Error> {
        let name = segment_file(n);
        let mut in_image: HashSet<u64> = HashSet::new();
        for &(a, b) in spans {
            in_image.extend(a / PAYLOAD as u64..b.div_ceil(PAYLOAD as u64));
        }
        let (mut valid, mut stale, mut first_stale) = (0u64, 0u64, None);
        let len = scan_blocks(&*self.storage, &name, &mut |b, block| {
            let ok = block.len() == BLOCK
                && open_block(block, 0).is_some_and(|t| t.lane == STORE_LANE && u64::from(t.seq) == b);
            if ok {
                valid += 1;
            } else if !in_image.contains(&b) && block.iter().any(|&x| x != 0) {
                stale += 1;
                first_stale.get_or_insert(b * BLOCK as u64);
            }
        })?;
        self.report.blocks += valid;
        if stale > 0 && known {
            self.warn(
                name.clone(),
                first_stale,
                format!("{stale} blocks that no image of the table uses fail their checksum (a write a crash interrupted, or damage where nothing is stored; the space is reused)"),
            );
        }
        // An image cut short is damage, reported where it is read.
        if len % BLOCK as u64 != 0 {
            self.warn(name, Some(len), "the file ends inside a block (a write a crash interrupted?)");
        }
        Ok(())
    }
}
