//! A checkpoint's pages: the changes applied as deltas or new bases to the pages they touch
//! (relocating those of the segments being cleaned), prepared in parallel by helper threads
//! a chunk ahead, and the rebuild that rewrites every page.

use super::*;

impl PageStore {
    /// Applies `changes` (sorted by key, unique) for generation `gen`: deltas or new
    /// bases for the pages they touch, and relocation of the pages of the segments
    /// cleaning picks. Then [`write_table`](Self::write_table) (several calls may come
    /// before it: each one's pages are the next one's). The changes' values are read
    /// a page at a time (a page with over [`PREPARE_MAX_CHANGES`] changes [`CHANGE_BATCH`]
    /// at a time), so a checkpoint never holds all it writes.
    ///
    /// With `milestone`, each time the images written since the last table pass
    /// [`milestone_bytes`](Self::milestone_bytes), the table of the pages so far (the
    /// pages done, then the rest as they were) is made current and `milestone` is called
    /// with the store: it writes that table and, once a master record names it, calls
    /// [`commit`](Self::commit), so that the segments it frees are reused within the
    /// same checkpoint instead of piling up until its end.
    pub fn apply(
        &mut self,
        gen: u64,
        changes: &dyn Changes,
        mut milestone: Option<Milestone<'_>>,
    ) -> Result<(), Error> {
        self.gen = gen;
        let before = (self.appended(), self.stats.relocated_bytes);
        // Cleaning's first pick goes with the changes (counting the room the last
        // checkpoint's changes took, with twice the relocation budget), so that with
        // milestones the segments it empties are reused within this checkpoint: picked
        // only after the changes' writes, they stayed on disk beside them until its end
        // (a steady overwrite's page store peaked at 1.8x the data instead of 1.5x). A
        // second pick after the changes covers what their writes took beyond that.
        let early = if milestone.is_some() { self.pick_victims(self.last_pass, 2) } else { BTreeSet::new() };
        self.stats.segments_cleaned += early.len() as u64;
        let reclaim = self.pick_reclaim();
        self.apply_pass(changes, &early, &reclaim, &mut milestone)?;
        self.last_pass = (self.appended() - before.0) - (self.stats.relocated_bytes - before.1);
        let victims = self.pick_victims(0, 1);
        if !victims.is_empty() {
            self.stats.segments_cleaned += victims.len() as u64;
            // The pass reads back images the first one wrote.
            self.write_pending()?;
            let none: &[Change] = &[];
            self.apply_pass(&none, &victims, &[], &mut milestone)?;
        }
        Ok(())
    }

    /// Bytes of images after which a checkpoint writes an intermediate table: a sixteenth
    /// of the live data, at least two segments (a table costs a few bytes per page, and
    /// the segments a milestone frees hold at most what was written since the last one).
    fn milestone_bytes(&self) -> u64 {
        (self.live_bytes() / MILESTONE_SHARE).max(2 * self.segment_bytes)
    }

    /// Bytes of images appended since open (written or not).
    pub(super) fn appended(&self) -> u64 {
        self.stats.written_bytes + (self.out.len() + self.buf.len()) as u64
    }

