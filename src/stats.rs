//! What one client did: counters and gauges, kept in atomics (a relaxed
//! add each, nothing on the server) and read with [`Client::stats`]. With
//! the `metrics` feature every change also goes to the `metrics` facade, so
//! the application's exporter (Prometheus, StatsD, ...) publishes it; without
//! the feature that part compiles to nothing.
//!
//! Metric names (all labelled `kind` = `mutex`, `fair`, `read`, `write`,
//! `semaphore`
//! where it applies):
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `redbell_acquisitions_total` | counter | `kind`, `outcome` = `acquired`, `busy` (a `try_lock` that found it held), `timeout`, `cancelled`, `error` |
//! | `redbell_releases_total` | counter | `outcome` = `ours`, `gone` (expired), `theirs` (taken over) |
//! | `redbell_leases_lost_total` | counter | `cause` = `gone`, `taken`, `deadline` |
//! | `redbell_renewals_total` | counter | `outcome` = `ok`, `failed` |
//! | `redbell_hub_reconnects_total` | counter | |
//! | `redbell_wakeups_sent_total` | counter | |
//! | `redbell_wakeups_total` | counter | `outcome` = `received`, `skipped`, `passed_on` |
//! | `redbell_permission_denied_total` | counter | `command` (the refused command, e.g. `SUBSCRIBE`) |
//! | `redbell_wait_seconds` | histogram | `kind`: from the call to the guard |
//! | `redbell_hold_seconds` | histogram | from the acquisition to the release |
//! | `redbell_handoff_gap_seconds` | histogram | from a release to the next holder, both in this client |
//! | `redbell_waiters` | gauge | waiters parked now |
//! | `redbell_guards` | gauge | guards held now |
//!
//! Lock names are never labels (millions of one-off names would explode an
//! exporter's memory), unless a client opts in with
//! [`ClientBuilder::metrics_lock_names`](crate::ClientBuilder::metrics_lock_names).
//!
//! Every metric is described (`describe_counter!` and the like: a help text
//! and a unit, seconds for the histograms) when a client is built, so the
//! recorder must be installed before the first client connects, or
//! [`describe_metrics`] called after it is. A Prometheus exporter prints
//! the help as `# HELP`; the unit is the recorder's to use (the
//! `metrics-exporter-prometheus` text format has no `# UNIT` line, and the
//! names already end in `_seconds` and `_total`). The histograms are the
//! exporter's to bucket: `metrics-exporter-prometheus` renders them as
//! summaries unless given buckets (`examples/metrics.rs` sets them for
//! `redbell_wait_seconds`).
//!
//! How wake-ups and hand-off gaps are counted is told on [`Stats`].
//!
//! [`Client::stats`]: crate::Client::stats

use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::Error;
use crate::keys::Kind;
use crate::scripts::Owned;

