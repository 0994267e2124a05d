//! Operator tools: inspect a lock, break a lock, note who holds it.
//!
//! A name is one kind of lock at a time (the acquire scripts refuse the
//! others), and the holder's token opens with its kind's letter, so one
//! read of the name's keys tells the kind: `inspect.lua` reads every
//! kind's keys, and an election's leader key only when the holder is an
//! election's.

use std::time::Duration;

use crate::keys::{Kind, LockKeys, lease_ms};
use crate::{Client, Error, Leader, scripts};

/// A snapshot of one [`Semaphore`](crate::Semaphore), taken atomically on
/// the server by [`Client::semaphore_status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreStatus {
    /// The semaphore's name.
    pub name: String,
    /// The permit count stored in Redis; `None` when none is (nobody held
    /// or waited for it lately).
    pub permits: Option<u32>,
    /// Each live holder's permit token and remaining lease, the earliest to
    /// expire first.
    pub holders: Vec<(String, Duration)>,
    /// Waiters queued for a permit, across all clients (entries not yet
    /// expired).
    pub waiters: u64,
    /// The last fence handed out for this name; `None` if none is
    /// remembered.
    pub fence: Option<u64>,
}

impl Client {
    /// Reads the state of the semaphore `name`: permit count, live holders
    /// with their remaining leases, queued waiters and last fence, in one
    /// atomic script call.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name, [`Error::WrongType`] when the
    /// semaphore's keys hold foreign data, [`Error::Redis`] when Redis
    /// fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn semaphore_status(&self, name: &str) -> Result<SemaphoreStatus, Error> {
        let keys = self.keys(name, Kind::Semaphore)?;
        let (permits, fence, waiters, holders) =
            scripts::semaphore_status(&self.0.conn, &keys).await?;
        Ok(SemaphoreStatus {
            name: keys.name().to_owned(),
            permits: permits.parse().ok(),
            holders: holders
                .into_iter()
                .map(|(token, ms)| (token, Duration::from_millis(ms)))
                .collect(),
            waiters,
            fence: fence.parse().ok(),
        })
    }
}

/// What [`Client::break_lock`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BrokenLock {
    /// The kind of lock broken; `None` when nothing was held.
    pub kind: Option<LockKind>,
    /// The owner tokens removed: the holder's, or an RwLock's writer's and
    /// readers'.
    pub tokens: Vec<String>,
}

/// The kind of lock a name is in use as, as [`Client::inspect`] tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// A [`Mutex`](crate::Mutex).
    Mutex,
    /// A [`FairMutex`](crate::FairMutex).
    FairMutex,
    /// An [`RwLock`](crate::RwLock).
    RwLock,
    /// An [`Election`](crate::Election): the holder is the leader once it
    /// has proclaimed itself (see [`LockInfo::leader`]).
    Election,
    /// A [`Semaphore`](crate::Semaphore): its permits are in
    /// [`LockInfo::semaphore`].
    Semaphore,
}

impl LockKind {
    /// The kind an owner token belongs to, by its first letter; `None` for a
    /// token of no known kind (older clients, foreign writers).
    fn of_token(token: &str) -> Option<LockKind> {
        match token.chars().next() {
            Some('m') => Some(LockKind::Mutex),
            Some('q') => Some(LockKind::FairMutex),
            Some('w' | 'r') => Some(LockKind::RwLock),
            Some('l') => Some(LockKind::Election),
            Some('s') => Some(LockKind::Semaphore),
            _ => None,
        }
    }

    fn of_script(kind: &str) -> Option<LockKind> {
        match kind {
            "mutex" => Some(LockKind::Mutex),
            "fair" => Some(LockKind::FairMutex),
            "rwlock" => Some(LockKind::RwLock),
            "election" => Some(LockKind::Election),
            _ => None,
        }
    }
}

/// One hold of a lock, as [`Client::inspect`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner token.
    pub token: String,
    /// The remaining lease; `None` when the key has no expiry.
    pub ttl: Option<Duration>,
    /// The note recorded for this token with
    /// [`set_owner_note`](Client::set_owner_note), if any (`redbell run`
    /// records `host:pid`).
    pub note: Option<String>,
}