    /// One pass over the pages: `changes` applied, and every page with an image in
    /// `victims` or an index in `reclaim` (ascending) rewritten as a consolidated base, a
    /// reclaimed page together with the small neighbours it takes in (`Touched::absorbed`).
    ///
    /// What a touched page needs before its images are appended (its changes' values, and
    /// its entries read back when it is consolidated) is prepared ahead, in order, by
    /// helper threads (see [`ReadAhead`]) when the store has some and the pass touches
    /// many pages: a uniform update touches most pages each checkpoint, and on one thread
    /// the checkpoint capped the commit rate on 16 cores. The appends stay on this
    /// thread, in page order (addresses, page ids, segments).
    fn apply_pass(
        &mut self,
        changes: &dyn Changes,
        victims: &BTreeSet<u32>,
        reclaim: &[usize],
        milestone: &mut Option<Milestone<'_>>,
    ) -> Result<(), Error> {
        // The table as the pass found it: the pass reads it while it builds the new list
        // (unchanged pages are shared), and a milestone's table is the pages done followed
        // by the rest of it.
        let before = self.pages.clone();
        let mut touched: Vec<Touched> = Vec::new();
        let mut at = 0;
        let mut reclaim = reclaim.iter().peekable();
        let mut i = 0;
        while i < before.len() {
            let page = &before[i];
            let mut end = range_end(&before, i, changes, at);
            let reclaimed = reclaim.next_if(|&&r| r == i).is_some();
            let relocate = reclaimed || page.chain.iter().any(|r| victims.contains(&r.seg));
            if reclaimed {
                let prev_untouched = touched.last().is_none_or(|t| t.page + t.absorbed + 1 < i);
                let (first, last) = merged_run(&before, i, prev_untouched, &mut reclaim);
                for j in i + 1..=last {
                    end = range_end(&before, j, changes, end);
                }
                touched.push(Touched { page: first, changes: at..end, relocate: true, absorbed: last - first });
                at = end;
                i = last + 1;
                continue;
            }
            if end > at || relocate {
                touched.push(Touched { page: i, changes: at..end, relocate, absorbed: 0 });
            }
            at = end;
            i += 1;
        }
        let helpers = if touched.len() >= PARALLEL_MIN_PAGES { self.helpers } else { 0 };
        let reads = self.reads.clone();
        let ctx = Prepare { reads: &reads, before: &before, changes, touched: &touched };
        let ahead = ReadAhead::new(touched.len().div_ceil(PREPARE_CHUNK), helpers);
        std::thread::scope(|s| {
            // Helpers blocked for room wake and leave however this ends (a failed spawn
            // included: the scope would otherwise wait for them).
            let _stop = ahead.stop_on_drop();
            // A thread the system refuses is one helper fewer (none: the pass prepares
            // its pages itself).
            let started = (0..helpers)
                .filter(|_| std::thread::Builder::new().spawn_scoped(s, || ahead.help(&ctx)).is_ok())
                .count();
            self.apply_touched(&ctx, &ahead, started > 0, milestone)
        })
        .inspect(|_| self.stats.checkpoint_cpu_micros += ahead.cpu_micros.load(Ordering::Relaxed))
    }

    /// The sequential half of [`apply_pass`](Self::apply_pass): every page in order, the
    /// touched ones rewritten with what `ahead`'s helpers prepared (`helped`), or prepared
    /// here.
    fn apply_touched(
        &mut self,
        ctx: &Prepare<'_>,
        ahead: &ReadAhead,
        helped: bool,
        milestone: &mut Option<Milestone<'_>>,
    ) -> Result<(), Error> {
        let before = ctx.before;
        let mut out: Vec<Arc<Page>> = Vec::with_capacity(before.len());
        let every = self.milestone_bytes();
        let mut next_touched = ctx.touched.iter().enumerate().peekable();
        let mut chunk: std::vec::IntoIter<Option<Prepared>> = Vec::new().into_iter();
        // Pages before this were taken in by a merged page (see `Touched::absorbed`).
        let mut resume = 0;
        for i in 0..before.len() {
            if i < resume {
                continue;
            }
            if let Some(m) = milestone.as_mut() {
                if self.appended() >= self.table_written_at + every {
                    let mut now: Vec<Arc<Page>> = out.iter().chain(&before[i..]).cloned().collect();
                    if !now[0].low.is_empty() {
                        Arc::make_mut(&mut now[0]).low.clear();
                    }
                    self.pages = Arc::new(now);
                    m(self)?;
                }
            }
            let page = before[i].clone();
            let Some((n, t)) = next_touched.next_if(|(_, t)| t.page == i) else {
                out.push(page);
                continue;
            };
            let prepared = if !helped {
                ctx.prepare(t)?
            } else {
                if n % PREPARE_CHUNK == 0 {
                    chunk = ahead.take(n / PREPARE_CHUNK)?.into_iter();
                }
                chunk.next().expect("a prepared chunk holds each of its pages")
            };
            self.apply_page(ctx, page, t, prepared, &mut out)?;
            resume = i + 1 + t.absorbed;
        }
        if out.is_empty() {
            out.push(Arc::new(Page { low: Vec::new(), pid: self.take_pid(), chain: Vec::new(), dead: 0 }));
        }
        // The first page always starts at the empty key (an emptied first page was
        // dropped: its right neighbour now covers its range too).
        if !out[0].low.is_empty() {
            Arc::make_mut(&mut out[0]).low.clear();
        }
        self.pages = Arc::new(out);
        Ok(())
    }