/// A snapshot of one client's counters and gauges, from
/// [`Client::stats`](crate::Client::stats). Counters only grow (from the
/// client's start); gauges are the value now.
///
/// In a quiet moment (no acquisition, release or wake-up in flight):
///
/// - `acquired == releases() + guards` for the guards this client made;
/// - `wakeups_sent == wakeups_received + wakeups_skipped`, and
///   `wakeups_passed_on >= wakeups_skipped`.
///
/// **Wake-ups.** A release (or a pass-on) wakes one queued waiter with a
/// `PUBLISH` on the wake channel of that waiter's client. The release
/// scripts' reply does not tell whether they woke anyone, so wake-ups are
/// counted where they arrive: *sent* counts every wake-up that reached
/// this client's wake channels naming one of its waiters (from any
/// client's release or pass-on; a `PUBLISH` that counted no receiver
/// reached nobody and is counted nowhere). Each is then either *received*
/// (the waiter it names is still here and attempts) or *skipped* (that
/// waiter had left; the wake-up is passed on to the next in line, or
/// dropped if the channel was being unsubscribed). *Passed on* counts
/// every pass-on this client sent: the skipped wake-ups, and each waiter
/// that left the queue without the lock (it may have been woken). Standby
/// notices (the waiter ahead was just woken) and a read-write lock's
/// broadcast (every local reader wakes) are not wake-ups of one waiter and
/// are not counted.
///
/// **Hand-off gap.** When this client releases a lock it still owned while
/// another of its waiters waits for it, the release time is noted; when a
/// waiter that was already waiting then acquires that lock, the time since
/// the release is one hand-off gap (at most one per release). Hand-offs to
/// or from other clients are not seen; if another client held the lock in
/// between, that hold is part of the gap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Acquisitions that returned a guard.
    pub acquired: u64,
    /// `try_lock` calls (and zero-timeout waits) that found the lock held.
    pub busy: u64,
    /// Waits that ended at their deadline ([`Error::Timeout`](crate::Error::Timeout)).
    pub timed_out: u64,
    /// Waits whose future was dropped before they ended.
    pub cancelled: u64,
    /// Acquisitions that failed with another error.
    pub failed: u64,
    /// Releases that found the lock still ours.
    pub released_ours: u64,
    /// Releases that found it gone (the lease had run out).
    pub released_gone: u64,
    /// Releases that found another holder (the lease had run out and the
    /// lock was taken since).
    pub released_theirs: u64,
    /// Leases lost because the key was gone.
    pub lost_gone: u64,
    /// Leases lost because another token held the key.
    pub lost_taken: u64,
    /// Leases lost because Redis did not confirm a renewal before the local
    /// deadline (or a fixed lease ran out while its guard lived).
    pub lost_deadline: u64,
    /// Leases renewed.
    pub renewals: u64,
    /// Renewals that failed (they are retried until the lease's deadline).
    pub renewal_failures: u64,
    /// Times the pub/sub connection was replaced (lost, failed its probe,
    /// or followed a failover).
    pub hub_reconnects: u64,
    /// Wake-ups that arrived on this client's wake channels naming one of
    /// its waiters (sent by any client's release or pass-on, counted on
    /// arrival; see above). `wakeups_received + wakeups_skipped` in a quiet
    /// moment.
    pub wakeups_sent: u64,
    /// Wake-ups that reached the waiter they named.
    pub wakeups_received: u64,
    /// Wake-ups whose waiter had left: passed on to the next in line.
    pub wakeups_skipped: u64,
    /// Pass-ons sent: the skipped wake-ups, and every waiter that left the
    /// queue without the lock (cancelled or timed out, perhaps woken).
    pub wakeups_passed_on: u64,
    /// Hand-offs timed from one of this client's releases to one of its
    /// waiters acquiring the lock next (see *Hand-off gap* above).
    pub local_handoffs: u64,
    /// The sum of those hand-offs' gaps: release returned to the next
    /// holder's acquisition (divide by `local_handoffs` for the mean).
    pub local_handoff_gap: Duration,
    /// Operations the server's ACL refused ([`Error::NoPermission`](crate::Error::NoPermission)
    /// past connect: a refused `SUBSCRIBE`, a refused script command). The
    /// first refusal of each command is also logged at `warn`.
    pub permission_denied: u64,
    /// Waiters parked now.
    pub waiters: i64,
    /// Guards held now.
    pub guards: i64,
}

impl Stats {
    /// All releases, whatever they found.
    pub fn releases(&self) -> u64 {
        self.released_ours + self.released_gone + self.released_theirs
    }

    /// All lost leases, whatever the cause.
    pub fn leases_lost(&self) -> u64 {
        self.lost_gone + self.lost_taken + self.lost_deadline
    }

    /// The mean hand-off gap between this client's releases and its
    /// waiters' acquisitions; `None` before the first.
    pub fn mean_handoff_gap(&self) -> Option<Duration> {
        let n = u32::try_from(self.local_handoffs).ok().filter(|&n| n > 0)?;
        Some(self.local_handoff_gap / n)
    }
}

/// What became of a wake-up that arrived for one of our waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wakeup {
    /// The waiter it names is here.
    Received,
    /// That waiter had left.
    Skipped,
}

/// How an acquisition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    Busy,
    Timeout,
    Cancelled,
    Error,
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    Ours,
    Gone,
    Theirs,
}

impl From<Owned> for Released {
    fn from(owned: Owned) -> Released {
        match owned {
            Owned::Ours => Released::Ours,
            Owned::Gone => Released::Gone,
            Owned::Theirs => Released::Theirs,
        }
    }
}

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostCause {
    /// A renewal or extend found the key gone.
    Gone,
    /// A renewal or extend found another token.
    Taken,
    /// The local deadline passed unconfirmed.
    Deadline,
}

