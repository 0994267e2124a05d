//! `redbell completions SHELL` and `redbell man` (issue 31): the completion
//! script loads in a real bash and completes the subcommands, and the man
//! pages (redbell(1), redbell-run(1)) render with the system's `man` and
//! `groff` without a warning, every option with its help. Both
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

/// Renders the page `redbell ARGS...` prints with `man -l` (80 columns)
/// and checks it with `groff -ww` (every warning on; none may be
/// reported); the text `man` printed.
fn render(args: &[&str]) -> String {
    let out = offline(args);
    let page = scratch().join("page.1");
    std::fs::File::create(&page)
        .and_then(|mut f| f.write_all(&out.stdout))
        .expect("write the page");
    let rendered = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "80")
        .output()
        .expect("man runs");
    assert!(rendered.status.success(), "man -l: {}", rendered.status);
    let groff = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(&page)
        .output()
        .expect("groff runs");
    let warnings = String::from_utf8_lossy(&groff.stderr);
    assert!(
        groff.status.success() && warnings.is_empty(),
        "groff on {args:?}: {}\n{warnings}",
        groff.status
    );
    String::from_utf8_lossy(&rendered.stdout).into_owned()
}

#[test]
fn the_man_pages_render_with_man_and_groff() {
    let text = render(&["man"]);
    for needle in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "redbell-run(1)",
        "REDBELL_URL",
        // The Redis options (hidden from -h) keep their help.
        "discovered", // --cluster: "(the rest are discovered)"
        "--tls-insecure",
    ] {
        assert!(
            text.contains(needle),
            "redbell(1) lacks {needle:?}:\n{text}"
        );
    }
    // The exit codes stay a table: code and meaning on one line.
    for (code, meaning) in [
        ("69", "Redis could not be reached"),
        ("78", "configuration"),
    ] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(code) && l.contains(meaning)),
            "exit code {code} not on one line with {meaning:?}:\n{text}"
        );
    }
    let run = render(&["man", "run"]);
    for needle in ["redbell-run", "--nonblock", "Fail at once", "REDBELL_FENCE"] {
        assert!(
            run.contains(needle),
            "redbell-run(1) lacks {needle:?}:\n{run}"
        );
    }
    let unknown = Command::new(redbell_binary())
        .args(["man", "nope"])
        .output()
        .expect("redbell runs");
    assert_eq!(unknown.status.code(), Some(2), "man nope");
}
