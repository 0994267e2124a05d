//! `redbell unlock --force`: break a lock, as an operator, and say what
//! happened. Whether a waiter was there to be woken is read just before the
//! break (the break script tells only the tokens it removed): a waiter that
//! comes in between takes the free lock itself.

use redbell::LockKind;

use crate::connect::{GlobalArgs, connect};
use crate::fail::{EX_FAILURE, Failure};
use crate::status::{permits_held, semaphore_in_use};

/// Options of `redbell unlock`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::connect::REDIS_HINT, after_long_help = "\
Breaks the lock whoever holds it, whatever its kind, and moves it on as the
holder's release would:
  mutex   the lock key is deleted and the next waiter woken, which then
          takes the lock at once;
  fair    the lock is granted to the next waiter in line;
  rwlock  the writer and every reader are removed, and the waiting writers
          and readers woken.
The former holders learn of it at their next renewal: a `redbell run`
holding it sends SIGTERM to its command and exits 75.

Prints, for each lock, the owner tokens it removed and whether a waiter was
queued to take it next (read just before the break), or that the lock was
free. A semaphore is not broken (its holders' leases run out): it is named
as one, and the exit code is 1.

Exit codes: 0 success (also when a lock was already free), 2 usage error
(no --force, an invalid lock name), 69 Redis unreachable, 77 login refused
or ACL denial, 78 configuration, 1 a semaphore named, or any other failure.")]
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
    let mut semaphores = Vec::new();
    for name in &args.names {
        let fail = |e| Failure::input(&target, &format!("cannot unlock {name:?}"), &e);
        let before = client.inspect(name).await.map_err(fail)?;
        let broken = client.break_lock(name).await.map_err(fail)?;
        let (kind, removed) = (broken.kind, broken.tokens);
        let tokens = removed.join(", ");
        let waiters = before.waiters;
        let queued = |next: &str, none: &str| match waiters {
            0 => none.to_owned(),
            1 => format!("1 waiter was queued: {next}"),
            n => format!("{n} waiters were queued: {next}"),
        };
        match kind {
            None => match semaphore_in_use(&client, &before).await.map_err(fail)? {
                Some(s) => {
                    println!(
                        "{name}: a semaphore ({}): not broken, unlock --force breaks locks; \
                         its holders' leases run out by themselves",
                        permits_held(&s)
                    );
                    semaphores.push(name.as_str());
                }
                None => println!("{name}: was not held; nothing removed"),
            },
            Some(LockKind::FairMutex) => println!(
                "{name}: removed holder {tokens} (fair lock); {}",
                queued(
                    "granted to the next",
                    "no waiter was queued; the lock is free"
                )
            ),
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
                // Waiting readers leave no trace: they are woken too, unseen.
                println!(
                    "{name}: removed {} (read-write lock); {}",
                    parts.join(" and "),
                    queued(
                        "waiters woken",
                        "no writer was queued; waiting readers (if any) woken"
                    )
                );
            }
            Some(LockKind::Election) => println!(
                "{name}: removed leader {tokens} (election); {}",
                queued(
                    "the next campaigner woken",
                    "no campaigner was queued; the election has no leader"
                )
            ),
            Some(_) => println!(
                "{name}: removed holder {tokens}; {}",
                queued("the next woken", "no waiter was queued; the lock is free")
            ),
        }
    }
    if !semaphores.is_empty() {
        return Err(Failure::new(
            EX_FAILURE,
            format!("not broken (semaphores): {}", semaphores.join(", ")),
        ));
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
