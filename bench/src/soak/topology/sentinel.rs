//! `sentinel`: `scripts/redis/sentinel.sh` on free ports (a primary, a
//! replica, three sentinels; master `mymaster`). Faults: `SENTINEL
//! FAILOVER`, and SIGKILL of the primary (the sentinels promote the
//! replica; the killed server comes back empty as a replica of the new
//! primary once they have).

use std::sync::{Arc, Mutex as StdMutex};

use tokio_stream::StreamExt;

use super::kit_failure;
use crate::fail::Failure;
use crate::soak::checker::{Fault, FaultKind};
use crate::soak::worker_io::now_us;

/// The Sentinel topology of one run.
pub struct Sentinel {
    kit: redbell_testkit::Sentinel,
    /// The sentinels' URLs, for the workers.
    pub urls: Vec<String>,
    /// What the sentinels announced (see the module docs): when we heard
    /// it, the event's channel and its payload.
    heard: Arc<StdMutex<Vec<(u64, String, String)>>>,
    watchers: Vec<tokio::task::JoinHandle<()>>,
}

/// How long before an unexplained `+switch-master` its failover is taken to
/// have begun when no `+try-failover` was heard (the promotion precedes the
/// announcement by about a second: the sentinels INFO the promoted replica
/// every second during a failover).
const SWITCH_LEAD_US: u64 = 2_000_000;

/// How long a frozen sentinel stays stopped ([`Sentinel::frozen_failover`]).
const FROZEN_FOR: std::time::Duration = std::time::Duration::from_secs(3);

/// How long after an injected failover's end (when the soak saw the new
/// primary named) its first `+switch-master` may still be heard.
const SWITCH_SLACK_US: u64 = 1_000_000;

impl Sentinel {
    pub async fn start() -> Result<Sentinel, Failure> {
        let kit = redbell_testkit::Sentinel::start()
            .await
            .map_err(kit_failure)?;
        let urls = kit.sentinel_urls().to_vec();
        let mut sentinel = Sentinel {
            kit,
            urls,
            heard: Arc::default(),
            watchers: Vec::new(),
        };
        sentinel.watch().await;
        Ok(sentinel)
    }

    /// Subscribes to every sentinel's `+try-failover` and `+switch-master`
    /// for the rest of the run (the failover's leader announces the first;
    /// each sentinel the second).
    async fn watch(&mut self) {
        for url in &self.urls {
            let Ok(client) = redis::Client::open(url.as_str()) else {
                continue;
            };
            let Ok(mut pubsub) = client.get_async_pubsub().await else {
                eprintln!("soak: cannot watch sentinel {url}; its own failovers go unseen");
                continue;
            };
            if pubsub
                .subscribe(&["+try-failover", "+switch-master"])
                .await
                .is_err()
            {
                continue;
            }
            let heard = self.heard.clone();
            self.watchers.push(tokio::spawn(async move {
                let mut messages = pubsub.into_on_message();
                while let Some(m) = messages.next().await {
                    let at = now_us();
                    let payload: String = m.get_payload().unwrap_or_default();
                    heard.lock().unwrap_or_else(|p| p.into_inner()).push((
                        at,
                        m.get_channel_name().to_owned(),
                        payload,
                    ));
                }
            }));
        }
    }

    /// The failovers the sentinels began on their own, given the faults
    /// the soak injected (see [`own_failovers`]), and how many
    /// `+switch-master` announcements were heard in all (a watch that
    /// heard none after injected failovers is broken).
    pub fn own_failovers(&self, injected: &[Fault]) -> (Vec<Fault>, usize) {
        let heard = self.heard.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let switches = heard.iter().filter(|h| h.1 == "+switch-master").count();
        (own_failovers(&heard, injected), switches)
    }

    pub async fn stop(&mut self) {
        for w in &self.watchers {
            w.abort();
        }
        let _ = self.kit.stop().await;
    }

    /// The primary's port, as the first sentinel that answers names it.
    pub async fn primary(&self) -> Option<u16> {
        self.kit.primary().await
    }

    /// `SENTINEL FAILOVER mymaster`; returns when the sentinels name the
    /// new primary.
    pub async fn failover(&self) -> Result<String, Failure> {
        let old = self.primary().await.unwrap_or(0);
        if let Err(e) = self.kit.ask_failover(0).await {
            return Ok(format!("SENTINEL FAILOVER refused: {e}"));
        }
        Ok(match self.kit.new_primary(old).await {
            Some(p) => format!("SENTINEL FAILOVER: primary {old} -> {p}"),
            None => format!("SENTINEL FAILOVER: {old} still the primary after 30 s"),
        })
    }