impl LostCause {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LostCause::Gone => "gone",
            LostCause::Taken => "taken",
            LostCause::Deadline => "deadline",
        }
    }
}

/// The live counters of one client, shared by its parts.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    acquired: AtomicU64,
    busy: AtomicU64,
    timed_out: AtomicU64,
    cancelled: AtomicU64,
    failed: AtomicU64,
    released_ours: AtomicU64,
    released_gone: AtomicU64,
    released_theirs: AtomicU64,
    lost_gone: AtomicU64,
    lost_taken: AtomicU64,
    lost_deadline: AtomicU64,
    renewals: AtomicU64,
    renewal_failures: AtomicU64,
    hub_reconnects: AtomicU64,
    wakeups_sent: AtomicU64,
    wakeups_received: AtomicU64,
    wakeups_skipped: AtomicU64,
    wakeups_passed_on: AtomicU64,
    local_handoffs: AtomicU64,
    /// In nanoseconds.
    local_handoff_gap: AtomicU64,
    permission_denied: AtomicU64,
    waiters: AtomicI64,
    guards: AtomicI64,
    /// The commands whose refusal was already logged (each is logged once).
    warned_denied: StdMutex<Vec<String>>,
    /// Label acquisitions and releases with the lock's name
    /// ([`ClientBuilder::metrics_lock_names`](crate::ClientBuilder::metrics_lock_names)).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    lock_names: bool,
}

/// Describes every redbell metric to the installed `metrics` recorder: its
/// help text and unit (so a Prometheus scrape has a `# HELP` line for each).
/// Building a client does it; call this only if the recorder is installed
/// after the first client was built. Calling it again changes nothing.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "redbell_acquisitions_total",
        Unit::Count,
        "Lock acquisitions by kind and outcome (acquired, busy, timeout, cancelled, error)."
    );
    describe_counter!(
        "redbell_releases_total",
        Unit::Count,
        "Releases by what they found: ours, gone (expired), theirs (taken over)."
    );
    describe_counter!(
        "redbell_leases_lost_total",
        Unit::Count,
        "Leases lost while their guard lived, by cause: gone, taken, deadline."
    );
    describe_counter!(
        "redbell_renewals_total",
        Unit::Count,
        "Lease renewals by outcome: ok, failed (retried until the lease's deadline)."
    );
    describe_counter!(
        "redbell_hub_reconnects_total",
        Unit::Count,
        "Times the pub/sub connection that carries wake-ups was replaced."
    );
    describe_counter!(
        "redbell_wakeups_sent_total",
        Unit::Count,
        "Wake-ups that arrived naming one of this process's waiters."
    );
    describe_counter!(
        "redbell_wakeups_total",
        Unit::Count,
        "Wake-ups by outcome: received, skipped (waiter gone), passed_on."
    );
    describe_counter!(
        "redbell_permission_denied_total",
        Unit::Count,
        "Commands the server's ACL refused, by command."
    );
    describe_histogram!(
        "redbell_wait_seconds",
        Unit::Seconds,
        "Time from a lock call to its guard, by kind."
    );
    describe_histogram!(
        "redbell_hold_seconds",
        Unit::Seconds,
        "Time from an acquisition to its release."
    );
    describe_histogram!(
        "redbell_handoff_gap_seconds",
        Unit::Seconds,
        "Time from a release to the next holder's acquisition, both in this process."
    );
    describe_gauge!("redbell_waiters", Unit::Count, "Waiters parked now.");
    describe_gauge!("redbell_guards", Unit::Count, "Guards held now.");
}