    /// Rewrites one touched page: a delta of its changes, or a consolidated base (several
    /// when it grew), with `prepared` (or, for a page with too many changes to prepare at
    /// once, its changes read a batch at a time).
    fn apply_page(
        &mut self,
        ctx: &Prepare<'_>,
        page: Arc<Page>,
        t: &Touched,
        prepared: Option<Prepared>,
        out: &mut Vec<Arc<Page>>,
    ) -> Result<(), Error> {
        let to = t.changes.end;
        if t.relocate {
            self.stats.relocated_pages += 1 + t.absorbed as u64;
        }
        // What cleaning alone writes (the page has no change) is not what the next
        // checkpoint's changes are expected to take.
        let relocation_from = t.changes.is_empty().then(|| self.appended());
        let (mut mine, mut next, old, delta) = match prepared {
            Some(p) => {
                let delta = p.old.is_none();
                (p.mine, to, p.old, delta)
            }
            None => {
                // Changes are read a batch at a time: the last page of an ascending fill
                // gets every new key of the interval, and holding them all would cost as
                // much memory as the interval wrote.
                let mut mine = Vec::new();
                let mut next = t.changes.start;
                let room = delta_room(&page, t.relocate);
                if let Some(room) = room {
                    let mut delta_len = 0u64;
                    while next < to && delta_len <= room {
                        let end = (next + CHANGE_BATCH).min(to);
                        let seen = mine.len();
                        ctx.changes.values(next..end, &mut mine)?;
                        let prev = if seen > 0 { mine[seen - 1].0.as_slice() } else { &[] };
                        delta_len += changes_len(prev, &mine[seen..]);
                        next = end;
                    }
                    let delta = next == to && delta_len <= room;
                    (mine, next, None, delta)
                } else {
                    (mine, next, None, false)
                }
            }
        };
        if delta {
            let (count, body) = encode_entries(mine.iter().map(|(k, v)| (k.as_slice(), v.as_deref())));
            let r = self.append_image(KIND_DELTA, page.pid, page.chain[0], count, &body)?;
            self.stats.deltas_written += 1;
            self.stats.delta_bytes += u64::from(r.len);
            let mut p = Arc::unwrap_or_clone(page);
            p.chain.insert(0, r);
            let dead = markers(&mine).saturating_mul(self.entry_bytes);
            p.dead = u32::try_from(u64::from(p.dead).saturating_add(dead)).unwrap_or(u32::MAX);
            out.push(Arc::new(p));
            return Ok(());
        }
        // Consolidate: the page's entries (one page, or a merged run of at most
        // `MERGE_MAX_PAGES`: bounded) merged with the changes
        // read so far and the rest, a batch at a time, written as bases of about
        // `PAGE_TARGET` as they fill.
        let old = match old {
            Some(old) => old,
            None => ctx.entries(t)?,
        };
        for p in std::iter::once(&page).chain(&ctx.before[t.page + 1..=t.page + t.absorbed]) {
            for r in &p.chain {
                self.dead(*r);
            }
        }
        let mut bases = Bases::new(Arc::unwrap_or_clone(page));
        let mut at = 0;
        loop {
            for (k, v) in mine.drain(..) {
                while at < old.len() && old.key(at) <= k.as_slice() {
                    let (ok, ov) = old.get(at);
                    if ok != k.as_slice() {
                        bases.push(self, ok, ov, out)?;
                    }
                    at += 1;
                }
                if let Some(v) = v {
                    bases.push(self, &k, &v, out)?;
                }
            }
            if next == to {
                break;
            }
            let end = (next + CHANGE_BATCH).min(to);
            ctx.changes.values(next..end, &mut mine)?;
            next = end;
        }
        for i in at..old.len() {
            let (k, v) = old.get(i);
            bases.push(self, k, v, out)?;
        }
        bases.finish(self, out)?;
        if let Some(at) = relocation_from {
            self.stats.relocated_bytes += self.appended() - at;
        }
        Ok(())
    }

