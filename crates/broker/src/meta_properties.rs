//! `meta.properties` in every log dir (Kafka's v1 layout: `cluster.id`, `node.id`,
//! `directory.id`, `version=1`): formatting, as `kafka-storage format` does it (`strom format`),
//! and the check at start-up, as Kafka's `MetaPropertiesEnsemble.verify` and
//! `KafkaRaftServer.initializeLogDirs` do it.
//!
//! A broker starts only on log dirs formatted for its node id and one cluster: a dir without
//! `meta.properties` — an empty mount point after a disk was replaced, a dir wiped by mistake —
//! or formatted for another node or cluster is refused with Kafka's message, never formatted
//! silently: a node that lost its data must come back as the new incarnation it is, not as
//! itself. The one exception is a fresh node: when none of its dirs exists yet, the server
//! creates and formats them itself (the README's first start, test harnesses), with a cluster id
//! derived from the voter set in a quorum (so that the nodes of one `--controller-quorum` agree)
//! or a random one on a single node. `strom format` is the way to format existing dirs.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::config::parse_properties;
use crate::server::ServerError;

pub const META_PROPERTIES: &str = "meta.properties";

/// Every dir a broker with `config` keeps data in: its log dirs and its metadata log dir
/// (Kafka's `metadata.log.dir`, by default the first log dir).
pub fn dirs_of(config: &crate::config::BrokerConfig) -> Vec<PathBuf> {
    let mut dirs = config.log_dirs.clone();
    if !dirs.contains(&config.metadata_log_dir) {
        dirs.push(config.metadata_log_dir.clone());
    }
    dirs
}

/// A new cluster id, as `kafka-storage random-uuid` prints it (Kafka's `Uuid.randomUuid`: a
/// random UUID in URL-safe base64, never one that starts with '-', which a command line would
/// take for an option).
pub fn random_uuid() -> String {
    loop {
        let s = crate::topic_id_string(&Uuid::new_v4());
        if !s.starts_with('-') {
            return s;
        }
    }
}

/// One dir's `meta.properties`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub cluster_id: String,
    pub node_id: i32,
    /// Nil when the file has none (Kafka then assigns one at start-up).
    pub directory_id: Uuid,
}

/// What a log dir holds.
#[derive(Debug)]
enum DirState {
    /// The dir does not exist.
    Missing,
    /// The dir exists without `meta.properties`.
    Unformatted,
    Formatted(BTreeMap<String, String>),
}

fn meta_error(msg: impl Into<String>) -> ServerError {
    ServerError::MetaProperties(msg.into())
}

fn io_error(dir: &Path) -> impl Fn(std::io::Error) -> ServerError + '_ {
    move |source| ServerError::DataDir {
        path: dir.display().to_string(),
        source,
    }
}

fn load(dir: &Path) -> Result<DirState, ServerError> {
    if !dir.exists() {
        return Ok(DirState::Missing);
    }
    let path = dir.join(META_PROPERTIES);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse_properties(&text)
            .map(DirState::Formatted)
            .map_err(|e| meta_error(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DirState::Unformatted),
        Err(e) => Err(io_error(dir)(e)),
    }
}

/// Kafka's `MetaPropertiesEnsemble.verify` over the formatted dirs: each v1 file names a
/// cluster id and the configured node id, all the same cluster id (`expected_cluster_id` if
/// given), no two the same directory id.
fn verify(
    formatted: &[(&PathBuf, &BTreeMap<String, String>)],
    node_id: i32,
    expected_cluster_id: Option<&str>,
) -> Result<String, ServerError> {
    let mut cluster_id: Option<String> = expected_cluster_id.map(str::to_string);
    let mut directory_ids: HashMap<String, &PathBuf> = HashMap::new();
    for (dir, props) in formatted {
        let path = dir.join(META_PROPERTIES);
        let Some(id) = props.get("cluster.id") else {
            return Err(meta_error(format!(
                "cluster.id was not specified in the v1 file: {}",
                path.display()
            )));
        };
        match &cluster_id {
            Some(expected) if expected != id => {
                return Err(meta_error(format!(
                    "Invalid cluster.id in: {}. Expected {expected}, but read {id}",
                    path.display()
                )))
            }
            Some(_) => {}
            None => cluster_id = Some(id.clone()),
        }
        let Some(stored) = props.get("node.id") else {
            return Err(meta_error(format!(
                "node.id was not specified in {}",
                path.display()
            )));
        };
        if stored.trim().parse::<i32>().ok() != Some(node_id) {
            return Err(meta_error(format!(
                "Stored node id {stored} doesn't match previous node id {node_id} in {}. If you \
                 moved your data, make sure your configured node id matches. If you intend to \
                 create a new node, you should remove all data in your data directories.",
                path.display()
            )));
        }
        if let Some(d) = props.get("directory.id").filter(|d| !d.is_empty()) {
            if let Some(other) = directory_ids.insert(d.clone(), dir) {
                return Err(meta_error(format!(
                    "Duplicate directory ID {d} found. It was the ID of {}, but also of {}",
                    other.display(),
                    dir.display()
                )));
            }
        }
    }
    cluster_id.ok_or_else(|| meta_error("No readable meta.properties files found."))
}

