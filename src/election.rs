//! Leader election: [`Election`], its [`Leadership`] guard, and the
//! [`Observer`] stream of leader changes.
//!
//! An election named `N` is a lock on the keys of the [`Mutex`] named `N`
//! (the leader holds the lock key `P:{N}`, with a token of the election's
//! own letter: see *One name, one kind*) plus a **leader key**
//! `P:{N}:leader`, a hash naming
//! the leader's owner token, its value, its term and the value's revision,
//! and a pub/sub channel `P:{N}:leader:events`. Campaigning is
//! [`Mutex::lock`]: the same event-driven wait, queue and hand-off, no
//! protocol of its own. The **term** is the fence of the leader's
//! acquisition, so it is strictly greater than every earlier term of the
//! election, across all clients.
//!
//! The leader is the lock's holder *once it has proclaimed itself*: the
//! `elect_proclaim` script, run right after the acquire, writes the leader
//! key only while the lock key still holds the token, and publishes
//! `elected`. [`Election::leader`] reads both keys in one script and names
//! a leader only when the leader key names the lock's holder; a holder
//! that has not proclaimed yet (a millisecond after its acquire), or has
//! resigned, is no leader. [`Leadership::resign`] first clears the leader
//! key's token (publishing `resigned`), then releases the lock with the
//! plain release script, which wakes the next campaigner.
//!
//! # One name, one kind
//!
//! The election's lock *is* the lock key of the name, not a key of its
//! own; its owner tokens open with `l` where a Mutex's open with `m`. So a
//! [`Mutex`] (or `redbell run`), a [`FairMutex`](crate::FairMutex), an
//! [`RwLock`](crate::RwLock) or a [`Semaphore`](crate::Semaphore) under a
//! name an election leads is refused with [`Error::KindConflict`], and a
//! campaign under a name one of them holds is refused alike, by the kind
//! checks every acquire script already makes; and
//! [`Client::inspect`] (so `redbell status` and `top`) tells an election by
//! its token, with its leader and term from the leader key.
//!
//! Keys of its own per kind (`P:{N}:election`) were the alternative, and
//! rejected: a Mutex and an Election of one name would then both be held
//! at once, each tool showing one of them, which is the confusion this
//! prevents; and during a rolling upgrade old campaigners on `P:{N}` and
//! new ones on their own key would elect two leaders at once. With the
//! token letter, mixing versions fails closed instead: a campaigner of
//! this version meets an older leader's `m` token as a kind conflict (and
//! an older campaigner meets the `l` token as a held lock, and waits), so
//! upgrade every campaigner of an election together.
//!
//! # Step-down safety
//!
//! A leader's lease is the guard's lease (`lease.rs`): renewed by the
//! client's renewal task, with a local deadline of `s + L − (L/100 + 2 ms)`
//! where `s` is when the last *confirmed* acquire or renewal was sent and
//! `L` the lease. The key lives at least `L` of server time past `s`, so at
//! the deadline it still exists, and nobody else can have been elected: a
//! campaign succeeds only once the key is gone. When renewals stop being
//! confirmed (Redis unreachable, the process starved), [`Leadership::lost`]
//! resolves and [`Leadership::is_lost`] turns true at that deadline, the
//! margin before another client can take over. The conditions under which
//! this holds (no write lost by the server, server clock not more than 1%
//! faster than ours) are argued once, in `lease.rs` ("When can two holders
//! coexist?"); where they break, the term is the fence to reject the stale
//! leader's writes with.
//!
//! # Observing
//!
//! See [`observe`] (`election/observe.rs`).

mod observe;

use std::fmt;
use std::sync::{Arc, Mutex as StdMutex};

pub use observe::Observer;

use crate::Error;
use crate::background::Work;
use crate::client::Client;
use crate::keys::{Kind, LockKeys};
use crate::mutex::{Mutex, MutexGuard};
use crate::scripts::{self, Proclaimed, Proclamation, Reading};
use crate::stats::LostCause;

