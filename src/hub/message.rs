//! The payloads of wake channel messages, as the release scripts publish
//! them (the wire format is `PROTOCOL.md`'s), parsed apart from the routing
//! in `registry.rs` so each form has a test of its own.
//!
//! A payload is the woken queue member without its client id:
//!
//! - `<waiter id>`: a plain wake-up; the waiter attempts.
//! - `<waiter id>:?`: the probe before a fair grant, checking that we still
//!   listen; not for the waiter.
//! - `<waiter id>:<token>:g<fence>:<claim end us>`: a fair grant; the lock
//!   holds the waiter's token on a claim, and the waiter's attempt confirms
//!   it (the fence and claim end are not read: the attempt returns them).
//! - `<waiter id>:<token>:s<ms>` or `<waiter id>::s<ms>`: a standby; the
//!   waiter ahead was just woken or granted the lock, so park no longer than
//!   `<ms>`, then attempt, in case it is frozen.
//! - `<waiter id>:<token>`: a grant from an older client; the waiter
//!   attempts, as for a wake-up.

/// What a wake channel message asks of the waiter it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Notice {
    /// A fair grant's probe of our subscription: nothing to deliver.
    Probe,
    /// Attempt now (a wake-up, or an older client's grant).
    Wake,
    /// A fair grant: the lock holds the waiter's token on a claim.
    Grant,
    /// Park no longer than this many ms (at least 1), then attempt.
    Standby(u64),
}

/// One parsed wake channel payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WakeMessage {
    /// The waiter it names, within this client; `None` when the id does not
    /// parse (then no local waiter matches, and the message is handled as
    /// one for a waiter that is gone).
    pub(super) waiter: Option<u64>,
    /// What it asks.
    pub(super) notice: Notice,
}

/// Parses a payload; never fails: malformed parts read as the plainest
/// form (a bad id as no waiter, an unknown tag as a wake-up, a bad standby
/// window as 1 ms).
pub(super) fn parse(payload: &[u8]) -> WakeMessage {
    let text = std::str::from_utf8(payload).unwrap_or("");
    let mut parts = text.split(':');
    let waiter = parts.next().and_then(|id| id.parse::<u64>().ok());
    let token = parts.next().unwrap_or("");
    let tag = parts.next().unwrap_or("");
    let notice = if token == "?" {
        Notice::Probe
    } else if let Some(ms) = tag.strip_prefix('s') {
        Notice::Standby(ms.parse::<u64>().unwrap_or(1).max(1))
    } else if tag.starts_with('g') {
        Notice::Grant
    } else {
        Notice::Wake
    };
    WakeMessage { waiter, notice }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(payload: &str) -> (Option<u64>, Notice) {
        let m = parse(payload.as_bytes());
        (m.waiter, m.notice)
    }

    #[test]
    fn each_form() {
        assert_eq!(parsed("7"), (Some(7), Notice::Wake));
        assert_eq!(parsed("7:?"), (Some(7), Notice::Probe));
        assert_eq!(
            parsed("7:qabc:g1700000000:1700000500"),
            (Some(7), Notice::Grant)
        );
        assert_eq!(parsed("7:qabc:s250"), (Some(7), Notice::Standby(250)));
        assert_eq!(parsed("7::s250"), (Some(7), Notice::Standby(250)));
        assert_eq!(parsed("7:qabc"), (Some(7), Notice::Wake));
        assert_eq!(
            parsed(&format!("{}", u64::MAX)),
            (Some(u64::MAX), Notice::Wake)
        );
    }

    #[test]
    fn malformed_input_reads_as_the_plainest_form() {
        // No id, or one that is not a number: no waiter matches.
        assert_eq!(parsed(""), (None, Notice::Wake));
        assert_eq!(parsed("x"), (None, Notice::Wake));
        assert_eq!(parsed("-1"), (None, Notice::Wake));
        assert_eq!(parsed("18446744073709551616"), (None, Notice::Wake));
        assert_eq!(parsed(":?"), (None, Notice::Probe));
        // A standby window that does not parse, or 0: 1 ms, never "none".
        assert_eq!(parsed("7:t:s"), (Some(7), Notice::Standby(1)));
        assert_eq!(parsed("7:t:sx"), (Some(7), Notice::Standby(1)));
        assert_eq!(parsed("7:t:s0"), (Some(7), Notice::Standby(1)));
        // An unknown tag: a wake-up.
        assert_eq!(parsed("7:t:z9"), (Some(7), Notice::Wake));
        // Not UTF-8: no waiter.
        assert_eq!(parse(&[0xff, 0xfe]).waiter, None);
        // The probe wins over any tag after it.
        assert_eq!(parsed("7:?:s5"), (Some(7), Notice::Probe));
    }
}
