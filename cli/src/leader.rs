//! `redbell leader`: who leads an election, and with `--watch` each change
//! as it happens (event-driven: the library's `Election::observe`).

use tokio_stream::StreamExt;

use crate::connect::{GlobalArgs, connect};
use crate::fail::{EX_FAILURE, Failure};

/// Options of `redbell leader`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::connect::REDIS_HINT, after_long_help = "\
Prints `leader: VALUE (term N)`, or `no leader`. With --watch, prints the
current leader, then one such line per change (elected, proclaimed,
resigned, lost by lease expiry) until interrupted.

Exit codes: 0 a leader was printed (or --watch ended by a signal), 1 no
leader (without --watch), 2 usage error, 69 Redis unreachable.")]
pub struct LeaderArgs {
    /// Keep printing each change of leader.
    #[arg(long)]
    pub watch: bool,

    /// Name of the election.
    pub name: String,
}

/// Runs `redbell leader`.
pub async fn run(global: &GlobalArgs, args: &LeaderArgs) -> Result<(), Failure> {
    let client = connect(global).await?;
    let target = global.target();
    let url = target.as_str();
    let election = client.election(&args.name);
    let what = format!("cannot read election {:?}", args.name);
    if !args.watch {
        let leader = election
            .leader()
            .await
            .map_err(|e| Failure::input(url, &what, &e))?;
        println!("{}", line(leader.as_ref()));
        return match leader {
            Some(_) => Ok(()),
            None => Err(Failure::new(
                EX_FAILURE,
                format!("election {:?} has no leader", args.name),
            )),
        };
    }
    let mut changes = election.observe();
    while let Some(change) = changes.next().await {
        match change {
            Ok(leader) => println!("{}", line(leader.as_ref())),
            Err(e @ redbell::Error::InvalidName { .. }) => {
                return Err(Failure::input(url, &what, &e));
            }
            Err(e) => eprintln!("redbell: {what} ({e}); retrying"),
        }
    }
    Ok(())
}

fn line(leader: Option<&redbell::Leader>) -> String {
    match leader {
        Some(l) => format!("leader: {} (term {})", l.value, l.term),
        None => "no leader".to_owned(),
    }
}