/// A handle on one leader election, identified by its name.
///
/// Cheap to clone; clones name the same election. Holding an `Election`
/// holds nothing in Redis: [`campaign`](Election::campaign) returns a
/// [`Leadership`] that owns one term.
#[derive(Clone)]
pub struct Election {
    mutex: Mutex,
    client: Client,
    /// The election's keys, or the reason its name is invalid (reported by
    /// the first call that needs them).
    names: Result<Arc<Names>, (String, &'static str)>,
}

/// The Redis names of one election.
#[derive(Debug)]
pub(crate) struct Names {
    /// The name the user gave.
    pub(crate) name: String,
    /// `P:{N}`: the lock key, holding the leader's token.
    pub(crate) lock: String,
    /// `P:{N}:leader`: the leader key (token, value, term, rev).
    pub(crate) leader: String,
    /// `P:{N}:leader:events`: where leadership changes are published.
    pub(crate) channel: String,
    /// Expiry of the leader key in ms: the fence key's.
    pub(crate) ttl_ms: u64,
}

impl Names {
    fn new(keys: &LockKeys) -> Names {
        Names {
            name: keys.name().to_owned(),
            lock: keys.token_key().to_owned(),
            leader: format!("{}:leader", keys.writer()),
            channel: format!("{}:leader:events", keys.writer()),
            ttl_ms: keys.fence_ttl_ms,
        }
    }
}

/// The leader of an election, as [`Election::leader`] and
/// [`Election::observe`] report it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's term: the fence of its acquisition, strictly greater
    /// than every earlier term of this election.
    pub term: u64,
    /// What the leader proclaimed: the value it campaigned with, or the
    /// latest [`proclaim`](Leadership::proclaim).
    pub value: String,
}

impl Client {
    /// A handle on the leader election called `name`.
    ///
    /// This does no I/O and never fails: an invalid name is reported by the
    /// first call that uses it ([`Error::InvalidName`]).
    pub fn election(&self, name: &str) -> Election {
        let names = match self.keys(name, Kind::Election) {
            Ok(keys) => Ok(Arc::new(Names::new(&keys))),
            Err(Error::InvalidName { name, reason }) => Err((name, reason)),
            Err(_) => Err((name.chars().take(64).collect(), "invalid name")),
        };
        Election {
            mutex: Mutex::new(self.clone(), name, Kind::Election),
            client: self.clone(),
            names,
        }
    }
}

impl Election {
    /// The election's name.
    pub fn name(&self) -> &str {
        match &self.names {
            Ok(names) => &names.name,
            Err((name, _)) => name,
        }
    }

    fn names(&self) -> Result<Arc<Names>, Error> {
        self.names
            .clone()
            .map_err(|(name, reason)| Error::InvalidName { name, reason })
    }

    /// Waits until this client leads the election, then proclaims `value`
    /// and returns the [`Leadership`].
    ///
    /// Waiting is [`Mutex::lock`]'s: parked until the leader resigns (its
    /// release wakes one campaigner) or its lease runs out, no polling. The
    /// lease is the client's (default 30 s), renewed while the
    /// `Leadership` lives. Should the lease run out between the acquire and
    /// the proclamation (a stalled process), the campaign starts over.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redbell::Error> {
    /// # let client = redbell::Client::connect("redis://127.0.0.1:6379").await?;
    /// let leadership = client.election("scheduler").campaign("host-a:8080").await?;
    /// println!("leading in term {}", leadership.term());
    /// leadership.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidName`] for a bad name.
    /// - [`Error::WrongType`] when the election's keys hold foreign data.
    /// - [`Error::KindConflict`] when the name is in use as another kind
    ///   of lock: a [`Mutex`], [`FairMutex`](crate::FairMutex),
    ///   [`RwLock`](crate::RwLock) or [`Semaphore`](crate::Semaphore).
    /// - [`Error::Redis`] when Redis fails or cannot be reached; nothing is
    ///   held (a possibly applied acquire is released in the background).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no leader
    /// behind. An acquire in flight is released in the background, as for
    /// [`Mutex::lock`]; a term acquired but not yet returned is resigned
    /// and released as a dropped [`Leadership`] is.
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership, Error> {
        let names = self.names()?;
        let value = value.into();
        loop {
            let guard = self.mutex.lock().await?;
            // From here on, dropping `leadership` (this future cancelled, or
            // an error) resigns and releases: an `elected` already applied
            // is withdrawn.
            let leadership = Leadership {
                guard: Some(guard),
                names: names.clone(),
                client: self.client.clone(),
                value: StdMutex::new(value.clone()),
            };
            let outcome = leadership.proclaim_as(&value, true).await?;
            if outcome == Proclaimed::NotLeader || leadership.is_lost() {
                tracing::debug!(election = %names.name, "lease lost before the proclamation; campaigning again");
                continue; // `leadership` is dropped: resigned and released
            }
            return Ok(leadership);
        }
    }