fn kind_label(kind: Kind) -> &'static str {
    match kind {
        Kind::Plain => "mutex",
        Kind::Fair => "fair",
        Kind::Read => "read",
        Kind::Write => "write",
        Kind::Semaphore => "semaphore",
        Kind::Election => "election",
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// Counters whose metrics carry the lock's name as a label when
    /// `lock_names` is set.
    /// Describes the metrics to the recorder installed now (see
    /// [`describe_metrics`]).
    pub(crate) fn new(lock_names: bool) -> Counters {
        #[cfg(feature = "metrics")]
        describe_metrics();
        Counters {
            lock_names,
            ..Counters::default()
        }
    }

    /// An acquisition of `kind` on the lock `name` ended as `outcome` after
    /// `waited`.
    pub(crate) fn acquisition(&self, kind: Kind, outcome: Outcome, waited: Duration, name: &str) {
        let (counter, label) = match outcome {
            Outcome::Acquired => (&self.acquired, "acquired"),
            Outcome::Busy => (&self.busy, "busy"),
            Outcome::Timeout => (&self.timed_out, "timeout"),
            Outcome::Cancelled => (&self.cancelled, "cancelled"),
            Outcome::Error => (&self.failed, "error"),
        };
        add(counter, 1);
        #[cfg(feature = "metrics")]
        {
            let kind = kind_label(kind);
            if self.lock_names {
                let lock = name.to_owned();
                metrics::counter!("redbell_acquisitions_total", "kind" => kind, "outcome" => label, "lock" => lock.clone())
                    .increment(1);
                if outcome == Outcome::Acquired {
                    metrics::histogram!("redbell_wait_seconds", "kind" => kind, "lock" => lock)
                        .record(waited.as_secs_f64());
                }
            } else {
                metrics::counter!("redbell_acquisitions_total", "kind" => kind, "outcome" => label)
                    .increment(1);
                if outcome == Outcome::Acquired {
                    metrics::histogram!("redbell_wait_seconds", "kind" => kind)
                        .record(waited.as_secs_f64());
                }
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (kind_label(kind), label, waited, name);
    }

    /// A release found `outcome`, `held` after the acquisition (`None`: a
    /// release in the background, whose hold was timed at the drop).
    pub(crate) fn release(&self, outcome: Released, held: Option<Duration>, name: &str) {
        let (counter, label) = match outcome {
            Released::Ours => (&self.released_ours, "ours"),
            Released::Gone => (&self.released_gone, "gone"),
            Released::Theirs => (&self.released_theirs, "theirs"),
        };
        add(counter, 1);
        #[cfg(feature = "metrics")]
        {
            if self.lock_names {
                let lock = name.to_owned();
                metrics::counter!("redbell_releases_total", "outcome" => label, "lock" => lock.clone())
                    .increment(1);
                if let Some(held) = held {
                    metrics::histogram!("redbell_hold_seconds", "lock" => lock)
                        .record(held.as_secs_f64());
                }
            } else {
                metrics::counter!("redbell_releases_total", "outcome" => label).increment(1);
                if let Some(held) = held {
                    metrics::histogram!("redbell_hold_seconds").record(held.as_secs_f64());
                }
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (label, held, name);
    }

    /// A lease was lost.
    pub(crate) fn lost(&self, cause: LostCause) {
        add(
            match cause {
                LostCause::Gone => &self.lost_gone,
                LostCause::Taken => &self.lost_taken,
                LostCause::Deadline => &self.lost_deadline,
            },
            1,
        );
        #[cfg(feature = "metrics")]
        metrics::counter!("redbell_leases_lost_total", "cause" => cause.as_str()).increment(1);
    }

    /// `ok` leases were renewed and `failed` renewals failed.
    pub(crate) fn renewals(&self, ok: u64, failed: u64) {
        add(&self.renewals, ok);
        add(&self.renewal_failures, failed);
        #[cfg(feature = "metrics")]
        {
            metrics::counter!("redbell_renewals_total", "outcome" => "ok").increment(ok);
            metrics::counter!("redbell_renewals_total", "outcome" => "failed").increment(failed);
        }
    }

    /// The pub/sub connection was replaced.
    pub(crate) fn hub_reconnect(&self) {
        add(&self.hub_reconnects, 1);
        #[cfg(feature = "metrics")]
        metrics::counter!("redbell_hub_reconnects_total").increment(1);
    }

    /// A wake-up naming one of our waiters arrived, and found it here or
    /// not.
    pub(crate) fn wakeup(&self, what: Wakeup) {
        add(&self.wakeups_sent, 1);
        let (counter, label) = match what {
            Wakeup::Received => (&self.wakeups_received, "received"),
            Wakeup::Skipped => (&self.wakeups_skipped, "skipped"),
        };
        add(counter, 1);
        #[cfg(feature = "metrics")]
        {
            metrics::counter!("redbell_wakeups_sent_total").increment(1);
            metrics::counter!("redbell_wakeups_total", "outcome" => label).increment(1);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = label;
    }

    /// A pass-on was sent.
    pub(crate) fn passed_on(&self) {
        add(&self.wakeups_passed_on, 1);
        #[cfg(feature = "metrics")]
        metrics::counter!("redbell_wakeups_total", "outcome" => "passed_on").increment(1);
    }

    /// One of our waiters acquired a lock `gap` after our release of it.
    pub(crate) fn handoff(&self, gap: Duration) {
        add(&self.local_handoffs, 1);
        add(
            &self.local_handoff_gap,
            u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX),
        );
        #[cfg(feature = "metrics")]
        metrics::histogram!("redbell_handoff_gap_seconds").record(gap.as_secs_f64());
    }

    /// An operation on the lock `name` failed with `err`: an ACL refusal is
    /// counted, and logged at `warn` the first time its command is refused
    /// (the right is missing for every lock alike; one line says so).
    pub(crate) fn failed(&self, err: &Error, name: &str) {
        let Error::NoPermission { command, detail } = err else {
            return;
        };
        add(&self.permission_denied, 1);
        #[cfg(feature = "metrics")]
        metrics::counter!("redbell_permission_denied_total", "command" => command.clone())
            .increment(1);
        let first = {
            let mut warned = self.warned_denied.lock().unwrap_or_else(|p| p.into_inner());
            let first = !warned.contains(command);
            if first {
                warned.push(command.clone());
            }
            first
        };
        if first {
            tracing::warn!(
                right = %command,
                lock = name,
                detail = %detail,
                "missing ACL right: the server refused {command}; \
                 grant it to this client's user (see the README's ACL users)"
            );
        }
    }

    /// A waiter started (+1) or stopped (-1) waiting.
    pub(crate) fn waiters(&self, delta: i64) {
        let now = self.waiters.fetch_add(delta, Ordering::Relaxed) + delta;
        #[cfg(feature = "metrics")]
        metrics::gauge!("redbell_waiters").set(now as f64);
        #[cfg(not(feature = "metrics"))]
        let _ = now;
    }

    /// Whether any waiter of this client is parked now: a release with none
    /// has no hand-off gap to time, and skips the registry's lock.
    pub(crate) fn any_parked(&self) -> bool {
        self.waiters.load(Ordering::Relaxed) > 0
    }

    /// A guard was made (+1) or dropped (-1).
    pub(crate) fn guards(&self, delta: i64) {
        let now = self.guards.fetch_add(delta, Ordering::Relaxed) + delta;
        #[cfg(feature = "metrics")]
        metrics::gauge!("redbell_guards").set(now as f64);
        #[cfg(not(feature = "metrics"))]
        let _ = now;
    }

    /// A snapshot.
    pub(crate) fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            acquired: get(&self.acquired),
            busy: get(&self.busy),
            timed_out: get(&self.timed_out),
            cancelled: get(&self.cancelled),
            failed: get(&self.failed),
            released_ours: get(&self.released_ours),
            released_gone: get(&self.released_gone),
            released_theirs: get(&self.released_theirs),
            lost_gone: get(&self.lost_gone),
            lost_taken: get(&self.lost_taken),
            lost_deadline: get(&self.lost_deadline),
            renewals: get(&self.renewals),
            renewal_failures: get(&self.renewal_failures),
            hub_reconnects: get(&self.hub_reconnects),
            wakeups_sent: get(&self.wakeups_sent),
            wakeups_received: get(&self.wakeups_received),
            wakeups_skipped: get(&self.wakeups_skipped),
            wakeups_passed_on: get(&self.wakeups_passed_on),
            local_handoffs: get(&self.local_handoffs),
            local_handoff_gap: Duration::from_nanos(get(&self.local_handoff_gap)),
            permission_denied: get(&self.permission_denied),
            waiters: self.waiters.load(Ordering::Relaxed),
            guards: self.guards.load(Ordering::Relaxed),
        }
    }
}
