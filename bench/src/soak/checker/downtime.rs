//! The servers' downtime a free wait is allowed on top of its bound: the
//! time covered by the server faults near it, each counted once.

/// The length of the union of `spans` (`(from, until)`, in µs; `None`
/// when there are none). Faults one after another each add their own
/// downtime, since a waiter cannot be granted through any of them; faults
/// that overlap add the time they cover together, not each its own.
pub fn union_len(spans: impl IntoIterator<Item = (u64, u64)>) -> Option<u64> {
    let mut spans: Vec<(u64, u64)> = spans.into_iter().collect();
    if spans.is_empty() {
        return None;
    }
    spans.sort_unstable();
    let mut total = 0;
    let (mut from, mut until) = spans[0];
    for &(a, b) in &spans[1..] {
        if a > until {
            total += until.saturating_sub(from);
            (from, until) = (a, b);
        } else {
            until = until.max(b);
        }
    }
    Some(total + until.saturating_sub(from))
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::union_len;

    #[test]
    fn spans_in_a_row_add_up_and_overlaps_count_once() {
        assert_eq!(union_len([]), None);
        assert_eq!(union_len([(5, 5)]), Some(0));
        assert_eq!(union_len([(0, 10), (20, 25)]), Some(15));
        assert_eq!(union_len([(20, 25), (0, 10), (5, 12)]), Some(17));
        assert_eq!(union_len([(0, 10), (2, 3)]), Some(10));
    }

    fn rec(worker: &str, event: Event, fence: Option<u64>, start: u64, end: Option<u64>) -> Record {
        Record {
            worker: worker.into(),
            kind: "mutex".into(),
            lock: "L".into(),
            event,
            seq: 1,
            fence,
            start_us: start,
            end_us: end,
            outcome: None,
            permits: None,
            pid: None,
            ppid: None,
        }
    }

    fn server(at_us: u64, until_us: u64) -> Fault {
        Fault {
            at_us,
            kind: FaultKind::KillThenFailover,
            worker: None,
            until_us: Some(until_us),
        }
    }

    /// `a` lets go at 1 s; `b`, waiting since 0.5 s, gets the lock at
    /// 7.4 s, through three failovers of 1 s, 1 s and 2 s in a row: the
    /// wait is within the lease, 1 s and the 4 s the servers were down,
    /// not within the lease, 1 s and the longest of them alone (4.5 s).
    #[test]
    fn a_free_wait_through_server_faults_in_a_row_gets_their_downtime() {
        let r = vec![
            rec("a", Event::Wait, None, 0, None),
            rec("a", Event::Acquired, Some(10), 0, Some(100)),
            rec("a", Event::Hold, Some(10), 100, Some(1_000_000)),
            rec("b", Event::Wait, None, 500_000, None),
            rec("b", Event::Acquired, Some(11), 500_000, Some(7_400_000)),
            rec("b", Event::Hold, Some(11), 7_400_000, Some(7_400_100)),
        ];
        let faults = [
            server(900_000, 1_900_000),
            server(2_500_000, 3_500_000),
            server(3_900_000, 5_900_000),
        ];
        let v = check(&r, &faults, 1_500_000);
        assert_eq!(v.longest_free_wait_after_fault_us, 6_400_000);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        // Past the lease, 1 s and those 4 s, it is over its bound.
        let mut late = r.clone();
        late[4].end_us = Some(8_600_000);
        late[5].start_us = 8_600_000;
        late[5].end_us = Some(8_600_100);
        let v = check(&late, &faults, 1_500_000);
        assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
        assert!(v.violations[0].bound.ends_with("<= 6500 ms"));
    }
}
