//! ACL users of a test's own on the shared server ([`User`]), for the
//! suites that check what a restricted user can do and what it is told.

use redbell::redis::{ConnectionInfo, IntoConnectionInfo};
use redbell::{Client, Error};

use crate::{promptly, raw, redis_url, unique};

/// A user of the test's own (a unique name), deleted on drop.
#[derive(Debug)]
pub struct User {
    name: String,
    password: String,
}

impl User {
    /// `ACL SETUSER <unique> reset on >password <rules...>` on the shared
    /// server.
    ///
    /// # Panics
    ///
    /// When the server refuses the rules.
    pub async fn create(rules: &str) -> User {
        let user = User {
            name: unique("acl-user"),
            password: unique("pw"),
        };
        let mut admin = raw(&redis_url()).await;
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER")
            .arg(&user.name)
            .arg("reset")
            .arg("on")
            .arg(format!(">{}", user.password));
        for rule in rules.split_whitespace() {
            cmd.arg(rule);
        }
        let ok: String = cmd.query_async(&mut admin).await.expect("ACL SETUSER");
        assert_eq!(ok, "OK");
        user
    }

    /// The user's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The user's password (for the CLI tests, which pass it as the
    /// command line takes it).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The shared server's address with this user's credentials.
    ///
    /// # Panics
    ///
    /// When `REDIS_URL` does not parse.
    pub fn info(&self) -> ConnectionInfo {
        let info = redis_url()
            .as_str()
            .into_connection_info()
            .expect("REDIS_URL");
        let settings = info
            .redis_settings()
            .clone()
            .set_username(&self.name)
            .set_password(&self.password);
        info.set_redis_settings(settings)
    }

    /// A redbell client as this user (the connect bounded in time).
    pub async fn connect(&self) -> Result<Client, Error> {
        promptly("connect", Client::builder(self.info()).connect()).await
    }

    /// A raw connection as this user.
    ///
    /// # Panics
    ///
    /// When the user cannot connect.
    pub async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.info())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connect as the user")
    }
}

impl Drop for User {
    fn drop(&mut self) {
        if let Ok(mut conn) = redis::Client::open(redis_url()).and_then(|c| c.get_connection()) {
            let _: redis::RedisResult<i64> = redis::cmd("ACL")
                .arg("DELUSER")
                .arg(&self.name)
                .query(&mut conn);
        }
    }
}
