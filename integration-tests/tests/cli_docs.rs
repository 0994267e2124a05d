//! `redbell completions SHELL` and `redbell man` (issue 31): the completion
//! script loads in a real bash and completes the subcommands, and the man
//! page renders with the system's `man` and `groff` without a warning. Both
//! are generated without Redis: the tests point REDIS_URL nowhere.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use redbell_integration_tests::cli::scratch;
use redbell_integration_tests::redbell_binary;

/// `redbell ARGS...` with no reachable Redis.
fn offline(args: &[&str]) -> Output {
    let out = Command::new(redbell_binary())
        .args(args)
        .env("REDIS_URL", "redis://127.0.0.1:1")
        .stdin(Stdio::null())
        .output()
        .expect("redbell runs");
    assert!(
        out.status.success(),
        "redbell {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `bash -c SCRIPT` with `REDBELL` naming the binary; its stdout.
fn bash(script: &str) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .env("REDBELL", redbell_binary())
        .env("REDIS_URL", "redis://127.0.0.1:1")
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "bash -c {script:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn bash_loads_the_completion_script_and_completes_subcommands() {
    let registered = bash(r#"source <("$REDBELL" completions bash) && complete -p redbell"#);
    assert!(
        registered.contains("-F _redbell redbell"),
        "complete -p redbell: {registered}"
    );
    // What bash offers after `redbell st` and after `redbell run --`.
    let offered = bash(
        r#"source <("$REDBELL" completions bash)
        COMP_WORDS=(redbell st); COMP_CWORD=1; _redbell redbell st redbell
        echo "${COMPREPLY[@]}"
        COMP_WORDS=(redbell run --no); COMP_CWORD=2; _redbell redbell --no run
        echo "${COMPREPLY[@]}""#,
    );
    let lines: Vec<&str> = offered.lines().collect();
    assert_eq!(lines.len(), 2, "{offered}");
    assert_eq!(lines[0].trim(), "status", "after `redbell st`: {offered}");
    assert!(
        lines[1].contains("--nonblock"),
        "after `run --no`: {offered}"
    );
    // Every subcommand is offered (bash's generator also offers the
    // hidden, internal `__guard`: not asserted either way).
    let all = bash(
        r#"source <("$REDBELL" completions bash)
        COMP_WORDS=(redbell ''); COMP_CWORD=1; _redbell redbell '' redbell
        echo "${COMPREPLY[@]}""#,
    );
    for sub in ["run", "status", "top", "unlock", "elect", "leader", "man"] {
        assert!(all.split_whitespace().any(|w| w == sub), "{sub}: {all}");
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = offline(&["completions", shell]);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("redbell"),
            "{shell}"
        );
    }
}

#[test]
fn the_man_page_renders_with_man_and_groff() {
    let out = offline(&["man"]);
    let page = scratch().join("redbell.1");
    std::fs::File::create(&page)
        .and_then(|mut f| f.write_all(&out.stdout))
        .expect("write redbell.1");
    let rendered = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "80")
        .output()
        .expect("man runs");
    let text = String::from_utf8_lossy(&rendered.stdout);
    assert!(rendered.status.success(), "man -l: {}", rendered.status);
    for needle in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "redbell",
        "status",
        "REDBELL_URL",
    ] {
        assert!(text.contains(needle), "man -l lacks {needle:?}:\n{text}");
    }
    // Every roff warning category on (-ww); nothing may be reported.
    let groff = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(&page)
        .output()
        .expect("groff runs");
    let warnings = String::from_utf8_lossy(&groff.stderr);
    assert!(
        groff.status.success() && warnings.is_empty(),
        "groff: {}\n{warnings}",
        groff.status
    );
}
