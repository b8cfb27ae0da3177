//! The dump format of `tsumiki dump` and `tsumiki load` (docs/dump-format.md): a header,
//! checksummed records, and an end record with the count and a digest of every record, so
//! that a damaged or truncated stream is detected.

use std::io::{self, Read, Write};

/// The first 8 bytes of a dump.
pub const MAGIC: &[u8; 8] = b"TSMKDUMP";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;
/// Header: magic, version, flags, CRC32C of the 16 bytes before it.
const HEADER_LEN: usize = 8 + 4 + 4 + 4;
/// A key/value record.
const TAG_RECORD: u8 = b'R';
/// The end record.
const TAG_END: u8 = b'E';
/// The longest key and value a version 1 dump may hold (the format's limits; the database
/// refuses what it cannot store).
pub const MAX_KEY: u32 = 64 << 10;
/// See [`MAX_KEY`].
pub const MAX_VALUE: u32 = 256 << 20;

fn put_varint(out: &mut Vec<u8>, mut n: u32) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Writes a dump to `W`: [`DumpWriter::record`] for each record, then
/// [`DumpWriter::finish`].
pub struct DumpWriter<W: Write> {
    out: W,
    count: u64,
    digest: u32,
    buf: Vec<u8>,
    bytes: u64,
}

impl<W: Write> DumpWriter<W> {
    /// Writes the header.
    pub fn new(mut out: W) -> io::Result<DumpWriter<W>> {
        let mut h = Vec::with_capacity(HEADER_LEN);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&VERSION.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        let crc = crc32c::crc32c(&h);
        h.extend_from_slice(&crc.to_le_bytes());
        out.write_all(&h)?;
        Ok(DumpWriter { out, count: 0, digest: 0, buf: Vec::new(), bytes: HEADER_LEN as u64 })
    }

    /// Appends one record. Keys and values beyond the format's limits are refused.
    pub fn record(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        let (Ok(kl), Ok(vl)) = (u32::try_from(key.len()), u32::try_from(value.len())) else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a record beyond the dump format's limits"));
        };
        if kl > MAX_KEY || vl > MAX_VALUE {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a record beyond the dump format's limits"));
        }
        self.buf.clear();
        self.buf.push(TAG_RECORD);
        put_varint(&mut self.buf, kl);
        put_varint(&mut self.buf, vl);
        // Key and value go straight to the writer; the checksum runs over all of it.
        let crc = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(&self.buf), key), value);
        self.out.write_all(&self.buf)?;
        self.out.write_all(key)?;
        self.out.write_all(value)?;
        self.out.write_all(&crc.to_le_bytes())?;
        // The digest leaves the record's own checksum out: a CRC run over a message and
        // its CRC ends in a constant, so with it the digest would depend only on the
        // records' lengths, and two records of one length could swap unnoticed.
        self.digest = crc32c::crc32c_append(self.digest, &self.buf);
        self.digest = crc32c::crc32c_append(self.digest, key);
        self.digest = crc32c::crc32c_append(self.digest, value);
        self.count += 1;
        self.bytes += (self.buf.len() + key.len() + value.len() + 4) as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Writes the end record and flushes; returns the writer and the record count.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        let mut e = Vec::with_capacity(1 + 8 + 4 + 4);
        e.push(TAG_END);
        e.extend_from_slice(&self.count.to_le_bytes());
        e.extend_from_slice(&self.digest.to_le_bytes());
        let crc = crc32c::crc32c(&e);
        e.extend_from_slice(&crc.to_le_bytes());
        self.out.write_all(&e)?;
        self.out.flush()?;
        Ok((self.out, self.count))
    }
}

/// A record: key and value.
pub type Record = (Vec<u8>, Vec<u8>);

/// Why a dump could not be read.
#[derive(Debug)]
pub enum DumpError {
    /// Reading failed.
    Io(io::Error),
    /// The stream is not a valid dump: damaged, truncated, or something else.
    Invalid(String),
}

impl std::fmt::Display for DumpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DumpError::Io(e) => write!(f, "reading the dump: {e}"),
            DumpError::Invalid(m) => write!(f, "{m}"),
        }
    }
}

