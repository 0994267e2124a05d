//! The checker's unit tests: hand-made logs with a known verdict.

use super::*;

fn rec(
    worker: &str,
    event: Event,
    seq: u64,
    fence: Option<u64>,
    start: u64,
    end: Option<u64>,
    outcome: Option<&str>,
) -> Record {
    Record {
        worker: worker.into(),
        kind: "mutex".into(),
        lock: "L".into(),
        event,
        seq,
        fence,
        start_us: start,
        end_us: end,
        outcome: outcome.map(str::to_owned),
        permits: None,
        pid: None,
        ppid: None,
    }
}

/// A full critical section: wait from `w`, hold [a, b], write in it.
fn section(
    worker: &str,
    seq: u64,
    fence: u64,
    w: u64,
    a: u64,
    b: u64,
    outcome: &str,
) -> Vec<Record> {
    vec![
        rec(worker, Event::Wait, seq, None, w, None, None),
        rec(worker, Event::Acquired, seq, Some(fence), w, Some(a), None),
        rec(
            worker,
            Event::Write,
            seq,
            Some(fence),
            a + 1,
            Some(a + 2),
            Some(outcome),
        ),
        rec(worker, Event::Hold, seq, Some(fence), a, Some(b), None),
    ]
}

const LEASE: u64 = 1_500_000;

/// A SIGKILL of `worker` at `at_us`.
fn kill(worker: &str, at_us: u64) -> Fault {
    Fault {
        at_us,
        kind: FaultKind::Sigkill,
        worker: Some(worker.into()),
        until_us: None,
    }
}

/// A stop of `worker` (`kind`: a SIGSTOP of a holder or of a woken waiter)
/// from `at_us` until `until_us`.
fn stop(kind: FaultKind, worker: &str, at_us: u64, until_us: u64) -> Fault {
    Fault {
        at_us,
        kind,
        worker: Some(worker.into()),
        until_us: Some(until_us),
    }
}

