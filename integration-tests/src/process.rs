//! Other processes a test freezes and kills: [`signal`] and [`Stoppable`].

use std::process::{Child, Command, Stdio};

/// Sends `signal` (`STOP`, `CONT`, `KILL`, ...) to process `pid`.
///
/// # Panics
///
/// When `kill` cannot be run or fails.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A child process the test may SIGSTOP: on drop it is continued
/// (SIGCONT), killed and reaped, so a failing test leaves nothing behind.
#[derive(Debug)]
pub struct Stoppable(pub Child);

impl Stoppable {
    /// Starts `program` with `args`, its stdout piped (for
    /// [`Stoppable::wait_for_line`]) and its stderr inherited.
    ///
    /// # Panics
    ///
    /// When it cannot be started.
    pub fn start(program: &std::path::Path, args: &[&str]) -> Stoppable {
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        Stoppable(child)
    }

    /// Reads the child's stdout until a line equal to `line` (at most 10 s).
    ///
    /// # Panics
    ///
    /// When the child ends, or 10 s pass, first.
    pub fn wait_for_line(&mut self, line: &str) {
        use std::io::BufRead;
        let out = self.0.stdout.take().expect("stdout piped");
        let want = line.to_owned();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if l == want {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("the child never printed {line:?}"));
    }

    /// Freezes it (SIGSTOP): its sockets stay open, it reads nothing.
    pub fn stop(&self) {
        signal(self.0.id(), "STOP");
    }
}

impl Drop for Stoppable {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.id().to_string()])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