/// A snapshot of one lock of any kind, taken atomically on the server by
/// [`Client::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// What the name is in use as, told by the holder's token (which opens
    /// with its kind's letter), or else by live read holds or queued
    /// waiters; `None` when nothing of it is live, or the holder's token is
    /// of no known kind.
    pub kind: Option<LockKind>,
    /// The exclusive holder: of a Mutex, of a FairMutex (also a grant not
    /// yet confirmed), an RwLock's writer, or an Election's lock (its
    /// leader once it has proclaimed itself: see `leader`).
    pub holder: Option<Holder>,
    /// An RwLock's live read holds, soonest expiry first.
    pub readers: Vec<Holder>,
    /// The last fence handed out; `None` if none is remembered.
    pub fence: Option<u64>,
    /// Waiters queued for the lock, across all clients: a Mutex's or
    /// FairMutex's queue, an RwLock's waiting writers (waiting readers
    /// leave no trace on the server).
    pub waiters: u64,
    /// An election's leader (term and proclaimed value): the holder, once
    /// the election's leader key names it; `None` for the other kinds.
    pub leader: Option<Leader>,
    /// A semaphore's permits, holders and waiters, when the name is in use
    /// as one (then `kind` is [`LockKind::Semaphore`]); read by
    /// [`Client::inspect`] only, with a second script call when the first
    /// found none of the other kinds (a name is one kind at a time).
    /// [`Client::inspect_many`] leaves it `None`.
    pub semaphore: Option<SemaphoreStatus>,
}

impl LockInfo {
    /// The lock `name` as the inspect script's snapshot `s` shows it.
    pub(crate) fn of(name: String, s: scripts::Snapshot) -> LockInfo {
        let note = |n: String| (!n.is_empty()).then_some(n);
        let holder = (!s.holder.is_empty()).then(|| Holder {
            token: s.holder.clone(),
            ttl: u64::try_from(s.pttl).ok().map(Duration::from_millis),
            note: note(s.note),
        });
        let readers: Vec<Holder> = s
            .readers
            .into_iter()
            .map(|(token, ms, n)| Holder {
                token,
                ttl: Some(Duration::from_millis(ms)),
                note: note(n),
            })
            .collect();
        let kind = match &holder {
            Some(h) => LockKind::of_token(&h.token),
            None if !readers.is_empty() || s.intents > 0 => Some(LockKind::RwLock),
            None if s.fair > 0 => Some(LockKind::FairMutex),
            None if s.waiters > 0 => Some(LockKind::Mutex),
            None => None,
        };
        LockInfo {
            name,
            kind,
            holder,
            readers,
            fence: s.fence.parse().ok(),
            waiters: s.waiters + s.fair + s.intents,
            leader: s.term.parse().ok().map(|term| Leader {
                term,
                value: s.value,
            }),
            semaphore: None,
        }
    }
}

