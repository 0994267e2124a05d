//! `redbell unlock --force`: break a lock, as an operator.

use crate::fail::Failure;

/// Options of `redbell unlock`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Deletes the lock key whoever holds it and wakes the next waiter, which then
takes the lock at once. The former holder learns of it at its next renewal:
a `redbell run` holding it sends SIGTERM to its command and exits 75.

Prints, for each lock, the owner token it removed, or that the lock was free.

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
pub async fn run(url: &str, args: &UnlockArgs) -> Result<(), Failure> {
    let client = redbell::Client::connect(url)
        .await
        .map_err(|e| Failure::input(url, "cannot connect to Redis", &e))?;
    for name in &args.names {
        let removed = client
            .force_unlock(name)
            .await
            .map_err(|e| Failure::input(url, &format!("cannot unlock {name:?}"), &e))?;
        match removed {
            Some(token) => println!("{name}: removed holder {token}; next waiter woken"),
            None => println!("{name}: was not held; nothing removed"),
        }
    }
    Ok(())
}
