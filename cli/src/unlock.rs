//! `redbell unlock --force`: break a lock, as an operator.

use redbell::LockKind;

use crate::connect::{GlobalArgs, connect};
use crate::fail::Failure;

/// Options of `redbell unlock`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Breaks the lock whoever holds it, whatever its kind, and moves it on as the
holder's release would:
  mutex   the lock key is deleted and the next waiter woken, which then
          takes the lock at once;
  fair    the lock is granted to the next waiter in line;
  rwlock  the writer and every reader are removed, and the waiting writers
          and readers woken.
The former holders learn of it at their next renewal: a `redbell run`
holding it sends SIGTERM to its command and exits 75.

Prints, for each lock, the owner tokens it removed, or that the lock was free.

Exit codes: 0 success (also when a lock was already free), 2 usage error
(no --force, an invalid lock name), 69 Redis unreachable, 1 any other failure.")]
pub struct UnlockArgs {
    /// Required: break the lock even though another client holds it.
    #[arg(long, required = true)]
    pub force: bool,

    /// Names of the locks to break.
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
}

/// Runs `redbell unlock --force`.
pub async fn run(global: &GlobalArgs, args: &UnlockArgs) -> Result<(), Failure> {
    let client = connect(global).await?;
    let target = global.target();
    for name in &args.names {
        let (kind, removed) = client
            .break_lock(name)
            .await
            .map_err(|e| Failure::input(&target, &format!("cannot unlock {name:?}"), &e))?;
        let tokens = removed.join(", ");
        match kind {
            None => println!("{name}: was not held; nothing removed"),
            Some(LockKind::FairMutex) => {
                println!("{name}: removed holder {tokens} (fair lock); granted to the next waiter");
            }
            Some(LockKind::RwLock) => {
                let (writer, readers): (Vec<_>, Vec<_>) =
                    removed.iter().partition(|t| t.starts_with('w'));
                let mut parts = Vec::new();
                if !writer.is_empty() {
                    parts.push(format!("writer {}", join(&writer)));
                }
                if !readers.is_empty() {
                    parts.push(format!("{} reader(s) {}", readers.len(), join(&readers)));
                }
                println!(
                    "{name}: removed {} (read-write lock); waiters woken",
                    parts.join(" and ")
                );
            }
            Some(LockKind::Election) => {
                println!("{name}: removed leader {tokens} (election); next campaigner woken");
            }
            Some(_) => println!("{name}: removed holder {tokens}; next waiter woken"),
        }
    }
    Ok(())
}

fn join(tokens: &[&String]) -> String {
    tokens
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
