//! Untrusted record batch bytes: `BatchView::parse`, `validate`, every header accessor,
//! `BatchIter` over concatenated batches, and the sequence arithmetic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strom_protocol::batch::{self, BatchIter, BatchView};

fuzz_target!(|data: &[u8]| {
    let _ = batch::peek_batch_size(data);
    if let Ok(view) = BatchView::parse(data) {
        inspect(view);
    }

    let mut iter = BatchIter::new(data);
    let mut total = 0usize;
    for item in &mut iter {
        match item {
            Ok(view) => {
                total += view.size();
                inspect(view);
            }
            Err(_) => break,
        }
    }
    assert_eq!(iter.valid_bytes(), total);
    assert!(iter.valid_bytes() <= data.len());

    // The free sequence functions on arbitrary (base, delta) pairs.
    if data.len() >= 8 {
        let base = i32::from_be_bytes(data[0..4].try_into().unwrap());
        let delta = i32::from_be_bytes(data[4..8].try_into().unwrap());
        // KNOWN FINDING (artifacts-kept/record_batch-last_sequence-*): `last_sequence` overflows
        // `i32::MAX - delta` for delta < 0. Restricted to delta >= 0 (what `validate` admits) so
        // the run can go on; drop the guard once fixed.
        // Second KNOWN FINDING (artifacts-kept/record_batch-first_sequence-*): `first_sequence`
        // overflows `delta - last` when `last` is a very negative sequence (from base < -1);
        // restricted to real sequences (base >= -1) until fixed.
        if delta >= 0 && base >= -1 {
            let last = batch::last_sequence(base, delta);
            let _ = batch::first_sequence(last, delta);
        }
    }
});

fn inspect(view: BatchView<'_>) {
    assert!(view.size() >= batch::HEADER_SIZE);
    assert_eq!(view.bytes().len(), view.size());
    let _ = format!("{view:?}");
    let _ = (
        view.base_offset(),
        view.batch_length(),
        view.partition_leader_epoch(),
        view.magic(),
        view.crc(),
        view.compute_crc(),
        view.attributes(),
        view.compression().name(),
        view.is_log_append_time(),
        view.is_transactional(),
        view.is_control(),
        view.has_delete_horizon(),
        view.last_offset_delta(),
        view.base_timestamp(),
        view.max_timestamp(),
        view.producer_id(),
        view.producer_epoch(),
        view.base_sequence(),
        view.records_count(),
        view.records_bytes().len(),
    );
    // KNOWN FINDING (artifacts-kept/record_batch-validate-*): `validate` computes `delta + 1`
    // unchecked, overflowing for delta == i32::MAX with count > 0. Skipped until fixed.
    let valid = view.last_offset_delta() != i32::MAX && view.validate().is_ok();
    // Derived values, on validated and unvalidated views alike. KNOWN FINDING: `last_sequence`
    // panics for a negative last offset delta, which `validate` rejects; only called on valid
    // views until fixed.
    if valid {
        let _ = view.last_sequence();
    }
    // KNOWN FINDING (artifacts-kept/record_batch-last_offset-overflow): `last_offset` is
    // `base_offset + delta` unchecked, so a base offset near i64::MAX overflows (validate does
    // not look at base_offset), and near i64::MIN with a negative delta underflows. Skipped for
    // such views until fixed.
    let fits = view
        .base_offset()
        .checked_add(view.last_offset_delta() as i64)
        .and_then(|last| last.checked_add(1))
        .is_some();
    if fits {
        let _ = view.last_offset();
        let _ = view.next_offset();
    }
}
