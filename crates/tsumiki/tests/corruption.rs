//! Damaged files: flipped bits, truncations, zeroed blocks, garbage. Opening must give a
//! clear error or a clean cut of a torn tail (the state after some prefix of the commits),
//! never a panic and never wrong data. Also fuzzes the block, record and master decoders
//! (`TSUMIKI_FUZZ_SECS`, CI: 60).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tsumiki::storage::{SimImage, SimRng, SimStorage};
use tsumiki::store::master::{self, Master};
use tsumiki::wal::format::{self, LoggedWrite, RecordEncoder, Trailer, BLOCK};
use tsumiki::wal::recovery;
use tsumiki::{Db, Error, LogMode, LogOptions, Options, Release, StoreOptions};

type State = BTreeMap<Vec<u8>, Vec<u8>>;

fn dump(db: &Db) -> State {
    db.begin().iter().map(|r| r.unwrap()).collect()
}

fn variants() -> Vec<LogOptions> {
    let mut v = Vec::new();
    for mode in [LogMode::PWal, LogMode::SWal] {
        for release in [Release::Nlr, Release::Elr] {
            v.push(LogOptions { mode, release, group: 1, segment_size: 16 << 10, ..LogOptions::default() });
        }
    }
    v
}

/// A database image after `n` acknowledged commits (not closed: the logs hold them), and
/// the state after each commit.
fn written(log: &LogOptions, n: u32) -> (SimImage, Vec<State>) {
    let opts = Options { log: log.clone(), ..Options::default() };
    let disk = SimStorage::new(9);
    let db = Db::open_with_storage(Arc::new(disk.clone()), opts).unwrap();
    let mut states = vec![State::new()];
    let mut model = State::new();
    for i in 0..n {
        let k = format!("key{:03}", i % 40).into_bytes();
        let v = format!("value-{i}-").repeat(1 + (i as usize * 7) % 50).into_bytes();
        if i % 9 == 8 {
            db.run(|t| t.delete(&k)).unwrap();
            model.remove(&k);
        } else {
            db.run(|t| t.put(&k, &v)).unwrap();
            model.insert(k, v);
        }
        states.push(model.clone());
    }
    let image = disk.crash();
    drop(db);
    (image, states)
}

fn open_image(image: &SimImage, log: &LogOptions) -> Result<State, Error> {
    let opts = Options { log: log.clone(), ..Options::default() };
    Db::open_with_storage(Arc::new(SimStorage::from_image(image, 0)), opts).map(|db| dump(&db))
}

#[test]
fn undamaged_image_recovers_everything() {
    for log in variants() {
        let (image, states) = written(&log, 120);
        assert_eq!(open_image(&image, &log).unwrap(), *states.last().unwrap(), "{}", log.name());
    }
}

#[test]
fn random_damage_gives_an_error_or_a_prefix() {
    let mut outcomes = [0u32; 3]; // error, prefix, everything
    for log in variants() {
        let (image, states) = written(&log, 120);
        let mut rng = SimRng::new(5);
        for round in 0..150 {
            let mut img = image.clone();
            let names = img.names();
            let name = &names[rng.below(names.len() as u64) as usize];
            let f = img.file_mut(name).unwrap();
            let what = match rng.below(5) {
                0 | 1 if !f.is_empty() => {
                    let bit = rng.below(f.len() as u64 * 8) as usize;
                    f[bit / 8] ^= 1 << (bit % 8);
                    "flip"
                }
                2 => {
                    f.truncate(rng.below(f.len() as u64 + 1) as usize);
                    "truncate"
                }
                3 if f.len() >= BLOCK => {
                    let b = rng.below((f.len() / BLOCK) as u64) as usize;
                    f[b * BLOCK..(b + 1) * BLOCK].fill(0);
                    "zero block"
                }
                _ => {
                    let len = rng.below(3 * BLOCK as u64) as usize;
                    *f = (0..len).map(|_| rng.next_u64() as u8).collect();
                    "garbage"
                }
            };
            match open_image(&img, &log) {
                Err(Error::Corrupt(_) | Error::Io { .. }) => outcomes[0] += 1,
                Err(e) => panic!("{} round {round}: {what} of {name}: unexpected error {e:?}", log.name()),
                Ok(got) => match states.iter().rposition(|s| *s == got) {
                    Some(j) if j + 1 == states.len() => outcomes[2] += 1,
                    Some(_) => outcomes[1] += 1,
                    None => panic!("{} round {round}: {what} of {name}: wrong data recovered", log.name()),
                },
            }
        }
    }
    assert!(outcomes[0] > 0 && outcomes[2] > 0, "outcomes {outcomes:?}");
}

