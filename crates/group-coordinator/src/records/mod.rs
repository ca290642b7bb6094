//! `__consumer_offsets` records in Kafka's schemas. Filled in by the records work.
