//! [`LockKeys`]: the Redis names of one lock, kept in one buffer.

use std::time::Duration;

use super::{Kind, millis, validate_name};
use crate::Error;

/// The Redis names of one lock: its keys and channels, read through the
/// methods of the same names.
///
/// Kept as one buffer, each name a span of it: a lock's keys live as long
/// as any handle or waiter of the lock, and a dozen `String`s (each a heap
/// block of its own beside its 24-byte header) were most of what a lock
/// cost its parked waiters. A name that opens another shares its bytes:
/// the writer key (holding the lock's name) opens the readers key, the
/// queue its expiries, the wake prefix the client's wake channel.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// Every name, end to end.
    names: Box<str>,
    /// Where each [`Part`] is in `names`: its start and end byte offsets.
    spans: [(u16, u16); Part::COUNT],
    /// The protocol, which picks the scripts.
    pub(crate) kind: Kind,
    /// A semaphore's permit count as this handle asks for it; 0 for the
    /// other kinds (and for a semaphore of zero permits, which is refused).
    pub(crate) permits: u32,
    /// Expiry of the fence key, in ms.
    pub(crate) fence_ttl_ms: u64,
}

/// The names a [`LockKeys`] keeps, by their index in its spans.
#[derive(Clone, Copy)]
enum Part {
    Name,
    Writer,
    Readers,
    Fence,
    Queue,
    QueueExpiry,
    Count,
    Holders,
    Handoff,
    WakePrefix,
    Channel,
}

impl Part {
    const COUNT: usize = Part::Channel as usize + 1;
}

impl LockKeys {
    /// The keys and channels of the lock `name` of `kind`, under `prefix`,
    /// as seen by the client `client_id`.
    pub(crate) fn new(
        prefix: &str,
        client_id: &str,
        name: &str,
        kind: Kind,
        fence_ttl: Duration,
    ) -> Result<LockKeys, Error> {
        validate_name(name)?;
        let queue = match kind {
            Kind::Plain | Kind::Election => ":waiters",
            Kind::Fair => ":fifo",
            Kind::Semaphore => ":queue",
            Kind::Read | Kind::Write => ":writers",
        };
        let base = [prefix, ":{", name, "}"];
        let base_len: usize = base.iter().map(|s| s.len()).sum();
        let rw = matches!(kind, Kind::Read | Kind::Write);
        // Sized exactly (the runs below): no slack, and no copy to drop it.
        let len = if rw {
            8 * base_len + 9
        } else {
            7 * base_len + 6 + client_id.len()
        } + ":readers:expiry:permits:holders:handoff:fence".len()
            + queue.len();
        let mut names = String::with_capacity(len);
        // Appends a run: the base key `P:{N}`, then each suffix in turn;
        // the spans of the base and of the base with its first suffix, and
        // with its first two (unused ones repeat the last).
        let mut run = |suffixes: &[&str]| {
            let start = names.len();
            names.extend(base);
            let mut spans = [(start, names.len()); 3];
            for (i, suffix) in suffixes.iter().enumerate() {
                names.push_str(suffix);
                spans[i + 1..].fill((start, names.len()));
            }
            spans
        };
        let [writer, readers, _] = run(&[":readers"]);
        let [_, queue, queue_expiry] = run(&[queue, ":expiry"]);
        let (wake_prefix, channel) = if rw {
            // Read-write locks broadcast on one channel per lock.
            (run(&[":wake:"])[1], run(&[":rw"])[1])
        } else {
            let [_, prefix, channel] = run(&[":wake:", client_id]);
            (prefix, channel)
        };
        let count = run(&[":permits"])[1];
        let holders = run(&[":holders"])[1];
        let handoff = run(&[":handoff"])[1];
        let fence = run(&[":fence"])[1];
        // `P:{N}` without `P:{` and `}`.
        let name_span = (writer.0 + prefix.len() + 2, writer.1 - 1);
        let mut spans = [(0, 0); Part::COUNT];
        for (part, (start, end)) in [
            (Part::Name, name_span),
            (Part::Writer, writer),
            (Part::Readers, readers),
            (Part::Fence, fence),
            (Part::Queue, queue),
            (Part::QueueExpiry, queue_expiry),
            (Part::Count, count),
            (Part::Holders, holders),
            (Part::Handoff, handoff),
            (Part::WakePrefix, wake_prefix),
            (Part::Channel, channel),
        ] {
            // Never over: a name and a prefix are at most 512 bytes each.
            let (Ok(start), Ok(end)) = (u16::try_from(start), u16::try_from(end)) else {
                return Err(Error::InvalidName {
                    name: name_of(&names, name_span),
                    reason: "the lock's keys are longer than 64 KiB together",
                });
            };
            spans[part as usize] = (start, end);
        }
        debug_assert_eq!(names.len(), len);
        Ok(LockKeys {
            names: names.into_boxed_str(),
            spans,
            kind,
            permits: 0,
            fence_ttl_ms: millis(fence_ttl),
        })
    }

