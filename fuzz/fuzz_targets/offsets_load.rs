//! Untrusted `__consumer_offsets` contents: the records a coordinator replays when it loads a
//! partition are bytes someone wrote (Kafka lets the admin client id produce to the internal
//! topics, and a log may come from another broker). The input is cut into `(key, value)`
//! records — u16 key length, key bytes, u16 value length (0xFFFF: a tombstone), value bytes —
//! written to an in-memory offsets partition; a `GroupCoordinatorService` loads it (every
//! record through `CoordinatorRecord::decode` and the shard's `replay`), then every group it
//! lists is described through both group APIs and its offsets fetched. The load must finish
//! (a panic in replay leaves the shard failed, which this target turns into a crash), and no
//! answer may panic. The same bytes also go through `decode_subscription_topics`, the decoder
//! of a JoinGroup's `consumer` protocol metadata.
#![no_main]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strom_group_coordinator::classic::group::decode_subscription_topics;
use strom_group_coordinator::config::GroupCoordinatorConfig;
use strom_group_coordinator::testing::MemPartitions;
use strom_group_coordinator::{GroupCoordinatorService, GroupRequestContext};
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;

fn records(mut data: &[u8]) -> Vec<(Bytes, Option<Bytes>)> {
    fn take<'a>(d: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if d.len() < n {
            return None;
        }
        let (h, t) = d.split_at(n);
        *d = t;
        Some(h)
    }
    let mut out = Vec::new();
    while out.len() < 256 {
        let Some(kl) = take(&mut data, 2) else { break };
        let kl = u16::from_be_bytes([kl[0], kl[1]]) as usize;
        let Some(key) = take(&mut data, kl) else { break };
        let Some(vl) = take(&mut data, 2) else { break };
        let vl = u16::from_be_bytes([vl[0], vl[1]]);
        let value = if vl == u16::MAX {
            None
        } else {
            let Some(v) = take(&mut data, vl as usize) else { break };
            Some(Bytes::copy_from_slice(v))
        };
        out.push((Bytes::copy_from_slice(key), value));
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let _ = decode_subscription_topics(data);
    let recs = records(data);
    if recs.is_empty() {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let parts = MemPartitions::new();
        let tp = ("__consumer_offsets".to_string(), 0);
        parts.logs.lock().insert(tp.clone(), recs);
        let mut config = GroupCoordinatorConfig::default();
        config.offsets_topic.num_partitions = 1;
        let service = GroupCoordinatorService::new(config, parts.clone(), parts.clone());
        service.on_elected(0, 0);
        let mut loaded = false;
        for _ in 0..10_000 {
            match service.runtime().partitions().first() {
                Some((_, true)) => {
                    loaded = true;
                    break;
                }
                _ => tokio::time::sleep(Duration::from_micros(100)).await,
            }
        }
        assert!(loaded, "the shard did not load (replay panicked or hung)");
        let ctx = |v: i16| GroupRequestContext {
            api_version: v,
            ..Default::default()
        };
        let listed = service
            .list_groups(&ctx(5), ListGroupsRequest::default())
            .await;
        let ids: Vec<String> = listed
            .groups
            .iter()
            .map(|g| g.group_id.to_string())
            .collect();
        for id in &ids {
            let name: GroupId = StrBytes::from_string(id.clone()).into();
            let _ = service
                .describe_groups(
                    &ctx(5),
                    DescribeGroupsRequest::default().with_groups(vec![name.clone()]),
                )
                .await;
            let _ = service
                .consumer_group_describe(
                    &ctx(0),
                    ConsumerGroupDescribeRequest::default().with_group_ids(vec![name.clone()]),
                )
                .await;
            let _ = service
                .offset_fetch(
                    &ctx(9),
                    OffsetFetchRequest::default().with_groups(vec![
                        offset_fetch_request::OffsetFetchRequestGroup::default()
                            .with_group_id(name)
                            .with_topics(None),
                    ]),
                )
                .await;
        }
        drop(Arc::clone(&service));
    });
});
