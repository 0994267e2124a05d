//! The faults the soak injects, with what each excuses in the checker:
//! the vocabulary the plan draws from and the checker judges by.

use serde::{Deserialize, Serialize};

/// The faults the soak injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    Sigkill,
    SigkillRun,
    Sigstop,
    SigstopWaiter,
    ClientKillNormal,
    ClientKillPubsub,
    ClientPause,
    Partition,
    HalfOpen,
    Restart,
    Failover,
    /// A failover the sentinels began on their own (observed, never
    /// injected): one announces `+switch-master` with no fault of ours
    /// behind it, as a primary they briefly took for down.
    SentinelFailover,
    KillPrimary,
    /// `SENTINEL FAILOVER` while one of the three sentinels is frozen
    /// (SIGSTOP, continued 3 s later): its sockets accept and answer
    /// nothing, so a client that waits for every sentinel's answer stays
    /// on the old primary, which is still up.
    FreezeSentinel,
    ClusterFailover,
    /// `CLIENT KILL TYPE pubsub` on a lock's shard, and 150 ms later a
    /// `CLUSTER FAILOVER` of it: the failover meets the hubs' waves of
    /// recovered subscriptions.
    KillThenFailover,
    Migrate,
    /// Every connection of a worker open at the fault goes silent for good
    /// (its proxy closes the server side and swallows what the worker
    /// sends, no RST, no FIN); new connections work.
    BlackHole,
    /// SIGSTOP of a pool worker (several tasks waiting on one lock) while
    /// all its tasks wait, then SIGCONT.
    FreezePool,
    /// SIGSTOP of three single-task workers together while each waits on
    /// one lock (a paused host or container), then SIGCONT: one record per
    /// worker.
    FreezeHost,
    /// SIGSTOP of a `redbell run` process (not its command nor its
    /// guardian) while its command runs, past the lease, then SIGCONT.
    SigstopRun,
    /// SIGSTOP of a `redbell run` command (its group, as job control
    /// stops it), then SIGTERM to its `redbell run`, as `timeout` sends.
    SigstopCommand,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Sigkill => "SIGKILL worker",
            FaultKind::SigkillRun => "SIGKILL redbell run worker",
            FaultKind::Sigstop => "SIGSTOP worker past its lease",
            FaultKind::SigstopWaiter => "SIGSTOP woken waiter past its lease",
            FaultKind::ClientKillNormal => "CLIENT KILL TYPE normal",
            FaultKind::ClientKillPubsub => "CLIENT KILL TYPE pubsub",
            FaultKind::ClientPause => "CLIENT PAUSE 300 ALL",
            FaultKind::Partition => "partition a worker past its lease (proxy)",
            FaultKind::HalfOpen => "half-open a worker's connections (proxy)",
            FaultKind::Restart => "Redis SIGKILL + restart (AOF everysec)",
            FaultKind::Failover => "SENTINEL FAILOVER",
            FaultKind::SentinelFailover => "failover the sentinels began on their own",
            FaultKind::KillPrimary => "SIGKILL the primary (Sentinel fails over)",
            FaultKind::FreezeSentinel => "SENTINEL FAILOVER with a sentinel frozen (SIGSTOP)",
            FaultKind::ClusterFailover => "CLUSTER FAILOVER of a lock's shard",
            FaultKind::KillThenFailover => {
                "CLIENT KILL TYPE pubsub, then CLUSTER FAILOVER of the shard"
            }
            FaultKind::Migrate => "slot migration of a lock's slot",
            FaultKind::BlackHole => "black-hole every connection of a worker (proxy)",
            FaultKind::FreezePool => "SIGSTOP a worker whose tasks all wait",
            FaultKind::FreezeHost => "SIGSTOP three workers waiting on one lock (frozen host)",
            FaultKind::SigstopRun => "SIGSTOP redbell run while its command runs",
            FaultKind::SigstopCommand => "SIGSTOP a redbell run command, then SIGTERM",
        }
    }

    /// A fault of the servers rather than of one worker.
    pub fn is_server(self) -> bool {
        matches!(
            self,
            FaultKind::Restart
                | FaultKind::Failover
                | FaultKind::SentinelFailover
                | FaultKind::KillPrimary
                | FaultKind::FreezeSentinel
                | FaultKind::ClusterFailover
                | FaultKind::KillThenFailover
                | FaultKind::Migrate
        )
    }

    /// Why two holds may overlap after this fault (`None`: they may not).
    pub fn cause(self) -> Option<&'static str> {
        match self {
            FaultKind::Sigstop
            | FaultKind::SigstopWaiter
            | FaultKind::FreezePool
            | FaultKind::FreezeHost => Some("SIGSTOP past the lease"),
            FaultKind::Partition => Some("partition past the lease"),
            FaultKind::HalfOpen => Some("half-open connection"),
            FaultKind::BlackHole => Some("black-holed connections"),
            FaultKind::Restart => Some("restart (writes lost with the AOF's last second)"),
            FaultKind::Failover
            | FaultKind::SentinelFailover
            | FaultKind::KillPrimary
            | FaultKind::FreezeSentinel
            | FaultKind::ClusterFailover
            | FaultKind::KillThenFailover => Some("unreplicated write lost in failover"),
            // A frozen `redbell run` or a stopped command excuses nothing:
            // its command must be dead before the lease can run out.
            _ => None,
        }
    }

    /// A fault that leaves a worker unable to act for a while (judged as
    /// not live then; a fault of the holder if it held): those that excuse
    /// an overlap, and a frozen `redbell run`, which must not.
    pub fn stops(self) -> bool {
        !self.is_server() && (self.cause().is_some() || self == FaultKind::SigstopRun)
    }
}