/// Reads a dump record by record, verifying each record's checksum, and at the end the
/// count and digest.
pub struct DumpReader<R: Read> {
    inp: R,
    count: u64,
    digest: u32,
    offset: u64,
    done: bool,
}

impl<R: Read> DumpReader<R> {
    /// Reads and checks the header.
    pub fn new(mut inp: R) -> Result<DumpReader<R>, DumpError> {
        let mut h = [0u8; HEADER_LEN];
        let got = read_full(&mut inp, &mut h).map_err(DumpError::Io)?;
        if got < 8 || &h[..8] != MAGIC {
            return Err(DumpError::Invalid("not a tsumiki dump (no TSMKDUMP header)".into()));
        }
        if got < HEADER_LEN {
            return Err(DumpError::Invalid("the dump is truncated inside its header".into()));
        }
        if crc32c::crc32c(&h[..16]).to_le_bytes() != h[16..20] {
            return Err(DumpError::Invalid("the dump's header fails its checksum (damaged)".into()));
        }
        let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        let flags = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes"));
        if version != VERSION || flags != 0 {
            return Err(DumpError::Invalid(format!(
                "a dump of format version {version} (flags {flags:#x}); this tsumiki reads version {VERSION}"
            )));
        }
        Ok(DumpReader { inp, count: 0, digest: 0, offset: HEADER_LEN as u64, done: false })
    }

