//! A bulk load's pages: records sorted by key, each above every key of the store, written
//! bottom-up as new bases after the last page's entries (as LMDB's append and RocksDB's
//! ingestion build their pages and files): no delta, no other page read, memory bounded
//! by a few pages whatever the number of records.

use super::apply::Bases;
use super::*;

/// What [`PageStore::append_sorted`] appended.
#[derive(Debug, Default)]
pub struct Appended {
    /// Records appended.
    pub records: u64,
    /// The first one's key.
    pub first: Option<Vec<u8>>,
    /// The low keys above `first` of the pages written: where the key range from `first`
    /// on may be cut into ranges that load a page at a time.
    pub lows: Vec<Vec<u8>>,
}

/// Why [`PageStore::append_sorted`] stopped: the records (out of order, too long, or the
/// source's own error), and nothing changed; or the store's files, which a checkpoint's
/// failure is too.
#[derive(Debug)]
pub enum AppendError {
    /// A record was refused or could not be read; the store is as it was.
    Input(Error),
    /// Writing an image failed.
    Store(Error),
}

/// Checks record `n` of a bulk load, `key` and `value`, against the limits and against
/// `prev`: the key before it, or the database's last key for the first.
pub fn check_appended(prev: Option<&[u8]>, key: &[u8], value: &[u8], n: u64) -> Result<(), Error> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLong { len: key.len(), max: MAX_KEY_LEN });
    }
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::ValueTooLong { len: value.len(), max: MAX_VALUE_LEN });
    }
    match prev.filter(|p| key <= *p) {
        Some(p) => {
            let what = if n == 0 { "the last key in the database" } else { "the key before it" };
            Err(Error::InvalidInput(format!(
                "bulk load: record {n} has key \"{}\", not above {what} (\"{}\"): keys must ascend, above every key \
                 already stored",
                crate::error::show_key(key),
                crate::error::show_key(p),
            )))
        }
        None => Ok(()),
    }
}

impl PageStore {
    /// Appends `records` (sorted, unique, each key above every key in the store) for
    /// generation `gen`: the entries of the last page holding a key and then the records
    /// are written as bases of about [`PAGE_TARGET`] (that page keeps its id and low key,
    /// the rest get new ones), and the images of it and of the emptied pages after it die.
    /// Then [`write_table`](Self::write_table). On an error the table being built is left as
    /// it was (the images written are dead, for cleaning).
    pub fn append_sorted<I>(&mut self, gen: u64, records: I) -> Result<Appended, AppendError>
    where
        I: Iterator<Item = Result<(Vec<u8>, Vec<u8>), Error>>,
    {
        let mut records = records.peekable();
        if records.peek().is_none() {
            return Ok(Appended::default());
        }
        self.gen = gen;
        let before = self.pages.clone();
        // The last page holding a key takes the records after its entries. Emptied pages
        // past it go: their low keys may lie above the first record (a load over keys
        // deleted since their pages were written), and a table's lows must ascend.
        let (last, old) = self.last_entries(&before).map_err(AppendError::Store)?;
        let max = (!old.is_empty()).then(|| old.key(old.len() - 1).to_vec());
        let mut out: Vec<Arc<Page>> = before[..last].to_vec();
        let page = Page { low: before[last].low.clone(), pid: before[last].pid, chain: Vec::new(), dead: 0 };
        let mut bases = Bases::new(page);
        let r = self.append_records(&mut bases, &mut out, old, &mut records, max);
        let r = r.and_then(|a| bases.finish(self, &mut out).map_err(AppendError::Store).map(|()| a));
        match r {
            Ok(mut a) => {
                for p in &before[last..] {
                    for r in p.chain.clone() {
                        self.dead(r);
                    }
                }
                let first = a.first.as_deref().unwrap_or_default();
                a.lows = out[last..].iter().map(|p| &p.low).filter(|l| l.as_slice() > first).cloned().collect();
                self.pages = Arc::new(out);
                Ok(a)
            }
            Err(e) => {
                for p in &out[last..] {
                    for r in p.chain.clone() {
                        self.dead(r);
                    }
                }
                Err(e)
            }
        }
    }

    /// The last page's entries `old`, then the records, checked, into `bases`.
    fn append_records(
        &mut self,
        bases: &mut Bases,
        out: &mut Vec<Arc<Page>>,
        old: Entries,
        records: &mut dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>), Error>>,
        max: Option<Vec<u8>>,
    ) -> Result<Appended, AppendError> {
        for i in 0..old.len() {
            let (k, v) = old.get(i);
            bases.push(self, k, v, out).map_err(AppendError::Store)?;
        }
        let mut a = Appended::default();
        let mut prev = max;
        for r in records {
            let (k, v) = r.map_err(AppendError::Input)?;
            check_appended(prev.as_deref(), &k, &v, a.records).map_err(AppendError::Input)?;
            match prev.as_mut() {
                Some(p) => {
                    p.clear();
                    p.extend_from_slice(&k);
                }
                None => prev = Some(k.clone()),
            }
            if a.first.is_none() {
                a.first = Some(k.clone());
            }
            a.records += 1;
            bases.push(self, &k, &v, out).map_err(AppendError::Store)?;
        }
        Ok(a)
    }

    /// The index of the last page of `pages` that holds a key (0 if none does), and its
    /// entries.
    fn last_entries(&self, pages: &[Arc<Page>]) -> Result<(usize, Entries), Error> {
        for i in (0..pages.len()).rev() {
            let entries = self.reads.entries(pages, i..=i)?;
            if !entries.is_empty() || i == 0 {
                return Ok((i, entries));
            }
        }
        Err(Error::Corrupt("the page table holds no page".into()))
    }
}