    /// The current leader, or `None` when nobody leads: one atomic script
    /// read of the lock key's holder and the leader key.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name, [`Error::WrongType`] when the
    /// election's keys hold foreign data, [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        let names = self.names()?;
        Ok(
            match scripts::leader(&self.client.0.conn, &names.lock, &names.leader).await? {
                Reading::Leader { term, value, .. } => Some(Leader { term, value }),
                Reading::Vacant { .. } => None,
            },
        )
    }

    /// A [`Stream`](tokio_stream::Stream) of the election's leader: first
    /// the current one, then each change (elected, proclaimed, resigned,
    /// lost by lease expiry) as it happens. See [`Observer`].
    ///
    /// Must be called inside a Tokio runtime; outside one, the stream
    /// yields [`Error::Closed`] and ends.
    pub fn observe(&self) -> Observer {
        match self.names() {
            Ok(names) => Observer::start(self.client.clone(), names),
            Err(e) => Observer::failed(e),
        }
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// One term of leadership in an [`Election`], from
/// [`Election::campaign`].
///
/// While [`is_lost`](Leadership::is_lost) is false, no other client leads
/// (see *Step-down safety* in the module docs, and the conditions written
/// out on [`MutexGuard`]); select on [`lost`](Leadership::lost) to stop
/// leading work in time. Pass the [`term`](Leadership::term) to what the
/// leader writes to, so a stale leader's writes can be rejected.
///
/// Dropping it resigns in the background: the leader key is cleared and
/// observers told (a task spawned on the current Tokio runtime; without
/// one, observers learn at the lock's next change), and the lock is
/// released by the client's background worker (see [Shutting
/// down](crate::Client#shutting-down)).
#[must_use = "dropping the leadership resigns at once (in the background)"]
pub struct Leadership {
    /// `Some` until resigned; taken by `resign` and `Drop`.
    guard: Option<MutexGuard>,
    names: Arc<Names>,
    client: Client,
    /// The value last proclaimed (confirmed by Redis).
    value: StdMutex<String>,
}

impl Leadership {
    /// The term: the fence of this leadership's acquisition, strictly
    /// greater than the term of every earlier leader of this election.
    pub fn term(&self) -> u64 {
        self.guard.as_ref().map_or(0, MutexGuard::fence)
    }

    /// The value observers see: the one campaigned with, or the latest
    /// [`proclaim`](Leadership::proclaim)ed.
    pub fn value(&self) -> String {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.names.name
    }

    /// Resolves when the leadership is lost: a renewal found the lock gone
    /// or taken, or Redis stayed unreachable past the lease's local
    /// deadline, which comes before anyone else can be elected.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn lost(&self) {
        if let Some(guard) = &self.guard {
            guard.lost().await;
        }
    }

    /// Whether the leadership is known lost (see
    /// [`lost`](Leadership::lost)). Once true it stays true.
    pub fn is_lost(&self) -> bool {
        self.guard.as_ref().is_none_or(MutexGuard::is_lost)
    }

    /// The local instant until which the leadership is known held, which
    /// comes before anyone else can be elected: the lock guard's
    /// [`deadline`](MutexGuard::deadline) (the latest confirmed renewal's
    /// send instant, plus the lease, minus the drift margin). The client's
    /// renewals move it on; [`lost`](Leadership::lost) fires at it
    /// otherwise. Once the leadership is lost it says nothing more.
    pub fn deadline(&self) -> tokio::time::Instant {
        self.guard
            .as_ref()
            .map_or_else(tokio::time::Instant::now, MutexGuard::deadline)
    }

    /// Changes the value observers see to `value`, if this client still
    /// leads; observers are told at once.
    ///
    /// # Errors
    ///
    /// - [`Error::NotHeld`] when this client no longer leads (the lease is
    ///   lost locally, or Redis found the lock taken or gone); nothing was
    ///   written, and the leadership is lost from now on.
    /// - [`Error::WrongType`] when the leader key holds foreign data.
    /// - [`Error::Redis`] when Redis could not be reached.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not apply the new value; observers
    /// see whichever applied, and [`value`](Leadership::value) keeps the
    /// last one confirmed.
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<(), Error> {
        let value = value.into();
        if self.is_lost() {
            return Err(Error::NotHeld);
        }
        match self.proclaim_as(&value, false).await? {
            Proclaimed::Done { .. } => {
                *self.value.lock().unwrap_or_else(|p| p.into_inner()) = value;
                Ok(())
            }
            Proclaimed::NotLeader => {
                if let Some(guard) = &self.guard {
                    guard.0.lease.set_lost(LostCause::Taken);
                }
                Err(Error::NotHeld)
            }
        }
    }

    async fn proclaim_as(&self, value: &str, elected: bool) -> Result<Proclaimed, Error> {
        let Some(guard) = &self.guard else {
            return Ok(Proclaimed::NotLeader);
        };
        scripts::proclaim(
            &self.client.0.conn,
            Proclamation {
                lock: &self.names.lock,
                leader: &self.names.leader,
                channel: &self.names.channel,
                token: guard.token(),
                term: guard.fence(),
                value,
                elected,
                ttl_ms: self.names.ttl_ms,
            },
        )
        .await
    }

    /// Steps down: observers are told there is no leader, then the lock is
    /// released, waking the next campaigner.
    ///
    /// # Errors
    ///
    /// - [`Error::NotHeld`] when the leadership had been lost already (the
    ///   lease expired, and another client may lead since). Nothing of
    ///   anyone else's was changed.
    /// - [`Error::Redis`] when Redis could not be reached; the release is
    ///   retried in the background, and the lease bounds the damage.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped before Redis answered, the
    /// resignation is completed in the background, as on drop.
    pub async fn resign(mut self) -> Result<(), Error> {
        let Some(token) = self.guard.as_ref().map(|g| g.token().to_owned()) else {
            return Err(Error::NotHeld);
        };
        // `self` keeps the guard meanwhile: should this future be dropped,
        // it resigns in the background.
        let conn = &self.client.0.conn;
        let cleared = scripts::resign(conn, &self.names.leader, &self.names.channel, &token).await;
        let Some(guard) = self.guard.take() else {
            return Err(Error::NotHeld);
        };
        // Cancel safe: a guard dropped mid-unlock is released in the
        // background.
        let released = guard.unlock().await;
        cleared?;
        released
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            resign_in_background(&self.client, &self.names, guard);
        }
    }
}