#[test]
fn damage_before_synced_data_is_an_error_not_a_cut() {
    for log in variants() {
        let (image, _) = written(&log, 120);
        let seg = image.names().into_iter().find(|n| n.starts_with("wal-") && n.ends_with("-00000000.log")).unwrap();
        let mut img = image.clone();
        img.file_mut(&seg).unwrap()[100] ^= 0x10;
        assert!(matches!(open_image(&img, &log), Err(Error::Corrupt(_))), "{}: flipped bit in block 0", log.name());
        let mut img = image.clone();
        img.file_mut(&seg).unwrap()[BLOCK..2 * BLOCK].fill(0);
        assert!(matches!(open_image(&img, &log), Err(Error::Corrupt(_))), "{}: zeroed block 1", log.name());
        let mut img = image.clone();
        img.file_mut(&seg).unwrap().truncate(3 * BLOCK);
        assert!(matches!(open_image(&img, &log), Err(Error::Corrupt(_))), "{}: truncated segment", log.name());
        let mut img = image.clone();
        img.insert("MASTER", b"not a master record at all, just text".to_vec());
        assert!(matches!(open_image(&img, &log), Err(Error::Corrupt(_))), "{}: garbage MASTER", log.name());
        let mut img = image.clone();
        img.remove("MASTER");
        assert!(matches!(open_image(&img, &log), Err(Error::Corrupt(_))), "{}: missing MASTER", log.name());
    }
}

#[test]
fn torn_tail_is_cut_cleanly() {
    for log in variants() {
        let (image, states) = written(&log, 60);
        // Damage the last written block of each lane's last segment: the last flush is torn.
        let segs: Vec<(u64, u16, u64)> = image.names().iter().filter_map(|n| format::parse_segment_name(n)).collect();
        let lasts = segs.iter().filter(|(g, l, s)| !segs.iter().any(|(g2, l2, s2)| g2 == g && l2 == l && s2 > s));
        for name in lasts.map(|&(g, l, s)| format::segment_name(g, l, s)) {
            let mut img = image.clone();
            let f = img.file_mut(&name).unwrap();
            let last = f.chunks(BLOCK).rposition(|b| b.iter().any(|&c| c != 0));
            // Block 0 is the segment's header: a segment prepared ahead holds only that.
            let Some(last) = last.filter(|&b| b > 0) else { continue };
            f[last * BLOCK + 10] ^= 0xFF;
            let got = open_image(&img, &log).unwrap_or_else(|e| panic!("{}: torn tail of {name}: {e}", log.name()));
            assert!(states.contains(&got), "{}: a cut must leave a prefix", log.name());
        }
    }
}

fn valid_record(rng: &mut SimRng) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut e = RecordEncoder::begin(&mut buf, rng.next_u64());
    for _ in 0..rng.below(4) {
        let k: Vec<u8> = (0..rng.below(20)).map(|_| rng.next_u64() as u8).collect();
        if rng.below(3) == 0 {
            e.write(&k, None);
        } else {
            let v: Vec<u8> = (0..rng.below(300)).map(|_| rng.next_u64() as u8).collect();
            e.write(&k, Some(&v));
        }
    }
    e.finish().unwrap();
    buf
}

