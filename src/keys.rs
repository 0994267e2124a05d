//! The shared vocabulary every other module may use, and which uses none of
//! them but [`Error`]: lock kinds, key and channel naming, name and duration
//! validation and their limits, the cluster hash slot, the replication
//! setting, the owner tokens, and the timings of the wait protocol (explained where the loop
//! runs, in `acquire.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::Error;

mod names;

pub(crate) use names::LockKeys;

/// The longest lock name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 512;

/// The shortest lease accepted: one millisecond, the unit Redis keeps
/// expiries in. A shorter one (`1 ns` meant as "at once"?) is a mistake
/// to report, not a duration to round.
pub const MIN_LEASE: Duration = Duration::from_millis(1);

/// The longest lease accepted: one year. Longer durations are almost
/// certainly a unit mistake; Redis itself overflows near `i64::MAX` ms.
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// How long a plain release reserves the free lock for the waiter it woke
/// (the hand-off key's expiry): long enough for the wake-up and the woken
/// waiter's attempt on a busy machine, short enough that a woken client that
/// died on the spot stalls nobody for long.
pub(crate) const HANDOFF_MS: u64 = 100;

/// How long a fair release's grant holds the lock for the woken waiter
/// before its attempt confirms it (and sets its lease, before its guard is
/// returned): a grant that never reaches its waiter costs the next one this
/// long.
pub(crate) const CLAIM_MS: u64 = 500;

/// How long a semaphore waiter woken for a permit keeps its place in the
/// queue before its attempt arrives (its entry's expiry is cut to this);
/// the next seven in line stand by for twice as long, so a woken waiter that
/// froze costs the others that window, not a lease.
pub(crate) const SEM_RESERVE_MS: u64 = 250;

/// How long a read-write lock's release leaves the intents of the writers it
/// woke: a live writer attempts at once (renewing its intent), so only a
/// frozen one's intent lapses, and new readers are held back no longer.
pub(crate) const INTENT_WINDOW_MS: u64 = 500;

/// Which protocol a lock follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// [`Mutex`](crate::Mutex): wake the head waiter, who then attempts.
    Plain,
    /// [`FairMutex`](crate::FairMutex): grant the lock to the head waiter
    /// inside the release.
    Fair,
    /// A reader of an [`RwLock`](crate::RwLock): the guard's token lives in
    /// the readers set.
    Read,
    /// The writer of an [`RwLock`](crate::RwLock): the guard's token is the
    /// writer key's value.
    Write,
    /// A permit of a [`Semaphore`](crate::Semaphore): the guard's token
    /// lives in the holders set; a release wakes the head waiters, who then
    /// attempt (FIFO by arrival).
    Semaphore,
    /// The lock of an [`Election`](crate::Election): the plain protocol
    /// (the same keys and scripts as [`Kind::Plain`]), with tokens of its
    /// own letter, so that the name is one kind only (see `election.rs`).
    Election,
}

impl Kind {
    /// The letter an owner token of this kind opens with, so the scripts
    /// can tell a lock name used as another kind of lock (and refuse it with
    /// [`Error::KindConflict`]).
    pub(crate) fn token_tag(self) -> char {
        match self {
            Kind::Plain => 'm',
            Kind::Fair => 'q',
            Kind::Write => 'w',
            Kind::Read => 'r',
            Kind::Semaphore => 's',
            Kind::Election => 'l',
        }
    }
}

/// `WAIT replicas timeout` after writes: see
/// [`ClientBuilder::min_replica_acks`](crate::ClientBuilder::min_replica_acks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replication {
    /// Never 0 (that is no replication, `None`): so an
    /// `Option<Replication>`, in every lock handle, is no bigger than this.
    pub(crate) replicas: std::num::NonZeroU32,
    pub(crate) timeout_ms: u64,
}

