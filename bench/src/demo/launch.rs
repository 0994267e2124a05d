//! Starting a run's windows (OS processes or tasks) and reaping them.

use std::time::Duration;

use super::DemoArgs;
use super::window::{self, Mode, WindowConfig};
use crate::fail::{EX_FAILURE, EX_UNAVAILABLE, Failure};

/// The windows of a run, whichever way they run.
pub enum Windows {
    Procs(Vec<(u32, tokio::process::Child)>),
    Tasks(Vec<(u32, tokio::task::JoinHandle<Result<(), Failure>>)>),
}

impl Windows {
    pub fn spawn(url: &str, args: &DemoArgs, mode: Mode, run: &str) -> Result<Windows, Failure> {
        let cfg = |window| WindowConfig {
            run: run.to_owned(),
            window,
            mode,
            poll_interval: args.poll_interval,
            hold: args.hold,
            serve: args.serve,
            lease: args.lease,
            open: args.open,
        };
        if args.tasks {
            let tasks = (1..=args.windows)
                .map(|w| {
                    let (url, cfg) = (url.to_owned(), cfg(w));
                    (
                        w,
                        tokio::spawn(async move { window::sell(&url, &cfg).await }),
                    )
                })
                .collect();
            return Ok(Windows::Tasks(tasks));
        }
        let exe = std::env::current_exe()
            .map_err(|e| Failure::new(EX_FAILURE, format!("cannot find my own executable: {e}")))?;
        let mode = clap::ValueEnum::to_possible_value(&mode)
            .expect("no skipped modes")
            .get_name()
            .to_owned();
        let dur = |d: Duration| humantime::format_duration(d).to_string();
        let mut procs = Vec::new();
        for w in 1..=args.windows {
            let child = tokio::process::Command::new(&exe)
                .env("REDIS_URL", url)
                .arg("demo-worker")
                .args(["--run", run, "--window", &w.to_string(), "--mode", &mode])
                .args(["--poll-interval", &dur(args.poll_interval)])
                .args(["--hold", &dur(args.hold), "--serve", &dur(args.serve)])
                .args(["--lease", &dur(args.lease)])
                .args(
                    args.open
                        .iter()
                        .flat_map(|k| ["--open".to_owned(), k.to_string()]),
                )
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| {
                    Failure::new(
                        EX_FAILURE,
                        format!("cannot start window {w} ({}): {e}", exe.display()),
                    )
                })?;
            procs.push((w, child));
        }
        Ok(Windows::Procs(procs))
    }

    /// Reaps finished windows: `Ok(true)` once all are done, the first
    /// window's failure as an error.
    pub async fn check(&mut self) -> Result<bool, Failure> {
        match self {
            Windows::Procs(procs) => {
                let mut i = 0;
                while i < procs.len() {
                    let (w, child) = &mut procs[i];
                    match child.try_wait() {
                        Ok(None) => i += 1,
                        Ok(Some(status)) if status.success() => {
                            procs.remove(i);
                        }
                        Ok(Some(status)) => {
                            let code = if status.code() == Some(i32::from(EX_UNAVAILABLE)) {
                                EX_UNAVAILABLE
                            } else {
                                EX_FAILURE
                            };
                            return Err(Failure::new(
                                code,
                                format!("window {w} failed ({status})"),
                            ));
                        }
                        Err(e) => {
                            return Err(Failure::new(EX_FAILURE, format!("window {w}: {e}")));
                        }
                    }
                }
                Ok(procs.is_empty())
            }
            Windows::Tasks(tasks) => {
                let mut i = 0;
                while i < tasks.len() {
                    if !tasks[i].1.is_finished() {
                        i += 1;
                        continue;
                    }
                    let (w, handle) = tasks.remove(i);
                    match handle.await {
                        Ok(Ok(())) => {}
                        Ok(Err(f)) => return Err(f),
                        Err(e) => {
                            return Err(Failure::new(
                                EX_FAILURE,
                                format!("window {w} panicked: {e}"),
                            ));
                        }
                    }
                }
                Ok(tasks.is_empty())
            }
        }
    }
}

impl Drop for Windows {
    /// Stops windows still running when the run is abandoned (child
    /// processes are killed by `kill_on_drop`).
    fn drop(&mut self) {
        if let Windows::Tasks(tasks) = self {
            for (_, handle) in tasks {
                handle.abort();
            }
        }
    }
}
