//! The command line's conventions (README, "Conventions"), checked on the built `pinwise`
//! binary: exit statuses, messages, outputs, completions and manual pages.
use std::path::Path;
use std::process::{Command, Output};

fn pinwise(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .args(args)
        .env_remove("PINWISE_PRELOAD_LIB")
        .env("NO_COLOR", "1")
        .output()
        .expect("run pinwise")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn completions_are_generated_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _pinwise"),
        ("zsh", "#compdef pinwise"),
        ("fish", "complete -c pinwise"),
    ] {
        let o = pinwise(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(text.contains(marker), "{shell}: no `{marker}`");
        // Subcommands and their options are in the script.
        assert!(text.contains("fail-under"), "{shell}: no --fail-under");
    }
    let o = pinwise(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2), "an unknown shell is a usage error");
}

#[test]
fn the_manual_page_is_roff_and_one_page_per_subcommand_is_written() {
    let o = pinwise(&["man"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let page = stdout(&o);
    assert!(page.contains(".TH pinwise 1"), "{page}");
    assert!(page.contains("pinwise\\-trace"), "subcommands listed");
    let dir = tempfile::tempdir().unwrap();
    let o = pinwise(&["man", "--out-dir", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for name in ["pinwise.1", "pinwise-trace.1", "pinwise-run.1", "pinwise-bench-alloc.1"] {
        let p = dir.path().join(name);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{name}");
    }
    let run = std::fs::read_to_string(dir.path().join("pinwise-run.1")).unwrap();
    assert!(run.contains("\\-\\-budget"), "pinwise-run.1 documents --budget");
    assert!(!Path::new(&dir.path().join("pinwise-help.1")).exists());
}
