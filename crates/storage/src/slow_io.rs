//! An injected slow disk, for tests: with `STROM_TEST_SLOW_IO=<substring>:<millis>` in the
//! environment, every fsync of a path containing `<substring>` sleeps that long first, as a
//! disk that stalls on fsync would. Read once; without the variable (production) each hook is
//! one load of an initialized `OnceLock`.
//!
//! The hook, [`before_sync`], sits before each fsync of the storage layer: segments and their
//! indexes, checkpoints, producer-state snapshots, the leader-epoch checkpoint, directories.
//! A substring such as `t-0/0000` names one partition's segment files and snapshots only.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable naming the slow paths and the delay.
pub const ENV: &str = "STROM_TEST_SLOW_IO";

static SLOW: OnceLock<Option<(String, Duration)>> = OnceLock::new();

fn parse(v: &str) -> Option<(String, Duration)> {
    let (needle, ms) = v.rsplit_once(':')?;
    if needle.is_empty() {
        return None;
    }
    Some((
        needle.to_string(),
        Duration::from_millis(ms.trim().parse().ok()?),
    ))
}

/// Sleeps if `path` is on the injected slow disk.
pub fn before_sync(path: &Path) {
    let slow = SLOW.get_or_init(|| std::env::var(ENV).ok().and_then(|v| parse(&v)));
    if let Some((needle, delay)) = slow {
        if path.to_string_lossy().contains(needle.as_str()) {
            std::thread::sleep(*delay);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_substring_and_millis() {
        assert_eq!(
            parse("slow-0:250"),
            Some(("slow-0".into(), Duration::from_millis(250)))
        );
        assert_eq!(
            parse("/a:b/slow:5"),
            Some(("/a:b/slow".into(), Duration::from_millis(5)))
        );
        assert_eq!(parse(":5"), None);
        assert_eq!(parse("slow"), None);
        assert_eq!(parse("slow:x"), None);
    }
}
