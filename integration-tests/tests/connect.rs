//! Connection settings of the user's own: `Client::builder` takes whatever
//! redis-rs takes for one server (`&str`, `String`, a `ConnectionInfo`, a
//! `(host, port)` pair), `Client::from_redis_client` a redis-rs client
//! built by the application, and `Client::from_cluster_client` a redis-rs
//! cluster client: their credentials, database and protocol are used for
//! every connection redbell opens (commands and pub/sub), so locks, unlocks
//! and woken hand-offs work.

use std::time::Duration;

use redbell::redis::{self as rr, IntoConnectionInfo};
use redbell::{Client, Error};
use redbell_integration_tests::cluster::Cluster;
use redbell_integration_tests::{
    PrivateRedis, exists, hand_off, lock_key, promptly, raw, redis_url, unique,
};

/// A hand-off quick enough to have been woken, not waited out.
fn assert_woken(what: &str, handoff: Duration) {
    eprintln!("{what}: hand-off {handoff:?}");
    assert!(
        handoff < Duration::from_secs(1),
        "{what}: the waiter got the lock {handoff:?} after the release (not woken)"
    );
}

/// `&str` and `String` URLs, a `ConnectionInfo` with a database number and
/// a `(host, port)` pair all connect; the database is the one the settings
/// name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_takes_any_connection_info() {
    let url = redis_url();
    let info = url.as_str().into_connection_info().expect("REDIS_URL");
    let (host, port) = match info.addr() {
        rr::ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
        other => panic!("REDIS_URL is not a TCP address: {other}"),
    };
    let by_str = Client::builder(url.as_str()).connect().await.expect("&str");
    let by_string = Client::builder(url.clone())
        .connect()
        .await
        .expect("String");
    let by_pair = Client::builder((host.as_str(), port))
        .connect()
        .await
        .expect("(host, port)");
    assert_woken("&str to String", hand_off(&by_str, &by_string).await);
    assert_woken(
        "String to (host, port)",
        hand_off(&by_string, &by_pair).await,
    );

    let db = 7;
    let settings = info.redis_settings().clone().set_db(db);
    let in_db = Client::builder(info.clone().set_redis_settings(settings.clone()))
        .connect()
        .await
        .expect("ConnectionInfo with a db");
    let name = unique("db");
    let guard = in_db.mutex(&name).lock().await.expect("lock in db 7");
    let mut db7 = raw(&format!("{url}/{db}")).await;
    let mut db0 = raw(&url).await;
    assert!(exists(&mut db7, &lock_key(&name)).await, "not in db {db}");
    assert!(!exists(&mut db0, &lock_key(&name)).await, "in db 0");
    guard.unlock().await.expect("unlock in db 7");
    let other = Client::builder(info.set_redis_settings(settings))
        .connect()
        .await
        .expect("a second client in db 7");
    assert_woken("in db 7", hand_off(&in_db, &other).await);

    let bad = Client::builder("not a url").connect().await;
    assert!(matches!(bad, Err(Error::Redis(_))), "{bad:?}");
}

/// A `redis::Client` built by the application, with a password and a
/// database: redbell's command and pub/sub connections both use them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_redis_client_uses_its_credentials_and_database() {
    let server = PrivateRedis::start_with_password("s3cret").await;
    let url = format!("redis://:s3cret@127.0.0.1:{}/3", server.port());
    let make = || {
        let client = rr::Client::open(url.as_str()).expect("redis client");
        Client::from_redis_client(client).connect()
    };
    let a = promptly("from_redis_client", make())
        .await
        .expect("connect a");
    let b = promptly("from_redis_client", make())
        .await
        .expect("connect b");
    let name = unique("byo");
    let guard = a.mutex(&name).lock().await.expect("lock");
    let mut db3 = raw(&url).await;
    assert!(
        exists(&mut db3, &lock_key(&name)).await,
        "the lock is not in db 3"
    );
    guard.unlock().await.expect("unlock");
    assert_woken("from_redis_client", hand_off(&a, &b).await);

    // Without the password the same server refuses.
    let plain = rr::Client::open(server.url_without_password()).expect("client");
    let refused = Client::from_redis_client(plain).connect().await;
    assert!(matches!(refused, Err(Error::Redis(_))), "{refused:?}");
}

/// A `ClusterClient` built by the application (RESP3): locks, unlocks and
/// a woken hand-off on a real cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_cluster_client_locks_and_hands_off() {
    let cluster = Cluster::start().await;
    let make = || {
        let client = rr::cluster::ClusterClient::builder(cluster.urls())
            .use_protocol(rr::ProtocolVersion::RESP3)
            .build()
            .expect("cluster client");
        Client::from_cluster_client(client).connect()
    };
    let a = promptly("from_cluster_client", make())
        .await
        .expect("connect a");
    let b = promptly("from_cluster_client", make())
        .await
        .expect("connect b");
    for _ in 0..3 {
        // Names land on different shards.
        assert_woken("from_cluster_client", hand_off(&a, &b).await);
    }
}
