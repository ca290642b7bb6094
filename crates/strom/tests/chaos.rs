//! `strom chaos leader-kill`, shortened: 5,000 records, the leader SIGKILLed at record 1,000,
//! one run with idempotence off and one with it on. With idempotence on the topic must hold
//! every record exactly once, in order, and nothing acknowledged may be lost.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(300);

#[test]
fn leader_kill_shortened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_strom"))
        .args([
            "chaos",
            "leader-kill",
            "--records",
            "5000",
            "--kill-at",
            "1000",
            "--runs",
            "1",
            "--idempotence",
            "both",
            "--data-dir",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting strom chaos");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for strom chaos") {
            break Some(s);
        }
        if start.elapsed() > LIMIT {
            // SIGTERM: the command kills its cluster before exiting.
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            std::thread::sleep(Duration::from_secs(3));
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = out_reader.join().unwrap();
    let err = err_reader.join().unwrap();
    let Some(status) = status else {
        panic!("chaos leader-kill took over {LIMIT:?}\nstdout:\n{out}\nstderr:\n{err}");
    };
    assert!(
        status.success(),
        "exit {status}\nstdout:\n{out}\nstderr:\n{err}"
    );
    // idempotence run cb-ok cb-failed in-topic unique duplicates reorderings lost
    let on: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 9 && f[0] == "on")
        .collect();
    assert_eq!(on.len(), 1, "one table line for idempotence on:\n{out}");
    let f = &on[0];
    assert_eq!(f[6], "0", "duplicates with idempotence on:\n{out}");
    assert_eq!(f[7], "0", "reorderings with idempotence on:\n{out}");
    assert_eq!(f[8], "0", "lost records with idempotence on:\n{out}");
    assert_eq!(f[5], "5000", "unique records with idempotence on:\n{out}");
    let off = out
        .lines()
        .filter(|l| l.split_whitespace().next() == Some("off"))
        .count();
    assert_eq!(off, 1, "one table line for idempotence off:\n{out}");
    // No server of the experiment outlives the command.
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    let dir_s = dir.path().display().to_string();
    assert!(
        !ps.lines().any(|l| l.contains(&dir_s)),
        "a server of the experiment is still running:\n{ps}"
    );
}