    /// Records read so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Bytes read so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn truncated(&self, inside: &str) -> DumpError {
        DumpError::Invalid(format!(
            "the dump is truncated: it ends at byte {} {inside}, after {} complete records, without its end record",
            self.offset, self.count
        ))
    }

    /// Reads exactly `buf.len()` bytes, or says the dump is truncated `inside` something.
    fn exact(&mut self, buf: &mut [u8], inside: &str) -> Result<(), DumpError> {
        let got = read_full(&mut self.inp, buf).map_err(DumpError::Io)?;
        self.offset += got as u64;
        if got < buf.len() {
            return Err(self.truncated(inside));
        }
        Ok(())
    }

    fn varint(&mut self, raw: &mut Vec<u8>, inside: &str) -> Result<u32, DumpError> {
        let mut n = 0u32;
        for i in 0..5 {
            let mut b = [0u8];
            self.exact(&mut b, inside)?;
            raw.push(b[0]);
            if i == 4 && b[0] > 0x0F {
                return Err(self.damaged("a length overflows 32 bits"));
            }
            n |= u32::from(b[0] & 0x7F) << (7 * i);
            if b[0] & 0x80 == 0 {
                break;
            }
        }
        Ok(n)
    }

    fn damaged(&self, what: &str) -> DumpError {
        DumpError::Invalid(format!("the dump is damaged at byte {}, in record {}: {what}", self.offset, self.count + 1))
    }

    /// The next record, or `None` after the end record was read and verified (and
    /// nothing follows it).
    pub fn next_record(&mut self) -> Result<Option<Record>, DumpError> {
        if self.done {
            return Ok(None);
        }
        let mut tag = [0u8];
        let got = read_full(&mut self.inp, &mut tag).map_err(DumpError::Io)?;
        if got == 0 {
            return Err(self.truncated("between records"));
        }
        self.offset += 1;
        match tag[0] {
            TAG_RECORD => {
                let inside = "inside a record";
                let mut raw = vec![TAG_RECORD];
                let kl = self.varint(&mut raw, inside)?;
                let vl = self.varint(&mut raw, inside)?;
                if kl > MAX_KEY || vl > MAX_VALUE {
                    return Err(
                        self.damaged(&format!("a key of {kl} or value of {vl} bytes, beyond the format's limits"))
                    );
                }
                // Read as the bytes arrive: a damaged length never allocates more than the
                // stream holds.
                let mut key = Vec::new();
                let n = (&mut self.inp).take(u64::from(kl)).read_to_end(&mut key).map_err(DumpError::Io)?;
                self.offset += n as u64;
                if n < kl as usize {
                    return Err(self.truncated(inside));
                }
                let mut value = Vec::new();
                let n = (&mut self.inp).take(u64::from(vl)).read_to_end(&mut value).map_err(DumpError::Io)?;
                self.offset += n as u64;
                if n < vl as usize {
                    return Err(self.truncated(inside));
                }
                let mut crc = [0u8; 4];
                self.exact(&mut crc, inside)?;
                let want = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(&raw), &key), &value);
                if want.to_le_bytes() != crc {
                    return Err(self.damaged("the record fails its checksum"));
                }
                self.digest = crc32c::crc32c_append(self.digest, &raw);
                self.digest = crc32c::crc32c_append(self.digest, &key);
                self.digest = crc32c::crc32c_append(self.digest, &value);
                self.count += 1;
                Ok(Some((key, value)))
            }
            TAG_END => {
                let mut e = [0u8; 16];
                self.exact(&mut e, "inside the end record")?;
                let mut all = vec![TAG_END];
                all.extend_from_slice(&e[..12]);
                if crc32c::crc32c(&all).to_le_bytes() != e[12..16] {
                    return Err(self.damaged("the end record fails its checksum"));
                }
                let count = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
                let digest = u32::from_le_bytes(e[8..12].try_into().expect("4 bytes"));
                if count != self.count {
                    return Err(DumpError::Invalid(format!(
                        "the dump's end record says {count} records, but {} were read: records are missing or added",
                        self.count
                    )));
                }
                if digest != self.digest {
                    return Err(DumpError::Invalid(
                        "the dump's digest does not match its records: records were reordered, replaced or lost".into(),
                    ));
                }
                let mut extra = [0u8];
                if read_full(&mut self.inp, &mut extra).map_err(DumpError::Io)? > 0 {
                    return Err(DumpError::Invalid(format!(
                        "bytes follow the dump's end record at byte {}",
                        self.offset
                    )));
                }
                self.done = true;
                Ok(None)
            }
            t => Err(DumpError::Invalid(format!(
                "the dump is damaged at byte {}: unknown record tag {t:#04x} after {} records",
                self.offset - 1,
                self.count
            ))),
        }
    }
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = DumpWriter::new(Vec::new()).unwrap();
        for i in 0..50u32 {
            w.record(&i.to_be_bytes(), &vec![i as u8; i as usize * 7]).unwrap();
        }
        w.record(b"", b"").unwrap();
        w.finish().unwrap().0
    }

    fn read_all(b: &[u8]) -> Result<Vec<Record>, String> {
        let mut r = DumpReader::new(b).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while let Some(kv) = r.next_record().map_err(|e| e.to_string())? {
            out.push(kv);
        }
        Ok(out)
    }

    #[test]
    fn round_trip() {
        let b = sample();
        let got = read_all(&b).unwrap();
        assert_eq!(got.len(), 51);
        assert_eq!(got[3], (3u32.to_be_bytes().to_vec(), vec![3u8; 21]));
        let empty = DumpWriter::new(Vec::new()).unwrap().finish().unwrap().0;
        assert_eq!(read_all(&empty).unwrap(), vec![]);
    }

    /// Every truncation and every flipped byte of a dump is refused.
    #[test]
    fn every_cut_and_every_flipped_bit_is_refused() {
        let b = sample();
        for cut in 0..b.len() {
            assert!(read_all(&b[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..b.len() {
            for bit in [0, 3, 7] {
                let mut c = b.clone();
                c[at] ^= 1 << bit;
                assert!(read_all(&c).is_err(), "byte {at} bit {bit}");
            }
        }
        let mut extra = b.clone();
        extra.push(0);
        assert!(read_all(&extra).unwrap_err().contains("follow"));
        // Two records swapped (each intact): the digest says so.
        let mut w = DumpWriter::new(Vec::new()).unwrap();
        w.record(b"a", b"1").unwrap();
        w.record(b"b", b"2").unwrap();
        let good = w.finish().unwrap().0;
        let rec = 1 + 1 + 1 + 1 + 1 + 4;
        let mut swapped = good.clone();
        swapped[HEADER_LEN..HEADER_LEN + 2 * rec].copy_from_slice(
            &[&good[HEADER_LEN + rec..HEADER_LEN + 2 * rec], &good[HEADER_LEN..HEADER_LEN + rec]].concat(),
        );
        assert!(read_all(&swapped).unwrap_err().contains("digest"));
    }
}
