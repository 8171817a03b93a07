//! pinwise's own allocations stay out of the program's malloc heap: 2,000 recorded
//! allocations (each with its stack, all freed by the program) leave the bytes in use in
//! glibc's heap as they were. When pinwise allocated from glibc, this loop left 1.1 MiB of
//! pinwise's blocks in use among the program's (development VM); the program's freed blocks
//! then could not merge back into the top chunk, and its later small blocks were split from
//! and coalesced into free chunks (+15 to +45 ns per 4 KiB pair on the H100:
//! `bench/results/preload-malloc-hooks.md`, eighth session).

mod common;

use common::*;

/// The bytes in use in glibc's heap before and after the loop, in KiB.
fn in_use(stderr: &[u8]) -> (u64, u64) {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("in_use "))
        .unwrap_or_else(|| panic!("no `in_use` line: {text}"));
    let mut v = line.split_whitespace().map(|kv| {
        kv.split_once('=')
            .expect("k=v")
            .1
            .parse::<u64>()
            .expect("KiB")
    });
    (v.next().unwrap(), v.next().unwrap())
}

#[test]
fn recorded_allocations_leave_the_programs_heap_as_it_was() {
    let s = Setup::new();
    let exe = s.build_plain("heap_after_records.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain run");
    let (pb, pa) = in_use(&plain.stderr);
    assert!(
        pa <= pb + 16,
        "plain: the loop itself keeps blocks: {pb} -> {pa} KiB"
    );
    let run = s.run_pinwise(&["--min-tracked", "64K"], &exe, &[]);
    assert_ok(&run, "pinwise run");
    assert_same_stdout(&run, &plain, "pinwise run");
    let (b, a) = in_use(&run.stderr);
    eprintln!("in use: plain {pb} -> {pa} KiB; pinwise run {b} -> {a} KiB");
    assert!(
        a <= b + 64,
        "2,000 recorded allocations left {} KiB more in use in the program's heap ({b} -> \
         {a} KiB): pinwise's own blocks are among the program's",
        a.saturating_sub(b)
    );
}

/// `MIMALLOC_*` variables meant for a program's own mimalloc change nothing under
/// `pinwise run`: pinwise's mimalloc sets its options itself. Before, with
/// `MIMALLOC_DESTROY_ON_EXIT=1` a Python program died of SIGSEGV at exit,
/// `MIMALLOC_DISALLOW_OS_ALLOC=1` aborted it at start and `MIMALLOC_MAX_VABITS=20` crashed it.
#[test]
fn mimalloc_settings_meant_for_the_program_change_nothing() {
    let Some(python) = python3() else {
        return;
    };
    let s = Setup::new();
    let script = "b = [bytearray(1 << 20) for _ in range(64)]\nprint('ok', sum(len(x) for x in b))";
    let plain = {
        let mut c = s.libs.command(std::path::Path::new(python));
        c.args(["-c", script]).current_dir(s.dir.path());
        clean_env(&mut c);
        c.output().expect("run python3")
    };
    assert_ok(&plain, "plain run");
    for (var, value) in [
        ("MIMALLOC_DESTROY_ON_EXIT", "1"),
        ("MIMALLOC_DISALLOW_OS_ALLOC", "1"),
        ("MIMALLOC_DISALLOW_ARENA_ALLOC", "1"),
        ("MIMALLOC_MAX_VABITS", "20"),
        ("MIMALLOC_RESERVE_OS_MEMORY", "64MiB"),
        ("MIMALLOC_VERBOSE", "1"),
        ("MIMALLOC_SHOW_STATS", "1"),
        ("MIMALLOC_SHOW_ERRORS", "1"),
    ] {
        let mut c = s.libs.command(pinwise());
        c.args(["run", "--min-tracked", "64K", "--", python, "-c", script])
            .current_dir(s.dir.path());
        clean_env(&mut c);
        c.env(var, value);
        let out = c.output().expect("run pinwise");
        assert_ok(&out, var);
        assert_same_stdout(&out, &plain, var);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("mimalloc"),
            "{var}={value}: pinwise's mimalloc printed something: {stderr}"
        );
    }
}
