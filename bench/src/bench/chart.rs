//! The SVG chart, what a user feels, per library: the acquire-wait
//! distribution (CDF) at one worker count; hand-offs per second to
//! *another* worker against W; uncontended lock+unlock/s and Redis CPU per
//! operation; round trips per hand-off against the number of waiters.

use std::path::Path;

use plotters::prelude::*;

use super::contend::Outcome;
use super::results::Results;
use super::results::fmt_us;
use super::stats::quantile;

const COLORS: [RGBColor; 5] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
];

/// Writes the chart to `path`.
pub fn draw(r: &Results, path: &Path) -> Result<(), String> {
    let root = SVGBackend::new(path, (1200, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((2, 2));
    waits(r, &areas[0]).map_err(|e| e.to_string())?;
    handovers(r, &areas[1]).map_err(|e| e.to_string())?;
    uncontended(r, &areas[2]).map_err(|e| e.to_string())?;
    scaling(r, &areas[3]).map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// The worker count whose gap distributions are drawn: 8 when measured.
fn chosen(r: &Results) -> u32 {
    if r.handoff.iter().any(|o| o.workers == 8) {
        8
    } else {
        r.handoff.first().map_or(0, |o| o.workers)
    }
}

/// A stable colour per library, whatever rows a run has.
fn color(strategy: &str) -> RGBColor {
    match strategy {
        "redbell" => COLORS[0],
        "redbell fair" => COLORS[1],
        "rslock" => COLORS[2],
        "poll 10ms" => COLORS[3],
        "redbell cluster" => RGBColor(0x8c, 0x56, 0x4b),
        _ => COLORS[4],
    }
}

fn waits(r: &Results, area: &Area<'_>) -> DrawResult {
    let w = chosen(r);
    let series: Vec<&Outcome> = r
        .handoff
        .iter()
        .filter(|o| o.workers == w && o.strategy != "redbell cluster")
        .collect();
    let max = series
        .iter()
        .flat_map(|o| o.waits.iter().copied())
        .max()
        .unwrap_or(1000)
        .max(1000) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("lock() wait, W={w} (CDF; dashed: lock from another worker)"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((10f64..max * 1.5).log_scale(), 0f64..100f64)?;
    chart
        .configure_mesh()
        .x_desc("wait (µs, log scale): lock() called to lock() returned")
        .y_desc("% of lock() calls ≤ wait")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for o in &series {
        let mut v: Vec<i64> = o.waits.clone();
        let p50 = quantile(&mut v, 0.5).unwrap_or(0); // sorts
        let p99 = quantile(&mut v, 0.99).unwrap_or(0);
        let n = v.len().max(1) as f64;
        let c = color(&o.strategy);
        let points = v
            .iter()
            .enumerate()
            .map(|(j, g)| ((*g).max(10) as f64, (j + 1) as f64 * 100.0 / n));
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))?
            .label(format!(
                "{}: p50 {}, p99 {}, max {}",
                o.strategy,
                fmt_us(p50),
                fmt_us(p99),
                fmt_us(o.wait_max_us)
            ))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
        // Dashed: only the acquisitions that took the lock from another
        // worker (a polling releaser's re-takes of its own lock, the left
        // of its solid curve, wait for nobody).
        let mut h = o.handover_waits.clone();
        if h.is_empty() {
            continue;
        }
        h.sort_unstable();
        let n = h.len() as f64;
        let points = h
            .iter()
            .enumerate()
            .map(|(j, g)| ((*g).max(10) as f64, (j + 1) as f64 * 100.0 / n));
        chart
            .draw_series(DashedLineSeries::new(points, 6, 4, c.stroke_width(2)))?
            .label(format!(
                "  from another worker ({} of them): p99 {}",
                h.len(),
                o.handover_wait_us.p99.map_or("–".into(), fmt_us)
            ))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 8, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(("sans-serif", 12))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn handovers(r: &Results, area: &Area<'_>) -> DrawResult {
    let mut strategies: Vec<&str> = Vec::new();
    for o in &r.handoff {
        if !strategies.contains(&o.strategy.as_str()) {
            strategies.push(&o.strategy);
        }
    }
    let ymax = r
        .handoff
        .iter()
        .map(|o| o.handovers_per_s)
        .fold(r.serial_floor.iterations_per_s, f64::max)
        .max(10.0);
    let xmax = r
        .handoff
        .iter()
        .map(|o| o.workers)
        .max()
        .unwrap_or(8)
        .max(4);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Hand-offs/s to another worker (serial floor dashed)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (1.5f64..f64::from(xmax) * 1.3).log_scale(),
            (1f64..ymax * 2.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("workers W (log scale)")
        .y_desc("hand-offs/s to another worker (log scale)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for name in &strategies {
        let c = color(name);
        let pts: Vec<(f64, f64)> = r
            .handoff
            .iter()
            .filter(|o| o.strategy == *name)
            .map(|o| (f64::from(o.workers), o.handovers_per_s.max(1.0)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(name.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))?;
    }
    let f = r.serial_floor.iterations_per_s.max(1.0);
    chart.draw_series(DashedLineSeries::new(
        vec![(1.5, f), (f64::from(xmax) * 1.3, f)],
        4,
        4,
        BLACK.stroke_width(1),
    ))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn uncontended(r: &Results, area: &Area<'_>) -> DrawResult {
    let (top, bottom) = area.split_vertically(250);
    for (i, part) in [top, bottom].iter().enumerate() {
        // ops/s around the critical section; CPU of lock+unlock alone.
        let u = if i == 0 {
            &r.uncontended_work
        } else {
            &r.uncontended
        };
        let value = |row: &super::floor::UncontendedRow| {
            if i == 0 {
                row.ops_per_s
            } else {
                row.cpu_us_per_op
            }
        };
        let max = u.rows.iter().map(value).fold(1e-9, f64::max);
        let n = u.rows.len().max(1);
        let mut chart = ChartBuilder::on(part)
            .caption(
                if i == 0 {
                    format!(
                        "Uncontended, {} workers each its own lock: ops/s around a {} µs section",
                        u.workers,
                        u.hold_us.unwrap_or(0)
                    )
                } else {
                    "Redis CPU µs per lock+unlock (commands per op on the bar)".to_owned()
                },
                ("sans-serif", 16),
            )
            .margin(8)
            .x_label_area_size(20)
            .y_label_area_size(110)
            .build_cartesian_2d(0f64..max * 1.7, 0f64..n as f64)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()?;
        for (j, row) in u.rows.iter().enumerate() {
            let y = (n - 1 - j) as f64;
            let c = color(&row.strategy);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y + 0.2), (value(row), y + 0.8)],
                c.filled(),
            )))?;
            let text = if i == 0 {
                format!("{}  {:.0}", row.strategy, row.ops_per_s)
            } else {
                format!(
                    "{}  {:.1} µs, {:.1} cmds",
                    row.strategy, row.cpu_us_per_op, row.commands_per_op
                )
            };
            chart.draw_series(std::iter::once(Text::new(
                text,
                (value(row) + max * 0.02, y + 0.35),
                ("sans-serif", 14),
            )))?;
        }
    }
    Ok(())
}

fn scaling(r: &Results, area: &Area<'_>) -> DrawResult {
    let mut strategies: Vec<&str> = r.scaling.iter().map(|o| o.strategy.as_str()).collect();
    strategies.dedup();
    let points = |name: &str| -> Vec<(f64, f64)> {
        r.scaling
            .iter()
            .filter(|o| o.strategy == name)
            .filter_map(|o| {
                let c = o.commands.as_ref()?;
                Some((f64::from(o.workers - 1), c.per_handoff(c.round_trips)?))
            })
            .collect()
    };
    let ymax = strategies
        .iter()
        .flat_map(|s| points(s))
        .map(|p| p.1)
        .fold(4.0, f64::max);
    let xmax = r
        .scaling
        .iter()
        .map(|o| o.workers)
        .max()
        .unwrap_or(10)
        .max(10);
    let mut chart = ChartBuilder::on(area)
        .caption("Round trips per hand-off vs waiters", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(
            (0.8f64..f64::from(xmax) * 1.3).log_scale(),
            (0.5f64..ymax * 1.5).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("waiters (log scale)")
        .y_desc("commands sent per hand-off (log scale)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for name in &strategies {
        let color = color(name);
        let pts = points(name);
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(name.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
