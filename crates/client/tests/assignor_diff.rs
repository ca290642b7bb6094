//! Strom's `range` and `roundrobin` assignors against kafka-clients 4.4's `RangeAssignor` and
//! `RoundRobinAssignor` on thousands of generated groups (members with and without racks and
//! group.instance.id, differing subscriptions, racked and unracked partitions): the assignments
//! must be equal member by member, partitions in the same order.

#[path = "assignor_oracle/mod.rs"]
mod assignor_oracle;

use assignor_oracle::{run_differential, GenOptions, RANGE, ROUND_ROBIN};
use strom_client::assignor::range::RangeAssignor;
use strom_client::assignor::roundrobin::RoundRobinAssignor;

const CASES: usize = 3000;

#[test]
fn range_matches_java() {
    if let Some(compared) = run_differential(
        RANGE,
        &RangeAssignor,
        0x5752_414e,
        CASES,
        &GenOptions::default(),
    ) {
        assert_eq!(compared, CASES);
        eprintln!("range: {compared} cases compared with Java");
    }
}

#[test]
fn roundrobin_matches_java() {
    if let Some(compared) = run_differential(
        ROUND_ROBIN,
        &RoundRobinAssignor,
        0x0052_5242,
        CASES,
        &GenOptions::default(),
    ) {
        assert_eq!(compared, CASES);
        eprintln!("roundrobin: {compared} cases compared with Java");
    }
}