/// Writes `dir`'s `meta.properties` (creating the dir), atomically.
fn write(dir: &Path, props: &MetaProperties) -> Result<(), ServerError> {
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let text = format!(
        "#\n#Written by strom\ncluster.id={}\ndirectory.id={}\nnode.id={}\nversion=1\n",
        props.cluster_id,
        crate::topic_id_string(&props.directory_id),
        props.node_id
    );
    let tmp = dir.join("meta.properties.tmp");
    std::fs::write(&tmp, text).map_err(io_error(dir))?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io_error(dir))?;
    std::fs::rename(&tmp, dir.join(META_PROPERTIES)).map_err(io_error(dir))?;
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io_error(dir))
}

/// A directory id no dir uses yet (Kafka's `generateValidDirectoryId`: random, not one of the
/// reserved ids, which are all below 100 in their low bits).
fn new_directory_id(taken: &[Uuid]) -> Uuid {
    loop {
        let id = Uuid::new_v4();
        if id.as_u128() >= 100 && !taken.contains(&id) {
            return id;
        }
    }
}

/// `strom format` (Kafka's `kafka-storage format`): writes `meta.properties` with
/// `cluster_id`, `node_id` and a new directory id into every dir of `dirs` that has none,
/// creating the dirs. Dirs already formatted must belong to `cluster_id` and `node_id`; unless
/// `ignore_formatted`, any formatted dir is an error (and nothing is written). Returns the lines
/// to print.
pub fn format(
    dirs: &[PathBuf],
    node_id: i32,
    cluster_id: &str,
    ignore_formatted: bool,
) -> Result<Vec<String>, ServerError> {
    if node_id < 0 {
        return Err(meta_error("You must specify a valid non-negative node ID."));
    }
    if cluster_id.is_empty() {
        return Err(meta_error("You must specify the cluster id."));
    }
    if dirs.is_empty() {
        return Err(meta_error(
            "You must specify at least one directory to format",
        ));
    }
    let states: Vec<(PathBuf, DirState)> = dirs
        .iter()
        .map(|d| load(d).map(|s| (d.clone(), s)))
        .collect::<Result<_, _>>()?;
    let formatted: Vec<(&PathBuf, &BTreeMap<String, String>)> = states
        .iter()
        .filter_map(|(d, s)| match s {
            DirState::Formatted(p) => Some((d, p)),
            _ => None,
        })
        .collect();
    verify(&formatted, node_id, Some(cluster_id))?;
    if let Some((d, _)) = formatted.first() {
        if !ignore_formatted {
            return Err(meta_error(format!(
                "Log directory {} is already formatted. Use --ignore-formatted to ignore this \
                 directory and format the others.",
                d.display()
            )));
        }
    }
    let mut taken: Vec<Uuid> = formatted
        .iter()
        .filter_map(|(_, p)| p.get("directory.id"))
        .filter_map(|d| crate::parse_topic_id_string(d))
        .collect();
    let mut out = Vec::new();
    for (dir, state) in &states {
        if matches!(state, DirState::Formatted(_)) {
            continue;
        }
        let directory_id = new_directory_id(&taken);
        taken.push(directory_id);
        write(
            dir,
            &MetaProperties {
                cluster_id: cluster_id.to_string(),
                node_id,
                directory_id,
            },
        )?;
        out.push(format!(
            "Formatting data directory {} with cluster.id {cluster_id}.",
            dir.display()
        ));
    }
    if out.is_empty() {
        out.push("All of the log directories are already formatted.".to_string());
    }
    Ok(out)
}

