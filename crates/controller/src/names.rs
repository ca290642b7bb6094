//! Kafka's topic-name rules (`org.apache.kafka.common.internals.Topic`).

pub const MAX_NAME_LENGTH: usize = 249;
pub const INTERNAL_TOPICS: &[&str] = &["__consumer_offsets", "__transaction_state"];
pub const METADATA_TOPIC: &str = "__cluster_metadata";

/// Checks a name as Kafka's `Topic.validate` does, returning Kafka's message on failure.
pub fn validate(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("Topic name is illegal, it can't be empty".into());
    }
    if name == "." || name == ".." {
        return Err("Topic name cannot be \".\" or \"..\"".into());
    }
    if name.len() > MAX_NAME_LENGTH {
        return Err(format!(
            "Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, topic name: {name}"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

pub fn is_internal(name: &str) -> bool {
    INTERNAL_TOPICS.contains(&name) || name == METADATA_TOPIC
}

/// '.' and '_' collide in metric names, so Kafka refuses topics differing only by them.
pub fn unify_collision_chars(name: &str) -> String {
    name.replace('.', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_rules() {
        assert!(validate("orders-1.v2_x").is_ok());
        assert!(validate("").is_err());
        assert!(validate(".").is_err());
        assert!(validate("..").is_err());
        assert!(validate("a b").is_err());
        assert!(validate("ü").is_err());
        assert!(validate(&"a".repeat(249)).is_ok());
        assert!(validate(&"a".repeat(250)).is_err());
        assert!(is_internal("__consumer_offsets"));
        assert_eq!(unify_collision_chars("a.b_c"), "a_b_c");
    }
}
