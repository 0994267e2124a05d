//! What `redbell status` and `redbell top` print alike: a plain text table
//! and the names and figures in its cells.

use std::time::Duration;

use redbell::LockKind;
use unicode_width::UnicodeWidthStr;

/// The lines of a table: `header`, then `rows`, each column as wide as its
/// widest cell, columns two spaces apart, no trailing spaces. Widths are
/// display columns (`unicode-width`: a CJK character takes two), not
/// characters, so names in any script line up on a terminal.
pub fn lines<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> Vec<String> {
    let header = header.map(str::to_owned);
    let mut widths = [0usize; N];
    for r in std::iter::once(&header).chain(rows) {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.width());
        }
    }
    std::iter::once(&header)
        .chain(rows)
        .map(|r| {
            let line: Vec<String> = r
                .iter()
                .zip(widths)
                .map(|(cell, w)| {
                    let pad = w.saturating_sub(cell.width());
                    format!("{cell}{:pad$}", "")
                })
                .collect();
            line.join("  ").trim_end().to_owned()
        })
        .collect()
}

/// A lock kind as the tables and the JSON name it (`None`: not known, or
/// not one of these).
pub fn kind_name(kind: Option<LockKind>) -> Option<&'static str> {
    match kind? {
        LockKind::Mutex => Some("mutex"),
        LockKind::FairMutex => Some("fair"),
        LockKind::RwLock => Some("rwlock"),
        LockKind::Election => Some("election"),
        _ => None,
    }
}

/// A remaining lease in whole milliseconds.
pub fn millis(ttl: Option<Duration>) -> Option<u64> {
    ttl.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
}