impl Replication {
    /// `WAIT replicas timeout`; `None` (off) for 0 replicas.
    pub(crate) fn new(replicas: u32, timeout: Duration) -> Option<Replication> {
        std::num::NonZeroU32::new(replicas).map(|replicas| Replication {
            replicas,
            timeout_ms: millis(timeout),
        })
    }

    /// The replicas that must acknowledge (at least 1).
    pub(crate) fn replicas(self) -> u32 {
        self.replicas.get()
    }
}

/// Checks a lock name (or prefix): non-empty, at most [`MAX_NAME_LEN`]
/// bytes, no `{` `}` (the cluster hash tag) and no control characters.
pub(crate) fn validate_name(name: &str) -> Result<(), Error> {
    let reason = if name.is_empty() {
        "the name is empty"
    } else if name.len() > MAX_NAME_LEN {
        "the name is longer than 512 bytes"
    } else if name.contains(['{', '}']) {
        "the name contains '{' or '}', which would break the cluster hash tag"
    } else if name.chars().any(char::is_control) {
        "the name contains control characters"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        name: name.chars().take(64).collect(),
        reason,
    })
}

/// The one lease rule, for every lease and lease-like duration, wherever
/// it is given: a handle's `with_lease` and `max_hold` (checked when the
/// handle is used), the builder's `default_lease`, `renew_every`,
/// `max_hold` and other durations (checked at `connect`), a guard's
/// `extend` (checked before anything is sent), an owner note's ttl.
/// Refuses zero, anything under [`MIN_LEASE`] and anything over
/// [`MAX_LEASE`] with [`Error::InvalidLease`] naming the duration given;
/// else the lease in whole milliseconds, a fractional part rounded up
/// (never down to zero).
pub(crate) fn lease_ms(lease: Duration) -> Result<u64, Error> {
    let reason = if lease.is_zero() {
        "the duration is zero"
    } else if lease < MIN_LEASE {
        "the duration is shorter than 1 ms, the least Redis can keep"
    } else if lease > MAX_LEASE {
        "the duration is longer than one year"
    } else {
        return Ok(millis(lease));
    };
    Err(Error::InvalidLease {
        duration: lease,
        reason,
    })
}