    /// Replaces the whole store with `entries` (key order): every page new, every old
    /// image dead. For databases whose changes are not known from the log.
    pub fn rebuild(&mut self, gen: u64, fill: &mut dyn FnMut(&mut Sink<'_>) -> Result<(), Error>) -> Result<(), Error> {
        self.gen = gen;
        for r in self.pages.iter().flat_map(|p| p.chain.clone()).collect::<Vec<_>>() {
            self.dead(r);
        }
        let mut out: Vec<Arc<Page>> = Vec::new();
        let first = Page { low: Vec::new(), pid: self.take_pid(), chain: Vec::new(), dead: 0 };
        let mut bases = Bases::new(first);
        fill(&mut |k, v| bases.push(self, k, v, &mut out))?;
        bases.finish(self, &mut out)?;
        if out.is_empty() {
            out.push(Arc::new(Page { low: Vec::new(), pid: self.take_pid(), chain: Vec::new(), dead: 0 }));
        }
        self.pages = Arc::new(out);
        Ok(())
    }

    fn take_pid(&mut self) -> u64 {
        self.next_pid += 1;
        self.next_pid - 1
    }

    /// Writes `entries` (the whole content of `page`) as one base, or as several pages
    /// when it is more than twice [`PAGE_TARGET`]; an empty page is dropped.
    fn write_bases(
        &mut self,
        page: Page,
        entries: &Entries,
        range: std::ops::Range<usize>,
        out: &mut Vec<Arc<Page>>,
    ) -> Result<(), Error> {
        if range.is_empty() {
            return Ok(());
        }
        let total = entries_len(entries.iter(range.clone()));
        let pieces = if total > 2 * PAGE_TARGET { total.div_ceil(PAGE_TARGET) } else { 1 };
        let per = total.div_ceil(pieces);
        let mut start = range.start;
        let mut first = Some(page);
        while start < range.end {
            let mut size = 0;
            let mut end = start;
            while end < range.end && (end == start || size < per) {
                let prev = if end > start { entries.key(end - 1) } else { &[] };
                let (k, v) = entries.get(end);
                size += entry_len(prev, k, Some(v));
                end += 1;
            }
            let (pid, low) = match first.take() {
                Some(page) => (page.pid, page.low),
                None => (self.take_pid(), entries.key(start).to_vec()),
            };
            // Encoded straight into the pending blocks (no body copied first).
            let count = (end - start) as u32;
            let r = self.append_image_with(KIND_BASE, pid, ImageRef::default(), count, size, &mut |body| {
                encode_entries_into(body, entries.iter(start..end));
            })?;
            self.stats.bases_written += 1;
            out.push(Arc::new(Page { low, pid, chain: vec![r], dead: 0 }));
            start = end;
        }
        Ok(())
    }
}

/// A consolidated page being written as bases while its entries stream in: a base of
/// at most [`PAGE_TARGET`] leaves each time three times that has gathered (the first keeps the
/// page's id and low key, the rest get new ids), and [`finish`](Self::finish) splits what
/// is left evenly, as [`PageStore::write_bases`] does.
pub(super) struct Bases {
    page: Option<Page>,
    piece: Entries,
    size: usize,
}

impl Bases {
    pub(super) fn new(page: Page) -> Bases {
        Bases { page: Some(page), piece: Entries::default(), size: 0 }
    }