/// Mutation fuzzing of the decoders, seeded by valid encodings, for a set time.
#[test]
fn fuzz_decoders() {
    let secs: u64 = std::env::var("TSUMIKI_FUZZ_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut rng = SimRng::new(77);
    let mut runs = 0u64;
    let master = Master {
        generation: 4,
        table: Some((1, 1 << 14, 300, 5)),
        last_exit: false,
        elr: true,
        segment_size: 1 << 16,
        count: Some(9),
        count_replayable: true,
    };
    while Instant::now() < end {
        for _ in 0..1000 {
            let mut input = match rng.below(3) {
                0 => valid_record(&mut rng),
                1 => {
                    let mut b = vec![0u8; BLOCK];
                    let r = valid_record(&mut rng);
                    let n = r.len().min(format::PAYLOAD);
                    b[..n].copy_from_slice(&r[..n]);
                    let t = Trailer { lane: 1, used: n as u16, records: 1, seq: 3, ..Trailer::default() };
                    format::seal_block(&mut b, &t, 1);
                    b
                }
                _ => master.encode().to_vec(),
            };
            for _ in 0..1 + rng.below(4) {
                if input.is_empty() {
                    break;
                }
                let i = rng.below(input.len() as u64) as usize;
                match rng.below(4) {
                    0 => input[i] ^= 1 << rng.below(8),
                    1 => input[i] = rng.next_u64() as u8,
                    2 => input.truncate(i),
                    _ => input.insert(i, rng.next_u64() as u8),
                }
            }
            let _ = format::decode_record(&input);
            let _ = format::open_block(&input, 1);
            let _ = Master::decode(&input);
            // The same bytes as a one-segment lane log.
            let disk = SimStorage::new(1);
            let mut img = disk.crash();
            let mut seg = input.clone();
            seg.resize(2 * BLOCK, 0);
            img.insert(&format::segment_name(1, 1, 0), seg);
            let _ =
                recovery::read_lane(&SimStorage::from_image(&img, 0), 1, 1, &[0], 2 * BLOCK as u64, rng.below(2) == 0);
            runs += 1;
        }
    }
    assert!(runs >= 1000);
}

/// Damages `input` in one to four places: bit flips, random bytes, a random 32-bit
/// little-endian length, truncation, insertion.
fn mutate(input: &mut Vec<u8>, rng: &mut SimRng) {
    for _ in 0..1 + rng.below(4) {
        if input.is_empty() {
            break;
        }
        let i = rng.below(input.len() as u64) as usize;
        match rng.below(5) {
            0 => input[i] ^= 1 << rng.below(8),
            1 => input[i] = rng.next_u64() as u8,
            2 if i + 4 <= input.len() => {
                let n = [u32::MAX, 1 << 31, rng.next_u64() as u32, rng.below(64) as u32][rng.below(4) as usize];
                input[i..i + 4].copy_from_slice(&n.to_le_bytes());
            }
            3 => input.truncate(i),
            _ => input.insert(i, rng.next_u64() as u8),
        }
    }
}

/// Mutation fuzzing of the page store's decoders (an image's header, a page's entries, a
/// translation table's base and delta), seeded by valid images, for a set time
/// (`TSUMIKI_FUZZ_SECS`). The checksums are left out, so the damage reaches the decoders.
#[test]
fn fuzz_page_decoders() {
    use tsumiki::page_fuzz::{decode_image, sample_images};
    let secs: u64 = std::env::var("TSUMIKI_FUZZ_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut rng = SimRng::new(79);
    let (mut runs, mut decoded) = (0u64, 0u64);
    while Instant::now() < end {
        for _ in 0..1000 {
            let samples = sample_images(rng.next_u64());
            // The seeds are valid, or the fuzzing would stop at their first error.
            for (i, img) in samples.iter().enumerate() {
                let n = decode_image(img, Some(&samples[2]));
                assert!(n.is_ok(), "sample {i}: {n:?}");
            }
            let pick = rng.below(5) as usize;
            let mut input = match pick {
                4 => (0..rng.below(400)).map(|_| rng.next_u64() as u8).collect(),
                i => samples[i].clone(),
            };
            mutate(&mut input, &mut rng);
            decoded += decode_image(&input, Some(&samples[2])).is_ok() as u64;
            runs += 1;
        }
    }
    assert!(runs >= 1000);
    eprintln!("fuzz_page_decoders: {runs} inputs, {decoded} decoded without error");
}

/// Whole page segments: a closed database's page files damaged (half the time with the
/// block's trailer re-sealed, so the damage reaches the images' own checksums), then
/// opened. Each open gives an error or exactly the data written, never a panic
/// (`TSUMIKI_FUZZ_SECS`).
#[test]
fn fuzz_page_segments() {
    let secs: u64 = std::env::var("TSUMIKI_FUZZ_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let log = LogOptions { segment_size: 16 << 10, ..LogOptions::default() };
    let store = StoreOptions { page_segment_size: 8 << 10, ..StoreOptions::default() };
    let opts = Options { log, store, ..Options::default() };
    let disk = SimStorage::new(5);
    let db = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()).unwrap();
    let mut model = State::new();
    for round in 0..3u32 {
        for i in 0..200u32 {
            if (i + round) % 5 == 0 {
                continue;
            }
            let (k, v) =
                (format!("k{:05}", i * 7 % 1000).into_bytes(), vec![(i ^ round) as u8; (i % 13 * 17) as usize]);
            db.run(|t| t.put(&k, &v)).unwrap();
            model.insert(k, v);
        }
        db.checkpoint().unwrap();
    }
    db.close().unwrap();
    let image = disk.crash();
    let pages: Vec<String> = image.names().into_iter().filter(|n| n.starts_with("pages-")).collect();
    assert!(!pages.is_empty());
    let end = Instant::now() + Duration::from_secs(secs);
    let mut rng = SimRng::new(80);
    let (mut runs, mut opened) = (0u64, 0u64);
    while Instant::now() < end || runs < 50 {
        let mut img = image.clone();
        let name = &pages[rng.below(pages.len() as u64) as usize];
        let file = img.file_mut(name).unwrap();
        runs += 1;
        if file.is_empty() {
            continue;
        }
        let at = rng.below(file.len() as u64) as usize;
        let block = at / BLOCK * BLOCK;
        let trailer =
            if file.len() >= block + BLOCK { format::open_block(&file[block..block + BLOCK], 0) } else { None };
        let mut bytes = file[block..(block + BLOCK).min(file.len())].to_vec();
        mutate(&mut bytes, &mut rng);
        bytes.resize(BLOCK.min(file.len() - block), 0);
        if let (Some(t), true) = (trailer, rng.below(2) == 0 && bytes.len() == BLOCK) {
            format::seal_block(&mut bytes, &t, 0);
        }
        file[block..block + bytes.len()].copy_from_slice(&bytes);
        match Db::open_with_storage(Arc::new(SimStorage::from_image(&img, 0)), opts.clone()) {
            // Pages are read when used: the damage may show only then, as `Corrupt`.
            Ok(db) => match db.begin().iter().collect::<Result<State, Error>>() {
                Ok(state) => {
                    assert!(state == model, "{name} damaged at block {}: read other data", block / BLOCK);
                    opened += 1;
                }
                Err(Error::Corrupt(_)) => {}
                Err(e) => panic!("{name} damaged at block {}: {e}", block / BLOCK),
            },
            Err(Error::Corrupt(_)) => {}
            Err(e) => panic!("{name} damaged at block {}: {e}", block / BLOCK),
        }
    }
    eprintln!("fuzz_page_segments: {runs} damaged images, {opened} read back whole (damage in unused bytes)");
}

proptest! {
    #[test]
    fn record_round_trip(order: u64, writes in proptest::collection::vec(
        (proptest::collection::vec(any::<u8>(), 0..40), proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200))), 0..8)) {
        let mut buf = Vec::new();
        let mut e = RecordEncoder::begin(&mut buf, order);
        for (k, v) in &writes {
            e.write(k, v.as_deref());
        }
        let n = e.finish().unwrap();
        let (r, len) = format::decode_record(&buf).unwrap();
        prop_assert_eq!(len, n);
        prop_assert_eq!(r.order, order);
        let want: Vec<LoggedWrite> = writes.into_iter().map(|(key, value)| LoggedWrite { key, value }).collect();
        prop_assert_eq!(r.writes, want);
    }

    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
        let _ = format::decode_record(&bytes);
        let _ = format::open_block(&bytes, 1);
        let _ = Master::decode(&bytes);
    }

    #[test]
    fn page_decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..5000), seed: u64) {
        let base = tsumiki::page_fuzz::sample_images(seed);
        let _ = tsumiki::page_fuzz::decode_image(&bytes, Some(&base[2]));
    }
}

