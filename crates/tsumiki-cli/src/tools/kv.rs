//! `tsumiki get`, `put`, `delete` and `scan`: one key or a key range, for scripts.

use std::io::{BufWriter, Read, Write};
use std::ops::Bound;
use std::path::PathBuf;

use tsumiki::{Db, Options};

use super::{open_existing, scan_chunks, Failure, Outcome};

/// The text after `--help`'s options: details and examples.
pub const GET_HELP: &str = "\
Prints the value followed by a newline (the value's bytes as they are; with --hex, the
key is given and the value printed in hexadecimal). Exit code 1, printing nothing on
standard output, when the key is absent; 2 on an error (no database there, open
elsewhere).

Examples:
  tsumiki get ./db user:42
  tsumiki get --hex ./db 0000002a
  if v=$(tsumiki get ./db config); then echo \"config: $v\"; fi";

/// The text after `--help`'s options: details and examples.
pub const PUT_HELP: &str = "\
Stores VALUE under KEY in one transaction, durable when the command returns. Without
VALUE, the value is read from standard input (all of it, as it is: binary data welcome).
With --hex, KEY and VALUE (or standard input, whitespace ignored) are hexadecimal. The
database must exist unless --create is given.

Examples:
  tsumiki put --create ./db user:42 'Ada Lovelace'
  tsumiki put ./db photo < photo.jpg
  tsumiki put --hex ./db 0000002a cafe";

/// The text after `--help`'s options: details and examples.
pub const DELETE_HELP: &str = "\
Deletes KEY in one transaction, durable when the command returns. Exit code 1 when the key
was not there.

Examples:
  tsumiki delete ./db user:42
  tsumiki delete --hex ./db 0000002a || echo 'was not there'";

/// The text after `--help`'s options: details and examples.
pub const SCAN_HELP: &str = "\
Prints one line per record, `KEY<TAB>VALUE` (the bytes as they are; use --hex for keys or
values that may hold tabs, newlines or binary data), in ascending key order, or
descending with --reverse. --from is inclusive and --to exclusive; --prefix selects the
keys that start with it. The records printed are one consistent state of the database.

Examples:
  tsumiki scan ./db
  tsumiki scan ./db --prefix user: --keys-only
  tsumiki scan ./db --from a --to m --limit 10
  tsumiki scan ./db --reverse --limit 1        # the last record
  tsumiki scan --hex ./db --from 00000010";

/// Arguments of `tsumiki get`.
#[derive(clap::Args)]
pub struct GetArgs {
    /// The database directory.
    pub dir: PathBuf,
    /// The key (UTF-8, or hexadecimal with --hex).
    pub key: String,
    /// The key is given, and the value printed, in hexadecimal.
    #[arg(long)]
    pub hex: bool,
}

/// Arguments of `tsumiki put`.
#[derive(clap::Args)]
pub struct PutArgs {
    /// The database directory.
    pub dir: PathBuf,
    /// The key (UTF-8, or hexadecimal with --hex).
    pub key: String,
    /// The value (UTF-8, or hexadecimal with --hex); read from standard input when omitted.
    pub value: Option<String>,
    /// Create the database if there is none.
    #[arg(long)]
    pub create: bool,
    /// The key and value are hexadecimal.
    #[arg(long)]
    pub hex: bool,
}

/// Arguments of `tsumiki delete`.
#[derive(clap::Args)]
pub struct DeleteArgs {
    /// The database directory.
    pub dir: PathBuf,
    /// The key (UTF-8, or hexadecimal with --hex).
    pub key: String,
    /// The key is hexadecimal.
    #[arg(long)]
    pub hex: bool,
}

/// Arguments of `tsumiki scan`.
#[derive(clap::Args)]
pub struct ScanArgs {
    /// The database directory.
    pub dir: PathBuf,
    /// The first key (inclusive).
    #[arg(long)]
    pub from: Option<String>,
    /// The key to stop before (exclusive).
    #[arg(long)]
    pub to: Option<String>,
    /// Only keys starting with this.
    #[arg(long, conflicts_with_all = ["from", "to"])]
    pub prefix: Option<String>,
    /// Print at most this many records.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Descending key order.
    #[arg(long)]
    pub reverse: bool,
    /// Keys (in the options too) and values in hexadecimal.
    #[arg(long)]
    pub hex: bool,
    /// Print keys only.
    #[arg(long)]
    pub keys_only: bool,
}

