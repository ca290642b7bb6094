//! Server-side assignors (KIP-848). Filled in by the server-assignors work.
