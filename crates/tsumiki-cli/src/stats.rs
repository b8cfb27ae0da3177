//! `tsumiki stats DIR`: a database's files as their block trailers describe them.

use std::path::PathBuf;

use serde_json::json;
use tsumiki::{inspect, Inspection};

/// The text after `--help`'s options: details and examples.
pub const HELP: &str = "\
Reads the database's files without changing them (the database must not be open
elsewhere): MASTER, the page store's translation table, every page (to count the records),
and the trailer of every 4 KiB block of every log and page segment. The trailer of each
block records its lane, its position, how many commit records end in it, their timestamp
or LSN range, the lane's durable watermark and whether it ends a flush; a page block
records the generation that wrote it. Per file: its size, valid, zero and other blocks,
commit records, flushes, live bytes (page segments: bytes of images the table names),
and the generations (logs: the generation; pages: the newest that wrote it).

Examples:
  tsumiki stats ./db
  tsumiki stats --json ./db | jq .records";

/// Arguments of `tsumiki stats`.
#[derive(clap::Args)]
pub struct StatsArgs {
    /// The database directory.
    pub dir: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Prints the report for `args.dir`.
pub fn run(args: &StatsArgs) -> Result<(), String> {
    let r = inspect(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?;
    if args.json {
        println!("{}", json(&r));
    } else {
        print!("{}", table(&r));
    }
    Ok(())
}

/// The report as a human-readable table.
pub fn table(r: &Inspection) -> String {
    let mut s = format!(
        "generation {} ({}), {} logs, {} pages\n",
        r.generation,
        if r.last_exit {
            "closed cleanly"
        } else {
            "open, crashed, or closed keeping a short log: the next open replays the logs"
        },
        if r.elr { "ELR" } else { "NLR" },
        r.pages
    );
    s += &format!(
        "{} records in the pages ({} key bytes, {} value bytes); {} live bytes in {} page segments ({} free)\n",
        r.records, r.key_bytes, r.value_bytes, r.live_bytes, r.segments, r.free_segments
    );
    s += &format!(
        "{:<28} {:>10} {:>8} {:>6} {:>5} {:>9} {:>8} {:>10} {:>5}\n",
        "file", "bytes", "valid", "zero", "other", "records", "flushes", "live", "gen"
    );
    let (mut logs, mut log_records, mut seg_bytes, mut live) = (0u64, 0u64, 0u64, 0u64);
    for f in &r.files {
        let (lv, gen) = match (f.log, f.live) {
            (Some((g, _)), _) => (String::new(), g.to_string()),
            (None, Some((l, g))) => (l.to_string(), g.to_string()),
            (None, None) => ("free".to_string(), String::new()),
        };
        s += &format!(
            "{:<28} {:>10} {:>8} {:>6} {:>5} {:>9} {:>8} {:>10} {:>5}\n",
            f.name, f.bytes, f.valid_blocks, f.zero_blocks, f.bad_blocks, f.records, f.flushes, lv, gen
        );
        if f.log.is_some() {
            logs += f.bytes;
            log_records += f.records;
        } else {
            seg_bytes += f.bytes;
            live += f.live.map_or(0, |l| l.0);
        }
    }
    s += &format!(
        "logs: {logs} bytes, {log_records} records; page segments: {seg_bytes} bytes, {live} live ({:.2}x)\n",
        if live == 0 { 0.0 } else { seg_bytes as f64 / live as f64 }
    );
    for (g, lanes) in &r.lane_registries {
        s += &match lanes {
            Ok(n) => format!("lane registry of generation {g}: {n} lanes\n"),
            Err(e) => format!("lane registry of generation {g}: unreadable ({e})\n"),
        };
    }
    s += "other: blocks not valid where they are (a torn write, damage, or the older blocks of a reused segment)\n";
    s
}

/// The report as one JSON object.
pub fn json(r: &Inspection) -> serde_json::Value {
    let files: Vec<serde_json::Value> = r
        .files
        .iter()
        .map(|f| {
            json!({
                "name": f.name,
                "bytes": f.bytes,
                "kind": if f.log.is_some() { "log" } else { "pages" },
                "generation": f.log.map(|l| l.0).or(f.live.map(|l| l.1)),
                "lane": f.log.map(|l| l.1),
                "valid_blocks": f.valid_blocks,
                "zero_blocks": f.zero_blocks,
                "bad_blocks": f.bad_blocks,
                "records": f.records,
                "flushes": f.flushes,
                "lo": f.lo,
                "hi": f.hi,
                "watermark": f.watermark,
                "live_bytes": f.live.map(|l| l.0),
            })
        })
        .collect();
    let registries: Vec<serde_json::Value> = r
        .lane_registries
        .iter()
        .map(|(g, lanes)| match lanes {
            Ok(n) => json!({"generation": g, "lanes": n}),
            Err(e) => json!({"generation": g, "error": e.to_string()}),
        })
        .collect();
    json!({
        "generation": r.generation,
        "last_exit": r.last_exit,
        "elr": r.elr,
        "pages": r.pages,
        "records": r.records,
        "key_bytes": r.key_bytes,
        "value_bytes": r.value_bytes,
        "live_bytes": r.live_bytes,
        "segments": r.segments,
        "free_segments": r.free_segments,
        "files": files,
        "lane_registries": registries,
    })
}