/// `arg` as bytes: UTF-8 as given, or decoded from hexadecimal.
fn bytes(arg: &str, hex: bool, what: &str) -> Result<Vec<u8>, Failure> {
    if !hex {
        return Ok(arg.as_bytes().to_vec());
    }
    let clean: String = arg.chars().filter(|c| !c.is_whitespace()).collect();
    hex::decode(&clean).map_err(|e| Failure::new(format!("{what} is not hexadecimal: {e}")))
}

fn out_err(e: std::io::Error) -> Failure {
    Failure::new(format!("writing standard output: {e}"))
}

/// `tsumiki get`.
pub fn get(a: &GetArgs) -> Outcome {
    let key = bytes(&a.key, a.hex, "KEY")?;
    let db = open_existing(&a.dir, true)?;
    let value = db.view(|r| r.get(&key))?;
    db.close()?;
    let Some(v) = value else {
        eprintln!("tsumiki: {}: no such key", a.key);
        return Ok(1);
    };
    let mut out = std::io::stdout().lock();
    if a.hex {
        out.write_all(hex::encode(&v).as_bytes()).map_err(out_err)?;
    } else {
        out.write_all(&v).map_err(out_err)?;
    }
    out.write_all(b"\n").and_then(|()| out.flush()).map_err(out_err)?;
    Ok(0)
}

/// `tsumiki put`.
pub fn put(a: &PutArgs) -> Outcome {
    let key = bytes(&a.key, a.hex, "KEY")?;
    let value = match &a.value {
        Some(v) => bytes(v, a.hex, "VALUE")?,
        None => {
            let mut v = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut v)
                .map_err(|e| Failure::new(format!("reading standard input: {e}")))?;
            if a.hex {
                bytes(&String::from_utf8_lossy(&v), true, "standard input")?
            } else {
                v
            }
        }
    };
    let db = if a.create {
        Db::create(&a.dir, Options::default()).map_err(|e| Failure::new(format!("{}: {e}", a.dir.display())))?
    } else {
        open_existing(&a.dir, false)?
    };
    db.run(|t| t.put(&key, &value))?;
    db.close()?;
    Ok(0)
}

/// `tsumiki delete`.
pub fn delete(a: &DeleteArgs) -> Outcome {
    let key = bytes(&a.key, a.hex, "KEY")?;
    let db = open_existing(&a.dir, false)?;
    let existed = db.run(|t| t.delete(&key))?;
    db.close()?;
    if !existed {
        eprintln!("tsumiki: {}: no such key", a.key);
    }
    Ok(if existed { 0 } else { 1 })
}

/// The smallest key above every key that starts with `p` (`None`: none is).
fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Appends `b` to `line`, as it is or in hexadecimal.
fn push_field(line: &mut Vec<u8>, b: &[u8], hex: bool) {
    if hex {
        line.extend_from_slice(hex::encode(b).as_bytes());
    } else {
        line.extend_from_slice(b);
    }
}

/// `tsumiki scan`.
pub fn scan(a: &ScanArgs) -> Outcome {
    let (lo, hi) = match &a.prefix {
        Some(p) => {
            let p = bytes(p, a.hex, "--prefix")?;
            let hi = prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded);
            (Bound::Included(p), hi)
        }
        None => (
            a.from.as_deref().map(|f| bytes(f, a.hex, "--from")).transpose()?.map_or(Bound::Unbounded, Bound::Included),
            a.to.as_deref().map(|t| bytes(t, a.hex, "--to")).transpose()?.map_or(Bound::Unbounded, Bound::Excluded),
        ),
    };
    if a.limit == Some(0) {
        return Ok(0);
    }
    let db = open_existing(&a.dir, true)?;
    let mut out = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut n = 0u64;
    scan_chunks(&db, lo, hi, a.reverse, |k, v| {
        let mut line = Vec::with_capacity(2 * (k.len() + v.len()) + 2);
        push_field(&mut line, k, a.hex);
        if !a.keys_only {
            line.push(b'\t');
            push_field(&mut line, v, a.hex);
        }
        line.push(b'\n');
        out.write_all(&line).map_err(out_err)?;
        n += 1;
        Ok(a.limit.is_none_or(|l| n < l))
    })?;
    out.flush().map_err(out_err)?;
    drop(out);
    db.close()?;
    Ok(0)
}
