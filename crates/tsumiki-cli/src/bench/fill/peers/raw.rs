//! The floor: no database, only the device work a durable commit cannot avoid. The file is
//! preallocated (zeros, then fdatasync) when opened, outside the timed part; each
//! transaction is one write of its records, rounded up to whole 4 KiB blocks, at the next
//! offset, then an fdatasync (none with `--no-sync`).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{err, Batch, FillConfig, FillEngine};

const BLOCK: usize = 4096;

pub struct Raw {
    file: File,
    sync: bool,
    /// Bytes per transaction's write (whole blocks).
    unit: usize,
    units: u64,
    value_size: usize,
    next: u64,
    buf: Vec<u8>,
}

impl FillEngine for Raw {
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
        Ok(Raw { file, sync: cfg.sync, unit, units, value_size: cfg.value_size, next: 0, buf: vec![0; unit] })
    }

    fn write_batch(&mut self, batch: &Batch<'_>) -> Result<(), String> {
        self.buf.fill(0);
        self.buf[..4].copy_from_slice(&(batch.len() as u32).to_le_bytes());
        let mut at = 4;
        for (k, v) in batch.iter() {
            self.buf[at..at + k.len()].copy_from_slice(k);
            at += k.len();
            self.buf[at..at + v.len()].copy_from_slice(v);
            at += v.len();
        }
        self.file.write_all_at(&self.buf, self.next * self.unit as u64).map_err(err("raw write"))?;
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
            self.file.read_exact_at(&mut self.buf, u * self.unit as u64).map_err(err("raw read"))?;
            let n = u32::from_le_bytes(self.buf[..4].try_into().unwrap()) as usize;
            for i in 0..n.min((self.unit - 4) / rec) {
                let at = 4 + i * rec;
                if &self.buf[at..at + 4] == key {
                    return Ok(Some(self.buf[at + 4..at + rec].to_vec()));
                }
            }
        }
        Ok(None)
    }

    fn close(self) -> Result<(), String> {
        self.file.sync_all().map_err(err("raw close"))
    }
}
