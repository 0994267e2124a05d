//! The Lua scripts on a real server: they load under the advertised SHA,
//! document their interface, and are the only scripts the client runs.

use std::time::Duration;

use redbell_integration_tests::{Monitor, PrivateRedis, client, raw, unique, wait_for_subscribers};

#[tokio::test]
async fn every_script_loads_under_its_sha() {
    let redis = PrivateRedis::start().await;
    let mut conn = raw(&redis.url()).await;
    let scripts = redbell::scripts();
    let mut names: Vec<_> = scripts.iter().map(|s| s.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), scripts.len(), "duplicate script names");
    for wanted in ["acquire", "release", "extend"] {
        assert!(names.contains(&wanted), "no {wanted} script in {names:?}");
    }
    for s in &scripts {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(s.source)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{} does not load: {e}", s.name));
        assert_eq!(sha, s.sha1, "{}", s.name);
    }
    let shas: Vec<_> = scripts.iter().map(|s| s.sha1).collect();
    let exist: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&shas)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(exist.iter().all(|&e| e == 1), "{exist:?}");
}

/// Each script has a comment header naming its KEYS, every KEYS[i] and
/// ARGV[i] its body uses, and its return values. (Shared code such as `wake_next` may be
/// prepended; the operation's own header is the comment block that starts
/// with `-- <name>:`.)
#[test]
fn every_script_documents_its_interface() {
    for s in redbell::scripts() {
        let lines: Vec<&str> = s.source.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.starts_with(&format!("-- {}:", s.name)))
            .unwrap_or_else(|| panic!("{}: no header line '-- {}: ...'", s.name, s.name));
        let header: String = lines[start..]
            .iter()
            .take_while(|l| l.starts_with("--"))
            .copied()
            .collect::<Vec<_>>()
            .join("\n");
        let code: String = lines
            .iter()
            .filter(|l| !l.trim_start().starts_with("--"))
            .copied()
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            header.contains("KEYS[1"),
            "{}: no KEYS in the header",
            s.name
        );
        if code.contains("ARGV[") {
            assert!(
                header.contains("ARGV[1"),
                "{}: no ARGV in the header",
                s.name
            );
        }
        assert!(
            header.contains("Returns"),
            "{}: no Returns in the header",
            s.name
        );
        for kind in ["KEYS", "ARGV"] {
            for (i, _) in code.match_indices(&format!("{kind}[")) {
                let rest = &code[i + kind.len() + 1..];
                let idx: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if idx.is_empty() {
                    continue; // KEYS[i] in a loop: documented as a range
                }
                let used = format!("{kind}[{idx}");
                assert!(
                    header.contains(&format!("{used}]")) || header.contains(&format!("{used}..")),
                    "{}: {used}] is used but not documented in\n{header}",
                    s.name
                );
            }
        }
        assert!(!code.trim().is_empty(), "{}: no code", s.name);
    }
}

