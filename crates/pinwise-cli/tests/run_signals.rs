//! `pinwise run` and signals sent to it alone (not to the terminal's group): they are passed
//! on to the program, pinwise waits for it, and then ends as the program did.
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `pinwise run -- sh -c SCRIPT`, once the script has printed `ready`.
fn start(script: &str) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .args(["run", "--no-malloc-hooks", "--", "sh", "-c", script])
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pinwise run");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    // pinwise installs its forwarding right after the spawn; the shell took longer.
    std::thread::sleep(Duration::from_millis(200));
    child
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill with a pid we started; no memory involved.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

#[test]
fn a_signal_sent_to_pinwise_reaches_the_program_and_pinwise_waits_for_it() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let child = start("trap 'exit 7' TERM INT HUP; echo ready; while :; do sleep 0.05; done");
        signal(&child, sig);
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // Had pinwise died of the signal, its status would say so and the program would
        // still run; the program's own exit status says it got the signal.
        assert_eq!(out.status.code(), Some(7), "signal {sig}: {err}");
        assert!(err.contains("exited with status 7"), "signal {sig}: {err}");
    }
}

#[test]
fn a_program_killed_by_the_forwarded_signal_makes_pinwise_end_by_it_too() {
    let child = start("echo ready; exec sleep 30");
    signal(&child, libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{err}");
    assert!(
        err.contains("killed by signal 15"),
        "the summary says so: {err}"
    );
}
