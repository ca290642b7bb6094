//! A new target assignment for a group (Kafka's `TargetAssignmentBuilder`): the members (with
//! one added, updated or removed) and their subscriptions go to the group's assignor, which
//! starts from the current target assignment; the records are the members whose target
//! changed plus the new assignment epoch.

use std::collections::BTreeMap;

use super::group::{target_assignment_epoch_record, target_assignment_record, ConsumerGroup};
use super::member::ConsumerGroupMember;
use crate::assignor::{
    AssignorError, ConsumerGroupPartitionAssignor, GroupSpec, MemberAssignment,
    MemberSubscriptionAndAssignment,
};
use crate::metadata::GroupMetadataImage;
use crate::records::CoordinatorRecord;

pub struct TargetAssignmentResult {
    pub records: Vec<CoordinatorRecord>,
    pub target: BTreeMap<String, MemberAssignment>,
}

pub struct TargetAssignmentBuilder<'a> {
    group: &'a ConsumerGroup,
    /// Where the members' regexes are resolved (the group with this operation's records).
    regexes: &'a ConsumerGroup,
    epoch: i32,
    assignor: &'a dyn ConsumerGroupPartitionAssignor,
    image: &'a GroupMetadataImage,
    /// Members added or updated (`Some`) or removed (`None`) relative to `group`.
    updated: BTreeMap<String, Option<ConsumerGroupMember>>,
    now_ms: i64,
}

impl<'a> TargetAssignmentBuilder<'a> {
    pub fn new(
        group: &'a ConsumerGroup,
        regexes: &'a ConsumerGroup,
        epoch: i32,
        assignor: &'a dyn ConsumerGroupPartitionAssignor,
        image: &'a GroupMetadataImage,
        now_ms: i64,
    ) -> Self {
        Self {
            group,
            regexes,
            epoch,
            assignor,
            image,
            updated: BTreeMap::new(),
            now_ms,
        }
    }

    pub fn add_or_update_member(mut self, m: ConsumerGroupMember) -> Self {
        self.updated.insert(m.member_id.clone(), Some(m));
        self
    }

    pub fn remove_member(mut self, member_id: &str) -> Self {
        self.updated.insert(member_id.to_string(), None);
        self
    }

    fn spec(
        &self,
        m: &ConsumerGroupMember,
        current: MemberAssignment,
    ) -> MemberSubscriptionAndAssignment {
        // Topics the image does not know are left out, as Kafka's TopicIds view does.
        let subscribed_topic_ids = self
            .regexes
            .member_topics(m)
            .iter()
            .filter_map(|n| self.image.topic(n).map(|t| t.id))
            .collect();
        MemberSubscriptionAndAssignment {
            rack_id: m.rack_id.clone(),
            instance_id: m.instance_id.clone(),
            subscribed_topic_ids,
            assignment: current,
        }
    }

    pub fn build(self) -> Result<TargetAssignmentResult, AssignorError> {
        let g = self.group;
        let mut specs: BTreeMap<String, MemberSubscriptionAndAssignment> = BTreeMap::new();
        for (id, m) in &g.members {
            let current = g.target_assignment.get(id).cloned().unwrap_or_default();
            specs.insert(id.clone(), self.spec(m, current));
        }
        for (id, m) in &self.updated {
            match m {
                None => {
                    specs.remove(id);
                }
                Some(m) => {
                    let mut current = g.target_assignment.get(id).cloned().unwrap_or_default();
                    // A static member coming back under a new id takes over the target of
                    // the departed instance.
                    if let Some(prev) = m.instance_id.as_ref().and_then(|i| g.static_members.get(i))
                    {
                        if prev != id {
                            current = g.target_assignment.get(prev).cloned().unwrap_or_default();
                        }
                    }
                    specs.insert(id.clone(), self.spec(m, current));
                }
            }
        }
        let member_ids: Vec<String> = specs.keys().cloned().collect();
        let spec = GroupSpec::new(specs)?;
        let assignment = self.assignor.assign(&spec, self.image)?;
        let mut records = Vec::new();
        let mut target = BTreeMap::new();
        for id in member_ids {
            let new: MemberAssignment = assignment
                .members
                .get(&id)
                .map(|a| {
                    a.iter()
                        .filter(|(_, p)| !p.is_empty())
                        .map(|(t, p)| (*t, p.clone()))
                        .collect()
                })
                .unwrap_or_default();
            match g.target_assignment.get(&id) {
                Some(old) if *old == new => {}
                _ => records.push(target_assignment_record(&g.group_id, &id, &new)),
            }
            target.insert(id, new);
        }
        records.push(target_assignment_epoch_record(
            &g.group_id,
            self.epoch,
            self.now_ms,
        ));
        Ok(TargetAssignmentResult { records, target })
    }
}
