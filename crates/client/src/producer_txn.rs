//! The transactional producer inside the producer's background task: the commands of
//! [`Producer::init_transactions`] and friends, the coordinator requests they lead to (one at a
//! time, as Java's Sender sends transactional requests) and their effect on the batches, after
//! Java's `Sender.maybeSendAndPollTransactionalRequest` and `TransactionManager`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::{Event, Producer, State};
use crate::error::{Error, Result};
use crate::group::{GroupMetadata, TopicPartition};
use crate::idempotence::{ProducerIdAndEpoch, Tp};
use crate::producer_batch::clone_error;
use crate::transactions::{Transactions, TxnState};
use crate::txn_requests::{classify, TxnApi, TxnEnv, TxnFailure};
use crate::ErrorCode;

type Reply = oneshot::Sender<Result<()>>;

pub(crate) enum TxnCommand {
    Init(Reply),
    Begin(Reply),
    SendOffsets(BTreeMap<TopicPartition, i64>, GroupMetadata, Reply),
    End { commit: bool, reply: Reply },
}

pub(crate) enum TxnEvent {
    Init(Result<ProducerIdAndEpoch>),
    Added {
        partitions: Vec<Tp>,
        result: Result<Vec<(Tp, Option<Error>)>>,
    },
    Offsets {
        /// AddOffsetsToTxn succeeded (or was not needed): the transaction has begun.
        added: bool,
        result: std::result::Result<(), (TxnApi, Error)>,
    },
    Ended(Result<Option<ProducerIdAndEpoch>>),
}

/// The transactional side of the producer task.
pub(crate) struct TxnDriver {
    pub(crate) tm: Transactions,
    env: TxnEnv,
    /// A coordinator request is on the wire (one at a time).
    in_flight: bool,
    init_reply: Option<Reply>,
    offsets_queue: VecDeque<(BTreeMap<TopicPartition, i64>, GroupMetadata, Reply)>,
    offsets_reply: Option<Reply>,
    /// `Some(commit)` while commit/abort waits for the batches, then for EndTxn.
    ending: Option<(bool, Reply)>,
}

impl TxnDriver {
    pub(crate) fn new(env: TxnEnv, shared_state: Arc<Mutex<Option<TxnState>>>) -> Self {
        let tm = Transactions::new(env.transactional_id.clone()).with_observer(shared_state);
        TxnDriver {
            tm,
            env,
            in_flight: false,
            init_reply: None,
            offsets_queue: VecDeque::new(),
            offsets_reply: None,
            ending: None,
        }
    }

    /// Java's `maybeUpdateTransactionV2Enabled`: the coordinator's finalized
    /// `transaction.version`.
    fn tv2_enabled(&self) -> bool {
        self.env
            .known_coordinator()
            .and_then(|c| c.finalized_feature("transaction.version"))
            .is_some_and(|v| v >= 2)
    }

    fn fail_replies(&mut self, e: &Error) {
        for r in [
            self.init_reply.take(),
            self.offsets_reply.take(),
            self.ending.take().map(|(_, r)| r),
        ]
        .into_iter()
        .flatten()
        {
            let _ = r.send(Err(clone_error(e)));
        }
        for (_, _, r) in self.offsets_queue.drain(..) {
            let _ = r.send(Err(clone_error(e)));
        }
    }
}