    /// The next piece's page: the original one first, then new ids starting at `low`.
    fn header(page: &mut Option<Page>, store: &mut PageStore, low: &[u8]) -> Page {
        match page.take() {
            Some(p) => p,
            None => Page { low: low.to_vec(), pid: store.take_pid(), chain: Vec::new(), dead: 0 },
        }
    }

    pub(super) fn push(
        &mut self,
        store: &mut PageStore,
        k: &[u8],
        v: &[u8],
        out: &mut Vec<Arc<Page>>,
    ) -> Result<(), Error> {
        let n = self.piece.len();
        self.size += entry_len(if n > 0 { self.piece.key(n - 1) } else { &[] }, k, Some(v));
        self.piece.push(k, v);
        if self.size < 3 * PAGE_TARGET {
            return Ok(());
        }
        let (mut cut, mut size) = (0, 0);
        while cut < self.piece.len() {
            let prev = if cut > 0 { self.piece.key(cut - 1) } else { &[] };
            let (k, v) = self.piece.get(cut);
            let len = entry_len(prev, k, Some(v));
            if cut > 0 && size + len > PAGE_TARGET {
                break;
            }
            size += len;
            cut += 1;
        }
        self.size -= size;
        let page = Self::header(&mut self.page, store, self.piece.key(0));
        store.write_bases(page, &self.piece, 0..cut, out)?;
        self.piece.drop_front(cut);
        Ok(())
    }

    pub(super) fn finish(mut self, store: &mut PageStore, out: &mut Vec<Arc<Page>>) -> Result<(), Error> {
        if self.piece.is_empty() {
            // An emptied page is dropped (its range joins its left neighbour's).
            return Ok(());
        }
        let page = Self::header(&mut self.page, store, self.piece.key(0));
        store.write_bases(page, &self.piece, 0..self.piece.len(), out)
    }
}

/// Touched pages per chunk that a helper prepares at once (see [`ReadAhead`]).
const PREPARE_CHUNK: usize = 16;
/// Chunks prepared ahead of the pass per helper at most: what waits is bounded (each
/// page holds at most [`PREPARE_MAX_CHANGES`] changes and the entries of one page, or of
/// a merged run of at most [`MERGE_MAX_PAGES`]).
const PREPARE_AHEAD: usize = 4;
/// A page with more changes than this is applied by the pass itself, its changes read a
/// batch at a time (the last page of an ascending fill gets every new key).
pub(super) const PREPARE_MAX_CHANGES: usize = 4 * CHANGE_BATCH;
/// A pass touching fewer pages prepares them itself: a few pages are not worth threads.
pub(super) const PARALLEL_MIN_PAGES: usize = 4 * PREPARE_CHUNK;
/// A page a pass rewrites: its index in the table, its changes, and whether cleaning
/// relocates it.
struct Touched {
    page: usize,
    changes: std::ops::Range<usize>,
    relocate: bool,
    /// Pages after `page` merged into it (their changes included in `changes`): a
    /// reclaimed page's small or reclaimed neighbours (`page` itself is the small one
    /// before it when the reclaimed page is among these). They leave the table.
    absorbed: usize,
}

/// The most pages one merge of a reclaimed page with its neighbours takes in, itself
/// included (their entries are read and held together).
const MERGE_MAX_PAGES: usize = 8;

/// A touched page's inputs, read ahead: its changes with their values, and its current
/// entries if it is to be consolidated (`None`: it gets a delta).
struct Prepared {
    mine: Vec<Change>,
    old: Option<Entries>,
}

/// What preparing reads: the table as the pass found it, the changes, and the pages the
/// pass touches. Shared by the helpers (nothing in it changes during the pass: a milestone
/// frees only segments that no page after the pass's position names).
struct Prepare<'a> {
    reads: &'a PageReads,
    before: &'a [Arc<Page>],
    changes: &'a dyn Changes,
    touched: &'a [Touched],
}

