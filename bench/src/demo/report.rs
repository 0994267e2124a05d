//! Turning a run's records into the numbers, and the numbers into tables.

use std::collections::HashMap;
use std::time::Duration;

use hdrhistogram::Histogram;

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct Report {
    /// "pubsub (redbell)", "poll 100ms", ...
    pub label: String,
    pub tickets: u64,
    /// Tickets sold by each window (index 0 = window 1).
    pub per_window: Vec<u64>,
    /// Sale records in total.
    pub sold: u64,
    /// Records of a ticket number already sold.
    pub duplicates: u64,
    /// Records of ticket numbers outside 1..=tickets, plus sales beyond the pool.
    pub oversold: u64,
    /// Whether the fences, in the order Redis received the sale records,
    /// strictly increase.
    pub fences_increasing: bool,
    /// From the first window's first lock request to the last unlock.
    pub wall: Duration,
    /// Hand-off latencies (µs): from a holder's unlock to the next
    /// acquisition, counted when some other window was already waiting for
    /// the lock at the unlock (otherwise the lock merely sat idle). `None`
    /// without a lock.
    pub handoffs: Option<Histogram<u64>>,
    /// Lock waits (µs), from a window's lock request to its acquisition,
    /// of the acquisitions that took the lock from *another* window: what a
    /// window queued behind the others feels. `None` without a lock.
    pub waits: Option<Histogram<u64>>,
    /// Barging re-takes: acquisitions by the window that held the lock
    /// just before, while another window was already waiting at that
    /// unlock. Their waits are not in [`Report::waits`] (a re-take waits
    /// for nobody, which would flatter a median). `None` without a lock.
    pub retakes: Option<Retakes>,
    /// Redis commands per sale (server-wide `INFO commandstats` delta, less
    /// the demo's own bookkeeping commands); `None` if INFO was unavailable.
    pub commands_per_sale: Option<f64>,
    /// Of those, script calls (`EVAL`, `EVALSHA`, `FCALL`) per sale: each is
    /// one round trip whose inner commands are counted in `commands_per_sale`.
    pub scripts_per_sale: Option<f64>,
    /// With `--open K`: the concurrency check of the open windows.
    pub open: Option<OpenCheck>,
}

/// Acquisitions by the window that had just unlocked, ahead of a window
/// that was waiting.
#[derive(Debug, Clone)]
pub struct Retakes {
    /// Acquisitions in the run.
    pub acquisitions: u64,
    /// Those that were barging re-takes.
    pub count: u64,
    /// Their waits (µs).
    pub waits: Histogram<u64>,
}

/// How many windows were open at once, against the semaphore's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenCheck {
    /// K, the semaphore's permits.
    pub limit: u32,
    /// The most windows whose open intervals overlapped at any instant.
    pub max_seen: u32,
    /// Openings recorded.
    pub openings: u64,
}

/// One opening of a window, `window:opened:closed` (µs on this machine's
/// clock: opened after the permit was taken, closed before it was given
/// back, so intervals of permits that did not coexist do not overlap).
#[derive(Debug, Clone, Copy)]
pub struct Open {
    pub opened: u64,
    pub closed: u64,
}

pub fn parse_open(s: &str) -> Option<Open> {
    let f: Vec<u64> = s
        .split(':')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    match f[..] {
        [_, opened, closed] if opened <= closed => Some(Open { opened, closed }),
        _ => None,
    }
}

/// The most intervals open at one instant (a sweep over the start and end
/// points; an end at the same instant as a start counts first).
pub fn max_open(opens: &[Open]) -> u32 {
    let mut points: Vec<(u64, i32)> = opens
        .iter()
        .flat_map(|o| [(o.opened, 1), (o.closed, -1)])
        .collect();
    points.sort_unstable();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, step) in points {
        now += step;
        max = max.max(now);
    }
    u32::try_from(max).unwrap_or(0)
}

/// Commands counted over a run (see [`Report::commands_per_sale`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commands {
    /// All calls, including those made inside Lua scripts.
    pub total: u64,
    /// Script invocations.
    pub scripts: u64,
}

impl Report {
    /// Whether every invariant holds.
    pub fn ok(&self) -> bool {
        self.duplicates == 0
            && self.oversold == 0
            && self.fences_increasing
            && self.sold == self.tickets
            && self.open.is_none_or(|o| o.max_seen <= o.limit)
    }
}

