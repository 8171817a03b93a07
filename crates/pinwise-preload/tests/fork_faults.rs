//! What pinwise's fork handler costs a forked child (cudart stand-in, a TEST FIXTURE): a
//! child forked after the parent used CUDA (a DataLoader's worker) takes about as many page
//! faults as without pinwise. The handler forgets the parent's rings, queue and tables; it
//! used to write every slot of them, zeros over zeros included, and each page written is a
//! fault in every child: 144-146 faults in each child of this program against 28 without
//! pinwise (the release build, dev VM), whether pinwise was on or disabled; 116 more than
//! plain's with the debug build the tests use, 38 more once only what the parent used is
//! written.

mod common;

use common::*;

/// Faults a child may take beyond plain's: the handler's flags and the few slots the parent
/// used, a page or two each, and the handler's code: a child faults on each page of the
/// library's code it runs (text is not copied at fork), 30-40 pages in a debug build.
const MARGIN: u64 = 64;

fn child_faults(out: &std::process::Output, what: &str) -> u64 {
    assert_ok(out, what);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("child_minflt="))
        .unwrap_or_else(|| panic!("{what}: no child_minflt line in {text}"))
        .trim()
        .parse()
        .expect("a number")
}

#[test]
fn a_child_forked_after_cuda_takes_about_plain_page_faults() {
    let s = Setup::new();
    let exe = s.build_cudart("fork_faults.c", &["-lpthread"]);
    let plain = child_faults(&s.run_plain(&exe, &[]), "plain");
    // Malloc hooks on (the recorded allocations' events, the queue), and off.
    let tracked = child_faults(
        &s.run_pinwise(&["--min-tracked", "64K"], &exe, &[]),
        "pinwise run",
    );
    let untracked = child_faults(
        &s.run_pinwise(&["--no-malloc-hooks"], &exe, &[]),
        "pinwise run --no-malloc-hooks",
    );
    let mut c = s.libs.command(&exe);
    clean_env(&mut c);
    c.env("LD_PRELOAD", preload())
        .env("PINWISE_DISABLE", "1")
        .current_dir(s.dir.path());
    let disabled = child_faults(&c.output().expect("run the program"), "disabled");
    for (what, n) in [
        ("pinwise run", tracked),
        ("--no-malloc-hooks", untracked),
        ("PINWISE_DISABLE=1", disabled),
    ] {
        assert!(
            n <= plain + MARGIN,
            "{what}: a forked child took {n} minor faults, plain {plain} (margin {MARGIN})"
        );
    }
}