impl Client {
    /// Reads the state of the lock `name`, whatever its kind: its kind, its
    /// exclusive holder or readers with their leases and owner notes, the
    /// last fence and the queued waiters, in one atomic script call; when
    /// that finds nothing in use, a second one reads the name as a
    /// [`Semaphore`](crate::Semaphore) ([`LockInfo::semaphore`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name, [`Error::WrongType`] when the
    /// lock's keys hold foreign data, [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn inspect(&self, name: &str) -> Result<LockInfo, Error> {
        let keys = self.keys(name, Kind::Plain)?;
        let s = scripts::inspect(&self.0.conn, &keys, &owners_key(&keys)).await?;
        let mut info = LockInfo::of(keys.name().to_owned(), s);
        let unused = info.kind.is_none() && info.holder.is_none() && info.readers.is_empty();
        if unused && info.waiters == 0 {
            let status = self.semaphore_status(name).await?;
            if status.permits.is_some() || !status.holders.is_empty() || status.waiters > 0 {
                info.kind = Some(LockKind::Semaphore);
                info.fence = status.fence;
                info.waiters = status.waiters;
                info.semaphore = Some(status);
            }
        }
        Ok(info)
    }

    /// Breaks the lock `name` whoever holds it and whatever its kind, as an
    /// operator would, and moves it on as its holder's release would: a
    /// [`Mutex`](crate::Mutex) wakes its next waiter; a
    /// [`FairMutex`](crate::FairMutex) is granted to its next waiter; an
    /// [`RwLock`](crate::RwLock) loses its writer and all its readers, and
    /// its waiters are woken. Returns the kind broken (`None` when nothing
    /// was held; a [`Semaphore`](crate::Semaphore)'s permits are not
    /// broken, they run out with their leases) and the tokens removed. The
    /// former holders learn of it at their next renewal or unlock
    /// ([`Error::NotHeld`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name, [`Error::WrongType`] when the
    /// lock's keys hold foreign data, [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not break the lock.
    pub async fn break_lock(&self, name: &str) -> Result<BrokenLock, Error> {
        let keys = self.keys(name, Kind::Fair)?;
        let mut reply = scripts::break_lock(&self.0.conn, &keys).await?.into_iter();
        let kind = reply.next().as_deref().and_then(LockKind::of_script);
        Ok(BrokenLock {
            kind,
            tokens: reply.collect(),
        })
    }

    /// Records `note` (say, `host:pid`) for the hold `token` of the lock
    /// `name`, for [`inspect`](Client::inspect) to show, for `ttl` at least:
    /// a field of the hash `P:{N}:owners`, whose expiry is raised to `ttl`
    /// if it is shorter. Call it again as the lease is renewed, and
    /// [`clear_owner_note`](Client::clear_owner_note) at release; a note
    /// left behind (a crashed holder) is shown for no other token, and
    /// expires with the hash.
    ///
    /// Cost: one round trip (`HSET` and two `PEXPIRE`s, pipelined); the
    /// locks themselves never read the notes.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name, [`Error::InvalidLease`] for a
    /// zero or over-long `ttl`, [`Error::WrongType`] when the hash holds
    /// foreign data, [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not record the note.
    pub async fn set_owner_note(
        &self,
        name: &str,
        token: &str,
        note: &str,
        ttl: Duration,
    ) -> Result<(), Error> {
        let keys = self.keys(name, Kind::Plain)?;
        let ms = lease_ms(ttl)?;
        let owners = owners_key(&keys);
        let mut pipe = redis::pipe();
        pipe.cmd("HSET")
            .arg(&owners)
            .arg(token)
            .arg(note)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&owners)
            .arg(ms)
            .arg("NX")
            .ignore()
            .cmd("PEXPIRE")
            .arg(&owners)
            .arg(ms)
            .arg("GT")
            .ignore();
        self.owner_pipe(pipe, &owners).await
    }

    /// Removes the note [`set_owner_note`](Client::set_owner_note) recorded
    /// for `token` on the lock `name`.
    ///
    /// # Errors
    ///
    /// As [`set_owner_note`](Client::set_owner_note).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not remove the note.
    pub async fn clear_owner_note(&self, name: &str, token: &str) -> Result<(), Error> {
        let keys = self.keys(name, Kind::Plain)?;
        let owners = owners_key(&keys);
        let mut pipe = redis::pipe();
        pipe.cmd("HDEL").arg(&owners).arg(token).ignore();
        self.owner_pipe(pipe, &owners).await
    }

    async fn owner_pipe(&self, pipe: redis::Pipeline, owners: &str) -> Result<(), Error> {
        let conn = &self.0.conn;
        pipe.query_async::<()>(&mut conn.manager())
            .await
            .map_err(|e| {
                conn.report(&e);
                Error::from_redis(e, owners)
            })
    }
}

/// `P:{N}:owners`: the owner notes of a lock's holds (token -> note).
pub(crate) fn owners_key(keys: &LockKeys) -> String {
    format!("{}:owners", keys.writer())
}