/// The master file's two superblocks: each write goes to the one not holding the newest
/// record (one block, one fdatasync); a torn newest one leaves the previous record; two
/// damaged ones are `Corrupt`; a file of the wrong size is `Corrupt`.
#[test]
fn master_superblocks_alternate_and_survive_a_torn_write() {
    use tsumiki::store::master::{read_master, write_master, MASTER_FILE_LEN};
    let dir = tempfile::tempdir().unwrap();
    let storage = tsumiki::storage::DirStorage::new(dir.path()).unwrap();
    let path = dir.path().join("MASTER");
    let m = |generation| Master {
        generation,
        table: Some((0, 0, 64, 7)),
        last_exit: false,
        elr: false,
        segment_size: 1 << 20,
        count: Some(generation),
        count_replayable: generation % 2 == 0,
    };
    write_master(&storage, &m(1)).unwrap();
    assert_eq!(std::fs::read(&path).unwrap().len(), MASTER_FILE_LEN);
    assert_eq!(read_master(&storage).unwrap(), Some(m(1)));
    write_master(&storage, &m(2)).unwrap();
    let both = std::fs::read(&path).unwrap();
    assert_eq!(read_master(&storage).unwrap(), Some(m(2)));
    // Slots swapped: the sequence, not the place, says which is newer.
    let swapped = [&both[BLOCK..], &both[..BLOCK]].concat();
    std::fs::write(&path, &swapped).unwrap();
    assert_eq!(read_master(&storage).unwrap(), Some(m(2)));
    // The newest torn (here zeroed): the previous record.
    let mut torn = both.clone();
    torn[BLOCK..BLOCK + 20].fill(0);
    std::fs::write(&path, &torn).unwrap();
    assert_eq!(read_master(&storage).unwrap(), Some(m(1)));
    // The next write replaces the torn one, not the survivor.
    write_master(&storage, &m(3)).unwrap();
    assert_eq!(read_master(&storage).unwrap(), Some(m(3)));
    assert_eq!(&std::fs::read(&path).unwrap()[..BLOCK], &both[..BLOCK]);
    let mut bad = std::fs::read(&path).unwrap();
    bad[10] ^= 1;
    bad[BLOCK + 10] ^= 1;
    std::fs::write(&path, &bad).unwrap();
    assert!(matches!(read_master(&storage), Err(Error::Corrupt(_))));
    std::fs::write(&path, &both[..BLOCK]).unwrap();
    assert!(matches!(read_master(&storage), Err(Error::Corrupt(_))));
}

