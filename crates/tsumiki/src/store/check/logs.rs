//! The logs: every lane of the current generation (and of the next), the lane
//! registries against the lanes, and recovery's analysis without redoing anything.

use std::collections::BTreeMap;

use super::{scan_blocks, Checker};
use crate::block::{open_block, BLOCK};
use crate::error::Error;
use crate::storage::Storage;
use crate::store::master::Master;
use crate::wal::format;
use crate::wal::recovery;
use crate::wal::Release;

impl Checker {
    /// A lane registry file on its own (length, magic, checksum, generation), and whether
    /// it belongs to a generation that still counts.
    pub(super) fn check_registry_file(&mut self, g: u64, current: Option<u64>) -> Result<(), Error> {
        let name = format::registry_name(g);
        match recovery::read_registry(&*self.storage, g) {
            Ok(_) => {}
            Err(Error::Corrupt(m)) => self.damage(&name, None, m.to_string()),
            Err(e) => return Err(e),
        }
        if current.is_some_and(|c| g < c) {
            self.warn(&name, None, "the lane registry of an older generation: obsolete, the next open removes it");
        }
        Ok(())
    }

    /// The logs of the generation `m` names and of the next one, lane by lane, the lane
    /// registries against them, then recovery's analysis without redoing anything.
    pub(super) fn check_logs(&mut self, m: &Master, logs: &BTreeMap<(u64, u16), Vec<u64>>) -> Result<(), Error> {
        let g = m.generation;
        let next_exists = logs.keys().any(|&(lg, _)| lg == g.saturating_add(1));
        let mut stale = 0;
        for (&(lg, lane), segs) in logs {
            if lg < g {
                stale += segs.len();
            } else if lg > g.saturating_add(1) || (lg > g && m.last_exit) {
                for &s in segs {
                    let why = if lg > g + 1 {
                        format!("a log of generation {lg}, newer than MASTER's {g} allows: MASTER is older than the database")
                    } else {
                        format!("a log of generation {lg}, but MASTER says generation {g} ended cleanly")
                    };
                    self.damage(format::segment_name(lg, lane, s), None, why);
                }
            }
        }
        if stale > 0 {
            self.warn(
                format!("wal-*.log (generations before {g})"),
                None,
                format!("{stale} log segments of older generations: kept for reuse while the database was open, obsolete now (the next open removes them)"),
            );
        }
        let mut gens = vec![g];
        if next_exists && !m.last_exit {
            gens.push(g + 1);
        }
        let before = self.report.damage();
        for (i, &lg) in gens.iter().enumerate() {
            // The lanes of a generation the next one followed were closed by the
            // checkpoint: synced to their end.
            let closed = i + 1 < gens.len();
            let mut lanes = Vec::new();
            for (&(_, lane), segs) in logs.range((lg, 0)..=(lg, u16::MAX)) {
                let (holds, first_valid) = self.check_lane(m, lg, lane, segs, closed)?;
                lanes.push((lane, holds, first_valid));
            }
            if !m.last_exit {
                self.check_lane_registry(lg, &lanes)?;
            }
        }
        // Recovery's own pass (its analysis orders the lanes' records), once the lanes
        // read cleanly: what it says beyond the above is damage too.
        if !m.last_exit && self.report.damage() == before {
            let release = if m.elr { Release::Elr } else { Release::Nlr };
            match recovery::replay(&*self.storage, &gens, m.segment_size, release, |_| Ok(())) {
                Ok(_) => {}
                Err(Error::Corrupt(e)) => {
                    self.damage(format!("wal-{g:010}-*.log"), None, format!("recovery would fail: {e}"))
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One lane: returns whether it holds records and whether its first block is valid.
    pub(super) fn check_lane(
        &mut self,
        m: &Master,
        g: u64,
        lane: u16,
        segs: &[u64],
        closed: bool,
    ) -> Result<(bool, bool), Error> {
        let names: Vec<String> = segs.iter().map(|&s| format::segment_name(g, lane, s)).collect();
        let first = &names[0];
        let first_valid = segs[0] == 0 && {
            let f = self.storage.open(first, false).map_err(|e| Error::io(first, e))?;
            let mut b = vec![0u8; BLOCK];
            let n = f.read_at(&mut b, 0).map_err(|e| Error::io(first, e))?;
            // The lane's first block follows the segment's header (if written with one).
            let n = if n == BLOCK && format::is_segment_header(&b, g, lane, 0) {
                f.read_at(&mut b, format::SEGMENT_HEADER).map_err(|e| Error::io(first, e))?
            } else {
                n
            };
            n == BLOCK && open_block(&b, g).is_some_and(|t| t.lane == lane && t.seq == 0)
        };
        match recovery::read_lane(&*self.storage, g, lane, segs, m.segment_size, closed) {
            Ok(log) => {
                self.report.log_lanes += 1;
                self.report.log_records += log.records.len() as u64;
                self.report.blocks += self.count_valid_blocks(&names, g, lane)?;
                if log.cut_blocks > 0 {
                    self.warn(
                        names.last().expect("a segment"),
                        None,
                        format!(
                            "{} blocks after lane {lane}'s last valid block hold bytes: the tail of a flush a crash interrupted (the next open cuts it), or older blocks of a recycled segment",
                            log.cut_blocks
                        ),
                    );
                }
                if m.last_exit && !log.records.is_empty() {
                    self.damage(
                        first,
                        None,
                        format!(
                            "MASTER says generation {g} ended cleanly, but lane {lane} logged {} commits in it after: a newer master record is damaged or missing",
                            log.records.len()
                        ),
                    );
                }
                Ok((!log.records.is_empty(), first_valid))
            }
            Err(Error::Corrupt(why)) => {
                // Name the segment the reader blames, if it says.
                let file = names.iter().find(|n| why.contains(n.as_str())).unwrap_or(first).clone();
                self.damage(file, None, why.to_string());
                Ok((false, first_valid))
            }
            Err(e) => Err(e),
        }
    }

    /// The valid blocks of a lane's segments (for the count of blocks verified).
    pub(super) fn count_valid_blocks(&self, names: &[String], g: u64, lane: u16) -> Result<u64, Error> {
        let mut n = 0;
        for name in names {
            scan_blocks(&*self.storage, name, &mut |_, b| {
                n += u64::from(open_block(b, g).is_some_and(|t| t.lane == lane));
            })?;
        }
        Ok(n)
    }

    /// The registry of generation `g` against its lanes (`lanes`: id, holds records, first
    /// block valid): every registered lane has a log whose first block is valid, and every
    /// lane holding records is registered.
    pub(super) fn check_lane_registry(&mut self, g: u64, lanes: &[(u16, bool, bool)]) -> Result<(), Error> {
        let name = format::registry_name(g);
        let registered = match recovery::read_registry(&*self.storage, g) {
            Ok(r) => r,
            // Reported with the file.
            Err(Error::Corrupt(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        if let Some(n) = registered {
            for id in 0..n {
                match lanes.iter().find(|l| u32::from(l.0) == id) {
                    None => self.damage(&name, None, format!("lane {id} is registered, but its log is missing")),
                    Some(&(_, _, false)) => self.damage(
                        format::segment_name(g, id as u16, 0),
                        Some(0),
                        format!("lane {id} is registered, but its first block (synced before that) is damaged or gone"),
                    ),
                    Some(_) => {}
                }
            }
        }
        for &(id, holds, _) in lanes {
            if holds && registered.is_none_or(|n| u32::from(id) >= n) {
                let why = match registered {
                    None => format!("lane {id} holds commits, but the lane registry {name} is missing"),
                    Some(n) => format!("lane {id} holds commits, but {name} names only {n} lanes (an older copy?)"),
                };
                self.damage(format::segment_name(g, id, 0), None, why);
            }
        }
        Ok(())
    }
}
