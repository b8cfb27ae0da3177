//! A crash-recovery checker. Each transaction overwrites a few shared keys with its own id
//! and writes a marker `m/<id>` naming, for every key, the id it overwrote. After recovery:
//! - every acknowledged transaction's marker is there (no lost commit);
//! - every marker's predecessors are there (nothing depends on a lost transaction);
//! - each key's chain of writers, followed back from its current value, goes through
//!   recovered markers only, and contains every recovered writer of that key (no partial
//!   transaction: all of a recovered transaction's writes are there, or were overwritten
//!   by a recovered successor);
//! - the record count (`Db::len`, kept by the commits and recovered from the master record
//!   and the logs) equals a scan's: each transaction also inserts or deletes one of a few
//!   scratch keys, so the count goes up and down.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};

use tsumiki::storage::SimRng;
use tsumiki::{Db, Durability, Error};

/// The key of shared slot `k`.
pub fn slot_key(k: u64) -> Vec<u8> {
    format!("k{k:03}").into_bytes()
}

fn marker_key(id: u64) -> Vec<u8> {
    format!("m/{id:012}").into_bytes()
}

/// Runs one attempt of transaction `id` over `slots` shared keys; `Err` on conflict or
/// failure (nothing acknowledged). `deferred`: returns the ticket's wait instead.
pub fn chain_txn(db: &Db, id: u64, rng: &mut SimRng, slots: u64) -> Result<(), Error> {
    chain_txn_as(db, id, rng, slots, None)
}

/// As [`chain_txn`], committing with the transaction's own durability `level`.
pub fn chain_txn_as(db: &Db, id: u64, rng: &mut SimRng, slots: u64, level: Option<Durability>) -> Result<(), Error> {
    let mut txn = db.begin();
    if let Some(level) = level {
        txn.set_durability(level);
    }
    let n = 1 + rng.below(3);
    let mut picked = Vec::new();
    while (picked.len() as u64) < n.min(slots) {
        let k = rng.below(slots);
        if !picked.contains(&k) {
            picked.push(k);
        }
    }
    let mut entries = Vec::new();
    for k in picked {
        let prev = txn.get(slot_key(k))?;
        let prev = prev.map(|v| String::from_utf8(v).expect("ids are text")).unwrap_or_else(|| "none".into());
        txn.put(slot_key(k), id.to_string().as_bytes())?;
        entries.push(format!("{k}={prev}"));
    }
    txn.put(marker_key(id), entries.join(",").as_bytes())?;
    // A scratch key put or deleted, whether or not it is there: inserts, updates, removals
    // and deletes of absent keys for the count.
    let scratch = format!("x/{}", rng.below(4));
    if rng.below(2) == 0 {
        txn.put(&scratch, b"")?;
    } else {
        txn.delete(&scratch)?;
    }
    txn.commit()
}

/// The ids whose markers the database holds.
pub fn recovered_ids(db: &Db) -> Result<HashSet<u64>, String> {
    let txn = db.begin();
    let mut ids = HashSet::new();
    for row in txn.range(&b"m/"[..]..&b"m0"[..]) {
        let (k, _) = row.map_err(|e| format!("scan failed: {e}"))?;
        let id = std::str::from_utf8(&k[2..]).ok().and_then(|s| s.parse().ok()).ok_or("bad marker key")?;
        ids.insert(id);
    }
    Ok(ids)
}

/// Checks the recovered database against the acknowledged ids.
pub fn check_chains(db: &Db, acked: &[u64], slots: u64) -> Result<(), String> {
    let txn = db.begin();
    let state: BTreeMap<Vec<u8>, Vec<u8>> =
        txn.iter().collect::<Result<_, _>>().map_err(|e| format!("scan failed: {e}"))?;
    drop(txn);
    let mut markers: HashMap<u64, Vec<(u64, Option<u64>)>> = HashMap::new();
    for (k, v) in &state {
        if let Some(id) = k.strip_prefix(b"m/") {
            let id: u64 = std::str::from_utf8(id).unwrap().parse().map_err(|_| "bad marker key")?;
            let mut es = Vec::new();
            for e in std::str::from_utf8(v).map_err(|_| "bad marker")?.split(',') {
                let (k, p) = e.split_once('=').ok_or("bad marker entry")?;
                let p = if p == "none" { None } else { Some(p.parse().map_err(|_| "bad prev")?) };
                es.push((k.parse().map_err(|_| "bad slot")?, p));
            }
            markers.insert(id, es);
        }
    }
    for id in acked {
        if !markers.contains_key(id) {
            return Err(format!("acknowledged commit {id} was lost"));
        }
    }
    for (id, es) in &markers {
        for (k, p) in es {
            if let Some(p) = p {
                if !markers.contains_key(p) {
                    return Err(format!("commit {id} read k{k} from {p}, which was not recovered"));
                }
            }
        }
    }
    for k in 0..slots {
        let mut chain = HashSet::new();
        let mut cur = match state.get(&slot_key(k)) {
            Some(v) => Some(std::str::from_utf8(v).unwrap().parse::<u64>().map_err(|_| "bad slot value")?),
            None => None,
        };
        while let Some(w) = cur {
            let es = markers.get(&w).ok_or_else(|| format!("k{k} holds the write of {w}, whose marker is missing"))?;
            if !chain.insert(w) {
                return Err(format!("k{k}: the chain of writers loops at {w}"));
            }
            cur =
                es.iter().find(|(kk, _)| *kk == k).ok_or_else(|| format!("k{k} holds {w}, which did not write it"))?.1;
        }
        for (id, es) in &markers {
            if es.iter().any(|(kk, _)| *kk == k) && !chain.contains(id) {
                return Err(format!("commit {id}'s write of k{k} is missing (a partial transaction)"));
            }
        }
    }
    for k in state.keys() {
        let ok = k.starts_with(b"m/") || k.starts_with(b"x/") || (0..slots).any(|s| slot_key(s) == *k);
        if !ok {
            return Err(format!("unexpected key {:?}", String::from_utf8_lossy(k)));
        }
    }
    // Last: a lost commit also breaks the count (later records marked their inserts and
    // removals against the state it left), and is reported as lost above.
    let counted = db.len().map_err(|e| format!("len() failed: {e}"))?;
    if counted != state.len() as u64 {
        return Err(format!("the record count says {counted}, a scan finds {}", state.len()));
    }
    Ok(())
}