/// A master file of the format before the superblocks (one 51-byte record) is refused
/// with a message naming the format, not taken for a damaged file.
#[test]
fn a_single_record_master_of_the_earlier_format_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let storage = tsumiki::storage::DirStorage::new(dir.path()).unwrap();
    let m = Master {
        generation: 3,
        table: Some((0, 0, 64, 7)),
        last_exit: true,
        elr: false,
        segment_size: 1 << 20,
        count: None,
        count_replayable: false,
    };
    std::fs::write(dir.path().join("MASTER"), m.encode()).unwrap();
    match master::read_master(&storage) {
        Err(Error::Corrupt(msg)) => assert!(msg.contains("earlier tsumiki format"), "{msg}"),
        other => panic!("{other:?}"),
    }
}

/// A lane segment of 4 blocks: block `i` holds one record (order `first + i`) and is
/// sealed as block sequence `i` of lane 0 with `salt`; `end` marks the last block as the
/// lane's end (a checkpoint closed it). Each block after the first says that the one
/// before it is partly filled (each was synced before the next was written).
fn lane_blocks(first: u64, n: usize, salt: u64, end: bool) -> Vec<u8> {
    let mut seg = vec![0u8; 4 * BLOCK];
    for i in 0..n {
        let mut rec = Vec::new();
        let mut e = RecordEncoder::begin(&mut rec, first + i as u64);
        e.write(&(first + i as u64).to_be_bytes(), Some(b"v"));
        e.finish().unwrap();
        let b = &mut seg[i * BLOCK..(i + 1) * BLOCK];
        b[..rec.len()].copy_from_slice(&rec);
        let mut flags = format::FLAG_FLUSH_END;
        if i > 0 {
            flags |= format::FLAG_AFTER_PARTIAL;
        }
        if end && i + 1 == n {
            flags |= format::FLAG_LANE_END;
        }
        let t = Trailer {
            flags,
            lane: 0,
            used: rec.len() as u16,
            records: 1,
            seq: i as u32,
            lo: first + i as u64,
            hi: first + i as u64,
            ..Trailer::default()
        };
        format::seal_block(b, &t, salt);
    }
    seg
}

