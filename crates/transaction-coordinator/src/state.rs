//! A transaction's states (Kafka's `TransactionState`) and the transaction protocol versions
//! (`TransactionVersion`, the `transaction.version` feature).

/// Where a transactional id's transaction is. The ids are what `__transaction_state` stores
/// (`TransactionStatus`); the names are what DescribeTransactions and ListTransactions show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransactionState {
    /// No transaction yet (after InitProducerId).
    Empty,
    /// Partitions or a group were added.
    Ongoing,
    /// EndTxn(commit) is decided; markers are being written.
    PrepareCommit,
    /// EndTxn(abort) is decided (or a timeout / new producer aborts it); markers being written.
    PrepareAbort,
    /// Every partition has its commit marker.
    CompleteCommit,
    /// Every partition has its abort marker.
    CompleteAbort,
    /// The id is being expired (its tombstone is being written).
    Dead,
    /// The epoch is being bumped to fence the current producer before aborting (never stored:
    /// it becomes PrepareAbort in the same write).
    PrepareEpochFence,
}

impl TransactionState {
    pub const ALL: [TransactionState; 8] = [
        TransactionState::Empty,
        TransactionState::Ongoing,
        TransactionState::PrepareCommit,
        TransactionState::PrepareAbort,
        TransactionState::CompleteCommit,
        TransactionState::CompleteAbort,
        TransactionState::Dead,
        TransactionState::PrepareEpochFence,
    ];

    /// The `TransactionStatus` byte of the log value.
    pub fn id(self) -> i8 {
        match self {
            TransactionState::Empty => 0,
            TransactionState::Ongoing => 1,
            TransactionState::PrepareCommit => 2,
            TransactionState::PrepareAbort => 3,
            TransactionState::CompleteCommit => 4,
            TransactionState::CompleteAbort => 5,
            TransactionState::Dead => 6,
            TransactionState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.id() == id)
    }

    /// The name the admin APIs use.
    pub fn name(self) -> &'static str {
        match self {
            TransactionState::Empty => "Empty",
            TransactionState::Ongoing => "Ongoing",
            TransactionState::PrepareCommit => "PrepareCommit",
            TransactionState::PrepareAbort => "PrepareAbort",
            TransactionState::CompleteCommit => "CompleteCommit",
            TransactionState::CompleteAbort => "CompleteAbort",
            TransactionState::Dead => "Dead",
            TransactionState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The states a transition into this one may start from. PrepareAbort from Empty and the
    /// Complete states is transactions v2's abort of a transaction the client is unsure of.
    pub fn valid_previous_states(self) -> &'static [TransactionState] {
        use TransactionState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether an idle id in this state may be expired (`transactional.id.expiration.ms`).
    pub fn is_expiration_allowed(self) -> bool {
        matches!(
            self,
            TransactionState::Empty
                | TransactionState::CompleteCommit
                | TransactionState::CompleteAbort
        )
    }
}

/// The transaction protocol a client (or the cluster's `transaction.version` feature) uses:
/// 0 = the original protocol, 1 = flexible log values, 2 = KIP-890 part 2 (the coordinator
/// bumps the epoch at every EndTxn and partitions are added implicitly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TransactionVersion(pub i16);

impl TransactionVersion {
    pub const TV_0: TransactionVersion = TransactionVersion(0);
    pub const TV_1: TransactionVersion = TransactionVersion(1);
    pub const TV_2: TransactionVersion = TransactionVersion(2);

    pub fn feature_level(self) -> i16 {
        self.0
    }

    /// The `__transaction_state` value version written at this level (1 is the first
    /// flexible one, with the tagged fields).
    pub fn transaction_log_value_version(self) -> i16 {
        i16::from(self.0 >= 1)
    }

    /// Transactions v2: EndTxn bumps the producer epoch.
    pub fn supports_epoch_bump(self) -> bool {
        self.0 >= 2
    }

    /// The version an EndTxn request implies: v5+ is sent only by transactions-v2 clients.
    pub fn from_end_txn_version(api_version: i16) -> Self {
        if api_version >= 5 {
            Self::TV_2
        } else {
            Self::TV_0
        }
    }

    /// The version an AddPartitionsToTxn request implies (v5+ is transactions v2).
    pub fn from_add_partitions_version(api_version: i16) -> Self {
        if api_version >= 5 {
            Self::TV_2
        } else {
            Self::TV_0
        }
    }
}