/// Clears the leader key and releases the lock, both through the client's
/// background worker, so [`Client::shutdown`] waits for them. The two may
/// run in either order: the resign script only clears the leader key while
/// it names this token, so after a newer leader proclaimed it changes
/// nothing.
fn resign_in_background(client: &Client, names: &Arc<Names>, guard: MutexGuard) {
    client.0.background.send(Work::Resign {
        keys: guard.0.keys.clone(),
        leader: names.leader.clone(),
        channel: names.channel.clone(),
        token: guard.token().to_owned(),
    });
    drop(guard); // released in the background
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.names.name)
            .field("term", &self.term())
            .field("value", &self.value())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Election>();
        assert_send_sync::<Leadership>();
        assert_send_sync::<Observer>();
        assert_send_sync::<Leader>();
    }

    #[test]
    fn every_key_shares_the_lock_hash_tag() {
        let keys = LockKeys::new(
            "p",
            "c",
            "n",
            Kind::Election,
            std::time::Duration::from_secs(1),
        )
        .unwrap();
        let names = Names::new(&keys);
        assert_eq!(names.leader, "p:{n}:leader");
        assert_eq!(names.channel, "p:{n}:leader:events");
        let slot = crate::keys::hash_slot(&names.lock);
        assert_eq!(crate::keys::hash_slot(&names.leader), slot);
        assert_eq!(crate::keys::hash_slot(&names.channel), slot);
    }
}