#[test]
fn a_clean_run_passes() {
    let mut r = section("a", 1, 10, 0, 10, 1_000, "accepted");
    r.extend(section("b", 1, 11, 5, 1_100, 2_000, "accepted"));
    let v = check(&r, &[], LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!(v.acquisitions["mutex"], 2);
    assert_eq!(v.longest_free_wait_us, 100);
}

#[test]
fn reports_a_double_grant() {
    let mut r = section("a", 1, 10, 0, 10, 1_000, "accepted");
    r.extend(section("b", 1, 11, 5, 500, 2_000, "accepted"));
    let v = check(&r, &[], LEASE);
    assert_eq!(v.overlaps_unexplained, 1);
    assert_eq!(v.violations[0].bound, "unexplained overlapping holds = 0");
    assert_eq!(
        (v.violations[0].start_us, v.violations[0].end_us),
        (500, 1_000)
    );
}

#[test]
fn an_overlap_of_a_stopped_holder_is_explained() {
    let mut r = section("a", 1, 10, 0, 10, 3_000_000, "rejected");
    r.extend(section("b", 1, 11, 5, 2_000_000, 2_100_000, "accepted"));
    let v = check(&r, &[stop(FaultKind::Sigstop, "a", 20, 2_900_000)], LEASE);
    assert_eq!((v.overlaps_explained, v.overlaps_unexplained), (1, 0));
    assert!(v.violations.is_empty(), "{:?}", v.violations);
}

#[test]
fn reports_a_stale_accepted_write() {
    let mut r = section("a", 1, 20, 0, 10, 1_000, "accepted");
    r.extend(section("b", 1, 11, 5, 1_100, 2_000, "accepted"));
    let v = check(&r, &[], LEASE);
    assert_eq!(v.stale_writes_accepted, 1);
    assert!(
        v.violations
            .iter()
            .any(|x| x.bound == "stale writes accepted = 0" && x.end_us == 1_102)
    );
}

#[test]
fn reports_a_stranded_waiter_and_a_long_free_wait() {
    let mut r = section("a", 1, 10, 0, 10, 1_000, "accepted");
    r.extend(section("b", 1, 11, 5, 2_000_000, 2_000_100, "accepted"));
    r.push(rec("c", Event::Wait, 1, None, 2_500_000, None, None));
    let v = check(&r, &[], LEASE);
    assert_eq!(v.stranded_waiters, 1);
    assert!(
        v.violations
            .iter()
            .any(|x| x.bound == "stranded waiters = 0" && x.start_us == 2_500_000)
    );
    assert!(
        v.violations
            .iter()
            .any(|x| x.bound.starts_with("lock free") && x.start_us == 1_000)
    );
    assert_eq!(v.longest_free_wait_us, 2_000_000 - 1_000);
}

fn as_kind(mut r: Vec<Record>, kind: &str) -> Vec<Record> {
    for x in &mut r {
        x.kind = kind.into();
    }
    r
}

#[test]
fn readers_may_overlap_each_other_but_not_a_writer() {
    let mut r = as_kind(section("a", 1, 10, 0, 10, 1_000, "accepted"), READER);
    r.extend(as_kind(
        section("b", 1, 10, 5, 500, 2_000, "accepted"),
        READER,
    ));
    let v = check(&r, &[], LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    r.extend(as_kind(
        section("c", 1, 11, 5, 1_500, 2_500, "accepted"),
        "rw-write",
    ));
    let v = check(&r, &[], LEASE);
    assert_eq!(v.overlaps_unexplained, 1);
    assert!(
        v.violations[0].detail.contains("b and c"),
        "{:?}",
        v.violations
    );
}

#[test]
fn a_waiter_frozen_right_after_its_grant_is_explained() {
    // b is granted fence 10 at about 100, frozen until 2_000_000, logs
    // its hold then; a got fence 11 once b's lease ran out.
    let mut r = section("a", 1, 11, 5, 1_990_000, 2_005_000, "accepted");
    r.extend(section("b", 1, 10, 50, 2_000_100, 2_010_000, "rejected"));
    let frozen = stop(FaultKind::SigstopWaiter, "b", 150, 2_000_000);
    let v = check(&r, std::slice::from_ref(&frozen), LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!(v.overlaps_explained, 1);
    // With the higher fence, b's overlap is not explained.
    let mut r = section("a", 1, 10, 5, 1_990_000, 2_005_000, "accepted");
    r.extend(section("b", 1, 11, 50, 2_000_100, 2_010_000, "accepted"));
    assert_eq!(check(&r, &[frozen], LEASE).overlaps_unexplained, 1);
}

/// The stop of a woken waiter is sent at `at_us` (before `kill` runs) and
/// may land late: after the waiter was granted the lock, ran its section
/// and logged the end of its hold, but before it released (a `redbell run`
/// worker releases after its command exits). Its lock then stays taken
/// until its lease runs out: a holder's fault, with its bound. (The soak
/// saw this: seed 7211279904243670056, single, 1,497 ms judged against
/// 1 s.)
#[test]
fn a_woken_waiter_stopped_only_after_its_section_is_a_holder_fault() {
    // b, woken, is to be stopped from 100; it gets the lock at 110 anyway,
    // holds until 10_000, and is frozen before its release: a takes over
    // when b's lease runs out.
    let mut r = section("b", 1, 10, 50, 110, 10_000, "accepted");
    r.extend(section("a", 1, 11, 5, 1_510_000, 1_520_000, "accepted"));
    let frozen = stop(FaultKind::SigstopWaiter, "b", 100, 2_300_000);
    let v = check(&r, std::slice::from_ref(&frozen), LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!(v.longest_free_wait_after_fault_us, 1_500_000);
    // A waiter stopped after a hold it had let go of before the stop is
    // no holder fault: the same gap breaks the bound.
    let early = stop(FaultKind::SigstopWaiter, "b", 20_000, 2_300_000);
    assert_eq!(check(&r, &[early], LEASE).violations.len(), 1);
}

#[test]
fn a_killed_holder_gets_the_lease_and_its_wait_ends() {
    let mut r = vec![
        rec("a", Event::Wait, 1, None, 0, None, None),
        rec("a", Event::Acquired, 1, Some(10), 0, Some(10), None),
        rec("a", Event::Wait, 2, None, 100, None, None),
    ];
    r.truncate(2);
    r.extend(section("b", 1, 11, 5, 2_000_000, 2_000_100, "accepted"));
    let v = check(&r, &[kill("a", 20)], LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!(v.longest_free_wait_after_fault_us, 2_000_000 - 20);
    assert_eq!(v.faults["SIGKILL worker"], 1);
}

/// A section of a 2-permit semaphore's worker: no store writes.
fn permit(worker: &str, seq: u64, fence: u64, w: u64, a: u64, b: u64) -> Vec<Record> {
    let mut r = killed_permit(worker, seq, fence, w, a);
    r.push(rec(worker, Event::Hold, seq, Some(fence), a, Some(b), None));
    as_permit(r)
}

/// The start of a 2-permit semaphore worker's section whose hold never
/// ended (killed holding): waiting from `w`, the permit got at `a`.
fn killed_permit(worker: &str, seq: u64, fence: u64, w: u64, a: u64) -> Vec<Record> {
    as_permit(vec![
        rec(worker, Event::Wait, seq, None, w, None, None),
        rec(worker, Event::Acquired, seq, Some(fence), w, Some(a), None),
    ])
}

fn as_permit(mut r: Vec<Record>) -> Vec<Record> {
    for x in &mut r {
        x.kind = "sem".into();
        x.permits = Some(2);
    }
    r
}

#[test]
fn two_permits_may_be_held_at_once() {
    let mut r = permit("a", 1, 10, 0, 10, 1_000);
    r.extend(permit("b", 1, 11, 5, 500, 2_000));
    r.extend(permit("c", 1, 12, 6, 1_100, 2_500));
    let v = check(&r, &[], LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!((v.overlaps_explained, v.overlaps_unexplained), (0, 0));
    assert_eq!(v.acquisitions["sem"], 3);
    // c waited while a permit was free from 1_000 (a let go) to 1_100.
    assert_eq!(v.longest_free_wait_us, 100);
}

#[test]
fn a_third_permit_holder_is_a_violation() {
    let mut r = permit("a", 1, 10, 0, 10, 1_000);
    r.extend(permit("b", 1, 11, 5, 500, 2_000));
    r.extend(permit("c", 1, 12, 6, 800, 2_500));
    let v = check(&r, &[], LEASE);
    assert_eq!(v.overlaps_unexplained, 1);
    let x = &v.violations[0];
    assert_eq!(x.bound, "unexplained overlapping holds = 0");
    assert_eq!((x.start_us, x.end_us), (800, 1_000));
    assert!(
        x.detail
            .contains("c got one of 2 permits while a, b held them"),
        "{}",
        x.detail
    );
    // The same three on a plain lock: a pair each.
    let mutex: Vec<Record> = r
        .iter()
        .cloned()
        .map(|mut x| {
            x.permits = None;
            x
        })
        .collect();
    assert_eq!(check(&mutex, &[], LEASE).overlaps_unexplained, 3);
}

#[test]
fn a_third_permit_holder_beside_a_stopped_one_is_explained() {
    // a is stopped past its lease while holding; its permit expires and c
    // takes it while b holds the other.
    let mut r = permit("a", 1, 10, 0, 10, 3_000_000);
    r.extend(permit("b", 1, 11, 5, 500, 2_500_000));
    r.extend(permit("c", 1, 12, 6, 2_000_000, 2_100_000));
    let v = check(&r, &[stop(FaultKind::Sigstop, "a", 20, 2_900_000)], LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!((v.overlaps_explained, v.overlaps_unexplained), (1, 0));
    assert_eq!(v.overlaps_by_cause["SIGSTOP past the lease"], 1);
}

#[test]
fn a_permit_free_while_a_live_waiter_waits_is_a_violation() {
    // b holds throughout; a lets go at 1_000 and c, waiting since 500,
    // gets the free permit only at 2_001_000.
    let mut r = permit("a", 1, 10, 0, 10, 1_000);
    r.extend(permit("b", 1, 11, 5, 500, 3_000_000));
    r.extend(permit("c", 1, 12, 500, 2_001_000, 2_002_000));
    let v = check(&r, &[], LEASE);
    assert_eq!(v.longest_free_wait_us, 2_000_000);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    let x = &v.violations[0];
    assert_eq!(x.bound, "permit free while a live waiter waited <= 1000 ms");
    assert_eq!((x.start_us, x.end_us), (1_000, 2_001_000));
    // With both permits taken meanwhile there is nothing free to wait for.
    let mut r = permit("a", 1, 10, 0, 10, 2_001_000);
    r.extend(permit("b", 1, 11, 5, 500, 3_000_000));
    r.extend(permit("c", 1, 12, 500, 2_001_000, 2_002_000));
    let v = check(&r, &[], LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
}

#[test]
fn a_killed_permit_holder_excuses_its_permit_but_not_the_other() {
    // a is killed holding (its permit stays taken until its lease runs
    // out); b holds the other; c gets a's permit 2 s later.
    let mut r = killed_permit("a", 1, 10, 0, 10);
    r.extend(permit("b", 1, 11, 5, 500, 3_000_000));
    r.extend(permit("c", 1, 12, 600, 2_000_000, 2_001_000));
    let v = check(&r, &[kill("a", 1_000)], LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!(v.longest_free_wait_after_fault_us, 2_000_000 - 1_000);
    // Stopping b, which still holds the other permit, excuses nothing.
    let mut r = permit("a", 1, 10, 0, 10, 1_000);
    r.extend(permit("b", 1, 11, 5, 500, 3_000_000));
    r.extend(permit("c", 1, 12, 600, 2_000_000, 2_001_000));
    let v = check(
        &r,
        &[stop(FaultKind::Sigstop, "b", 1_500, 2_900_000)],
        LEASE,
    );
    assert_eq!(v.longest_free_wait_us, 2_000_000 - 1_000);
    assert!(v.violations[0].bound.starts_with("permit free"));
}

#[test]
fn a_second_killed_permit_holder_extends_the_first_ones_excuse() {
    // a is killed holding one permit at 1_000; b lets go of the other at
    // 1_200_000, takes it again and is killed holding it at 1_300_000. c,
    // waiting since 600, cycles through a's permit once it expires; d, also
    // waiting, gets b's only at 2_750_000: 2.75 s after a let go, but within
    // a lease and 1 s of b's kill.
    let mut r = killed_permit("a", 1, 10, 0, 10);
    r.extend(permit("b", 1, 11, 5, 500, 1_200_000));
    r.extend(killed_permit("b", 2, 12, 1_200_100, 1_200_200));
    r.extend(permit("c", 1, 13, 600, 1_510_000, 1_520_000));
    r.extend(permit("c", 2, 14, 1_520_100, 1_520_200, 1_530_000));
    r.extend(permit("d", 1, 15, 700, 2_750_000, 2_760_000));
    let faults = [kill("a", 1_000), kill("b", 1_300_000)];
    let v = check(&r, &faults, LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    // Without b's kill to explain the rest, the same wait is too long.
    let v = check(&r, &faults[..1], LEASE);
    assert!(
        v.violations
            .iter()
            .any(|x| x.bound.starts_with("permit free")),
        "{:?}",
        v.violations
    );
}

/// A `redbell run` command's lines in the unfenced log, from `a` to `b`
/// (one every 100 ms), and its section (acquired at `a`, held until `b`).
fn command(worker: &str, seq: u64, fence: u64, a: u64, b: u64) -> Vec<Record> {
    let mut r = as_kind(section(worker, seq, fence, a, a, b, "accepted"), RUN);
    let line =
        |event, t| as_kind(vec![rec(worker, event, seq, None, t, None, None)], RUN).remove(0);
    r.push(line(Event::RunStart, a));
    r.extend(
        (a + 100_000..b)
            .step_by(100_000)
            .map(|t| line(Event::RunLine, t)),
    );
    r.push(line(Event::RunEnd, b));
    r
}

#[test]
fn run_commands_one_after_another_pass() {
    let mut r = command("a", 1, 10, 0, 3_000_000);
    r.extend(command("b", 1, 11, 3_010_000, 6_000_000));
    let v = check(&r, &[], LEASE);
    assert_eq!(v.run_overlaps, 0);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
}

#[test]
fn overlapping_run_commands_are_flagged_whatever_the_fault() {
    // a's redbell run frozen 100 ms into a's command; the lease ran out and
    // b's command started while a's ran on: no fault of a worker excuses
    // it (a plain SIGSTOP would excuse a library worker's overlap).
    let mut r = command("a", 1, 10, 0, 3_000_000);
    r.extend(command("b", 1, 11, 1_600_000, 4_600_000));
    for kind in [FaultKind::SigstopRun, FaultKind::Sigstop] {
        let v = check(&r, &[stop(kind, "a", 100_000, 2_300_000)], LEASE);
        assert_eq!(v.run_overlaps, 1, "{kind:?}");
        let x = &v.violations[0];
        assert_eq!(x.bound, "redbell run commands running at once = 0");
        assert_eq!((x.start_us, x.end_us), (1_600_000, 3_000_000));
        assert!(x.detail.contains("1400 ms"), "{}", x.detail);
    }
    // A restart that may have lost a's grant explains it.
    let restart = Fault {
        at_us: 1_000_000,
        kind: FaultKind::Restart,
        worker: None,
        until_us: Some(1_200_000),
    };
    let v = check(&r, &[restart], LEASE);
    assert_eq!(v.run_overlaps, 0);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
}

#[test]
fn a_command_killed_mid_run_held_until_its_last_line() {
    // a's command killed (no end line, no hold) after its line at 1.0 s:
    // b's start at 2.6 s, a lease after, is no free wait past the bound.
    let mut r: Vec<Record> = command("a", 1, 10, 0, 3_000_000)
        .into_iter()
        .filter(|x| x.start_us <= 1_000_000 && !matches!(x.event, Event::Hold | Event::RunEnd))
        .collect();
    r.push(
        as_kind(
            vec![rec("b", Event::Wait, 1, None, 500_000, None, None)],
            RUN,
        )
        .remove(0),
    );
    r.extend(
        command("b", 1, 11, 2_600_000, 5_600_000)
            .into_iter()
            .skip(1),
    );
    let v = check(
        &r,
        &[stop(FaultKind::SigstopRun, "a", 100_000, 2_300_000)],
        LEASE,
    );
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!(v.longest_free_wait_after_fault_us, 1_600_000);
}

/// A black hole of `worker`'s connections at `at_us`.
fn black_hole(worker: &str, at_us: u64) -> Fault {
    Fault {
        at_us,
        kind: FaultKind::BlackHole,
        worker: Some(worker.into()),
        until_us: Some(at_us + 5_000_000),
    }
}

#[test]
fn a_black_holed_worker_must_get_a_lock_again_in_time() {
    // Bound: 2 x 2 s + 1 s, + the lease (1.5 s) and 1 s = 7.5 s.
    let base = || {
        let mut r = section("a", 1, 10, 0, 10, 1_000, "accepted");
        r.extend(section("b", 1, 11, 0, 2_000, 3_000, "accepted"));
        // The run goes on to 20 s.
        r.extend(section(
            "b", 2, 14, 19_000_000, 19_000_000, 20_000_000, "accepted",
        ));
        r
    };
    // Back after 7 s: within the bound.
    let mut r = base();
    r.extend(section("a", 2, 13, 1_000, 7_001_000, 7_002_000, "accepted"));
    let v = check(&r, &[black_hole("a", 1_000)], LEASE);
    assert_eq!(v.longest_black_hole_recovery_us, 7_000_000);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    // After 9 s: too late (and the lock sat free while it waited, once its
    // 5 s of not being live were over).
    let mut r = base();
    r.extend(section("a", 2, 13, 1_000, 9_001_000, 9_002_000, "accepted"));
    let v = check(&r, &[black_hole("a", 1_000)], LEASE);
    let bounds: Vec<&str> = v.violations.iter().map(|x| x.bound.as_str()).collect();
    assert_eq!(
        bounds,
        [
            "a black-holed worker gets a lock again <= 7500 ms",
            "lock free while a live waiter waited <= 2500 ms"
        ]
    );
    // Never again (every later call failed): too.
    let mut r = base();
    for seq in 2..10 {
        let t = seq * 2_000_000;
        r.push(rec("a", Event::Wait, seq, None, t, None, None));
        r.push(rec(
            "a",
            Event::Error,
            seq,
            None,
            t,
            Some(t + 2_000_000),
            Some("lock:Timeout"),
        ));
    }
    let v = check(&r, &[black_hole("a", 1_000)], LEASE);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert!(
        v.violations[0].detail.contains("never got a lock again"),
        "{:?}",
        v.violations
    );
    // Unless it was killed meanwhile (a fresh worker took its place).
    let v = check(&r, &[black_hole("a", 1_000), kill("a", 3_000_000)], LEASE);
    assert!(
        v.violations
            .iter()
            .all(|x| !x.bound.contains("black-holed")),
        "{:?}",
        v.violations
    );
}

#[test]
fn a_stopped_command_must_end_soon_after_sigterm() {
    let term = |at: u64| Fault {
        at_us: at - 300_000,
        kind: FaultKind::SigstopCommand,
        worker: Some("a".into()),
        until_us: Some(at),
    };
    let mut r = command("a", 1, 10, 0, 1_000_000);
    r.extend(command("b", 1, 11, 10_000_000, 13_000_000));
    // Its redbell run exits 143 2 s after the SIGTERM at 1 s: in time.
    let mut ok = r.clone();
    ok.push(rec(
        "a",
        Event::Error,
        1,
        None,
        0,
        Some(3_000_000),
        Some("run:exit:143"),
    ));
    let v = check(&ok, &[term(1_000_000)], LEASE);
    assert_eq!(v.longest_stopped_command_end_us, 2_000_000);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    // Never exits (held and renewed for good): a violation.
    let v = check(&r, &[term(1_000_000)], LEASE);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert_eq!(
        v.violations[0].bound,
        "a stopped command ended and its lock freed <= 2500 ms after SIGTERM"
    );
}

#[test]
fn a_frozen_pool_excuses_no_free_wait_of_another_worker() {
    // p frozen at 100 ms for 2.2 s; b gets the lock at 1.4 s.
    let r = frozen_pool_records(1_400_000);
    let v = check(
        &r,
        &[stop(FaultKind::FreezePool, "p", 100_000, 2_300_000)],
        LEASE,
    );
    assert_eq!(v.longest_free_wait_us, 1_399_000);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert_eq!(
        v.violations[0].bound,
        "lock free while a live waiter waited <= 1000 ms"
    );
    // The frozen tasks' own waits do not count: b got it in time.
    let r2 = frozen_pool_records(500_000);
    let v = check(
        &r2,
        &[stop(FaultKind::FreezePool, "p", 100_000, 2_300_000)],
        LEASE,
    );
    assert!(v.violations.is_empty(), "{:?}", v.violations);
}

#[test]
fn a_pool_stopped_as_the_release_wakes_it_is_a_holder_fault() {
    // As above, but p is stopped 0.25 ms after a lets go: its woken task's
    // attempt may have taken the hand-off with a full lease, its reply
    // unread, and its wait logs only a later grant. A lease bounds that
    // gap, not the 1 s; a stop 100 ms later still gets the 1 s.
    let r = frozen_pool_records(1_400_000);
    let v = check(
        &r,
        &[stop(FaultKind::FreezePool, "p", 1_250, 2_300_000)],
        LEASE,
    );
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!(v.longest_free_wait_after_fault_us, 1_399_000);
    let v = check(
        &r,
        &[stop(FaultKind::FreezePool, "p", 100_000, 2_300_000)],
        LEASE,
    );
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
}

#[test]
fn a_grant_is_dated_by_the_lease_that_ended_the_gap() {
    // p is stopped 40 ms after a lets go, and b gets the lock 1.56 s
    // after the release: a lease that ran out then was granted by 60 ms,
    // so p's stop may have met that grant's reply. With b in at 1.4 s no
    // lease ran out in the gap, and a stop 40 ms on excuses nothing.
    let v = check(
        &frozen_pool_records(1_561_000),
        &[stop(FaultKind::FreezePool, "p", 41_000, 2_300_000)],
        LEASE,
    );
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    let v = check(
        &frozen_pool_records(1_400_000),
        &[stop(FaultKind::FreezePool, "p", 41_000, 2_300_000)],
        LEASE,
    );
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
}

#[test]
fn a_waiter_killed_as_the_release_woke_it_is_a_holder_fault() {
    // k waits from 0 and is SIGKILLed 10 ms after a lets go (at 1 ms): its
    // attempt may have taken the lock with a full lease, unlogged. b gets
    // the lock when that lease ran out; a kill 300 ms on excuses nothing.
    let records = |b_at: u64| {
        let mut r = section("a", 1, 10, 0, 0, 1_000, "accepted");
        r.push(rec("k", Event::Wait, 1, None, 0, None, None));
        r.extend(section("b", 1, 11, 0, b_at, b_at + 1_000, "accepted"));
        r
    };
    let v = check(&records(1_520_000), &[kill("k", 11_000)], LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    let v = check(&records(1_520_000), &[kill("k", 300_000)], LEASE);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
}

/// Pool p's tasks wait from 0; a lets go at 1 ms; live waiter b (waiting
/// from 0) gets the lock at `b_at`; the pool's tasks get it once continued
/// (2.4 s on). Its task p/0 held the lock just before: let go, not a
/// holder hit.
fn frozen_pool_records(b_at: u64) -> Vec<Record> {
    let mut r = section("p/0", 0, 9, 0, 1, 5, "accepted");
    r.extend(section("a", 1, 10, 0, 10, 1_000, "accepted"));
    for t in 0..3 {
        r.push(rec(&format!("p/{t}"), Event::Wait, 1, None, 0, None, None));
    }
    r.extend(section("b", 1, 11, 0, b_at, b_at + 1_000, "accepted"));
    for t in 0..3u64 {
        let at = 2_400_000 + t * 10_000;
        r.push(rec(
            &format!("p/{t}"),
            Event::Acquired,
            1,
            Some(12 + t),
            0,
            Some(at),
            None,
        ));
        r.push(rec(
            &format!("p/{t}"),
            Event::Hold,
            1,
            Some(12 + t),
            at,
            Some(at + 5_000),
            None,
        ));
    }
    r
}

#[test]
fn a_free_wait_over_the_bound_by_a_machine_stall_inside_it_is_counted_not_failed() {
    // b waits from 5 µs; the lock is free from 1 ms to 1.4 s: 0.4 s over.
    let mut r = section("a", 1, 10, 0, 10, 1_000, "accepted");
    r.extend(section("b", 1, 11, 5, 1_401_000, 1_500_000, "accepted"));
    let inside = [Stall {
        from_us: 200_000,
        until_us: 700_000,
    }];
    let v = check_until(&r, &[], &inside, LEASE, 0);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!(v.free_waits_over_bound_in_stalls, 1);
    assert_eq!(v.longest_free_wait_in_stalls_us, 1_400_000);
    assert_eq!((v.machine_stalls, v.machine_stall_total_us), (1, 500_000));

    // A stall excuses at most the bound again: 2.4 s free with 2 s of
    // stalls inside is still over 1 s + 1 s.
    let mut long = section("a", 1, 10, 0, 10, 1_000, "accepted");
    long.extend(section("b", 1, 11, 5, 2_401_000, 2_500_000, "accepted"));
    let most = [Stall {
        from_us: 200_000,
        until_us: 2_200_000,
    }];
    let v = check_until(&long, &[], &most, LEASE, 0);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);

    // A stall too short, or outside the wait, excuses nothing.
    let short = [Stall {
        from_us: 200_000,
        until_us: 500_000,
    }];
    let outside = [Stall {
        from_us: 1_500_000,
        until_us: 2_500_000,
    }];
    for stalls in [&short[..], &outside[..]] {
        let v = check_until(&r, &[], stalls, LEASE, 0);
        assert_eq!(v.free_waits_over_bound_in_stalls, 0);
        assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
        assert!(v.violations[0].bound.starts_with("lock free while"));
    }
}

#[test]
fn a_worker_stopped_through_a_failover_may_be_granted_by_the_old_primary() {
    // The sentinels announce the new primary at 2 s; p, stopped from
    // before it until 5 s, is granted 1 ms after m by the old primary.
    let failover = Fault {
        at_us: 1_000_000,
        kind: FaultKind::Failover,
        worker: None,
        until_us: Some(2_000_000),
    };
    let mut r = section("m", 1, 10, 4_000_000, 5_200_000, 5_210_000, "accepted");
    r.extend(section(
        "p", 1, 11, 400_000, 5_201_000, 5_209_000, "accepted",
    ));
    for from in [500_000, 2_050_000] {
        // Stopped before the announcement, or 50 ms after it (before the
        // client could have switched).
        let through = stop(FaultKind::Sigstop, "p", from, 5_000_000);
        let v = check(&r, &[failover.clone(), through], LEASE);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!(v.overlaps_by_cause[STALE_PRIMARY], 1);
    }
    // Continued before the announcement: it heard it live.
    let before = stop(FaultKind::Sigstop, "p", 500_000, 1_900_000);
    let v = check(&r, &[failover.clone(), before], LEASE);
    assert_eq!(
        v.overlaps_unexplained, 1,
        "{:?} {:?}",
        v.violations, v.overlaps_by_cause
    );

    // Stopped over 0.5 s after the announcement, p had switched: no excuse.
    let after = stop(FaultKind::Sigstop, "p", 2_600_000, 5_000_000);
    let v = check(&r, &[failover, after], LEASE);
    assert_eq!(v.overlaps_unexplained, 1, "{:?}", v.violations);
}

#[test]
fn a_frozen_host_excuses_no_free_wait_of_another_worker() {
    // h1..h3 wait from 0 and freeze together at 100 ms for 2.2 s; a lets
    // go at 1 ms; b, waiting behind them, gets the lock at `b_at`.
    let records = |b_at: u64| {
        let mut r = section("a", 1, 10, 0, 10, 1_000, "accepted");
        r.extend(section("b", 1, 11, 0, b_at, b_at + 1_000, "accepted"));
        for (i, h) in ["h1", "h2", "h3"].into_iter().enumerate() {
            let at = 2_400_000 + i as u64 * 10_000;
            r.extend(section(h, 1, 12 + i as u64, 0, at, at + 5_000, "accepted"));
        }
        r
    };
    let host: Vec<Fault> = ["h1", "h2", "h3"]
        .into_iter()
        .map(|h| stop(FaultKind::FreezeHost, h, 100_000, 2_300_000))
        .collect();
    let v = check(&records(1_400_000), &host, LEASE);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert_eq!(
        v.violations[0].bound,
        "lock free while a live waiter waited <= 1000 ms"
    );
    let v = check(&records(500_000), &host, LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
}

#[test]
fn a_waiter_stopped_just_after_it_came_to_the_free_lock_is_a_holder_fault() {
    // a lets go at 1 ms; w comes to wait 2 ms later and is stopped 0.4 ms
    // after that (its attempt may have taken the free lock, its reply
    // unread); b, waiting all along, gets the lock one lease later; w logs
    // only its grant after it was continued.
    let records = |stopped_at: u64| {
        let mut r = section("a", 1, 10, 0, 10, 1_000, "accepted");
        r.extend(section("b", 1, 11, 500, 1_507_000, 1_510_000, "accepted"));
        r.extend(section("w", 1, 12, 3_000, 2_220_000, 2_225_000, "accepted"));
        (
            r,
            vec![stop(
                FaultKind::SigstopWaiter,
                "w",
                stopped_at,
                stopped_at + 2_200_000,
            )],
        )
    };
    let (r, faults) = records(3_400);
    let v = check(&r, &faults, LEASE);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!(v.longest_free_wait_after_fault_us, 1_506_000);
    // Stopped 300 ms after it came: a grant then would have run out 300 ms
    // later than the gap's end, so it explains nothing.
    let (r, faults) = records(300_000);
    let v = check(&r, &faults, LEASE);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
}