impl State {
    pub(super) fn handle_txn_command(&mut self, c: TxnCommand) {
        let Some(d) = self.txn.as_mut() else {
            let reply = match c {
                TxnCommand::Init(r) | TxnCommand::Begin(r) => r,
                TxnCommand::SendOffsets(_, _, r) => r,
                TxnCommand::End { reply, .. } => reply,
            };
            let _ = reply.send(Err(Error::IllegalState(
                "Transactional method invoked on a non-transactional producer.".into(),
            )));
            return;
        };
        match c {
            TxnCommand::Init(reply) => match d.tm.begin_init() {
                Ok(()) => d.init_reply = Some(reply),
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            TxnCommand::Begin(reply) => {
                let tv2 = d.tv2_enabled();
                let _ = reply.send(d.tm.begin_transaction(tv2));
            }
            TxnCommand::SendOffsets(offsets, group, reply) => match d.tm.check_send_offsets() {
                Ok(()) => d.offsets_queue.push_back((offsets, group, reply)),
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            TxnCommand::End { commit, reply } => {
                if d.ending.is_some() {
                    let _ = reply.send(Err(Error::IllegalState(
                        "a commit or abort of this transaction is already in progress".into(),
                    )));
                    return;
                }
                // Called again after a failed EndTxn: send it again.
                let again = d.tm.state()
                    == if commit {
                        TxnState::CommittingTransaction
                    } else {
                        TxnState::AbortingTransaction
                    };
                let r = if again {
                    Ok(())
                } else if commit {
                    d.tm.begin_commit()
                } else {
                    d.tm.begin_abort()
                };
                match r {
                    Ok(()) => d.ending = Some((commit, reply)),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
        }
    }

    /// Java's `maybeAddPartition` checks, when `send` is called.
    pub(super) fn txn_check_send(&self, topic: &str) -> Result<()> {
        let has_pid = self.tm.as_ref().is_some_and(|t| t.has_producer_id());
        match self.txn.as_ref() {
            Some(d) => d.tm.check_send(topic, has_pid),
            None => Ok(()),
        }
    }

    /// Adds `tp` to the transaction for a record accepted by `txn_check_send`, about to be
    /// appended.
    pub(super) fn txn_add_partition(&mut self, tp: &Tp) -> Result<()> {
        match self.txn.as_mut() {
            Some(d) => d.tm.add_accepted_partition(tp),
            None => Ok(()),
        }
    }

    /// Batches of `tp` may be drained (its partition is in the transaction).
    pub(super) fn txn_send_allowed(&self, tp: &Tp) -> bool {
        self.txn.as_ref().is_none_or(|d| d.tm.is_send_allowed(tp))
    }

    /// The transaction is being committed or aborted: batches go without linger.
    pub(super) fn txn_completing(&self) -> bool {
        self.txn
            .as_ref()
            .is_some_and(|d| d.tm.is_completing() || d.ending.is_some())
    }

    /// Produce v12 tells the broker to add partitions implicitly (transactions v2); without
    /// transactions v2 a transactional producer stays at 11.
    pub(super) fn txn_max_produce_version(&self) -> i16 {
        match &self.txn {
            Some(d) if !d.tm.tv2() => 11,
            _ => i16::MAX,
        }
    }

    /// A batch failed for good: the transaction becomes abortable (or the producer fatal).
    pub(super) fn txn_batch_failed(&mut self, e: &Error) {
        let Some(d) = self.txn.as_mut() else { return };
        d.tm.batch_failed(e);
        if d.tm.has_fatal_error() {
            self.txn_fatal();
        }
    }

    /// The producer entered the fatal state: everything queued and every waiting call fails.
    fn txn_fatal(&mut self) {
        let Some(d) = self.txn.as_mut() else { return };
        let Err(e) = d.tm.maybe_fail_with_error() else {
            return;
        };
        d.fail_replies(&e);
        for (_, q) in self.queues.drain() {
            for b in q {
                b.fail(&e);
            }
        }
        for (_, w) in self.waiting.drain() {
            for (_, dl, _) in w {
                let _ = dl.send(Err(clone_error(&e)));
            }
        }
        self.fatal = Some(e);
    }

    fn txn_apply_failure(&mut self, f: TxnFailure) {
        let Some(d) = self.txn.as_mut() else { return };
        match f {
            TxnFailure::Fatal(e) => {
                d.tm.transition_to_fatal_error(e);
                self.txn_fatal();
            }
            TxnFailure::Abortable(e) => d.tm.transition_to_abortable_error(e),
            TxnFailure::AbortableBump(e) => d.tm.abortable_error_with_epoch_bump(e),
        }
    }

    /// Java's `abortUndrainedBatches`: while aborting or in an abortable error, batches that
    /// were never sent (no sequence yet) and records waiting for metadata fail.
    fn txn_abort_undrained(&mut self) {
        let Some(d) = self.txn.as_ref() else { return };
        if !(d.tm.is_aborting() || d.tm.has_abortable_error()) {
            return;
        }
        let e = match d.tm.last_error() {
            Some(e) => clone_error(e),
            None => Error::TransactionAborted,
        };
        for q in self.queues.values_mut() {
            let mut keep = VecDeque::new();
            for b in q.drain(..) {
                if b.has_sequence() {
                    keep.push_back(b);
                } else {
                    b.fail(&e);
                }
            }
            *q = keep;
        }
        self.queues.retain(|_, q| !q.is_empty());
        for (_, w) in self.waiting.drain() {
            for (_, dl, _) in w {
                let _ = dl.send(Err(clone_error(&e)));
            }
        }
    }

    /// Sends the next transactional request when one is due (one at a time): InitProducerId,
    /// AddPartitionsToTxn, AddOffsetsToTxn + TxnOffsetCommit, EndTxn once every batch is done.
    pub(super) fn drive_txn(&mut self) {
        self.txn_abort_undrained();
        let idle = self.is_idle();
        let pid = self
            .tm
            .as_ref()
            .map_or(ProducerIdAndEpoch::NONE, |t| t.producer_id_and_epoch());
        let events = self.events.clone();
        let Some(d) = self.txn.as_mut() else { return };
        if d.in_flight || d.tm.has_fatal_error() {
            return;
        }
        let env = d.env.clone();
        let send = move |ev: TxnEvent| {
            let _ = events.send(Event::Txn(ev));
        };
        if d.tm.state() == TxnState::Initializing {
            d.in_flight = true;
            tokio::spawn(async move { send(TxnEvent::Init(env.init_producer_id(pid).await)) });
            return;
        }
        let adding = matches!(
            d.tm.state(),
            TxnState::InTransaction | TxnState::CommittingTransaction
        );
        if adding && !d.tm.tv2() {
            if let Some(partitions) = d.tm.take_partitions_to_add() {
                d.in_flight = true;
                tokio::spawn(async move {
                    let result = env.add_partitions(pid, &partitions).await;
                    send(TxnEvent::Added { partitions, result });
                });
                return;
            }
        }
        // Offsets queued before commit was called still go (commit waits for them).
        if adding && d.offsets_reply.is_none() {
            if let Some((offsets, group, reply)) = d.offsets_queue.pop_front() {
                d.in_flight = true;
                d.offsets_reply = Some(reply);
                let tv2 = d.tm.tv2();
                tokio::spawn(async move {
                    if !tv2 {
                        if let Err(e) = env.add_offsets(pid, &group.group_id).await {
                            send(TxnEvent::Offsets {
                                added: false,
                                result: Err((TxnApi::AddOffsets, e)),
                            });
                            return;
                        }
                    }
                    let result = env
                        .txn_offset_commit(pid, &group, &offsets, tv2)
                        .await
                        .map_err(|e| (TxnApi::TxnOffsetCommit, e));
                    send(TxnEvent::Offsets {
                        added: true,
                        result,
                    });
                });
                return;
            }
        }
        let Some((commit, _)) = &d.ending else { return };
        let commit = *commit;
        if !idle || d.tm.has_partitions_to_add() || !d.offsets_queue.is_empty() {
            return;
        }
        match d.tm.state() {
            TxnState::CommittingTransaction | TxnState::AbortingTransaction => {
                if !d.tm.transaction_started() {
                    // Nothing reached the coordinator: there is nothing to end.
                    d.tm.complete_transaction();
                    self.txn_completed();
                    return;
                }
                d.in_flight = true;
                let tv2 = d.tm.tv2();
                tokio::spawn(
                    async move { send(TxnEvent::Ended(env.end_txn(pid, commit, tv2).await)) },
                );
            }
            _ => {
                // A batch failed while committing: the commit fails with its error.
                let e = d.tm.maybe_fail_with_error().err().unwrap_or_else(|| {
                    Error::IllegalState(format!(
                        "cannot end the transaction in state {}",
                        d.tm.state().name()
                    ))
                });
                if let Some((_, r)) = d.ending.take() {
                    let _ = r.send(Err(e));
                }
            }
        }
    }

    /// The transaction ended: reply to commit/abort unless an epoch bump must happen first.
    fn txn_completed(&mut self) {
        let Some(d) = self.txn.as_mut() else { return };
        if d.tm.state() == TxnState::Ready {
            if let Some((_, r)) = d.ending.take() {
                let _ = r.send(Ok(()));
            }
        }
    }

    fn set_pid(&mut self, pid: ProducerIdAndEpoch) {
        if let Some(tm) = self.tm.as_mut() {
            tm.set_producer_id_and_epoch(pid);
            tm.reset_sequence_numbers();
        }
        *self.shared_pid.lock().unwrap() = pid;
    }

    pub(super) fn handle_txn_event(&mut self, ev: TxnEvent) {
        let Some(d) = self.txn.as_mut() else { return };
        d.in_flight = false;
        match ev {
            TxnEvent::Init(Ok(pid)) => {
                d.tm.init_done();
                let reply = d.init_reply.take();
                self.set_pid(pid);
                if let Some(r) = reply {
                    let _ = r.send(Ok(()));
                }
                // An epoch bump after an abort: the abort is done now.
                self.txn_completed();
            }
            TxnEvent::Init(Err(e)) => {
                let first = d.init_reply.is_some();
                match classify(TxnApi::InitProducerId, e) {
                    TxnFailure::Abortable(e) | TxnFailure::AbortableBump(e) if first => {
                        // Out of retries: init_transactions may be called again.
                        d.tm.init_failed_retriable();
                        if let Some(r) = d.init_reply.take() {
                            let _ = r.send(Err(e));
                        }
                    }
                    f => {
                        self.txn_apply_failure(f);
                        let Some(d) = self.txn.as_mut() else { return };
                        let e = d.tm.maybe_fail_with_error().err();
                        if let Some(e) = e {
                            d.fail_replies(&e);
                        }
                    }
                }
            }
            TxnEvent::Added { partitions, result } => match result {
                Ok(results) => {
                    let added: Vec<Tp> = results
                        .iter()
                        .filter(|(_, e)| e.is_none())
                        .map(|(tp, _)| tp.clone())
                        .collect();
                    let failed: Vec<Tp> = results
                        .iter()
                        .filter(|(_, e)| e.is_some())
                        .map(|(tp, _)| tp.clone())
                        .collect();
                    d.tm.partitions_added(&added, &failed);
                    let cause = results
                        .iter()
                        .filter_map(|(_, e)| e.as_ref())
                        .find(|e| e.code() != Some(ErrorCode::OperationNotAttempted))
                        .or_else(|| results.iter().find_map(|(_, e)| e.as_ref()))
                        .map(clone_error);
                    if let Some(e) = cause {
                        self.txn_apply_failure(classify(TxnApi::AddPartitions, e));
                    }
                }
                Err(e) => {
                    d.tm.partitions_added(&[], &partitions);
                    self.txn_apply_failure(classify(TxnApi::AddPartitions, e));
                }
            },
            TxnEvent::Offsets { added, result } => {
                if added {
                    d.tm.offsets_added();
                }
                let reply = d.offsets_reply.take();
                match result {
                    Ok(()) => {
                        if let Some(r) = reply {
                            let _ = r.send(Ok(()));
                        }
                    }
                    Err((api, e)) => {
                        self.txn_apply_failure(classify(api, e));
                        let err = self
                            .txn
                            .as_ref()
                            .and_then(|d| d.tm.maybe_fail_with_error().err())
                            .unwrap_or(Error::TransactionAborted);
                        if let Some(r) = reply {
                            let _ = r.send(Err(err));
                        }
                    }
                }
            }
            TxnEvent::Ended(Ok(new_pid)) => {
                d.tm.complete_transaction();
                if let Some(pid) = new_pid {
                    // Transactions v2: every EndTxn bumps the epoch.
                    self.set_pid(pid);
                }
                self.txn_completed();
            }
            TxnEvent::Ended(Err(e)) => {
                self.txn_apply_failure(classify(TxnApi::EndTxn, e));
                let Some(d) = self.txn.as_mut() else { return };
                let err =
                    d.tm.maybe_fail_with_error()
                        .err()
                        .unwrap_or(Error::TransactionAborted);
                if let Some((_, r)) = d.ending.take() {
                    let _ = r.send(Err(err));
                }
            }
        }
    }
}

impl Producer {
    async fn txn_call(&self, c: impl FnOnce(Reply) -> TxnCommand) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(super::Command::Txn(c(tx)))
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Java's `initTransactions`: finds the transaction coordinator, gets the producer id and
    /// epoch for `transactional.id` (fencing any older producer with the same id and aborting
    /// its open transaction) and makes the producer ready for transactions.
    pub async fn init_transactions(&self) -> Result<()> {
        self.txn_call(TxnCommand::Init).await
    }

    /// Java's `beginTransaction`.
    pub async fn begin_transaction(&self) -> Result<()> {
        self.txn_call(TxnCommand::Begin).await
    }

    /// Java's `sendOffsetsToTransaction`: `offsets` (the next offsets to consume) are committed
    /// for the consumer group of `group` when the transaction commits, and dropped when it
    /// aborts. `group` is the consumer's [`crate::Consumer::group_metadata`].
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: BTreeMap<TopicPartition, i64>,
        group: GroupMetadata,
    ) -> Result<()> {
        self.txn_call(|r| TxnCommand::SendOffsets(offsets, group, r))
            .await
    }

    /// Java's `commitTransaction`: sends everything queued, then EndTxn(commit). Fails with the
    /// error of a record that could not be written (the application must then abort).
    pub async fn commit_transaction(&self) -> Result<()> {
        self.txn_call(|reply| TxnCommand::End {
            commit: true,
            reply,
        })
        .await
    }

    /// Java's `abortTransaction`: records not sent yet fail with
    /// [`Error::TransactionAborted`], then EndTxn(abort).
    pub async fn abort_transaction(&self) -> Result<()> {
        self.txn_call(|reply| TxnCommand::End {
            commit: false,
            reply,
        })
        .await
    }

    /// The transactional state (`None` for a producer without `transactional.id`).
    pub fn transaction_state(&self) -> Option<TxnState> {
        *self.txn_state.lock().unwrap()
    }
}
