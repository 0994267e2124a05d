//! The SVG chart: left, the hand-off gap distribution (CDF) per strategy at
//! one worker count; right, round trips per hand-off against the number of
//! waiters.

use std::path::Path;

use plotters::prelude::*;

use super::contend::Outcome;
use super::results::Results;
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
    let root = SVGBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (left, right) = root.split_horizontally(600);
    gaps(r, &left).map_err(|e| e.to_string())?;
    scaling(r, &right).map_err(|e| e.to_string())?;
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

fn gaps(r: &Results, area: &Area<'_>) -> DrawResult {
    let w = chosen(r);
    let series: Vec<&Outcome> = r.handoff.iter().filter(|o| o.workers == w).collect();
    let max = series
        .iter()
        .flat_map(|o| o.gaps.iter().copied())
        .max()
        .unwrap_or(1000)
        .max(1000) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("Hand-off gap, W={w} (CDF; PING p50 dashed)"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((10f64..max * 1.5).log_scale(), 0f64..100f64)?;
    chart
        .configure_mesh()
        .x_desc("gap (µs, log scale; every hand-off, a releaser re-taking the lock included)")
        .y_desc("% of hand-offs ≤ gap")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for (i, o) in series.iter().enumerate() {
        let mut v: Vec<i64> = o.gaps.clone();
        let _ = quantile(&mut v, 0.5); // sorts
        let n = v.len().max(1) as f64;
        let color = COLORS[i % COLORS.len()];
        let points = v
            .iter()
            .enumerate()
            .map(|(j, g)| ((*g).max(10) as f64, (j + 1) as f64 * 100.0 / n));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(o.strategy.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    if let Some(p) = r.floor.ping_us.p50 {
        let x = p.max(10) as f64;
        chart.draw_series(DashedLineSeries::new(
            vec![(x, 0.0), (x, 100.0)],
            4,
            4,
            BLACK.stroke_width(1),
        ))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
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
    for (i, name) in strategies.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
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