/// Start-up: the cluster id of `dirs` (the log dirs and the metadata log dir), checked as Kafka
/// checks them, with a `directory.id` written where a formatted dir has none. A fresh node
/// (none of the dirs exists) is formatted here with `new_node_cluster_id()`; otherwise every dir
/// must be formatted for `node_id` and one cluster.
pub fn load_and_verify(
    dirs: &[PathBuf],
    node_id: i32,
    new_node_cluster_id: impl FnOnce() -> String,
) -> Result<String, ServerError> {
    let states: Vec<(PathBuf, DirState)> = dirs
        .iter()
        .map(|d| load(d).map(|s| (d.clone(), s)))
        .collect::<Result<_, _>>()?;
    if states.iter().all(|(_, s)| matches!(s, DirState::Missing)) {
        let cluster_id = new_node_cluster_id();
        for line in format(dirs, node_id, &cluster_id, false)? {
            tracing::warn!("a new node: {line}");
        }
        return Ok(cluster_id);
    }
    let formatted: Vec<(&PathBuf, &BTreeMap<String, String>)> = states
        .iter()
        .filter_map(|(d, s)| match s {
            DirState::Formatted(p) => Some((d, p)),
            _ => None,
        })
        .collect();
    if formatted.is_empty() {
        return Err(meta_error(
            "No readable meta.properties files found. Format the log directories with `strom \
             format` (Kafka's `kafka-storage.sh format`).",
        ));
    }
    let cluster_id = verify(&formatted, node_id, None)?;
    if let Some((dir, _)) = states
        .iter()
        .find(|(_, s)| !matches!(s, DirState::Formatted(_)))
    {
        return Err(meta_error(format!(
            "No `meta.properties` found in {} (have you run `strom format` to format the \
             directory?)",
            dir.display()
        )));
    }
    // Kafka's `initializeLogDirs`: a formatted dir without a directory id gets one.
    let mut taken: Vec<Uuid> = formatted
        .iter()
        .filter_map(|(_, p)| p.get("directory.id"))
        .filter_map(|d| crate::parse_topic_id_string(d))
        .collect();
    for (dir, props) in formatted {
        if props.get("directory.id").is_some_and(|d| !d.is_empty()) {
            continue;
        }
        let directory_id = new_directory_id(&taken);
        taken.push(directory_id);
        tracing::info!(dir = %dir.display(), "Rewriting meta.properties with a directory.id");
        write(
            dir,
            &MetaProperties {
                cluster_id: cluster_id.clone(),
                node_id,
                directory_id,
            },
        )?;
    }
    Ok(cluster_id)
}

/// A dir's `cluster.id` from its `meta.properties`, if it has one.
pub fn cluster_id_of(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(META_PROPERTIES))
        .ok()
        .and_then(|t| parse_properties(&t).ok())
        .and_then(|p| p.get("cluster.id").cloned())
}

