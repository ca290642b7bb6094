//! Kafka's offset checkpoint files (`recovery-point-offset-checkpoint`,
//! `log-start-offset-checkpoint`, `replication-offset-checkpoint`): a version line `0`, a count
//! line, then one `topic partition offset` line per partition.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::StorageError;

const VERSION: i32 = 0;

/// One checkpoint file. Writes go to `<path>.tmp`, are fsynced and renamed over the old file, so
/// a crash leaves either the old or the new contents, never a mix.
#[derive(Debug, Clone)]
pub struct OffsetCheckpointFile {
    path: PathBuf,
}

impl OffsetCheckpointFile {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The checkpointed offsets; an empty map if the file does not exist yet.
    pub fn read(&self) -> Result<HashMap<(String, i32), i64>, StorageError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashMap::new()),
            Err(e) => return Err(e.into()),
        };
        let bad = |reason: String| StorageError::CorruptCheckpoint {
            path: self.path.clone(),
            reason,
        };
        let mut lines = text.lines();
        let version = lines.next().ok_or_else(|| bad("empty file".into()))?;
        if version.trim().parse::<i32>().ok() != Some(VERSION) {
            return Err(bad(format!("unsupported version {version:?}")));
        }
        let count: usize = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| bad("missing or bad entry count".into()))?;
        let mut out = HashMap::with_capacity(count);
        for _ in 0..count {
            let line = lines
                .next()
                .ok_or_else(|| bad(format!("expected {count} entries")))?;
            let mut parts = line.split(' ');
            let (Some(topic), Some(partition), Some(offset), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad(format!("malformed line {line:?}")));
            };
            let partition = partition
                .parse()
                .map_err(|_| bad(format!("bad partition in {line:?}")))?;
            let offset = offset
                .parse()
                .map_err(|_| bad(format!("bad offset in {line:?}")))?;
            out.insert((topic.to_string(), partition), offset);
        }
        if lines.any(|l| !l.trim().is_empty()) {
            return Err(bad(format!("more than {count} entries")));
        }
        Ok(out)
    }

    pub fn write(&self, offsets: &HashMap<(String, i32), i64>) -> Result<(), StorageError> {
        let mut entries: Vec<_> = offsets.iter().collect();
        // Sorted only so the file is stable and diffable.
        entries.sort();
        let mut text = format!("{VERSION}\n{}\n", entries.len());
        for ((topic, partition), offset) in entries {
            text.push_str(&format!("{topic} {partition} {offset}\n"));
        }
        let mut tmp_name = self.path.as_os_str().to_owned();
        tmp_name.push(".tmp");
        let tmp = PathBuf::from(tmp_name);
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            f.write_all(text.as_bytes())?;
            crate::slow_io::before_sync(&tmp);
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(parent) = self.path.parent() {
            sync_dir(parent)?;
        }
        Ok(())
    }
}

/// Makes a rename or unlink in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    crate::slow_io::before_sync(dir);
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_format() {
        let dir = tempfile::tempdir().unwrap();
        let file = OffsetCheckpointFile::new(dir.path().join("recovery-point-offset-checkpoint"));
        assert!(file.read().unwrap().is_empty());
        let mut m = HashMap::new();
        m.insert(("my-topic".to_string(), 0), 42);
        m.insert(("a".to_string(), 3), 0);
        file.write(&m).unwrap();
        assert_eq!(file.read().unwrap(), m);
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert_eq!(text, "0\n2\na 3 0\nmy-topic 0 42\n");
        assert!(!dir
            .path()
            .join("recovery-point-offset-checkpoint.tmp")
            .exists());
        file.write(&HashMap::new()).unwrap();
        assert!(file.read().unwrap().is_empty());
    }

    #[test]
    fn rejects_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let file = OffsetCheckpointFile::new(dir.path().join("cp"));
        for bad in [
            "1\n0\n",
            "0\n2\nt 0 1\n",
            "0\n1\nt x 1\n",
            "0\n1\nt 0 1 9\n",
            "",
        ] {
            std::fs::write(file.path(), bad).unwrap();
            assert!(
                matches!(file.read(), Err(StorageError::CorruptCheckpoint { .. })),
                "{bad:?}"
            );
        }
    }
}