impl Prepare<'_> {
    /// `t`'s inputs; `None` for a page with more than [`PREPARE_MAX_CHANGES`] changes.
    fn prepare(&self, t: &Touched) -> Result<Option<Prepared>, Error> {
        if t.changes.len() > PREPARE_MAX_CHANGES {
            return Ok(None);
        }
        let mut mine = Vec::with_capacity(t.changes.len());
        self.changes.values(t.changes.clone(), &mut mine)?;
        let page = &self.before[t.page];
        let fits = delta_room(page, t.relocate).is_some_and(|room| changes_len(&[], &mine) <= room);
        let old = if fits { None } else { Some(self.entries(t)?) };
        Ok(Some(Prepared { mine, old }))
    }

    /// The live entries of `t`'s page (and of the pages it takes in) in the table as the
    /// pass found it.
    fn entries(&self, t: &Touched) -> Result<Entries, Error> {
        self.reads.entries(self.before, t.page..=t.page + t.absorbed)
    }
}

/// The helpers' side of a pass: chunks of [`PREPARE_CHUNK`] touched pages claimed in
/// order, prepared at most [`PREPARE_AHEAD`] chunks per helper ahead of the pass, and
/// taken by the pass in order.
struct ReadAhead {
    chunks: usize,
    helpers: usize,
    claimed: AtomicUsize,
    /// The helpers' CPU time, each added as it leaves (a helper's thread does nothing else).
    cpu_micros: AtomicU64,
    state: Mutex<AheadState>,
    ready: Condvar,
    room: Condvar,
}

#[derive(Default)]
struct AheadState {
    done: BTreeMap<usize, Result<Vec<Option<Prepared>>, Error>>,
    taken: usize,
    stop: bool,
}

impl ReadAhead {
    fn new(chunks: usize, helpers: usize) -> ReadAhead {
        ReadAhead {
            chunks,
            helpers,
            claimed: AtomicUsize::new(0),
            cpu_micros: AtomicU64::new(0),
            state: Mutex::new(AheadState::default()),
            ready: Condvar::new(),
            room: Condvar::new(),
        }
    }

    /// A helper's loop: claim the next chunk, wait for room, prepare it, hand it over.
    fn help(&self, ctx: &Prepare<'_>) {
        ctx.changes.on_helper_thread();
        self.help_chunks(ctx);
        let cpu = crate::background::thread_cpu_time().as_micros() as u64;
        self.cpu_micros.fetch_add(cpu, Ordering::Relaxed);
    }

    fn help_chunks(&self, ctx: &Prepare<'_>) {
        loop {
            let c = self.claimed.fetch_add(1, Ordering::Relaxed);
            if c >= self.chunks {
                return;
            }
            {
                let mut st = self.state.lock();
                // The chunk the pass waits for is always within reach: it was claimed
                // before every later one, and `taken` is at most it.
                while !st.stop && c >= st.taken + PREPARE_AHEAD * self.helpers {
                    self.room.wait(&mut st);
                }
                if st.stop {
                    return;
                }
            }
            let pages = &ctx.touched[c * PREPARE_CHUNK..((c + 1) * PREPARE_CHUNK).min(ctx.touched.len())];
            // A panic here would leave the pass waiting for this chunk forever.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pages.iter().map(|t| ctx.prepare(t)).collect::<Result<Vec<_>, _>>()
            }))
            .unwrap_or_else(|_| Err(Error::Corrupt("a checkpoint helper thread panicked".into())));
            self.state.lock().done.insert(c, r);
            self.ready.notify_all();
        }
    }

    /// Chunk `c`, once prepared (chunks are taken in order).
    fn take(&self, c: usize) -> Result<Vec<Option<Prepared>>, Error> {
        let mut st = self.state.lock();
        loop {
            if let Some(r) = st.done.remove(&c) {
                st.taken = c + 1;
                self.room.notify_all();
                return r;
            }
            self.ready.wait(&mut st);
        }
    }

    /// Stops the helpers when dropped (the pass ended, maybe early on an error).
    fn stop_on_drop(&self) -> impl Drop + '_ {
        struct Stop<'a>(&'a ReadAhead);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.state.lock().stop = true;
                self.0.room.notify_all();
            }
        }
        Stop(self)
    }
}