    fn part(&self, part: Part) -> &str {
        let (start, end) = self.spans[part as usize];
        // On char boundaries by construction (each span ends where a piece
        // ended); never the empty fallback.
        self.names
            .get(usize::from(start)..usize::from(end))
            .unwrap_or_default()
    }

    /// The name the user gave.
    pub(crate) fn name(&self) -> &str {
        self.part(Part::Name)
    }

    /// Where the guard's token lives, by kind: `P:{N}` (the owner's token,
    /// with the lease as its expiry), `P:{N}:readers` for a reader, or
    /// `P:{N}:holders` for a semaphore permit (token -> expiry ms).
    pub(crate) fn token_key(&self) -> &str {
        match self.kind {
            Kind::Read => self.readers(),
            Kind::Semaphore => self.holders(),
            Kind::Plain | Kind::Fair | Kind::Write | Kind::Election => self.writer(),
        }
    }

    /// `P:{N}`: a read-write lock's writer key.
    pub(crate) fn writer(&self) -> &str {
        self.part(Part::Writer)
    }

    /// `P:{N}:readers`: a read-write lock's readers (token -> expiry ms).
    pub(crate) fn readers(&self) -> &str {
        self.part(Part::Readers)
    }

    /// `P:{N}:fence`: the fencing counter.
    pub(crate) fn fence(&self) -> &str {
        self.part(Part::Fence)
    }

    /// The waiter queue, by kind: `P:{N}:waiters` (plain: member -> expiry),
    /// `P:{N}:fifo` (fair: member -> arrival), `P:{N}:queue` (semaphore:
    /// member -> arrival) or `P:{N}:writers` (read-write: waiting writers'
    /// intents, member -> expiry).
    pub(crate) fn queue(&self) -> &str {
        self.part(Part::Queue)
    }

    /// The queue's expiries, member -> expiry: `P:{N}:queue:expiry`
    /// (semaphore); the fair queue has none (`P:{N}:fifo:expiry`, written
    /// by older clients, is only deleted).
    pub(crate) fn queue_expiry(&self) -> &str {
        self.part(Part::QueueExpiry)
    }

    /// `P:{N}:permits`: a semaphore's permit count; it lives while any
    /// permit does, so the RwLock's acquires, reading it with the fence,
    /// look for live permits only when it exists (one kind per name).
    pub(crate) fn count(&self) -> &str {
        self.part(Part::Count)
    }

    /// `P:{N}:holders`: a semaphore's permits (token -> expiry ms); the
    /// other kinds' acquires only look for live ones (one kind per name).
    pub(crate) fn holders(&self) -> &str {
        self.part(Part::Holders)
    }