/// Whole milliseconds, for durations validated already (or harmless when
/// clamped): rounds up, never to zero, and saturates instead of failing.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its `{hash tag}` if
/// it has a non-empty one, else of the whole key, modulo 16384.
pub(crate) fn hash_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    crc16(tagged.unwrap_or(bytes)) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Where a client's owner tokens come from: the kind's tag letter (see
/// [`Kind::token_tag`]), then 32 hex digits, unique across processes and
/// clients.
///
/// The first 16 digits are random, drawn once per client; the last 16 are
/// the client's counter through a bijection (so two distinct counts never
/// give the same digits). A forked child cannot go on using its parent's
/// client (its runtime and connections stay with the parent), so a client
/// it builds draws a seed of its own. A token only has to be unique, not
/// secret (`status` shows it to anyone who can read the key), and this
/// costs no system call per acquisition: a random UUID each time did
/// (`getrandom`), and so did mixing in the process id (`getpid`).
#[derive(Debug)]
pub(crate) struct Tokens {
    seed: u64,
    count: AtomicU64,
}

impl Tokens {
    pub(crate) fn new() -> Tokens {
        Tokens {
            seed: uuid::Uuid::new_v4().as_u64_pair().0,
            count: AtomicU64::new(0),
        }
    }

    /// A fresh owner token for a lock of this kind.
    pub(crate) fn next(&self, kind: Kind) -> Token {
        let count = self.count.fetch_add(1, Ordering::Relaxed);
        let mut bytes = [0; TOKEN_LEN];
        let mut tag = [0; 4];
        bytes[0] = kind.token_tag().encode_utf8(&mut tag).as_bytes()[0];
        hex(&mut bytes[1..17], self.seed);
        hex(&mut bytes[17..], mix(count));
        Token(bytes)
    }
}

/// The length of an owner token: its tag letter and 32 hex digits.
const TOKEN_LEN: usize = 33;

/// One owner token (see [`Tokens`]), kept inline rather than in a `String`:
/// a waiter holds its token for as long as it waits, and one more heap
/// block per parked waiter is what the budget of 1 KiB each could
/// not spare. Derefs to the `str` the scripts are sent.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Token([u8; TOKEN_LEN]);

impl std::ops::Deref for Token {
    type Target = str;

    fn deref(&self) -> &str {
        // ASCII by construction (a tag letter and hex digits).
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

/// Writes `x` into `out` as lower-case hex digits, most significant first
/// (`out` is 16 bytes long: `{:016x}`).
fn hex(out: &mut [u8], x: u64) {
    let digits = out.len();
    for (i, b) in out.iter_mut().enumerate() {
        let nibble = (x >> (4 * (digits - 1 - i))) & 0xf;
        *b = b"0123456789abcdef"[nibble as usize];
    }
}

/// The splitmix64 finalizer: a bijection on `u64` that scatters nearby
/// inputs.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_name("orders:42").is_ok());
        assert!(validate_name("ünïcode ok").is_ok());
        for bad in [
            "",
            "a{b",
            "a}b",
            "line\nbreak",
            &"x".repeat(MAX_NAME_LEN + 1),
        ] {
            assert!(
                matches!(validate_name(bad), Err(Error::InvalidName { .. })),
                "{bad:?}"
            );
        }
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
    }

    #[test]
    fn leases_round_up_and_reject_nonsense() {
        assert_eq!(lease_ms(MIN_LEASE).unwrap(), 1);
        assert_eq!(lease_ms(Duration::from_micros(1500)).unwrap(), 2);
        for short in [Duration::from_nanos(1), Duration::from_micros(999)] {
            assert!(matches!(
                lease_ms(short),
                Err(Error::InvalidLease { duration, .. }) if duration == short
            ));
        }
        assert_eq!(lease_ms(Duration::from_secs(30)).unwrap(), 30_000);
        assert!(matches!(
            lease_ms(Duration::ZERO),
            Err(Error::InvalidLease { .. })
        ));
        assert!(matches!(
            lease_ms(Duration::MAX),
            Err(Error::InvalidLease { .. })
        ));
        assert!(lease_ms(MAX_LEASE).is_ok());
    }

    #[test]
    fn hash_slots_match_redis() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(hash_slot("foo"), 12182);
        assert_eq!(hash_slot("redbell:{foo}:fence"), 12182);
        assert_eq!(
            hash_slot("{user1000}.following"),
            hash_slot("{user1000}.followers")
        );
        assert_eq!(hash_slot("foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
    }

    #[test]
    fn tokens_are_unique_and_tagged_with_their_kind() {
        let tokens = Tokens::new();
        let (a, b) = (tokens.next(Kind::Plain), tokens.next(Kind::Plain));
        assert_ne!(a, b);
        assert_eq!(a.len(), 33);
        assert!(a.starts_with('m'));
        assert!(a[1..].chars().all(|c| c.is_ascii_hexdigit()));
        for kind in [Kind::Fair, Kind::Read, Kind::Write] {
            assert!(tokens.next(kind).starts_with(kind.token_tag()));
        }
        let many: std::collections::HashSet<Token> =
            (0..10_000).map(|_| tokens.next(Kind::Plain)).collect();
        assert_eq!(many.len(), 10_000);
        // Another client draws another seed (the 16 digits after the tag).
        let other = Tokens::new().next(Kind::Plain);
        assert_ne!(other[..17], a[..17]);
        // The digits are the seed's and the mixed count's, as `{:016x}`.
        assert_eq!(
            &*tokens.next(Kind::Plain),
            format!("m{:016x}{:016x}", tokens.seed, mix(10_005))
        );
    }
}