/// The bytes `page` may still take in deltas (`None`: it must be consolidated: no base,
/// relocated, a full chain, or deltas past its limit). Its dead bytes do not count here:
/// the pages they make due are rewritten at cleaning's pace (`pick_reclaim`), not all
/// by the checkpoint after a mass delete.
fn delta_room(page: &Page, relocate: bool) -> Option<u64> {
    if page.chain.is_empty() || relocate || page.chain.len() >= MAX_CHAIN {
        return None;
    }
    let (base, deltas) = page.base_and_deltas();
    delta_limit(page.pid, base).checked_sub(deltas)
}

/// Delete markers among `changes`.
fn markers(changes: &[Change]) -> u64 {
    changes.iter().filter(|(_, v)| v.is_none()).count() as u64
}

/// The encoded length of `changes` after the key `prev`.
fn changes_len(prev: &[u8], changes: &[Change]) -> u64 {
    changes
        .iter()
        .scan(prev, |prev, (k, v)| Some(entry_len(std::mem::replace(prev, k), k, v.as_deref())))
        .sum::<usize>() as u64
}

/// The pages `first..=last` of `pages` that the reclaimed page `i` is merged with while
/// they fit in one page (by their estimated live bytes; at most [`MERGE_MAX_PAGES`], as the
/// estimates may err and the run's entries are held at once): the small page before it
/// (when `prev_untouched`: no other rewrite of this pass takes it), then the reclaimed
/// (taken from `reclaim`) or small pages after it. Deleting 90% of the records left pages
/// a tenth full, each still an image, a table entry and a read. The small pages taken in
/// are not charged to the reclaim's budget: at most a page per reclaimed page.
fn merged_run(
    pages: &[Arc<Page>],
    i: usize,
    prev_untouched: bool,
    reclaim: &mut std::iter::Peekable<std::slice::Iter<'_, usize>>,
) -> (usize, usize) {
    let small = |p: &Page| p.live_estimate() < PAGE_TARGET as u64 / 4;
    let mut size = pages[i].live_estimate();
    let mut first = i;
    if let Some(prev) = i.checked_sub(1).filter(|_| prev_untouched) {
        if small(&pages[prev]) && size + pages[prev].live_estimate() <= PAGE_TARGET as u64 {
            size += pages[prev].live_estimate();
            first = prev;
        }
    }
    let mut last = i;
    while size < PAGE_TARGET as u64 / 2 && last - first + 1 < MERGE_MAX_PAGES {
        let Some(next) = pages.get(last + 1) else { break };
        let next_reclaimed = reclaim.peek() == Some(&&(last + 1));
        if !(next_reclaimed || small(next)) || size + next.live_estimate() > PAGE_TARGET as u64 {
            break;
        }
        if next_reclaimed {
            reclaim.next();
        }
        size += next.live_estimate();
        last += 1;
    }
    (first, last)
}

/// The end (exclusive) in `changes` of the changes of page `i` of `pages`, from `at`.
pub(super) fn range_end(pages: &[Arc<Page>], i: usize, changes: &dyn Changes, at: usize) -> usize {
    match pages.get(i + 1) {
        Some(next) => {
            // The first change at or past the next page's low key.
            let (mut lo, mut hi) = (at, changes.len());
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if changes.key(mid) < next.low.as_slice() {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        }
        None => changes.len(),
    }
}
