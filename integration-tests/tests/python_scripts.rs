//! The Python client (`python/redbell`) runs the same scripts, byte for
//! byte: the SHA1 of each script it assembles equals `redbell::scripts()`'s.
//! (python/tests/test_scripts.py checks the copied `.lua` files themselves.)

use std::collections::BTreeMap;
use std::process::Command;

#[test]
fn python_client_assembles_every_script_with_the_rust_sha1() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../python/redbell/_scripts.py");
    // _scripts.py imports only the standard library: any python3 runs it.
    let out = Command::new("python3")
        .arg(script)
        .output()
        .expect("python3 must be installed (scripts/install-tools.sh)");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let python: BTreeMap<String, String> = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, s)| (n.to_owned(), s.to_owned()))
        .collect();
    let rust: BTreeMap<String, String> = redbell::scripts()
        .iter()
        .map(|s| (s.name.to_owned(), s.sha1.to_owned()))
        .collect();
    assert_eq!(
        python, rust,
        "the Python package's scripts (left) differ from the Rust crate's (right): \
         run `make python-lua`, and mirror registry.rs in python/redbell/_scripts.py"
    );
}