/// Storage holding `seg` as generation 2's lane 0 (one 16 KiB segment).
fn one_lane(seg: Vec<u8>) -> SimStorage {
    let disk = SimStorage::new(1);
    let mut img = disk.crash();
    img.insert(&format::segment_name(2, 0, 0), seg);
    img.insert(&format::registry_name(2), format::LaneRegistry { generation: 2, count: 1 }.encode().to_vec());
    SimStorage::from_image(&img, 0)
}

/// Orders of the records `read_lane` finds in generation 2's lane 0 (one 16 KiB segment).
fn lane_orders(seg: Vec<u8>, closed: bool) -> Result<Vec<u64>, Error> {
    let log = recovery::read_lane(&one_lane(seg), 2, 0, &[0], 4 * BLOCK as u64, closed)?;
    Ok(log.records.iter().map(|r| r.0).collect())
}

/// A log segment is recycled into a later generation without being cleared: its old
/// blocks have the lane and sequence numbers the new generation's blocks will have. They
/// must read as never written (the checksum is salted with the generation). The planted
/// variant seals the old blocks with the new generation's salt, as an unsalted checksum
/// would leave them, and the old records come back.
#[test]
fn recycled_segments_old_blocks_are_not_replayed() {
    // Generation 1 filled the segment (orders 100..104); generation 2 wrote two blocks.
    let recycled = |old_salt: u64| {
        let mut seg = lane_blocks(100, 4, old_salt, false);
        seg[..2 * BLOCK].copy_from_slice(&lane_blocks(1, 2, 2, false)[..2 * BLOCK]);
        seg
    };
    assert_eq!(lane_orders(recycled(1), false).unwrap(), vec![1, 2]);
    // Planted: the stale blocks 2 and 3 pass as generation 2's.
    assert_eq!(lane_orders(recycled(2), false).unwrap(), vec![1, 2, 102, 103]);
}