    /// [`failover`](Self::failover) with the last sentinel frozen (SIGSTOP,
    /// by its pid file), continued [`FROZEN_FOR`] after it was stopped:
    /// the soak asks the first sentinel, which answers; the workers ask all
    /// three. Returns when the sentinels name the new primary.
    pub async fn frozen_failover(&self) -> Result<String, Failure> {
        let file = self.kit.dir().join("sentinel-2.pid");
        let Some(pid) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        else {
            return Ok(format!("cannot read {}", file.display()));
        };
        let pid = nix::unistd::Pid::from_raw(pid);
        if let Err(e) = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP) {
            return Ok(format!("SIGSTOP sentinel pid {pid} failed: {e}"));
        }
        tokio::spawn(async move {
            tokio::time::sleep(FROZEN_FOR).await;
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
        });
        let line = self.failover().await?;
        Ok(format!(
            "{line}; sentinel 2 (pid {pid}) frozen for {} ms from just before",
            FROZEN_FOR.as_millis()
        ))
    }

    /// SIGKILL of the primary; once the sentinels name another, the killed
    /// server starts again (empty) as its replica.
    pub async fn kill_primary(&self) -> Result<String, Failure> {
        let Some(old) = self.primary().await else {
            return Ok("no primary known to kill".into());
        };
        let pid = match self.kit.kill(old).await {
            Ok(pid) => pid,
            Err(e) => return Ok(format!("SIGKILL primary {old} failed: {e}")),
        };
        let Some(new) = self.kit.new_primary(old).await else {
            return Ok(format!("SIGKILL primary {old}: no new primary within 30 s"));
        };
        self.kit
            .restart_as_replica(old, new)
            .await
            .map_err(kit_failure)?;
        Ok(format!(
            "SIGKILL primary {old} (pid {pid}); sentinels promoted {new}; {old} restarted as its replica"
        ))
    }
}

/// The `+switch-master` announcements in `heard` that no injected
/// `SENTINEL FAILOVER` or primary kill explains, as faults: from the
/// `+try-failover` heard last before the switch (or [`SWITCH_LEAD_US`]
/// before it) until the switch. Every sentinel announces each switch (the
/// others up to 2 s after the leader): one naming the primary the last one
/// named is the same failover.
pub fn own_failovers(heard: &[(u64, String, String)], injected: &[Fault]) -> Vec<Fault> {
    let mut heard = heard.to_vec();
    heard.sort();
    let ours = |t: u64| {
        injected.iter().any(|f| {
            matches!(
                f.kind,
                FaultKind::Failover | FaultKind::KillPrimary | FaultKind::FreezeSentinel
            ) && f.at_us <= t
                && t <= f.until_us.unwrap_or(f.at_us) + SWITCH_SLACK_US
        })
    };
    // "<master name> <old ip> <old port> <new ip> <new port>": the new one.
    let new_primary = |payload: &str| payload.split(' ').skip(3).collect::<Vec<_>>().join(":");
    let mut out: Vec<Fault> = Vec::new();
    let mut named = String::new();
    for (i, (t, channel, payload)) in heard.iter().enumerate() {
        if channel != "+switch-master" || new_primary(payload) == named {
            continue;
        }
        named = new_primary(payload);
        if ours(*t) {
            continue;
        }
        let began = heard[..i]
            .iter()
            .rev()
            .find(|(at, c, _)| c == "+try-failover" && t - at < 15_000_000)
            .map_or(t.saturating_sub(SWITCH_LEAD_US), |(at, _, _)| *at);
        out.push(Fault {
            at_us: began,
            kind: FaultKind::SentinelFailover,
            worker: None,
            until_us: Some(*t),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_switches_no_injected_fault_explains_are_the_sentinels_own() {
        let to = |port: u16| format!("mymaster 127.0.0.1 1 127.0.0.1 {port}");
        let heard: Vec<(u64, String, String)> = [
            (10_000_000, "+try-failover", String::new()),
            (11_000_000, "+switch-master", to(2)), // the injected kill's
            (12_500_000, "+switch-master", to(2)), // another sentinel's word of it
            (12_900_000, "+try-failover", String::new()),
            (14_000_000, "+switch-master", to(1)), // on their own, 3 s after ours
            (14_400_000, "+switch-master", to(1)),
            (40_000_000, "+switch-master", to(2)), // on their own, no try heard
        ]
        .into_iter()
        .map(|(t, c, p)| (t, c.to_owned(), p))
        .collect();
        let injected = [Fault {
            at_us: 9_000_000,
            kind: FaultKind::KillPrimary,
            worker: None,
            until_us: Some(10_900_000),
        }];
        let own = own_failovers(&heard, &injected);
        let spans: Vec<(u64, Option<u64>)> = own.iter().map(|f| (f.at_us, f.until_us)).collect();
        assert_eq!(
            spans,
            vec![
                (12_900_000, Some(14_000_000)),
                (38_000_000, Some(40_000_000))
            ]
        );
        assert!(own.iter().all(|f| f.kind == FaultKind::SentinelFailover));
    }
}
