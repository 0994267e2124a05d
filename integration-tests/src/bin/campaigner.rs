//! A campaigning process for the election tests: campaigns in an election
//! as long as it lives, reporting each term on stdout and taking orders on
//! stdin.
//!
//! Usage: `campaigner NAME ID LEASE_MS`, with `REDIS_URL` set. The lease is
//! renewed every third of it. Prints, one line each (`<us>` is the wall
//! clock in µs since the Unix epoch, comparable across processes):
//!
//! - `ready` once connected;
//! - `elected <term> <us>` when it leads, `<us>` taken once `campaign`
//!   returned;
//! - `resigned <term> <us>` after a `resign` order, `<us>` taken *before*
//!   the resignation was sent (when it stopped leading);
//! - `lost <term> <us>` when the leadership was lost.
//!
//! Orders, one per stdin line: `resign` (then it campaigns again). It exits
//! at the end of stdin.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt, BufReader};

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, id, lease_ms] = args.as_slice() else {
        return Err("usage: campaigner NAME ID LEASE_MS".into());
    };
    let lease = Duration::from_millis(lease_ms.parse()?);
    let url = std::env::var("REDIS_URL")?;
    let client = redbell::Client::builder(url.as_str())
        .default_lease(lease)
        .renew_every(lease / 3)
        .connect()
        .await?;
    let election = client.election(name);
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    say("ready");
    loop {
        let leadership = tokio::select! {
            won = election.campaign(id.as_str()) => won?,
            line = stdin.next_line() => match line? {
                None => return Ok(()),
                Some(_) => continue, // an order while not leading: ignored
            },
        };
        let term = leadership.term();
        say(&format!("elected {term} {}", now_us()));
        tokio::select! {
            () = leadership.lost() => say(&format!("lost {term} {}", now_us())),
            line = stdin.next_line() => match line?.as_deref() {
                None => {
                    leadership.resign().await?;
                    client.shutdown().await?;
                    return Ok(());
                }
                Some(_) => {
                    let stepped_down = now_us();
                    leadership.resign().await?;
                    say(&format!("resigned {term} {stepped_down}"));
                }
            },
        }
    }
}