    /// `P:{N}:handoff`: the fair queue's standby marker (the waiter told to
    /// stand by, and by when it should have attempted). The plain mutex
    /// keeps its hand-off reservation in the lock key itself.
    pub(crate) fn handoff(&self) -> &str {
        self.part(Part::Handoff)
    }

    /// `P:{N}:wake:`: a client's wake channel is this plus its id.
    pub(crate) fn wake_prefix(&self) -> &str {
        self.part(Part::WakePrefix)
    }

    /// The channel this client listens on for the lock:
    /// `P:{N}:wake:<our id>`, or `P:{N}:rw` for a read-write lock.
    pub(crate) fn channel(&self) -> &str {
        self.part(Part::Channel)
    }
}

/// The lock's name, from its span in `names`, cut as errors show names.
fn name_of(names: &str, (start, end): (usize, usize)) -> String {
    names
        .get(start..end)
        .unwrap_or_default()
        .chars()
        .take(64)
        .collect()
}

impl std::fmt::Debug for LockKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockKeys")
            .field("name", &self.name())
            .field("kind", &self.kind)
            .field("channel", &self.channel())
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{MAX_NAME_LEN, hash_slot};

    #[test]
    fn every_key_of_a_lock_shares_its_hash_tag() {
        for kind in [
            Kind::Plain,
            Kind::Fair,
            Kind::Read,
            Kind::Write,
            Kind::Semaphore,
            Kind::Election,
        ] {
            let k = LockKeys::new("p", "c", "n", kind, Duration::from_secs(1)).unwrap();
            let slot = hash_slot(k.token_key());
            for key in [
                k.writer(),
                k.readers(),
                k.fence(),
                k.queue(),
                k.queue_expiry(),
                k.handoff(),
                k.channel(),
                k.count(),
                k.holders(),
            ] {
                assert_eq!(hash_slot(key), slot, "{key}");
            }
        }
    }

    #[test]
    fn each_key_is_named_as_the_protocol_says() {
        let id = "0123456789abcdef0123456789abcdef";
        let ttl = Duration::from_secs(7);
        for (kind, queue, channel, token_key) in [
            (Kind::Plain, "waiters", "wake:<id>", ""),
            (Kind::Election, "waiters", "wake:<id>", ""),
            (Kind::Fair, "fifo", "wake:<id>", ""),
            (Kind::Semaphore, "queue", "wake:<id>", ":holders"),
            (Kind::Read, "writers", "rw", ":readers"),
            (Kind::Write, "writers", "rw", ""),
        ] {
            let k = LockKeys::new("app", id, "orders:42 ü", kind, ttl).unwrap();
            let key = |suffix: &str| format!("app:{{orders:42 ü}}{suffix}");
            assert_eq!(k.name(), "orders:42 ü");
            assert_eq!(k.writer(), key(""));
            assert_eq!(k.token_key(), key(token_key), "{kind:?}");
            assert_eq!(k.readers(), key(":readers"));
            assert_eq!(k.fence(), key(":fence"));
            assert_eq!(k.queue(), key(&format!(":{queue}")), "{kind:?}");
            assert_eq!(k.queue_expiry(), key(&format!(":{queue}:expiry")));
            assert_eq!(k.count(), key(":permits"));
            assert_eq!(k.holders(), key(":holders"));
            assert_eq!(k.handoff(), key(":handoff"));
            assert_eq!(k.wake_prefix(), key(":wake:"));
            assert_eq!(
                k.channel(),
                key(&format!(":{}", channel.replace("<id>", id))),
                "{kind:?}"
            );
            assert_eq!((k.kind, k.permits, k.fence_ttl_ms), (kind, 0, 7_000));
        }
        // The longest name under the longest prefix still fits.
        let long = "x".repeat(MAX_NAME_LEN);
        let k = LockKeys::new(&long, id, &long, Kind::Semaphore, ttl).unwrap();
        assert_eq!(k.name(), long);
        assert_eq!(k.channel(), format!("{long}:{{{long}}}:wake:{id}"));
    }
}