/// A dir's `directory.id` from its `meta.properties` (nil if unreadable).
pub fn read_directory_id(dir: &Path) -> Uuid {
    std::fs::read_to_string(dir.join(META_PROPERTIES))
        .ok()
        .and_then(|t| parse_properties(&t).ok())
        .and_then(|p| p.get("directory.id").cloned())
        .and_then(|d| crate::parse_topic_id_string(&d))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
        let t = tempfile::tempdir().unwrap();
        let p = (0..n).map(|i| t.path().join(format!("d{i}"))).collect();
        (t, p)
    }

    fn err(r: Result<impl std::fmt::Debug, ServerError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn format_writes_v1_files_with_one_cluster_id_and_a_directory_id_each() {
        let (_t, paths) = dirs(2);
        let out = format(&paths, 3, "c1", false).unwrap();
        assert_eq!(out.len(), 2, "{out:?}");
        let ids: Vec<Uuid> = paths.iter().map(|p| read_directory_id(p)).collect();
        assert!(ids.iter().all(|d| !d.is_nil()));
        assert_ne!(ids[0], ids[1]);
        let text = std::fs::read_to_string(paths[0].join(META_PROPERTIES)).unwrap();
        let props = parse_properties(&text).unwrap();
        assert_eq!(props["cluster.id"], "c1");
        assert_eq!(props["node.id"], "3");
        assert_eq!(props["version"], "1");
        assert_eq!(load_and_verify(&paths, 3, || unreachable!()).unwrap(), "c1");
    }

    /// `kafka-storage format`'s answers, word for word (Kafka 4.4's `Formatter` and
    /// `MetaPropertiesEnsemble`).
    #[test]
    fn format_refuses_as_kafka_storage_does() {
        let (_t, paths) = dirs(2);
        format(&paths[..1], 1, "abc", false).unwrap();
        assert_eq!(
            err(format(&paths, 1, "abc", false)),
            format!(
                "Log directory {} is already formatted. Use --ignore-formatted to ignore this \
                 directory and format the others.",
                paths[0].display()
            )
        );
        assert!(!paths[1].exists(), "nothing written");
        assert_eq!(
            err(format(&paths, 1, "x", true)),
            format!(
                "Invalid cluster.id in: {}. Expected x, but read abc",
                paths[0].join(META_PROPERTIES).display()
            )
        );
        assert!(err(format(&paths, 2, "abc", true))
            .starts_with("Stored node id 1 doesn't match previous node id 2 in"));
        assert_eq!(format(&paths, 1, "abc", true).unwrap().len(), 1);
        assert_eq!(
            format(&paths, 1, "abc", true).unwrap(),
            vec!["All of the log directories are already formatted."]
        );
        assert_eq!(
            err(format(&paths, 1, "", false)),
            "You must specify the cluster id."
        );
    }

    /// Start-up refuses unformatted and foreign dirs (Kafka 4.4's messages, `strom format` in
    /// place of `kafka-storage.sh`), and formats only a fresh node (no dir exists).
    #[test]
    fn start_up_refuses_unformatted_and_foreign_dirs() {
        let (_t, paths) = dirs(2);
        // Fresh node: both dirs created and formatted.
        assert_eq!(
            load_and_verify(&paths, 1, || "fresh".into()).unwrap(),
            "fresh"
        );
        assert!(paths.iter().all(|p| p.join(META_PROPERTIES).exists()));

        // An existing empty dir: never formatted silently.
        let (_t2, empty) = dirs(1);
        std::fs::create_dir_all(&empty[0]).unwrap();
        assert!(err(load_and_verify(&empty, 1, || "x".into()))
            .starts_with("No readable meta.properties files found."),);
        assert!(!empty[0].join(META_PROPERTIES).exists());

        // One dir lost its contents (a new disk), the other is fine.
        std::fs::remove_dir_all(&paths[1]).unwrap();
        std::fs::create_dir_all(&paths[1]).unwrap();
        assert_eq!(
            err(load_and_verify(&paths, 1, || "x".into())),
            format!(
                "No `meta.properties` found in {} (have you run `strom format` to format the \
                 directory?)",
                paths[1].display()
            )
        );
        // Or is missing altogether: the same (only a node with no dir at all is fresh).
        std::fs::remove_dir_all(&paths[1]).unwrap();
        assert!(err(load_and_verify(&paths, 1, || "x".into())).starts_with("No `meta.properties`"));
        assert!(!paths[1].exists());

        // Another node's dir, another cluster's dir.
        assert!(err(load_and_verify(&paths[..1], 2, || "x".into()))
            .starts_with("Stored node id 1 doesn't match previous node id 2 in"));
        format(&paths[1..], 1, "other", false).unwrap();
        assert_eq!(
            err(load_and_verify(&paths, 1, || "x".into())),
            format!(
                "Invalid cluster.id in: {}. Expected fresh, but read other",
                paths[1].join(META_PROPERTIES).display()
            )
        );
    }

    #[test]
    fn start_up_adds_a_missing_directory_id() {
        let (_t, paths) = dirs(1);
        std::fs::create_dir_all(&paths[0]).unwrap();
        std::fs::write(
            paths[0].join(META_PROPERTIES),
            "cluster.id=c\nnode.id=1\nversion=1\n",
        )
        .unwrap();
        assert_eq!(load_and_verify(&paths, 1, || unreachable!()).unwrap(), "c");
        assert!(!read_directory_id(&paths[0]).is_nil());
    }
}
