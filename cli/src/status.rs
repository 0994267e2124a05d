//! `redbell status`: what an operator wants to know about a lock.

use std::time::Duration;

use crate::fail::Failure;

/// Options of `redbell status`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Output: one line per lock, after a header: NAME, STATE (held or free), HOLDER
(the owner token, as REDBELL_TOKEN gave it to the command), TTL (the holder's
remaining lease), FENCE (the last fencing token handed out) and WAITERS
(clients queued for the lock, across all processes).

With --json, one object per lock and line:
  {\"name\":\"jobs\",\"held\":true,\"holder\":\"6f1c...\",\"ttl_ms\":29871,\"fence\":1719...,\"waiters\":2}
holder, ttl_ms and fence are null when unknown (ttl_ms is also null for a key
without expiry).

With --semaphore, the names are semaphores: one line each with NAME, PERMITS
(the stored count, - when none is), HELD (live holders), WAITERS, FENCE and
HOLDERS (each holder's token and remaining lease). With --json:
  {\"name\":\"uploads\",\"permits\":4,\"holders\":[{\"token\":\"6f1c...\",\"ttl_ms\":29871}],\"waiters\":2,\"fence\":1719...}

Exit codes: 0 success, 2 usage error (e.g. an invalid lock name), 69 Redis
unreachable, 1 any other failure.")]
pub struct StatusArgs {
    /// Print one JSON object per lock and line.
    #[arg(long)]
    pub json: bool,

    /// The names are semaphores (`redbell run --permits N`): show their
    /// holders and waiters.
    #[arg(long)]
    pub semaphore: bool,

    /// Names of the locks.
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
}

/// Runs `redbell status`.
pub async fn run(url: &str, args: &StatusArgs) -> Result<(), Failure> {
    let client = redbell::Client::connect(url)
        .await
        .map_err(|e| Failure::input(url, "cannot connect to Redis", &e))?;
    if args.semaphore {
        return semaphores(&client, url, args).await;
    }
    let mut rows = Vec::with_capacity(args.names.len());
    for name in &args.names {
        let status = client
            .status(name)
            .await
            .map_err(|e| Failure::input(url, &format!("cannot read lock {name:?}"), &e))?;
        if args.json {
            println!("{}", json(&status));
        } else {
            rows.push(row(&status));
        }
    }
    if !args.json {
        let header = ["NAME", "STATE", "HOLDER", "TTL", "FENCE", "WAITERS"];
        print_table(header, &rows);
    }
    Ok(())
}

/// `redbell status --semaphore`.
async fn semaphores(client: &redbell::Client, url: &str, args: &StatusArgs) -> Result<(), Failure> {
    let mut rows = Vec::with_capacity(args.names.len());
    for name in &args.names {
        let s = client
            .semaphore_status(name)
            .await
            .map_err(|e| Failure::input(url, &format!("cannot read semaphore {name:?}"), &e))?;
        if args.json {
            let holders: Vec<_> = s
                .holders
                .iter()
                .map(|(token, ttl)| serde_json::json!({"token": token, "ttl_ms": millis(*ttl)}))
                .collect();
            let line = serde_json::json!({
                "name": s.name,
                "permits": s.permits,
                "holders": holders,
                "waiters": s.waiters,
                "fence": s.fence,
            });
            println!("{line}");
        } else {
            let dash = || "-".to_owned();
            let holders: Vec<String> = s
                .holders
                .iter()
                .map(|(token, ttl)| format!("{token}({})", seconds(*ttl)))
                .collect();
            rows.push([
                s.name.clone(),
                s.permits.map_or_else(dash, |p| p.to_string()),
                s.holders.len().to_string(),
                s.waiters.to_string(),
                s.fence.map_or_else(dash, |f| f.to_string()),
                if holders.is_empty() {
                    dash()
                } else {
                    holders.join(",")
                },
            ]);
        }
    }
    if !args.json {
        let header = ["NAME", "PERMITS", "HELD", "WAITERS", "FENCE", "HOLDERS"];
        print_table(header, &rows);
    }
    Ok(())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One line of `--json` output.
#[derive(serde::Serialize)]
struct Json<'a> {
    name: &'a str,
    held: bool,
    holder: Option<&'a str>,
    ttl_ms: Option<u64>,
    fence: Option<u64>,
    waiters: u64,
}

fn json(s: &redbell::LockStatus) -> String {
    let line = Json {
        name: &s.name,
        held: s.holder.is_some(),
        holder: s.holder.as_deref(),
        ttl_ms: s
            .ttl
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        fence: s.fence,
        waiters: s.waiters,
    };
    // Strings, numbers and options only: serialization cannot fail.
    serde_json::to_string(&line).unwrap_or_default()
}

fn row(s: &redbell::LockStatus) -> [String; 6] {
    let dash = || "-".to_owned();
    [
        s.name.clone(),
        if s.holder.is_some() { "held" } else { "free" }.to_owned(),
        s.holder.clone().unwrap_or_else(dash),
        match (&s.holder, s.ttl) {
            (_, Some(ttl)) => seconds(ttl),
            (Some(_), None) => "no expiry".to_owned(),
            (None, None) => dash(),
        },
        s.fence.map_or_else(dash, |f| f.to_string()),
        s.waiters.to_string(),
    ]
}

fn seconds(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

fn print_table(header: [&str; 6], rows: &[[String; 6]]) {
    let header = header.map(str::to_owned);
    let mut widths = [0usize; 6];
    for r in std::iter::once(&header).chain(rows) {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for r in std::iter::once(&header).chain(rows) {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}