/// A lane's unsynced last block is written again with each buffered commit until full.
/// A power loss can leave an older version of it (valid, fewer records) before the block
/// written after it was filled: that block does not say its predecessor is partly filled,
/// so the lane ends at the old version (a torn tail), instead of going on past the lost
/// records into the later ones.
#[test]
fn an_old_version_of_a_rewritten_block_ends_the_lane() {
    // Block 0 as first written (record 1), then block 1 (record 3), written after block 0
    // was filled with record 2 and more: no `FLAG_AFTER_PARTIAL`.
    let mut seg = lane_blocks(1, 1, 2, false);
    let later = lane_blocks(3, 2, 2, false);
    seg[BLOCK..2 * BLOCK].copy_from_slice(&later[BLOCK..2 * BLOCK]);
    let mut b1 = seg[BLOCK..2 * BLOCK].to_vec();
    let mut t = format::open_block(&b1, 2).unwrap();
    t.flags &= !format::FLAG_AFTER_PARTIAL;
    t.lo = 3;
    t.hi = 3;
    let mut rec = Vec::new();
    let mut e = RecordEncoder::begin(&mut rec, 3);
    e.write(&3u64.to_be_bytes(), Some(b"v"));
    e.finish().unwrap();
    b1[..rec.len()].copy_from_slice(&rec);
    format::seal_block(&mut b1, &t, 2);
    seg[BLOCK..2 * BLOCK].copy_from_slice(&b1);
    assert_eq!(lane_orders(seg.clone(), false).unwrap(), vec![1], "record 3 read past the lost record 2");
    // Closed by a checkpoint, the lane was synced: the mismatch is corruption.
    assert!(matches!(lane_orders(seg.clone(), true), Err(Error::Corrupt(_))));
    // With the flag (block 0 was final and synced), both records are read.
    t.flags |= format::FLAG_AFTER_PARTIAL;
    format::seal_block(&mut b1, &t, 2);
    seg[BLOCK..2 * BLOCK].copy_from_slice(&b1);
    assert_eq!(lane_orders(seg, false).unwrap(), vec![1, 3]);
}

/// A lane closed by a checkpoint ends with a block marked as its end: blocks lost after
/// it (zeroed, or a recycled segment's stale ones in their place) are corruption when the
/// lane is read as closed, where an open lane's tail is a torn write to cut.
#[test]
fn a_closed_lane_without_its_end_block_is_corrupt() {
    let whole = lane_blocks(1, 3, 2, true);
    assert_eq!(lane_orders(whole.clone(), true).unwrap(), vec![1, 2, 3]);
    let mut zeroed = whole.clone();
    zeroed[2 * BLOCK..3 * BLOCK].fill(0);
    match lane_orders(zeroed.clone(), true) {
        Err(Error::Corrupt(m)) => assert!(m.contains("the end the checkpoint gave"), "{m}"),
        r => panic!("a closed lane that lost its end block read as {r:?}"),
    }
    // Read as the live lane, the same bytes are a torn tail: cut.
    assert_eq!(lane_orders(zeroed.clone(), false).unwrap(), vec![1, 2]);
    let mut damaged = whole.clone();
    damaged[BLOCK + 10] ^= 1;
    assert!(matches!(lane_orders(damaged.clone(), true), Err(Error::Corrupt(_))));
    // Every block valid, but none marked as the end (the end block and what followed it
    // lost, or the segment replaced by an older copy): closed, it is corrupt.
    let unmarked = lane_blocks(1, 3, 2, false);
    match lane_orders(unmarked.clone(), true) {
        Err(Error::Corrupt(m)) => assert!(m.contains("the end"), "{m}"),
        r => panic!("a closed lane without an end block read as {r:?}"),
    }
    assert_eq!(lane_orders(unmarked.clone(), false).unwrap(), vec![1, 2, 3]);
    // A full segment of valid blocks and no later one: the lane runs out before its end.
    match lane_orders(lane_blocks(1, 4, 2, false), true) {
        Err(Error::Corrupt(m)) => assert!(m.contains("without the end"), "{m}"),
        r => panic!("a closed lane whose last segment lacks the end block read as {r:?}"),
    }
    // The checkpoint's (and close's) read of a generation's keys applies the same rule.
    let keys = |seg: Vec<u8>| {
        recovery::logged_writes(&one_lane(seg), 2, 4 * BLOCK as u64, 1 << 20, false, &Default::default(), 0)
            .map(|k| k.len())
    };
    assert_eq!(keys(whole).unwrap(), 3);
    for (what, seg) in [("unmarked", unmarked), ("zeroed", zeroed), ("damaged", damaged)] {
        assert!(matches!(keys(seg), Err(Error::Corrupt(_))), "{what}");
    }
}

