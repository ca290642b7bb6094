//! Replica agreement: every replica's log of a partition, read from the nodes' data dirs, must
//! hold the same batches, byte for byte, below the high watermark. Owns reading `.log`
//! segments' batch framing (base offset, length) straight from the files: followers append the
//! leader's batches unchanged, so equal logs are equal bytes, as the integration tests'
//! harness compares them.

use std::path::Path;

use anyhow::Context;

/// One batch: (base offset, last offset, bytes including the 12-byte offset/length prefix).
pub type Batch = (i64, i64, Vec<u8>);

/// The batches of a partition directory's `.log` segments in offset order, up to the first
/// incomplete one (a tail being written or cut by a crash).
pub fn read_batches(partition_dir: &Path) -> anyhow::Result<Vec<Batch>> {
    let mut logs: Vec<_> = match std::fs::read_dir(partition_dir) {
        Ok(d) => d
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect(),
        // A replica that never got the partition has an empty log.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", partition_dir.display())),
    };
    // Segment names are zero-padded base offsets: name order is offset order.
    logs.sort();
    let mut out = Vec::new();
    for path in logs {
        let data = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        out.extend(split_batches(&data));
    }
    Ok(out)
}

/// Splits a segment into batches: [base offset i64][length i32][length bytes], the last
/// offset delta at byte 23 of the batch.
pub fn split_batches(data: &[u8]) -> Vec<Batch> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos + 12 <= data.len() {
        let base = i64::from_be_bytes(data[pos..pos + 8].try_into().unwrap_or([0; 8]));
        let len = i32::from_be_bytes(data[pos + 8..pos + 12].try_into().unwrap_or([0; 4]));
        // Preallocated zeroes past the end of the data, or garbage: stop.
        if len < 49 || pos + 12 + len as usize > data.len() {
            break;
        }
        let end = pos + 12 + len as usize;
        let delta = i32::from_be_bytes(data[pos + 23..pos + 27].try_into().unwrap_or([0; 4]));
        out.push((base, base + delta as i64, data[pos..end].to_vec()));
        pos = end;
    }
    out
}

/// Compares the replicas' batches below `hw`: `logs` is (node, batches). Returns a
/// description of each disagreement, and the number of batches compared.
pub fn compare(partition: i32, hw: i64, logs: &[(i32, Vec<Batch>)]) -> (Vec<String>, usize) {
    let below = |b: &Vec<Batch>| -> Vec<Batch> {
        b.iter()
            .filter(|(_, last, _)| *last < hw)
            .cloned()
            .collect()
    };
    let mut problems = Vec::new();
    let Some((ref_node, ref_log)) = logs.first() else {
        return (problems, 0);
    };
    let reference = below(ref_log);
    // The batches below the HW must cover offsets up to HW - 1 on every replica.
    for (node, log) in logs {
        let mine = below(log);
        let covered = mine.last().map_or(0, |(_, last, _)| last + 1);
        if covered < hw {
            problems.push(format!(
                "partition {partition}: node {node}'s log ends at offset {covered}, below the HW \
                 {hw}"
            ));
        }
        if node == ref_node {
            continue;
        }
        let first_diff = reference
            .iter()
            .zip(mine.iter())
            .position(|(a, b)| a != b)
            .or_else(|| (reference.len() != mine.len()).then(|| reference.len().min(mine.len())));
        if let Some(i) = first_diff {
            let at = |l: &[Batch]| l.get(i).map(|(b, e, bytes)| (*b, *e, bytes.len()));
            problems.push(format!(
                "partition {partition}: node {node} and node {ref_node} disagree below the HW \
                 {hw} from batch {i}: (base, last, bytes) {:?} vs {:?}",
                at(&mine),
                at(&reference)
            ));
        }
    }
    (problems, reference.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base: i64, records: i32, fill: u8) -> Vec<u8> {
        let len = 49 + 10;
        let mut b = Vec::new();
        b.extend(base.to_be_bytes());
        b.extend((len as i32).to_be_bytes());
        b.extend([0u8; 11]); // leader epoch (4), magic (1), crc (4), attributes (2)
        b.extend((records - 1).to_be_bytes());
        b.resize(12 + len, fill);
        b
    }

    #[test]
    fn equal_logs_agree_and_a_differing_batch_is_found() {
        let mut seg = batch(0, 3, 1);
        seg.extend(batch(3, 2, 2));
        seg.extend([0u8; 40]); // preallocated tail
        let a = split_batches(&seg);
        assert_eq!(
            a.iter().map(|b| (b.0, b.1)).collect::<Vec<_>>(),
            [(0, 2), (3, 4)]
        );
        let (p, n) = compare(0, 5, &[(1, a.clone()), (2, a.clone())]);
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(n, 2);
        let mut other = batch(0, 3, 1);
        other.extend(batch(3, 2, 9));
        let (p, _) = compare(0, 5, &[(1, a.clone()), (2, split_batches(&other))]);
        assert_eq!(p.len(), 1, "{p:?}");
        // Above the HW they may differ (uncommitted tail).
        let (p, _) = compare(0, 3, &[(1, a.clone()), (2, split_batches(&other))]);
        assert!(p.is_empty(), "{p:?}");
        // A replica short of the HW.
        let (p, _) = compare(0, 5, &[(1, a), (2, split_batches(&batch(0, 3, 1)))]);
        assert_eq!(p.len(), 2, "{p:?}");
    }
}
