//! Live progress while a run goes: one indicatif bar per window when stdout
//! is a terminal, otherwise a plain line about once a second.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    label: String,
    tickets: u64,
    sold: Vec<u64>,
    started: Instant,
    view: View,
}

enum View {
    Bars {
        multi: MultiProgress,
        total: ProgressBar,
        windows: Vec<ProgressBar>,
    },
    Lines {
        last: Instant,
        /// Tickets sold as of the last line printed.
        printed: u64,
    },
}

impl Progress {
    pub fn new(label: &str, windows: u32, tickets: u64) -> Progress {
        let view = if std::io::stdout().is_terminal() {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
            let style =
                ProgressStyle::with_template("  {prefix:>10} [{bar:40.cyan/blue}] {pos:>5} {msg}")
                    .expect("static template is valid")
                    .progress_chars("=> ");
            let total = multi.add(
                ProgressBar::new(tickets)
                    .with_style(style.clone())
                    .with_prefix("all")
                    .with_message(format!("/ {tickets} sold ({label})")),
            );
            let windows = (1..=windows)
                .map(|w| {
                    multi.add(
                        ProgressBar::new(tickets)
                            .with_style(style.clone())
                            .with_prefix(format!("window {w}")),
                    )
                })
                .collect();
            View::Bars {
                multi,
                total,
                windows,
            }
        } else {
            println!("{label}: selling {tickets} tickets at {windows} windows");
            View::Lines {
                last: Instant::now(),
                printed: 0,
            }
        };
        Progress {
            label: label.to_owned(),
            tickets,
            sold: vec![0; windows as usize],
            started: Instant::now(),
            view,
        }
    }

    /// Counts one more sale by `window` (1-based; others are ignored).
    pub fn sold_by(&mut self, window: u32) {
        if let Some(n) = self.sold.get_mut((window as usize).wrapping_sub(1)) {
            *n += 1;
            if let View::Bars { total, windows, .. } = &self.view {
                windows[window as usize - 1].inc(1);
                total.inc(1);
            }
        }
    }

    /// Redraws if due (bars redraw themselves; lines once a second).
    pub fn tick(&mut self) {
        if let View::Lines { last, printed } = &mut self.view
            && last.elapsed() >= Duration::from_secs(1)
        {
            *last = Instant::now();
            *printed = self.sold.iter().sum();
            self.line();
        }
    }

    fn line(&self) {
        let total: u64 = self.sold.iter().sum();
        let per: Vec<String> = self
            .sold
            .iter()
            .enumerate()
            .map(|(i, n)| format!("w{} {n}", i + 1))
            .collect();
        println!(
            "{}: {:5.1} s  {total}/{} sold  [{}]",
            self.label,
            self.started.elapsed().as_secs_f64(),
            self.tickets,
            per.join(", ")
        );
    }

    /// Final state: bars finish in place; lines print one last line.
    pub fn finish(self) {
        match self.view {
            View::Bars {
                multi,
                total,
                windows,
            } => {
                for bar in windows {
                    bar.abandon();
                }
                total.abandon();
                drop(multi); // the finished bars stay on screen
            }
            View::Lines { printed, .. } => {
                if printed != self.sold.iter().sum::<u64>() || printed == 0 {
                    self.line();
                }
            }
        }
    }
}
