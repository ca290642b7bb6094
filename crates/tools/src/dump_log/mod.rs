//! `strom dump-log`: an offline inspector of log directories that prints what Apache Kafka's
//! `kafka-dump-log.sh` (`org.apache.kafka.tools.DumpLogSegments`, Kafka 4.4) prints for the same
//! files, line for line.
//!
//! - `.log` (and KRaft `.checkpoint`): batch headers; with `--deep-iteration` every record, with
//!   `--print-data-log` keys and values too ([`log`]).
//! - `.index` / `.timeindex`: entries, plus Kafka's consistency checks against the `.log` beside
//!   them ([`index`]).
//! - `.snapshot`: producer-state snapshots in Kafka's `ProducerSnapshot` layout, CRC32C checked,
//!   and `.txnindex` aborted-transaction indexes ([`snapshot`]).
//!
//! Where Kafka's tool aborts with an exception (a record that cannot be parsed, a corrupt index
//! under `--index-sanity-check`, a missing `.log` next to an index) we print the exception's
//! message on stderr and exit with status 1, as Kafka does, but without a Java stack trace.

use std::io::{self, BufWriter, Write};
use std::path::Path;

mod consumer_protocol;
mod index;
mod javamap;
mod log;
mod offsets;
mod records;
mod snapshot;

pub(crate) use javamap::JavaHashMap;

/// Options of `strom dump-log`, named as Kafka's `kafka-dump-log.sh` names them.
#[derive(clap::Args, Debug, Clone)]
pub struct DumpLogArgs {
    /// REQUIRED: The comma separated list of data and index log files to be dumped.
    #[arg(long, value_name = "file1, file2, ...")]
    pub files: String,
    /// If set, printing the messages content when dumping data logs.
    #[arg(long)]
    pub print_data_log: bool,
    /// If set, just verify the index log without printing its content.
    #[arg(long)]
    pub verify_index_only: bool,
    /// If set, just checks the index sanity without printing its content (the check the broker
    /// runs at start-up to decide whether an index is rebuilt).
    #[arg(long)]
    pub index_sanity_check: bool,
    /// If set, uses deep instead of shallow iteration. Automatically set if print-data-log is
    /// enabled.
    #[arg(long)]
    pub deep_iteration: bool,
    /// Limit the amount of total batches read in bytes avoiding reading the whole .log file(s).
    #[arg(long, value_name = "size", default_value_t = i32::MAX)]
    pub max_bytes: i32,
    /// Size of largest message (used when checking .index files against the log).
    #[arg(long, value_name = "size", default_value_t = 5 * 1024 * 1024)]
    pub max_message_size: i32,
    /// Skip metadata when printing records. This flag also skips control records.
    #[arg(long)]
    pub skip_record_metadata: bool,
    /// If set, log data will be parsed as offset data from the __consumer_offsets topic.
    #[arg(long)]
    pub offsets_decoder: bool,
}

impl DumpLogArgs {
    fn deep(&self) -> bool {
        self.deep_iteration || self.print_data()
    }

    /// Kafka turns data printing on with any decoder option.
    fn print_data(&self) -> bool {
        self.print_data_log || self.offsets_decoder
    }
}

/// What stops the whole run, as an uncaught exception stops Kafka's tool.
#[derive(Debug)]
pub(crate) enum Fatal {
    /// Writing to stdout failed (e.g. a closed pipe): stop quietly.
    Stdout,
    /// The message Kafka's tool prints for the exception that ends it.
    Abort(String),
}

impl From<io::Error> for Fatal {
    fn from(e: io::Error) -> Self {
        let _ = e;
        Fatal::Stdout
    }
}

pub(crate) type Res<T> = Result<T, Fatal>;

pub(crate) fn abort<T>(msg: impl Into<String>) -> Res<T> {
    Err(Fatal::Abort(msg.into()))
}

