//! Structure modifications: consolidation (and improvement (a)'s consolidation below a
//! numbered delta), split, merge and root growth and collapse, with their helping.

use super::*;

impl<V: Clone + Send + Sync + 'static> Tree<V> {
    // ----- consolidation ---------------------------------------------------------------

    /// Replaces the chain at `pid` by one base (slot CAS, not retried), then splits, merges
    /// or collapses the root if the new base calls for it. Returns whether it installed.
    pub(super) fn consolidate(&self, pid: Pid, path: &Path, guard: &Guard, help: u32) -> bool {
        let head = self.load(pid, guard);
        // SAFETY: loaded under `guard`.
        let Some(h) = (unsafe { head.as_ref() }) else { return false };
        if h.is_base() {
            return false;
        }
        let Inspected { smo, range, .. } = self.inspect(h, guard);
        if let Some(s) = smo {
            match &s.kind {
                Kind::Remove { .. } => return false,
                // A split is absorbed only once its parent knows the new sibling, so no
                // split is ever lost from the index.
                Kind::Split { .. }
                    if help >= MAX_HELP || self.help_split(pid, s, path, guard, help + 1, false).is_err() =>
                {
                    return false;
                }
                _ => {}
            }
        }
        if self.cfg.split_delta_at_head && h.is_smo() {
            // Stop data deltas from landing behind the SMO run while we copy the chain.
            let mut last = h;
            loop {
                // SAFETY: SMO deltas have a non-null next.
                let n = unsafe { node_ref(last.next(guard)) };
                if !n.is_smo() {
                    break;
                }
                last = n;
            }
            loop {
                sched::point();
                let v = last.next.load(Ordering::Acquire, guard);
                if v.tag() & TAG_FROZEN != 0
                    || last
                        .next
                        .compare_exchange(
                            v,
                            v.with_tag(v.tag() | TAG_FROZEN),
                            Ordering::AcqRel,
                            Ordering::Acquire,
                            guard,
                        )
                        .is_ok()
                {
                    break;
                }
            }
        }
        let new_range = match smo {
            Some(_) => Arc::new(Range::new(range.low.clone(), range.high.clone(), range.right)),
            None => Arc::clone(&chain_base(h, guard).as_base().expect("base").range),
        };
        mark_merges_posted(h, guard);
        let base = if h.level == 0 {
            consolidate_leaf(h, range, guard, new_range)
        } else {
            self.resolve_index_deletes(h, guard);
            inner_base(&inner_entries(h, range, guard), new_range)
        };
        // Only a split needs it: a consolidation that stays under the maximum looks no further.
        let append_end = (h.level == 0 && base.len() > self.cfg.leaf_max)
            .then(|| append_end(h, &base, range.high.is_none(), guard))
            .flatten();
        let new = Owned::new(Node::base(h.level, base));
        sched::point();
        match self.map.slot(pid).compare_exchange(head, new, Ordering::AcqRel, Ordering::Acquire, guard) {
            Ok(nb) => {
                bump(&self.counters.consolidations);
                // SAFETY: our CAS unlinked `head`; only the CAS winner retires a chain.
                unsafe { retire_chain(head, &self.map, guard) };
                self.after_consolidation(pid, nb, path, guard, help, append_end);
                true
            }
            Err(_) => {
                bump(&self.counters.failed_consolidations);
                false
            }
        }
    }

    /// An inner chain is consolidated only with every index-delete decided: a posted one is
    /// committed (it was validated against this parent when posted).
    fn resolve_index_deletes(&self, head: &Node<V>, guard: &Guard) {
        let mut node = head;
        while !node.is_base() {
            if let Kind::IndexDelete { state, .. } = &node.kind {
                state.decide(MERGED);
            }
            // SAFETY: deltas have a non-null next under `guard`.
            node = unsafe { node_ref(node.next(guard)) };
        }
    }

    /// Improvement (a): the installer of number-0 delta `d` consolidates the chain below it
    /// and swaps the result in as `d.next` — a CAS only a retirement of the whole chain can
    /// beat. Chains holding SMO deltas, or another pending number-0, take the slot route.
    pub(super) fn consolidate_below(&self, pid: Pid, d: &Node<V>, path: &Path, guard: &Guard, help: u32) {
        sched::point();
        let below = d.next.load(Ordering::Acquire, guard);
        let done = |d: &Node<V>| d.pending.store(false, Ordering::Release);
        if below.tag() != 0 {
            done(d);
            return;
        }
        // SAFETY: non-null next of a delta, under `guard`.
        let b = unsafe { node_ref(below) };
        let mut node = b;
        let mut simple = true;
        while !node.is_base() {
            if node.is_smo() || node.pending.load(Ordering::Acquire) {
                simple = false;
                break;
            }
            // SAFETY: as above.
            node = unsafe { node_ref(node.next(guard)) };
        }
        // With SMO deltas kept at the head (b), data deltas under a head merge may hold keys
        // of the absorbed sibling, beyond the base's range: only a slot consolidation, which
        // sees the merge, may fold them.
        if self.cfg.split_delta_at_head {
            // SAFETY: loaded under `guard`; null means the pid was retired meanwhile.
            if unsafe { self.load(pid, guard).as_ref() }.is_some_and(|h| h.is_smo()) {
                simple = false;
            }
        }
        if !simple || b.is_base() {
            done(d);
            if !simple {
                self.consolidate(pid, path, guard, help);
            }
            return;
        }
        let base_node = chain_base(b, guard).as_base().expect("base");
        let range = Arc::clone(&base_node.range);
        let nb = if d.level == 0 {
            consolidate_leaf(b, &range, guard, Arc::clone(&range))
        } else {
            // As in `consolidate`: an index-delete still PENDING here would be dropped by the
            // copy while its merge goes on to commit, leaving the parent routing to a node
            // that is then retired.
            self.resolve_index_deletes(b, guard);
            inner_base(&inner_entries(b, &range, guard), range)
        };
        let len = nb.len();
        let new = Owned::new(Node::base(d.level, nb));
        sched::point();
        match d.next.compare_exchange(below, new, Ordering::AcqRel, Ordering::Acquire, guard) {
            Ok(_) => {
                done(d);
                bump(&self.counters.consolidations);
                // SAFETY: our CAS unlinked the old sub-chain; the claim protocol guarantees
                // no retirement of the enclosing chain took it first.
                unsafe { retire_chain(below, &self.map, guard) };
                // `d` itself is not in the new base: a node whose number-0 delta took it
                // under the merge threshold (or over the split size) must be consolidated
                // whole now, or it would only be at the next number-0 delta, if ever.
                if self.wants_smo(pid, d.level, len) || self.wants_smo(pid, d.level, d.size as usize) {
                    self.consolidate(pid, path, guard, help);
                }
            }
            Err(_) => done(d),
        }
    }

    /// Whether delta `d` took its node's entry count past the split size or below the merge
    /// threshold.
    pub(super) fn crossed_size_limit(&self, d: &Node<V>, guard: &Guard) -> bool {
        // SAFETY: deltas have a non-null next under `guard`.
        let before = unsafe { node_ref(d.next(guard)) }.size as usize;
        let now = d.size as usize;
        let max = if d.level == 0 { self.cfg.leaf_max } else { self.cfg.inner_max };
        (now > max && before <= max) || (now < self.cfg.merge_threshold && before >= self.cfg.merge_threshold)
    }

    fn wants_smo(&self, pid: Pid, level: u16, len: usize) -> bool {
        let max = if level == 0 { self.cfg.leaf_max } else { self.cfg.inner_max };
        len > max || len < self.cfg.merge_threshold || (level > 0 && len == 1 && self.root_pid() == pid)
    }

    /// `append_end`: see `try_split`.
    pub(super) fn after_consolidation(
        &self,
        pid: Pid,
        nb: Shared<'_, Node<V>>,
        path: &Path,
        guard: &Guard,
        help: u32,
        append_end: Option<usize>,
    ) {
        // SAFETY: just installed, protected by `guard`.
        let n = unsafe { node_ref(nb) };
        let b = n.as_base().expect("base");
        let max = if n.level == 0 { self.cfg.leaf_max } else { self.cfg.inner_max };
        let is_root = self.root_pid() == pid;
        if b.len() > max {
            self.try_split(pid, nb, path, guard, help, append_end);
        } else if is_root {
            if n.level > 0 && b.len() == 1 {
                self.try_collapse(pid, nb, guard);
            }
        } else if b.len() < self.cfg.merge_threshold {
            self.try_merge(pid, nb, path, guard, help);
        }
    }

    // ----- split -----------------------------------------------------------------------

    /// Splits the base `nb` just installed at `pid`, at its middle record, or, after an
    /// append run that ended at `append_end` (see [`append_end`]), there, in the upper half:
    /// a sequential load only ever appends at its end (the rightmost leaf's, or, for a load
    /// of one slice of the keys among several, just below the next slice's), so halves
    /// would stay half full for good, while a left part kept nearly full is never written
    /// again. The right part keeps at least `merge_threshold` records, so it does not merge
    /// back; where that is over a quarter of the records (tiny test nodes), the split stays
    /// in the middle.
    fn try_split(
        &self,
        pid: Pid,
        nb: Shared<'_, Node<V>>,
        path: &Path,
        guard: &Guard,
        help: u32,
        append_end: Option<usize>,
    ) {
        // SAFETY: `nb` is the base we just installed, protected by `guard`.
        let n = unsafe { node_ref(nb) };
        let b = n.as_base().expect("base");
        // The split point is the only change: the protocol is the same for any record.
        let right = (b.len() / 10).max(self.cfg.merge_threshold);
        let mid = match append_end {
            Some(end) if n.level == 0 && right <= b.len() / 4 => end.min(b.len() - right).max(b.len() / 2),
            _ => b.len() / 2,
        };
        let sep: Box<[u8]> = b.keys.get(mid).into();
        let Some(q) = self.map.alloc() else { return };
        let q_range = Arc::new(Range::new(sep.clone(), b.range.high.clone(), b.range.right));
        let q_base = if n.level == 0 {
            let e: Vec<_> = (mid..b.len()).map(|i| (b.keys.get(i), &b.vals[i])).collect();
            leaf_base(&e, q_range)
        } else {
            let e: Vec<_> = (mid..b.len()).map(|i| (b.keys.get(i), b.children[i].pid)).collect();
            inner_base(&e, q_range)
        };
        self.map.slot(q).store(Owned::new(Node::base(n.level, q_base)), Ordering::Release);
        let range = Arc::new(Range::new(b.range.low.clone(), Some(sep.clone()), q));
        let split =
            Owned::new(Node::delta(n.level, Kind::Split { sep, right: q, range, posted: AtomicBool::new(false) }));
        match self.install_smo(pid, nb, split, guard) {
            Ok(s) => {
                bump(&self.counters.splits);
                // SAFETY: just installed under `guard`.
                // Finishing our own split is not helping: it does not spend the help budget.
                let _ = self.help_split(pid, unsafe { node_ref(s) }, path, guard, help, true);
            }
            Err(_) => {
                // Q was never reachable: take it back at once.
                let q_node = self.map.slot(q).swap(Shared::null(), Ordering::AcqRel, guard);
                // SAFETY: unpublished, so we are the only owner.
                drop(unsafe { q_node.into_owned() });
                self.map.free_unpublished(q);
            }
        }
    }

    /// Completes a split whose delta `split` sits on `pid`: posts the parent's index entry,
    /// or grows a new root. `Err` when the caller should restart from the root.
    pub(super) fn help_split(
        &self,
        pid: Pid,
        split: &Node<V>,
        path: &Path,
        guard: &Guard,
        help: u32,
        own: bool,
    ) -> Result<(), Restart> {
        let Kind::Split { sep, right: q, posted, .. } = &split.kind else { return Ok(()) };
        if posted.load(Ordering::Acquire) {
            return Ok(());
        }
        if help > MAX_HELP {
            return Err(Restart);
        }
        let Some(parent) = path.last() else {
            return self.grow_root(pid, split, guard);
        };
        for _ in 0..1000 {
            let (ppid, phead) = self.settle(parent, split.level + 1, sep, &path.parent(), guard, help)?;
            let Some(ip) = self.insert_point(ppid, phead, guard) else {
                self.consolidate(ppid, &path.parent(), guard, help);
                continue;
            };
            // Re-check after fixing the insert point: if Q has started merging away, its
            // parent entry existed (a merge requires it), so the split is complete, and
            // posting the entry again now could resurrect Q.
            let qh = self.load(*q, guard);
            // SAFETY: `q` cannot be reused while we are pinned (pids are freed after an epoch).
            match unsafe { qh.as_ref() } {
                Some(qn) if !matches!(qn.kind, Kind::Remove { .. }) => {}
                _ => return Ok(()),
            }
            // SAFETY: non-null head from `settle`.
            if inner_route(unsafe { node_ref(phead) }, sep, guard) == *q {
                posted.store(true, Ordering::Release);
                return Ok(());
            }
            let delta = Owned::new(Node::delta(split.level + 1, Kind::IndexInsert { sep: sep.clone(), child: *q }));
            if let Ok(d) = self.install(&ip, delta, 1, guard) {
                posted.store(true, Ordering::Release);
                if !own {
                    bump(&self.counters.helped_splits);
                }
                self.after_install(ppid, d, &path.parent(), guard, help);
                return Ok(());
            }
        }
        Err(Restart)
    }

    /// Puts a new root above `pid` and the right half of its pending `split`.
    pub(super) fn grow_root(&self, pid: Pid, split: &Node<V>, guard: &Guard) -> Result<(), Restart> {
        let Kind::Split { sep, right: q, posted, .. } = &split.kind else { return Ok(()) };
        let word = self.root.load(Ordering::Acquire);
        if root_pid(word) != pid {
            return Err(Restart);
        }
        // Only a split still pending on the root's current chain, with Q not merging away,
        // may grow the tree. Each check read after `word` holds until the CAS: undoing it
        // takes a parent above `pid`, so a root change, which fails the CAS.
        sched::point();
        if posted.load(Ordering::Acquire) || !self.chain_holds(pid, split, guard) {
            return Err(Restart);
        }
        // SAFETY: loaded under `guard`; `q` is not reused while we are pinned.
        match unsafe { self.load(*q, guard).as_ref() } {
            Some(qn) if !matches!(qn.kind, Kind::Remove { .. }) => {}
            _ => return Err(Restart),
        }
        let Some(nr) = self.map.alloc() else { return Err(Restart) };
        let range = Arc::new(Range::new(Box::from(&b""[..]), None, NO_PID));
        let entries = [(&b""[..], pid), (&sep[..], *q)];
        let base: Base<V> = inner_base(&entries, range);
        self.map.slot(nr).store(Owned::new(Node::base(split.level + 1, base)), Ordering::Release);
        sched::point();
        if self.root.compare_exchange(word, next_root(word, nr), Ordering::AcqRel, Ordering::Acquire).is_ok() {
            posted.store(true, Ordering::Release);
            bump(&self.counters.root_splits);
        } else {
            let n = self.map.slot(nr).swap(Shared::null(), Ordering::AcqRel, guard);
            // SAFETY: the new root never became reachable.
            drop(unsafe { n.into_owned() });
            self.map.free_unpublished(nr);
        }
        Err(Restart)
    }

    /// Whether `node` is in the chain now at `pid`.
    fn chain_holds(&self, pid: Pid, node: &Node<V>, guard: &Guard) -> bool {
        let mut cur = self.load(pid, guard);
        // SAFETY: loaded under `guard`; a delta's next is non-null under the same guard.
        while let Some(n) = unsafe { cur.as_ref() } {
            if std::ptr::eq(n, node) {
                return true;
            }
            if n.is_base() {
                return false;
            }
            cur = n.next(guard);
        }
        false
    }

    // ----- merge and root collapse -------------------------------------------------------

    /// Merges an underflowing node into its left sibling; a parent's first child, having no
    /// left sibling under that parent, instead pulls its right sibling into itself.
    fn try_merge(&self, pid: Pid, nb: Shared<'_, Node<V>>, path: &Path, guard: &Guard, help: u32) {
        // SAFETY: `nb` is the base we just installed, under `guard`.
        let n = unsafe { node_ref(nb) };
        let b = n.as_base().expect("base");
        let Some(parent) = path.last() else { return };
        if help >= MAX_HELP {
            return;
        }
        let Ok((_, phead)) = self.settle(parent, n.level + 1, &b.range.low, &path.parent(), guard, help + 1) else {
            return;
        };
        // SAFETY: non-null head from `settle`.
        let ph = unsafe { node_ref(phead) };
        let prange = self.inspect(ph, guard).range;
        // Only a node the parent already routes to can be merged.
        if inner_route(ph, &b.range.low, guard) != pid {
            return;
        }
        let (victim, victim_head) = if prange.low[..] != b.range.low[..] {
            (pid, nb)
        } else {
            let entries = inner_entries(ph, prange, guard);
            let Some(&(_, right)) = entries.get(1) else { return };
            if entries[0].1 != pid {
                return;
            }
            // The right sibling must be a fresh base to be frozen.
            let mut head = self.load(right, guard);
            // SAFETY: loaded under `guard`.
            if unsafe { head.as_ref() }.is_some_and(|h| !h.is_base()) {
                self.consolidate(right, &path.parent().with(parent), guard, help + 1);
                head = self.load(right, guard);
            }
            // SAFETY: loaded under `guard`.
            match unsafe { head.as_ref() } {
                Some(h) if h.is_base() && h.level == n.level => (right, head),
                _ => return,
            }
        };
        let remove = Owned::new(Node::delta(n.level, Kind::Remove { state: MergeState::new(), collapse: false }));
        if let Ok(r) = self.install_smo(victim, victim_head, remove, guard) {
            // Our own merge, possibly propagating an underflow from below: no help budget.
            self.help_remove(victim, r, guard, help, true);
        }
    }

    fn try_collapse(&self, pid: Pid, nb: Shared<'_, Node<V>>, guard: &Guard) {
        let remove = Owned::new(Node::delta(
            // SAFETY: `nb` is non-null under `guard`.
            unsafe { node_ref(nb) }.level,
            Kind::Remove { state: MergeState::new(), collapse: true },
        ));
        if let Ok(r) = self.install_smo(pid, nb, remove, guard) {
            self.help_remove(pid, r, guard, 1, true);
        }
    }

    /// Drives the merge (or root collapse) frozen by the `Remove` delta `rem` on `pid`
    /// as far as it can go.
    pub(super) fn help_remove(&self, pid: Pid, rem: Shared<'_, Node<V>>, guard: &Guard, help: u32, own: bool) {
        // SAFETY: `rem` is non-null under `guard`.
        let r = unsafe { node_ref(rem) };
        let Kind::Remove { state, collapse } = &r.kind else { return };
        let base_sh = r.next(guard);
        // SAFETY: a Remove always sits on a base.
        let b = unsafe { node_ref(base_sh) }.as_base().expect("Remove sits on a base");
        if *collapse {
            let child = b.children[0].pid;
            let word = self.root.load(Ordering::Acquire);
            if root_pid(word) != pid {
                return;
            }
            sched::point();
            if self.root.compare_exchange(word, next_root(word, child), Ordering::AcqRel, Ordering::Acquire).is_ok() {
                state.decide(MERGED);
                bump(&self.counters.root_collapses);
                let old = self.map.slot(pid).swap(Shared::null(), Ordering::AcqRel, guard);
                // SAFETY: the old root is unreachable from `root`; its Remove stops anyone
                // from using it as a parent, and the pid is reused only after an epoch.
                unsafe { retire_chain(old, &self.map, guard) };
                self.map.free_deferred(pid, guard);
            }
            return;
        }
        let level = r.level;
        let sep = &b.range.low;
        let mut committed_by_us = false;
        for _ in 0..1000 {
            match state.get() {
                ABORTED => {
                    sched::point();
                    if self
                        .map
                        .slot(pid)
                        .compare_exchange(rem, base_sh, Ordering::AcqRel, Ordering::Acquire, guard)
                        .is_ok()
                    {
                        bump(&self.counters.aborted_merges);
                        // SAFETY: we unlinked the Remove delta; its base stays in the slot.
                        unsafe { guard.defer_destroy(rem) };
                    }
                    return;
                }
                PENDING => {
                    let mut ppath = Path::new();
                    let Some((ppid, phead)) = self.descend(sep, level + 1, &mut ppath, guard, help) else { return };
                    let Some(ip) = self.insert_point(ppid, phead, guard) else {
                        self.consolidate(ppid, &ppath, guard, help);
                        continue;
                    };
                    // SAFETY: non-null head from `descend`.
                    let ph = unsafe { node_ref(phead) };
                    if chain_has_index_delete(ph, state, guard) {
                        state.decide(MERGED);
                        continue;
                    }
                    let prange = self.inspect(ph, guard).range;
                    let entries = inner_entries(ph, prange, guard);
                    let Ok(i) = entries.binary_search_by(|(k, _)| (*k).cmp(&sep[..])) else { return };
                    if entries[i].1 != pid {
                        return;
                    }
                    if i == 0 {
                        // R became the first child of its parent: no left sibling to merge into.
                        state.decide(ABORTED);
                        continue;
                    }
                    let (llow, _) = entries[i - 1];
                    state.set_left_low(llow);
                    let delta = Owned::new(Node::delta(
                        level + 1,
                        Kind::IndexDelete { sep: sep.clone(), state: Arc::clone(state) },
                    ));
                    if state.get() != PENDING {
                        continue;
                    }
                    if self.install(&ip, delta, -1, guard).is_ok() {
                        committed_by_us = state.decide(MERGED) == MERGED;
                    }
                }
                _ => {
                    // MERGED: make sure the left sibling carries the merge delta.
                    if self.post_merge_delta(pid, base_sh, state, guard, help) {
                        if !own {
                            bump(&self.counters.helped_merges);
                        }
                        if committed_by_us {
                            // Like a B+-tree's underflow propagation: the parent lost a child,
                            // so see now whether it must merge in turn, or (as root) collapse.
                            let mut ppath = Path::new();
                            if let Some((ppid, _)) = self.descend(sep, level + 1, &mut ppath, guard, help) {
                                self.consolidate(ppid, &ppath, guard, help);
                            }
                        }
                        return;
                    }
                }
            }
        }
    }

    /// Posts the `Merge` delta for the decided merge of `pid` on its left sibling. Returns
    /// true when the left sibling carries it (posted now or before).
    fn post_merge_delta(
        &self,
        pid: Pid,
        base_sh: Shared<'_, Node<V>>,
        state: &Arc<MergeState>,
        guard: &Guard,
        help: u32,
    ) -> bool {
        // SAFETY: non-null base under `guard`.
        let rn = unsafe { node_ref(base_sh) };
        let b = rn.as_base().expect("base");
        let sep = &b.range.low;
        let Some(left_key) = state.left_low() else { return false };
        let mut lpath = Path::new();
        // The left sibling is the node at R's level that covers the keys just below `sep`:
        // descend to a key of it, then move right (B-link) until the node ending at `sep`.
        let Some((mut lpid, _)) = self.descend(left_key, rn.level, &mut lpath, guard, help) else { return false };
        loop {
            if lpid == pid || lpid == NO_PID {
                return false;
            }
            let lhead = self.load(lpid, guard);
            // SAFETY: loaded under `guard`.
            let Some(lh) = (unsafe { lhead.as_ref() }) else { return false };
            if lh.level != rn.level {
                return false;
            }
            let Inspected { smo, range: lrange, .. } = self.inspect(lh, guard);
            if let Some(s) = smo {
                match &s.kind {
                    Kind::Remove { .. } => {
                        if help < MAX_HELP {
                            self.help_remove(lpid, lhead, guard, help + 1, false);
                        }
                        return false;
                    }
                    Kind::Merge { state: st, .. } if Arc::ptr_eq(st, state) => return true,
                    _ => {}
                }
            }
            match &lrange.high {
                Some(h) if h[..] < sep[..] => {
                    lpid = lrange.right;
                    continue;
                }
                Some(h) if h[..] == sep[..] => {}
                _ => return true, // already absorbed and consolidated
            }
            // L ends at `sep`, but that may be a new split after L absorbed R: the flag, read
            // after the chain we CAS against, tells (see `MergeState::posted`).
            if state.posted() {
                return true;
            }
            let range = Arc::new(Range::new(lrange.low.clone(), b.range.high.clone(), b.range.right));
            let merge = Owned::new(Node::delta(
                rn.level,
                Kind::Merge {
                    sep: sep.clone(),
                    right_base: base_sh.as_raw(),
                    r_pid: pid,
                    range,
                    state: Arc::clone(state),
                },
            ));
            if self.install_smo(lpid, lhead, merge, guard).is_ok() {
                state.set_posted();
                bump(&self.counters.merges);
                return true;
            }
        }
    }
}

