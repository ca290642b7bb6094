//! Producer-state snapshots (`<offset>.snapshot`) and aborted-transaction indexes
//! (`.txnindex`).
//!
//! The snapshot layout is Kafka's `ProducerSnapshot` message (version 1), big endian:
//!
//! ```text
//! version: int16 (1)   crc: uint32, CRC32C of every byte after it   count: int32
//! count x { producerId: int64  epoch: int16  lastSequence: int32  lastOffset: int64
//!           offsetDelta: int32  timestamp: int64  coordinatorEpoch: int32
//!           currentTxnFirstOffset: int64 }
//! ```
//!
//! `ProducerStateManager.readSnapshot` turns each entry into a `ProducerStateEntry` (one per
//! entry, so several entries for one producer id are all printed) whose only batch is
//! `(lastSequence, lastOffset, offsetDelta, timestamp)` when `lastOffset >= 0`.

use std::io::Write;

use super::{abort, be_i16, be_i32, be_i64, be_u32, crc32c, optional_long, JFile, Res};

/// The only snapshot version Kafka reads and writes.
pub const PRODUCER_SNAPSHOT_VERSION: i16 = 1;
/// Bytes of one entry.
pub const ENTRY_SIZE: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;

/// One entry of a producer snapshot, with the fields Kafka's tool prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotEntry {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub last_sequence: i32,
    pub last_offset: i64,
    pub offset_delta: i32,
    pub timestamp: i64,
    pub coordinator_epoch: i32,
    pub current_txn_first_offset: i64,
}

impl SnapshotEntry {
    /// `BatchMetadata.firstSeq()`: `DefaultRecordBatch.decrementSequence(lastSeq, offsetDelta)`.
    pub fn first_sequence(&self) -> i32 {
        let (seq, dec) = (self.last_sequence, self.offset_delta);
        if seq < dec {
            i32::MAX.wrapping_sub(dec.wrapping_sub(seq)).wrapping_add(1)
        } else {
            seq.wrapping_sub(dec)
        }
    }

    /// The line `dumpProducerIdSnapshot` prints for this entry.
    pub fn line(&self) -> String {
        let mut s = format!(
            "producerId: {} producerEpoch: {} coordinatorEpoch: {} currentTxnFirstOffset: {} lastTimestamp: {}",
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            optional_long((self.current_txn_first_offset >= 0).then_some(self.current_txn_first_offset)),
            self.timestamp,
        );
        if self.last_offset >= 0 {
            s.push_str(&format!(
                " firstSequence: {} lastSequence: {} lastOffset: {} offsetDelta: {} timestamp: {}",
                self.first_sequence(),
                self.last_sequence,
                self.last_offset,
                self.offset_delta,
                self.timestamp
            ));
        }
        s
    }
}

/// Parses a producer snapshot as `ProducerStateManager.readSnapshot` does; the error is the
/// message of the `CorruptSnapshotException` Kafka throws.
pub fn read_producer_snapshot(b: &[u8]) -> Result<Vec<SnapshotEntry>, String> {
    let schema = |m: &str| format!("Snapshot failed schema validation: {m}");
    if b.len() < 2 {
        return Err(schema("null"));
    }
    let version = be_i16(b, 0);
    if version != PRODUCER_SNAPSHOT_VERSION {
        return Err(schema(&format!(
            "Snapshot contained an unknown file version {version}"
        )));
    }
    if b.len() < 6 {
        return Err(schema("null"));
    }
    let stored = be_u32(b, 2);
    if b.len() < 10 {
        return Err(schema("null"));
    }
    let count = be_i32(b, 6);
    let rest = b.len() - 10;
    if count < 0 {
        return Err(schema(
            "non-nullable field producerEntries was serialized as null",
        ));
    }
    if count as usize > rest {
        return Err(schema(&format!(
            "Tried to allocate a collection of size {count}, but there are only {rest} bytes remaining."
        )));
    }
    let mut entries = Vec::with_capacity(count as usize);
    let mut at = 10;
    for _ in 0..count {
        if at + ENTRY_SIZE > b.len() {
            return Err(schema("null"));
        }
        entries.push(SnapshotEntry {
            producer_id: be_i64(b, at),
            producer_epoch: be_i16(b, at + 8),
            last_sequence: be_i32(b, at + 10),
            last_offset: be_i64(b, at + 14),
            offset_delta: be_i32(b, at + 22),
            timestamp: be_i64(b, at + 26),
            coordinator_epoch: be_i32(b, at + 34),
            current_txn_first_offset: be_i64(b, at + 38),
        });
        at += ENTRY_SIZE;
    }
    let computed = crc32c(&b[6..]);
    if stored != computed {
        return Err(format!(
            "Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored}. Computed crc: {computed}"
        ));
    }
    Ok(entries)
}

/// Kafka's `dumpProducerIdSnapshot`: a corrupt snapshot is reported on stderr and the run goes
/// on with the next file.
pub(crate) fn dump_producer_snapshot(file: &JFile, out: &mut dyn Write) -> Res<()> {
    let data = file.read()?;
    match read_producer_snapshot(&data) {
        Ok(entries) => {
            for e in entries {
                writeln!(out, "{}", e.line())?;
            }
        }
        Err(m) => {
            out.flush()?;
            eprintln!("{m}");
        }
    }
    Ok(())
}

/// Kafka's `dumpTxnIndex`: 34-byte entries `version: int16, producerId: int64, firstOffset:
/// int64, lastOffset: int64, lastStableOffset: int64`.
pub(crate) fn dump_txn_index(file: &JFile, out: &mut dyn Write) -> Res<()> {
    const TXN_ENTRY: usize = 34;
    let data = file.read()?;
    for e in data.chunks_exact(TXN_ENTRY) {
        let version = be_i16(e, 0);
        if version != 0 {
            return abort(format!(
                "Unexpected aborted transaction version {version} in transaction index {}, current version is 0",
                file.absolute
            ));
        }
        writeln!(
            out,
            "version: {version} producerId: {} firstOffset: {} lastOffset: {} lastStableOffset: {}",
            be_i64(e, 2),
            be_i64(e, 10),
            be_i64(e, 18),
            be_i64(e, 26)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sequence_wraps() {
        let e = SnapshotEntry {
            producer_id: 1,
            producer_epoch: 0,
            last_sequence: 2,
            last_offset: 10,
            offset_delta: 4,
            timestamp: 0,
            coordinator_epoch: -1,
            current_txn_first_offset: -1,
        };
        assert_eq!(e.first_sequence(), i32::MAX - 1);
    }
}
