//! [`Monitor`]: what a server executes, recorded for counting.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::Value;
use tokio::task::JoinHandle;

use crate::{eventually, raw, unique};

/// Records every command a Redis server executes (`MONITOR`), in the
/// background, for counting.
///
/// A line looks like
/// `1712345678.123456 [0 127.0.0.1:50000] "EVALSHA" "<sha>" "2" "redbell:{n}" ...`;
/// commands a Lua script runs appear as `[0 lua] "SET" ...`. Matching is on
/// substrings, case-insensitively.
#[derive(Debug)]
pub struct Monitor {
    url: String,
    lines: Arc<StdMutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl Monitor {
    /// Starts monitoring the server at `url`; every command executed after
    /// this returns is recorded.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached.
    pub async fn start(url: &str) -> Monitor {
        let monitor = redis::Client::open(url)
            .expect("redis url")
            .get_async_monitor()
            .await
            .unwrap_or_else(|e| panic!("MONITOR on {url}: {e}"));
        let lines = Arc::new(StdMutex::new(Vec::new()));
        let sink = lines.clone();
        let task = tokio::spawn(async move {
            let mut stream = monitor.into_on_message::<Value>();
            while let Some(value) = stream.next().await {
                let line = match value {
                    Value::SimpleString(s) => s,
                    Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                    other => format!("{other:?}"),
                };
                sink.lock().unwrap().push(line);
            }
        });
        Monitor {
            url: url.to_owned(),
            lines,
            task,
        }
    }

    /// Waits until every command the server executed before this call has
    /// been recorded: sends a unique `ECHO` on a fresh connection and waits
    /// for it to come through (MONITOR reports commands in execution order).
    ///
    /// # Panics
    ///
    /// When the marker does not arrive within 10 s.
    pub async fn sync(&self) {
        let marker = unique("monitor-sync");
        let mut conn = raw(&self.url).await;
        let _: String = redis::cmd("ECHO")
            .arg(&marker)
            .query_async(&mut conn)
            .await
            .expect("ECHO");
        let seen = eventually(Duration::from_secs(10), || async {
            self.lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(&marker))
        })
        .await;
        assert!(seen, "MONITOR did not report our marker within 10 s");
    }

    /// The URL of the monitored server.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// How many lines are recorded so far; a mark for [`Monitor::count_since`].
    pub fn mark(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// A copy of the recorded lines.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The recorded lines (from index `since`) that contain every one of `needles`.
    pub fn matching_since(&self, since: usize, needles: &[&str]) -> Vec<String> {
        let needles: Vec<String> = needles.iter().map(|n| n.to_ascii_lowercase()).collect();
        self.lines.lock().unwrap()[since..]
            .iter()
            .filter(|line| {
                let line = line.to_ascii_lowercase();
                needles.iter().all(|n| line.contains(n.as_str()))
            })
            .cloned()
            .collect()
    }

    /// How many recorded lines contain every one of `needles`.
    pub fn count(&self, needles: &[&str]) -> usize {
        self.matching_since(0, needles).len()
    }

    /// How many lines recorded from index `since` on contain every one of `needles`.
    pub fn count_since(&self, since: usize, needles: &[&str]) -> usize {
        self.matching_since(since, needles).len()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}