/// The live generation's lanes are registered (`lanes-<generation>`) before their first
/// commits: a lane deleted or zeroed whole after a crash is missing, not a lane that never
/// wrote (before the registry, its acknowledged commits were dropped silently). Two lanes
/// commit, the process "crashes", and each damage is reopened: deleting lane 1's log,
/// zeroing it, deleting the registry, or putting back an older registry (one lane) is
/// `Corrupt`; untouched, every commit is there.
#[test]
fn a_live_lane_deleted_or_zeroed_whole_is_corrupt() {
    let crashed = || {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options { log: LogOptions { mode: LogMode::PWal, ..LogOptions::default() }, ..Options::default() };
        let db = Db::create(dir.path(), opts.clone()).unwrap();
        // Keys present first: the two updates below touch no shared gap (no conflict).
        db.run(|t| {
            t.put([0], b"0")?;
            t.put([1], b"0")
        })
        .unwrap();
        let both = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            for t in 0..2u8 {
                let (db, both) = (&db, &both);
                s.spawn(move || {
                    // Both transactions open at once: two slots, so two lanes.
                    let mut txn = db.begin();
                    txn.put([t], b"v").unwrap();
                    both.wait();
                    txn.commit().unwrap();
                });
            }
        });
        db.abandon_for_tests();
        let lane1: Vec<std::path::PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                format::parse_segment_name(&p.file_name().unwrap().to_string_lossy()).is_some_and(|(_, l, _)| l == 1)
            })
            .collect();
        assert!(!lane1.is_empty(), "the test needs a second lane");
        (dir, opts, lane1)
    };
    let reopen = |dir: &tempfile::TempDir, opts: &Options| Db::create(dir.path(), opts.clone());
    let (dir, opts, _) = crashed();
    let updated = |db: &Db| db.begin().iter().filter(|r| r.as_ref().unwrap().1 == b"v").count();
    let db = reopen(&dir, &opts).unwrap();
    assert_eq!(updated(&db), 2);
    drop(db);
    let registry = |dir: &tempfile::TempDir| dir.path().join(format::registry_name(1));
    type Damage = fn(&tempfile::TempDir, &[std::path::PathBuf], &std::path::Path);
    let cases: [(&str, Damage); 4] = [
        ("lane 1 deleted", |_, lane1, _| lane1.iter().for_each(|p| std::fs::remove_file(p).unwrap())),
        ("lane 1 zeroed", |_, lane1, _| {
            lane1.iter().for_each(|p| {
                let len = std::fs::metadata(p).unwrap().len() as usize;
                std::fs::write(p, vec![0u8; len]).unwrap()
            })
        }),
        ("registry deleted", |_, _, reg| std::fs::remove_file(reg).unwrap()),
        ("older registry", |_, _, reg| {
            std::fs::write(reg, format::LaneRegistry { generation: 1, count: 1 }.encode()).unwrap()
        }),
    ];
    for (what, damage) in cases {
        let (dir, opts, lane1) = crashed();
        damage(&dir, &lane1, &registry(&dir));
        match reopen(&dir, &opts) {
            Err(Error::Corrupt(m)) => assert!(m.contains("lane"), "{what}: {m}"),
            Ok(db) => panic!("{what}: opened with {} of the 2 updates", updated(&db)),
            Err(e) => panic!("{what}: {e}"),
        }
    }
}
