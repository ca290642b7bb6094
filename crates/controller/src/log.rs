//! The metadata log on a single node: one record per line, `<crc32c hex> <json>`, fsynced per
//! append. A torn or corrupt tail (a crash mid-write) is truncated on open; a corrupt line in the
//! middle cannot be skipped safely, so it is an error.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use crate::record::MetadataRecord;

pub struct MetadataLog {
    path: PathBuf,
    file: File,
}

impl MetadataLog {
    /// Opens the log at `path` and returns it with every record in it.
    pub fn open(path: &Path) -> io::Result<(Self, Vec<MetadataRecord>)> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut records = Vec::new();
        let mut valid_len = 0u64;
        if path.exists() {
            let reader = BufReader::new(File::open(path)?);
            let mut lines = reader.split(b'\n').peekable();
            let total = std::fs::metadata(path)?.len();
            while let Some(line) = lines.next() {
                let line = line?;
                let is_last = lines.peek().is_none();
                match Self::decode_line(&line) {
                    Some(r) if valid_len + (line.len() as u64) < total => {
                        records.push(r);
                        valid_len += line.len() as u64 + 1;
                    }
                    _ if is_last => break,
                    _ => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "corrupt metadata record at byte {valid_len} of {}",
                                path.display()
                            ),
                        ))
                    }
                }
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        if file.metadata()?.len() != valid_len {
            tracing::warn!(path = %path.display(), valid_len, "truncating torn metadata log tail");
            file.set_len(valid_len)?;
        }
        Ok((
            Self {
                path: path.to_path_buf(),
                file,
            },
            records,
        ))
    }

    fn decode_line(line: &[u8]) -> Option<MetadataRecord> {
        let text = std::str::from_utf8(line).ok()?;
        let (crc, json) = text.split_once(' ')?;
        let crc = u32::from_str_radix(crc, 16).ok()?;
        if crc32c::crc32c(json.as_bytes()) != crc {
            return None;
        }
        serde_json::from_str(json).ok()
    }

    /// Appends records durably: they are on disk when this returns.
    pub fn append(&mut self, records: &[MetadataRecord]) -> io::Result<()> {
        let mut buf = Vec::new();
        for r in records {
            let json = serde_json::to_string(r).map_err(io::Error::other)?;
            writeln!(buf, "{:08x} {json}", crc32c::crc32c(json.as_bytes()))?;
        }
        self.file.write_all(&buf)?;
        self.file.sync_data()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(n: i32) -> MetadataRecord {
        MetadataRecord::RegisterBroker {
            node_id: n,
            host: "h".into(),
            port: 1,
            rack: None,
            incarnation_id: uuid::Uuid::nil(),
            broker_epoch: None,
            fenced: None,
            in_controlled_shutdown: None,
        }
    }

    #[test]
    fn round_trip_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m/metadata.log");
        {
            let (mut log, recs) = MetadataLog::open(&p).unwrap();
            assert!(recs.is_empty());
            log.append(&[rec(1), rec(2)]).unwrap();
        }
        // A crash mid-write leaves half a line.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"0000abcd {\"type\":\"Reg").unwrap();
        drop(f);
        let (mut log, recs) = MetadataLog::open(&p).unwrap();
        assert_eq!(recs, vec![rec(1), rec(2)]);
        log.append(&[rec(3)]).unwrap();
        drop(log);
        let (_, recs) = MetadataLog::open(&p).unwrap();
        assert_eq!(recs, vec![rec(1), rec(2), rec(3)]);
    }

    #[test]
    fn corrupt_middle_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("metadata.log");
        let (mut log, _) = MetadataLog::open(&p).unwrap();
        log.append(&[rec(1), rec(2)]).unwrap();
        drop(log);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[12] ^= 1;
        std::fs::write(&p, bytes).unwrap();
        assert!(MetadataLog::open(&p).is_err());
    }
}
