//! The topology's processes: servers and sentinels spawned, the primary
//! killed.

use std::process::Command;

use crate::{redis_server_bin, redis_server_command, spawn_redis_server};

use super::{MASTER, Topology};

impl Topology {
    /// Spawns a redis-server (non-persistent, diskless sync without delay,
    /// logging to its log file) with `extra` arguments; does not wait for it.
    pub(super) fn spawn_server(&mut self, name: &str, port: u16, extra: &[&str]) {
        let data = self.dir.join(name);
        std::fs::create_dir_all(&data).expect("create a server dir");
        let mut cmd = redis_server_command(port, &data);
        cmd.arg("--repl-diskless-sync-delay")
            .arg("0")
            .arg("--logfile")
            .arg(self.log(name))
            .args(extra);
        self.spawn(name, cmd);
    }

    /// Spawns sentinel `i` (`redis-server CONF --sentinel`) from a fresh config.
    pub(super) fn spawn_sentinel(&mut self, i: usize) {
        let name = format!("sentinel-{i}");
        let port = self.sentinel_ports()[i];
        let conf = self.dir.join(format!("{name}.conf"));
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndaemonize no\nlogfile \"{log}\"\ndir \"{dir}\"\n\
             sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 10000\n\
             sentinel parallel-syncs {MASTER} 1\n",
            log = self.log(&name).display(),
            dir = self.dir.display(),
            primary = self.primary_port(),
        );
        std::fs::write(&conf, text).expect("write a sentinel config");
        let mut cmd = Command::new(redis_server_bin());
        cmd.arg(&conf).arg("--sentinel");
        self.spawn(&name, cmd);
    }

    fn spawn(&mut self, name: &str, mut cmd: Command) {
        let child = spawn_redis_server(&mut cmd);
        self.children.push((name.to_owned(), child));
    }

    /// SIGKILLs the primary and waits for it to exit.
    ///
    /// # Panics
    ///
    /// When it was killed before.
    pub fn kill_primary(&mut self) {
        let at = self
            .children
            .iter()
            .position(|(n, _)| n == "primary")
            .expect("the primary was already killed");
        let (_, mut child) = self.children.remove(at);
        child.kill().expect("SIGKILL the primary");
        child.wait().expect("reap the primary");
    }
}