/// Every EVALSHA a client sends (lock, contended hand-off, extend, unlock,
/// dropped guard, cancelled waiter) runs a script that `scripts()` lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_runs_only_listed_scripts() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let monitor = Monitor::start(&url).await;
    let (a, b) = (client(&url).await, client(&url).await);
    let name = unique("listed");
    let lease = Duration::from_secs(30);
    let g = a.mutex(&name).with_lease(lease).lock().await.unwrap();
    g.extend(lease).await.unwrap();
    let mutex = b.mutex(&name).with_lease(lease);
    let waiter = tokio::spawn(async move { mutex.lock().await });
    let cancelled = {
        let mutex = b.mutex(&name).with_lease(lease);
        tokio::spawn(async move { mutex.lock().await })
    };
    wait_for_subscribers(&url, &name, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    cancelled.abort();
    let _ = cancelled.await;
    g.unlock().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("hand-off")
        .unwrap()
        .unwrap();
    drop(g);
    let d = a.mutex(&name).with_lease(lease).lock().await.unwrap();
    drop(d);
    tokio::time::sleep(Duration::from_millis(300)).await;
    monitor.sync().await;

    let listed: Vec<String> = redbell::scripts()
        .iter()
        .map(|s| s.sha1.to_ascii_lowercase())
        .collect();
    let evals = monitor.matching_since(0, &["\"evalsha\""]);
    assert!(evals.len() >= 5, "{evals:#?}");
    for line in &evals {
        let sha = line
            .split("\"EVALSHA\" \"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_else(|| panic!("cannot parse {line}"))
            .to_ascii_lowercase();
        assert!(listed.contains(&sha), "unlisted script {sha} in {line}");
    }
    // EVAL (with the source) is only the NOSCRIPT fallback: at most once per
    // script on this fresh server, after which EVALSHA finds it cached.
    let by_source = monitor.count(&["\"eval\""]);
    assert!(
        by_source <= listed.len(),
        "{by_source} scripts sent by EVAL: more than the NOSCRIPT fallback explains"
    );
    let mark = monitor.mark();
    let again = a.mutex(&name).with_lease(lease).lock().await.unwrap();
    again.unlock().await.unwrap();
    monitor.sync().await;
    assert!(
        monitor.matching_since(mark, &["\"eval\""]).is_empty(),
        "a cached script was sent by EVAL again"
    );
}

/// PROTOCOL.md, the normative description other clients are written from,
/// names the version the scripts speak and lists every script in a table
/// row `` | `name` | KEYS | ARGV[2..] | reply | `` whose KEYS and ARGV
/// counts are those of the script's own header (rows of a variable length,
/// written with `…`, are not counted). So a script added, or a key or
/// argument added to one, without PROTOCOL.md, fails here.
#[test]
fn protocol_md_lists_every_script_with_its_keys_and_argv() {
    let spec = std::fs::read_to_string(redbell_integration_tests::repo_root().join("PROTOCOL.md"))
        .expect("PROTOCOL.md at the repository root");
    assert!(
        spec.starts_with(&format!(
            "# The redbell wire protocol, version {}\n",
            redbell::PROTOCOL_VERSION
        )),
        "PROTOCOL.md's title names another version"
    );
    // The largest index `kind[i]` in the operation's own header.
    fn last_index(header: &str, kind: &str) -> usize {
        header
            .match_indices(&format!("{kind}["))
            .filter_map(|(i, _)| {
                let digits: String = header[i + kind.len() + 1..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok()
            })
            .max()
            .unwrap_or(0)
    }
    // The items of a table cell: `(none)` is none.
    fn items(cell: &str) -> Option<usize> {
        let cell = cell.trim();
        if cell.contains('…') {
            None
        } else if cell == "(none)" {
            Some(0)
        } else {
            Some(cell.split(", ").count())
        }
    }
    for s in redbell::scripts() {
        // (The table of shared code names scripts too, in two columns.)
        let row = spec
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", s.name)) && l.split(" | ").count() >= 4)
            .unwrap_or_else(|| panic!("PROTOCOL.md has no table row for {}", s.name));
        let cells: Vec<&str> = row.split(" | ").collect();
        let lines: Vec<&str> = s.source.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.starts_with(&format!("-- {}:", s.name)))
            .expect("header");
        let header = lines[start..]
            .iter()
            .take_while(|l| l.starts_with("--"))
            .copied()
            .collect::<Vec<_>>()
            .join("\n");
        if let Some(keys) = items(cells[1]) {
            assert_eq!(
                keys,
                last_index(&header, "KEYS"),
                "{}: PROTOCOL.md lists {keys} KEYS: {row}",
                s.name
            );
        }
        if let Some(args) = items(cells[2]) {
            assert_eq!(
                args + 1,
                last_index(&header, "ARGV"),
                "{}: PROTOCOL.md lists {args} ARGV after the version: {row}",
                s.name
            );
        }
    }
}