/// Problems found along the way and printed to stderr once every file is dumped, in the order
/// and with the wording of Kafka's tool.
#[derive(Default)]
pub(crate) struct Report {
    /// `.index` entries whose batch does not end at the indexed offset: file → (index offset →
    /// log offset), offsets in descending order.
    pub index_mismatches: JavaHashMap<std::collections::BTreeMap<std::cmp::Reverse<i64>, i64>>,
    pub time_mismatches: JavaHashMap<Vec<(i64, i64)>>,
    pub time_out_of_order: JavaHashMap<Vec<(i64, i64)>>,
    pub time_offset_not_found: JavaHashMap<Vec<(i64, i64)>>,
    /// Records whose offset does not follow the previous one: file → (previous → offset).
    pub non_consecutive: JavaHashMap<std::collections::BTreeMap<i64, i64>>,
}

impl Report {
    fn print(&self, err: &mut dyn Write) -> io::Result<()> {
        for (file, m) in self.index_mismatches.iter() {
            writeln!(err, "Mismatches in :{file}")?;
            for (idx, log) in m {
                writeln!(err, "  Index offset: {}, log offset: {log}", idx.0)?;
            }
        }
        for (file, l) in self.time_mismatches.iter() {
            writeln!(err, "Found timestamp mismatch in :{file}")?;
            for (i, l) in l {
                writeln!(err, "  Index timestamp: {i}, log timestamp: {l}")?;
            }
        }
        for (file, l) in self.time_out_of_order.iter() {
            writeln!(err, "Found out of order timestamp in :{file}")?;
            for (i, p) in l {
                writeln!(
                    err,
                    "  Index timestamp: {i}, Previously indexed timestamp: {p}"
                )?;
            }
        }
        for (_, l) in self.time_offset_not_found.iter() {
            writeln!(
                err,
                "The following indexed offsets are not found in the log."
            )?;
            for (i, f) in l {
                writeln!(err, "Indexed offset: {i}, found log offset: {f}")?;
            }
        }
        for (file, m) in self.non_consecutive.iter() {
            writeln!(err, "Non-consecutive offsets in {file}")?;
            for (a, b) in m {
                writeln!(err, "  {a} is followed by {b}")?;
            }
        }
        Ok(())
    }
}

/// A file named on the command line, with the names Java's `File` gives it.
pub(crate) struct JFile {
    /// `File.toString()`: the path as given, duplicate and trailing separators removed.
    pub shown: String,
    /// `File.getName()`.
    pub name: String,
    /// `File.getAbsolutePath()`.
    pub absolute: String,
}

impl JFile {
    pub fn new(arg: &str) -> Self {
        let mut shown = String::with_capacity(arg.len());
        for c in arg.chars() {
            if c == '/' && shown.ends_with('/') {
                continue;
            }
            shown.push(c);
        }
        if shown.len() > 1 && shown.ends_with('/') {
            shown.pop();
        }
        let name = match shown.rfind('/') {
            Some(i) => shown[i + 1..].to_string(),
            None => shown.clone(),
        };
        let absolute = if shown.starts_with('/') {
            shown.clone()
        } else {
            let cwd = std::env::current_dir()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            if shown.is_empty() {
                cwd
            } else {
                format!("{}/{}", cwd.trim_end_matches('/'), shown)
            }
        };
        Self {
            shown,
            name,
            absolute,
        }
    }

    /// A sibling file `<stem><suffix>` (the `.log` or `.index` beside an index), as Kafka builds
    /// it from the absolute parent and `name.split("\\.")[0]`.
    pub fn sibling(&self, suffix: &str) -> JFile {
        let parent = match self.absolute.rfind('/') {
            Some(0) => "/".to_string(),
            Some(i) => self.absolute[..i].to_string(),
            None => String::new(),
        };
        let stem = java_split_dot_first(&self.name);
        let path = if parent.ends_with('/') {
            format!("{parent}{stem}{suffix}")
        } else {
            format!("{parent}/{stem}{suffix}")
        };
        JFile::new(&path)
    }

