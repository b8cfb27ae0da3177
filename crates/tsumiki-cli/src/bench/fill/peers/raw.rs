//! The floor: no database, only the device work a durable commit cannot avoid. The file is
//! preallocated (zeros, then fdatasync) when opened, outside the timed part; each
//! transaction is one write of its records, rounded up to whole 4 KiB blocks, at the next
//! offset, then an fdatasync (none with `--no-sync`). `raw` writes through the OS page
//! cache; `raw-direct` with direct I/O (`O_DIRECT`), as tsumiki's synced log does, where
//! the fdatasync has no page to write back (on a file system without direct I/O it writes
//! through the cache too).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{err, Batch, FillConfig, FillEngine};

const BLOCK: usize = 4096;

/// The buffered floor.
pub type Raw = RawFile<false>;
/// The direct-I/O floor.
pub type RawDirect = RawFile<true>;

pub struct RawFile<const DIRECT: bool> {
    file: File,
    sync: bool,
    /// Bytes per transaction's write (whole blocks).
    unit: usize,
    units: u64,
    value_size: usize,
    next: u64,
    /// `unit` bytes from `start`: aligned to a block, as direct I/O needs.
    mem: Vec<u8>,
    start: usize,
}

impl<const DIRECT: bool> RawFile<DIRECT> {
    fn buf(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.start + self.unit]
    }
}

impl<const DIRECT: bool> FillEngine for RawFile<DIRECT> {
    fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
        let path = dir.join("raw.log");
        let fresh = !path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(err("raw open"))?;
        // A unit: the record count (4 bytes), then each key and value.
        let unit = (4 + cfg.per_txn * (4 + cfg.value_size)).div_ceil(BLOCK) * BLOCK;
        let units = cfg.txns();
        if fresh {
            let zeros = vec![0u8; 1 << 20];
            let total = units * unit as u64;
            let mut off = 0;
            while off < total {
                let n = (total - off).min(zeros.len() as u64) as usize;
                file.write_all_at(&zeros[..n], off).map_err(err("raw preallocate"))?;
                off += n as u64;
            }
            file.sync_all().map_err(err("raw preallocate"))?;
        }
        if DIRECT {
            // A file system that refuses O_DIRECT writes through the page cache.
            ::tsumiki::storage::set_direct_io(&file, true);
        }
        let mem = vec![0; unit + BLOCK];
        let start = mem.as_ptr().align_offset(BLOCK);
        Ok(RawFile { file, sync: cfg.sync, unit, units, value_size: cfg.value_size, next: 0, mem, start })
    }

    fn write_batch<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String> {
        let buf = self.buf();
        buf.fill(0);
        buf[..4].copy_from_slice(&(batch.len() as u32).to_le_bytes());
        let mut at = 4;
        for (k, v) in batch.iter() {
            buf[at..at + k.len()].copy_from_slice(k);
            at += k.len();
            buf[at..at + v.len()].copy_from_slice(v);
            at += v.len();
        }
        let off = self.next * self.unit as u64;
        self.file.write_all_at(&self.mem[self.start..self.start + self.unit], off).map_err(err("raw write"))?;
        self.next += 1;
        if self.sync {
            self.file.sync_data().map_err(err("raw fdatasync"))?;
        }
        Ok(())
    }

    /// Searches the units from the last one back (the runner reads the last key written).
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let rec = 4 + self.value_size;
        for u in (0..self.units).rev() {
            let off = u * self.unit as u64;
            let (file, buf) = (&self.file, &mut self.mem[self.start..self.start + self.unit]);
            file.read_exact_at(buf, off).map_err(err("raw read"))?;
            let n = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
            for i in 0..n.min((self.unit - 4) / rec) {
                let at = 4 + i * rec;
                if &buf[at..at + 4] == key {
                    return Ok(Some(buf[at + 4..at + rec].to_vec()));
                }
            }
        }
        Ok(None)
    }

    fn close(self) -> Result<(), String> {
        self.file.sync_all().map_err(err("raw close"))
    }
}