/// One sale record, `ticket:window:fence`.
#[derive(Debug, Clone, Copy)]
pub struct Sale {
    pub ticket: i64,
    pub window: u32,
    pub fence: u64,
}

pub fn parse_sale(s: &str) -> Option<Sale> {
    let mut it = s.split(':');
    let sale = Sale {
        ticket: it.next()?.parse().ok()?,
        window: it.next()?.parse().ok()?,
        fence: it.next()?.parse().ok()?,
    };
    it.next().is_none().then_some(sale)
}

/// One acquisition, `window:fence:request:acquired:unlock:sold` (µs).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub window: u32,
    pub request: u64,
    pub acquired: u64,
    pub unlock: u64,
}

pub fn parse_timing(s: &str) -> Option<Timing> {
    let f: Vec<u64> = s
        .split(':')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    match f[..] {
        [window, _, request, acquired, unlock, _] => Some(Timing {
            window: u32::try_from(window).ok()?,
            request,
            acquired,
            unlock,
        }),
        _ => None,
    }
}

/// Computes the report from the raw records.
pub fn analyse(
    label: String,
    windows: u32,
    tickets: u64,
    sales: &[Sale],
    timings: &[Timing],
    locked: bool,
    commands: Option<Commands>,
) -> Report {
    let mut per_window = vec![0; windows as usize];
    let mut seen: HashMap<i64, u32> = HashMap::new();
    let mut duplicates = 0;
    let mut out_of_range = 0;
    for sale in sales {
        if let Some(n) = per_window.get_mut((sale.window as usize).wrapping_sub(1)) {
            *n += 1;
        }
        let count = seen.entry(sale.ticket).or_default();
        *count += 1;
        if *count > 1 {
            duplicates += 1;
        }
        if sale.ticket < 1 || sale.ticket as u64 > tickets {
            out_of_range += 1;
        }
    }
    let sold = sales.len() as u64;
    let oversold = out_of_range.max(sold.saturating_sub(tickets));
    let fences_increasing = sales.windows(2).all(|w| w[0].fence < w[1].fence);

    let mut ordered = timings.to_vec();
    ordered.sort_by_key(|t| t.acquired);
    let wall = match (
        ordered.iter().map(|t| t.request).min(),
        ordered.iter().map(|t| t.unlock).max(),
    ) {
        (Some(first), Some(last)) => Duration::from_micros(last.saturating_sub(first)),
        _ => Duration::ZERO,
    };
    // Without a lock critical sections overlap: there is no hand-off.
    let (handoffs, waits, retakes) = if locked {
        let (waits, retakes) = wait_times(&ordered);
        (
            Some(handoff_latencies(&ordered)),
            Some(waits),
            Some(retakes),
        )
    } else {
        (None, None, None)
    };
    Report {
        label,
        tickets,
        per_window,
        sold,
        duplicates,
        oversold,
        fences_increasing,
        wall,
        handoffs,
        waits,
        retakes,
        commands_per_sale: commands.map(|c| c.total as f64 / sold.max(1) as f64),
        scripts_per_sale: commands.map(|c| c.scripts as f64 / sold.max(1) as f64),
        open: None,
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid")
}

/// See [`Report::handoffs`]. `ordered` is sorted by acquisition time.
fn handoff_latencies(ordered: &[Timing]) -> Histogram<u64> {
    let mut h = histogram();
    // earliest[i]: the earliest request among the acquisitions after i.
    let mut earliest = vec![u64::MAX; ordered.len()];
    for i in (0..ordered.len().saturating_sub(1)).rev() {
        earliest[i] = earliest[i + 1].min(ordered[i + 1].request);
    }
    for (i, pair) in ordered.windows(2).enumerate() {
        let (prev, next) = (pair[0], pair[1]);
        if earliest[i] <= prev.unlock {
            h.saturating_record(next.acquired.saturating_sub(prev.unlock).max(1));
        }
    }
    h
}

/// See [`Report::waits`] and [`Report::retakes`]. `ordered` is sorted by
/// acquisition time. An acquisition by the window that held the lock just
/// before is a barging re-take if another window had asked for the lock by
/// that unlock (and got it later); otherwise (nobody else waiting, or the
/// run's first acquisition) it is in neither.
fn wait_times(ordered: &[Timing]) -> (Histogram<u64>, Retakes) {
    let mut waits = histogram();
    let mut retakes = Retakes {
        acquisitions: ordered.len() as u64,
        count: 0,
        waits: histogram(),
    };
    for (i, pair) in ordered.windows(2).enumerate() {
        let (prev, t) = (pair[0], pair[1]);
        let wait = t.acquired.saturating_sub(t.request).max(1);
        if t.window != prev.window {
            waits.saturating_record(wait);
        } else if ordered[i + 2..]
            .iter()
            .any(|later| later.window != prev.window && later.request <= prev.unlock)
        {
            retakes.count += 1;
            retakes.waits.saturating_record(wait);
        }
    }
    (waits, retakes)
}

fn ms(us: u64) -> String {
    let ms = us as f64 / 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// A row value: its text and, for ratios, the number behind it.
struct Cell {
    text: String,
    value: Option<f64>,
}

fn cell(text: impl Into<String>) -> Cell {
    Cell {
        text: text.into(),
        value: None,
    }
}

fn num(text: String, value: f64) -> Cell {
    Cell {
        text,
        value: Some(value),
    }
}

/// Whether, and how, two runs' values of a row are compared.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ratio {
    None,
    /// Lower is better: "faster" / "slower".
    Time,
    /// Lower is better: "fewer" / "more".
    Count,
}

/// The rows of a report: (label, cell, how to compare it).
fn rows(r: &Report) -> Vec<(String, Cell, Ratio)> {
    let mut rows = Vec::new();
    for (i, n) in r.per_window.iter().enumerate() {
        rows.push((
            format!("window {} sold", i + 1),
            cell(n.to_string()),
            Ratio::None,
        ));
    }
    if let (Some(fewest), Some(most)) = (r.per_window.iter().min(), r.per_window.iter().max()) {
        rows.push((
            "sales per window, fewest / most".into(),
            cell(format!("{fewest} / {most}")),
            Ratio::None,
        ));
    }
    let mark = |bad: bool| if bad { "  <-- BROKEN" } else { "" };
    rows.push((
        "total sold".into(),
        cell(format!(
            "{} / {}{}",
            r.sold,
            r.tickets,
            mark(r.sold != r.tickets)
        )),
        Ratio::None,
    ));
    rows.push((
        "duplicates".into(),
        cell(format!("{}{}", r.duplicates, mark(r.duplicates > 0))),
        Ratio::None,
    ));
    rows.push((
        "oversold".into(),
        cell(format!("{}{}", r.oversold, mark(r.oversold > 0))),
        Ratio::None,
    ));
    rows.push((
        "fences strictly increasing".into(),
        cell(if r.fences_increasing {
            "yes"
        } else {
            "no  <-- BROKEN"
        }),
        Ratio::None,
    ));
    if let Some(o) = r.open {
        rows.push((
            "most windows open at once".into(),
            cell(format!(
                "{} (limit {}){}",
                o.max_seen,
                o.limit,
                mark(o.max_seen > o.limit)
            )),
            Ratio::None,
        ));
        rows.push(("openings".into(), cell(o.openings.to_string()), Ratio::None));
    }
    rows.push((
        "wall time".into(),
        num(secs(r.wall), r.wall.as_secs_f64()),
        Ratio::Time,
    ));
    match &r.handoffs {
        Some(h) if !h.is_empty() => {
            let (p50, p99) = (h.value_at_quantile(0.5), h.value_at_quantile(0.99));
            rows.push(("hand-off p50".into(), num(ms(p50), p50 as f64), Ratio::Time));
            rows.push(("hand-off p99".into(), num(ms(p99), p99 as f64), Ratio::Time));
            rows.push((
                "hand-offs measured".into(),
                cell(h.len().to_string()),
                Ratio::None,
            ));
        }
        _ => {
            rows.push(("hand-off p50".into(), cell("n/a"), Ratio::None));
            rows.push(("hand-off p99".into(), cell("n/a"), Ratio::None));
        }
    }
    // What a window queued behind the others feels; re-takes apart.
    const WAIT: &str = "wait for another window's lock";
    match &r.waits {
        Some(h) if !h.is_empty() => {
            for (q, name) in [(0.5, "p50"), (0.99, "p99"), (1.0, "max")] {
                let v = if q < 1.0 {
                    h.value_at_quantile(q)
                } else {
                    h.max()
                };
                rows.push((format!("{WAIT}, {name}"), num(ms(v), v as f64), Ratio::Time));
            }
        }
        _ => {
            for name in ["p50", "p99", "max"] {
                rows.push((format!("{WAIT}, {name}"), cell("n/a"), Ratio::None));
            }
        }
    }
    match &r.retakes {
        Some(t) => {
            rows.push((
                "barging re-takes (ahead of a waiter)".into(),
                cell(format!("{} of {}", t.count, t.acquisitions)),
                Ratio::None,
            ));
            rows.push((
                "  their wait, p50".into(),
                if t.waits.is_empty() {
                    cell("-")
                } else {
                    cell(ms(t.waits.value_at_quantile(0.5)))
                },
                Ratio::None,
            ));
        }
        None => rows.push((
            "barging re-takes (ahead of a waiter)".into(),
            cell("n/a"),
            Ratio::None,
        )),
    }
    for (label, value) in [
        ("Redis commands / sale", r.commands_per_sale),
        ("  of them script calls", r.scripts_per_sale),
    ] {
        rows.push(match value {
            Some(c) => (label.into(), num(format!("{c:.1}"), c), Ratio::Count),
            None => (label.into(), cell("n/a"), Ratio::None),
        });
    }
    rows
}

fn verdict(r: &Report) -> String {
    if r.ok() {
        format!("OK: all {} tickets sold exactly once", r.tickets)
    } else {
        "BROKEN: an invariant does not hold".to_owned()
    }
}

/// Prints one run's table.
pub fn print_single(r: &Report) {
    let rows = rows(r);
    let w = rows.iter().map(|(l, _, _)| l.len()).max().unwrap_or(0);
    println!();
    println!("  {:w$}   {}", "", r.label);
    for (label, c, _) in &rows {
        println!("  {label:w$}   {}", c.text);
    }
    println!("  {:w$}   {}", "result", verdict(r));
    footnote(r.commands_per_sale.is_some());
}

/// The first word of a run's label.
fn short(label: &str) -> &str {
    label.split_whitespace().next().unwrap_or(label)
}

/// Prints two runs side by side, with the ratio of the second to the first
/// where a lower value is better ("2.0x faster": the first took half as long).
pub fn print_compare(a: &Report, b: &Report) {
    let (ra, rb) = (rows(a), rows(b));
    let w = ra.iter().map(|(l, _, _)| l.len()).max().unwrap_or(0);
    let ca = ra
        .iter()
        .map(|(_, c, _)| c.text.len())
        .chain([a.label.len()])
        .max()
        .unwrap_or(0);
    let cb = rb
        .iter()
        .map(|(_, c, _)| c.text.len())
        .chain([b.label.len()])
        .max()
        .unwrap_or(0);
    println!();
    println!(
        "  {:w$}   {:>ca$}   {:>cb$}   {} vs {}",
        "",
        a.label,
        b.label,
        short(&a.label),
        short(&b.label)
    );
    for ((label, x, kind), (_, y, _)) in ra.iter().zip(&rb) {
        let ratio = match (kind, x.value, y.value) {
            (Ratio::Time | Ratio::Count, Some(x), Some(y)) if x > 0.0 && y > 0.0 => {
                let (better, worse) = if *kind == Ratio::Count {
                    ("fewer", "more")
                } else {
                    ("faster", "slower")
                };
                if y >= x {
                    format!("{:.1}x {better}", y / x)
                } else {
                    format!("{:.1}x {worse}", x / y)
                }
            }
            _ => String::new(),
        };
        let line = format!("  {label:w$}   {:>ca$}   {:>cb$}   {ratio}", x.text, y.text);
        println!("{}", line.trim_end());
    }
    println!(
        "  {:w$}   {:>ca$}   {:>cb$}",
        "result",
        if a.ok() { "OK" } else { "BROKEN" },
        if b.ok() { "OK" } else { "BROKEN" }
    );
    footnote(a.commands_per_sale.is_some() || b.commands_per_sale.is_some());
}

/// Explains the commands row, which is easy to misread.
fn footnote(commands: bool) {
    if commands {
        println!(
            "\n  Commands: INFO commandstats delta over the sale, server-wide (other clients of this \
             server count too),\n  including the commands run inside Lua scripts; each sale's own data \
             commands are GET, RPUSH, SET."
        );
    }
    println!(
        "  Waits: from a window's lock request to its acquisition, for acquisitions that took the lock from\n  \
         another window. A barging re-take (the window that just sold taking the lock again while another\n  \
         window was already waiting) waits for nobody; it is counted apart, not averaged in."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sale(ticket: i64, window: u32, fence: u64) -> Sale {
        Sale {
            ticket,
            window,
            fence,
        }
    }

    #[test]
    fn clean_run_passes() {
        let sales = [sale(3, 1, 10), sale(2, 2, 11), sale(1, 1, 12)];
        let commands = Commands {
            total: 30,
            scripts: 6,
        };
        let r = analyse("t".into(), 2, 3, &sales, &[], true, Some(commands));
        assert!(r.ok());
        assert_eq!(r.per_window, [2, 1]);
        assert_eq!(r.commands_per_sale, Some(10.0));
        assert_eq!(r.scripts_per_sale, Some(2.0));
    }

    #[test]
    fn broken_runs_fail() {
        let dup = [sale(3, 1, 10), sale(3, 2, 11), sale(2, 1, 12)];
        let r = analyse("t".into(), 2, 3, &dup, &[], true, None);
        assert_eq!((r.duplicates, r.ok()), (1, false));
        let over = [sale(2, 1, 10), sale(1, 2, 11), sale(0, 1, 12)];
        assert_eq!(
            analyse("t".into(), 2, 2, &over, &[], true, None).oversold,
            1
        );
        let fences = [sale(2, 1, 11), sale(1, 2, 10)];
        assert!(!analyse("t".into(), 2, 2, &fences, &[], true, None).fences_increasing);
    }

    #[test]
    fn handoffs_count_only_waiting_successors() {
        let t = |window, request, acquired, unlock| Timing {
            window,
            request,
            acquired,
            unlock,
        };
        // Second waited from 50 and got it 200 after the unlock; third came
        // later (idle lock); the fourth waited from 1050, but the holder of
        // 1100 took the lock again first, 150 after its unlock.
        let timings = [
            t(1, 0, 10, 100),
            t(2, 50, 300, 400),
            t(1, 1000, 1001, 1100),
            t(1, 1200, 1250, 1300),
            t(2, 1050, 1400, 1500),
        ];
        let r = analyse("t".into(), 2, 0, &[], &timings, true, None);
        let h = r.handoffs.unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h.max(), 200);
        assert_eq!(h.min(), 100);
        assert_eq!(r.wall, Duration::from_micros(1500));
        // Waits behind another window: 250 (window 2), 1 (window 1 after
        // window 2), 350 (window 2 after window 1's re-take).
        let waits = r.waits.unwrap();
        assert_eq!((waits.len(), waits.max()), (3, 350));
        // Window 1 took the lock again at 1250 while window 2 had waited
        // since 1050: one barging re-take, of five acquisitions.
        let retakes = r.retakes.unwrap();
        assert_eq!((retakes.count, retakes.acquisitions), (1, 5));
        assert_eq!(retakes.waits.max(), 50);
    }

    #[test]
    fn max_open_sweeps_the_intervals() {
        let o = |opened, closed| Open { opened, closed };
        assert_eq!(max_open(&[]), 0);
        assert_eq!(max_open(&[o(0, 10), o(10, 20), o(20, 30)]), 1);
        assert_eq!(max_open(&[o(0, 10), o(5, 15), o(6, 7), o(16, 20)]), 3);
        assert!(parse_open("1:5:4").is_none());
        assert_eq!(parse_open("1:4:5").map(|o| o.closed), Some(5));
    }

    #[test]
    fn parses_records() {
        assert!(parse_sale("5:2:99").is_some());
        assert!(parse_sale("5:2").is_none());
        assert!(parse_timing("1:2:3:4:5:1").is_some());
        assert!(parse_timing("1:2:3").is_none());
    }
}