    pub fn read(&self) -> Res<Vec<u8>> {
        std::fs::read(Path::new(&self.shown)).or_else(|e| abort(io_message(&self.shown, &e)))
    }
}

/// What Java's NIO exceptions say for a file that cannot be opened.
pub(crate) fn io_message(path: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => path.to_string(),
        io::ErrorKind::PermissionDenied => path.to_string(),
        _ => format!("{path}: {e}"),
    }
}

/// `name.split("\\.")[0]` in Java (an empty name gives an empty first part).
pub(crate) fn java_split_dot_first(name: &str) -> &str {
    name.split('.').next().unwrap_or("")
}

/// `Long.parseLong(name.split("\\.")[0])`, with Java's error message.
pub(crate) fn start_offset_of(name: &str) -> Res<i64> {
    let s = java_split_dot_first(name);
    // Java accepts an optional sign and ASCII digits only; Rust's parser is the same.
    match s.parse::<i64>() {
        Ok(v) if !s.is_empty() => Ok(v),
        _ => abort(format!("For input string: \"{s}\"")),
    }
}

/// Runs `strom dump-log`. Problems are reported here with Kafka's wording; when the run stops
/// on one (where Kafka's tool dies with an exception) the process exits with status 1 right
/// away, so the caller never sees an error to print a second time.
pub fn run(args: DumpLogArgs) -> crate::Result<()> {
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    let mut report = Report::default();
    let result = run_files(&args, &mut out, &mut report);
    let flushed = out.flush();
    drop(out);
    let code = match result {
        Ok(()) if flushed.is_ok() => {
            let _ = report.print(&mut io::stderr().lock());
            return Ok(());
        }
        Ok(()) | Err(Fatal::Stdout) => 1,
        Err(Fatal::Abort(msg)) => {
            eprintln!("{msg}");
            1
        }
    };
    std::process::exit(code)
}

fn run_files(args: &DumpLogArgs, out: &mut dyn Write, report: &mut Report) -> Res<()> {
    for arg in args.files.split(',') {
        let file = JFile::new(arg);
        writeln!(out, "Dumping {}", file.shown)?;
        let Some(dot) = file.name.rfind('.') else {
            let len = file.name.encode_utf16().count();
            return abort(format!("begin -1, end {len}, length {len}"));
        };
        match &file.name[dot..] {
            ".log" | ".checkpoint" => log::dump_log(&file, args, out, report)?,
            ".index" => index::dump_index(&file, args, out, report)?,
            ".timeindex" => index::dump_time_index(&file, args, out, report)?,
            ".snapshot" => snapshot::dump_producer_snapshot(&file, out)?,
            ".txnindex" => snapshot::dump_txn_index(&file, out)?,
            _ => {
                out.flush()?;
                eprintln!("Ignoring unknown file {}", file.shown);
            }
        }
    }
    Ok(())
}

/// `new String(bytes, UTF_8)`: malformed sequences become U+FFFD.
pub(crate) fn java_utf8(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Java's `OptionalLong.toString()`.
pub(crate) fn optional_long(v: Option<i64>) -> String {
    match v {
        Some(v) => format!("OptionalLong[{v}]"),
        None => "OptionalLong.empty".to_string(),
    }
}

pub(crate) fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
pub(crate) fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(crate) fn be_u32(b: &[u8], at: usize) -> u32 {
    be_i32(b, at) as u32
}
pub(crate) fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// CRC32C (Castagnoli), as Kafka's `Crc32C`.
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        t
    });
    let mut crc = !0u32;
    for &b in data {
        crc = table[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn java_file_names() {
        let f = JFile::new("/a//b/00000000000000000005.index");
        assert_eq!(f.shown, "/a/b/00000000000000000005.index");
        assert_eq!(f.name, "00000000000000000005.index");
        assert_eq!(f.sibling(".log").shown, "/a/b/00000000000000000005.log");
        assert_eq!(start_offset_of(&f.name).unwrap(), 5);
        assert!(start_offset_of("x.log").is_err());
    }
}
