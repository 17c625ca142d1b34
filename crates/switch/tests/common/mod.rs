//! The harness the loopback tests share (`loopback.rs`, `pool.rs`, `pool_session.rs`): switch
//! processes of this crate's binary, started from a scenario file written for the test and
//! stopped (SIGTERM, then reaped; killed if the test panics first) by the test that started them.
//! Each test file adds its own `Setup::new` (its 127.K.0.0/16 block) and `plan`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_reducelab-switch");

/// A running switch process.
pub struct Proc {
    pub child: Child,
    pub out: BufReader<ChildStdout>,
}

impl Proc {
    /// SIGTERM, then the switch's JSON report.
    pub fn stop(mut self) -> Value {
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let mut line = String::new();
        self.out.read_line(&mut line).expect("switch report");
        self.child.wait().expect("reaped");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("switch report `{line}`: {e}"))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Switch process `node` of the scenario file `path` (`args`: where it listens, and more), once
/// it says it is ready.
pub fn spawn_switch(path: &Path, node: u32, args: &[&str]) -> Proc {
    let mut child = Command::new(BIN)
        .args(["switch", "--scenario", path.to_str().unwrap(), "--node", &node.to_string()])
        .args(args)
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .expect("switch binary");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), format!("ready {node}"), "switch {node} did not start");
    Proc { child, out }
}

/// A test's scenario (written to a file for the switch processes) and its loopback addresses.
pub struct Setup {
    pub path: PathBuf,
    pub text: String,
    pub ip: Ipv4Addr,
}

impl Setup {
    /// Scenario `text` as `name.toml` under a directory of this test process; nodes at `ip`.
    pub fn at(name: &str, ip: Ipv4Addr, text: String) -> Setup {
        let dir = std::env::temp_dir().join(format!("reducelab-switch-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, &text).unwrap();
        Setup { path, text, ip }
    }

    /// Switch process `node` at this setup's addresses (`extra`: more arguments).
    pub fn switch(&self, node: u32, extra: &[&str]) -> Proc {
        spawn_switch(&self.path, node, &[&["--ip-base", &self.ip.to_string()], extra].concat())
    }
}