/// Where an append run ended in `base` (the consolidation of `head`'s chain): just past
/// the newest write's key, when that write was an upsert at the end of the rightmost leaf
/// (`rightmost`), or when the two newest writes were upserts of adjacent keys, the newer
/// above: a sequential load, here one below a slice loaded by another, rather than a random
/// insert that happened to land above a leaf's keys.
fn append_end<'g, V>(head: &'g Node<V>, base: &Base<V>, rightmost: bool, guard: &'g Guard) -> Option<usize> {
    fn newest_upsert<'g, V>(mut node: &'g Node<V>, guard: &'g Guard) -> Option<(&'g Node<V>, &'g [u8])> {
        while node.is_smo() {
            // SAFETY: SMO deltas have a non-null next under `guard`.
            node = unsafe { node_ref(node.next(guard)) };
        }
        match &node.kind {
            Kind::Upsert { key, .. } => Some((node, &key[..])),
            _ => None,
        }
    }
    let (newest, key) = newest_upsert(head, guard)?;
    let i = base.keys.search(key).ok()?;
    if rightmost && i + 1 == base.len() {
        return Some(base.len());
    }
    // SAFETY: a data delta has a non-null next under `guard`.
    let (_, before) = newest_upsert(unsafe { node_ref(newest.next(guard)) }, guard)?;
    (i > 0 && base.keys.get(i - 1) == before).then_some(i + 1)
}

/// Before a consolidation may absorb merge deltas, record that they were posted.
fn mark_merges_posted<V>(head: &Node<V>, guard: &Guard) {
    let mut node = head;
    while !node.is_base() {
        if let Kind::Merge { state, .. } = &node.kind {
            state.set_posted();
        }
        // SAFETY: deltas have a non-null next under `guard`.
        node = unsafe { node_ref(node.next(guard)) };
    }
}

fn chain_has_index_delete<V>(head: &Node<V>, state: &Arc<MergeState>, guard: &Guard) -> bool {
    let mut node = head;
    while !node.is_base() {
        if let Kind::IndexDelete { state: s, .. } = &node.kind {
            if Arc::ptr_eq(s, state) {
                return true;
            }
        }
        // SAFETY: deltas have a non-null next under `guard`.
        node = unsafe { node_ref(node.next(guard)) };
    }
    false
}
