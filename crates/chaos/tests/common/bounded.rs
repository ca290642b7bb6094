//! Running a `strom` command that may hang (chaos runs) with a hard time limit: SIGTERM first,
//! so that the command can kill its cluster and clean up, then SIGKILL.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub struct Finished {
    /// None when the limit was reached and the command was killed.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Finished {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the command");
    let read_all = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read_all(Box::new(child.stdout.take().unwrap()));
    let err = read_all(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for the command") {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let grace = Instant::now();
            while grace.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    Finished {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}
