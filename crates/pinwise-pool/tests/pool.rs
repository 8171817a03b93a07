//! The pool across processes, on the CPU stand-in for libcuda (a TEST FIXTURE: nothing here
//! is a GPU figure): a service process and client processes, each a copy of this test binary
//! started with `POOL_ROLE` set (see `role_main`).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pinwise_cuda::{DeviceBuffer, Driver};
use pinwise_pool::{ErrorKind, PoolClient, PoolError, Service, ServiceConfig};
use pinwise_testkit::StandinLibs;

const MIB: usize = 1 << 20;

// ---- roles: this binary run again as a service or a client ----

/// Not a test of its own: when `POOL_ROLE` is set, this process is a service or a client
/// for the tests below (which start it with `--exact role_main`).
#[test]
fn role_main() {
    let Ok(role) = std::env::var("POOL_ROLE") else {
        return;
    };
    let socket = PathBuf::from(std::env::var("POOL_SOCKET").expect("POOL_SOCKET"));
    match role.as_str() {
        "service" => service(&socket),
        "client" => client(&socket),
        "other_user" => other_user(&socket),
        "refused" => refused(&socket),
        other => panic!("unknown role {other}"),
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn service(socket: &Path) {
    let driver = Driver::shared().expect("driver");
    let ctx = driver.device(0).unwrap().primary_context().unwrap();
    let config = ServiceConfig {
        socket: socket.to_path_buf(),
        capacity: env_u64("POOL_CAPACITY", 256 * MIB as u64),
        client_budget: env_u64("POOL_BUDGET", 64 * MIB as u64),
        allow_uids: vec![],
        huge_pages: false,
        copy_limit: Duration::from_millis(env_u64(
            "POOL_COPY_LIMIT_MS",
            pinwise_pool::DEFAULT_COPY_LIMIT.as_millis() as u64,
        )),
    };
    let service = Service::bind(config, ctx).expect("bind");
    println!("POOL:ready");
    service.run().expect("serve");
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A client: takes a buffer, fills it, has the pool copy it to its device memory and back
/// at several offsets, checks every byte through its own CUDA calls. `POOL_MODE=hold`: after
/// the checks, prints its mapping and waits for stdin to close; `copy_forever`: loops on
/// large copies (to be killed mid-copy).
fn client(socket: &Path) {
    let seed = env_u64("POOL_SEED", 1);
    let len = env_u64("POOL_LEN", 4 * MIB as u64) as usize;
    let mode = std::env::var("POOL_MODE").unwrap_or_default();
    let driver = Driver::shared().expect("driver");
    let ctx = driver.device(0).unwrap().primary_context().unwrap();
    let pool = PoolClient::connect(socket).expect("connect");
    let shared = std::env::var("POOL_SHARED").ok();
    let mut buf = match &shared {
        Some(name) => pool.alloc_shared(name, len).expect("alloc_shared"),
        None => pool.alloc(len).expect("alloc"),
    };
    assert!(buf.len() >= len);
    let dev = DeviceBuffer::new(&ctx, len).unwrap();
    let pdev = pool
        .register_device(&ctx, dev.ptr())
        .expect("register_device");
    let data = pattern(seed, len);
    if buf.created() {
        buf.as_mut_slice()[..len].copy_from_slice(&data);
    } else {
        // Another client made this named buffer and filled it.
        assert!(
            buf.as_slice()[..len] == data,
            "an attached buffer shows other bytes"
        );
        println!("POOL:attached");
    }
    if mode == "late" {
        // A deadline that has passed when the service reads the request: never copied,
        // whichever answer the client saw first.
        let before = {
            let mut b = vec![0u8; len];
            dev.copy_to_host(&mut b).unwrap();
            b
        };
        pool.set_copy_timeouts(Some(Duration::from_nanos(1)), None);
        match pool.copy_to_device(&buf, 0, &pdev, dev.ptr(), len) {
            Err(PoolError::NotStarted(_))
            | Err(PoolError::Refused {
                kind: ErrorKind::Expired,
                ..
            }) => {}
            other => panic!("a copy past its deadline: {other:?}"),
        }
        // Long enough for a late copy to land, were one made.
        std::thread::sleep(Duration::from_millis(300));
        let mut after = vec![0u8; len];
        dev.copy_to_host(&mut after).unwrap();
        assert!(
            after == before,
            "a copy past its deadline changed the device"
        );
        assert!(
            before != data,
            "the pattern must differ from the device's bytes"
        );
        println!("POOL:late ok");
        return;
    }
    if mode == "stuck" {
        // The service's copy outlives its copy limit: the service ends itself, and the
        // client sees the connection close (never a copy reported done).
        match pool.copy_to_device(&buf, 0, &pdev, dev.ptr(), len) {
            Err(PoolError::Connection(_)) => println!("POOL:gone ok"),
            other => panic!("a copy past the service's limit: {other:?}"),
        }
        return;
    }
    if mode == "copy_forever" {
        println!("POOL:copying");
        loop {
            pool.copy_to_device(&buf, 0, &pdev, dev.ptr(), len)
                .expect("copy");
        }
    }
    // Whole buffer to the device; read back by this process's own CUDA copy.
    pool.copy_to_device(&buf, 0, &pdev, dev.ptr(), len)
        .expect("copy_to_device");
    let mut back = vec![0u8; len];
    dev.copy_to_host(&mut back).unwrap();
    assert!(back == data, "device bytes differ after the pool's copy");
    if shared.is_some() {
        // The buffer is not this client's alone: no writes into it beyond this point.
        println!("POOL:ok locked={}", pinwise_testkit::locked_memory_bytes());
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        return;
    }
    // A middle piece, device to pool buffer at another offset.
    let (off, n) = (4097, len / 3);
    buf.as_mut_slice().fill(0);
    pool.copy_from_device(&buf, 123, &pdev, dev.ptr().offset(off), n)
        .expect("copy_from_device");
    assert!(
        buf.as_slice()[123..123 + n] == data[off..off + n],
        "piece differs"
    );
    assert!(
        buf.as_slice()[..123].iter().all(|&b| b == 0),
        "bytes before the piece were written"
    );
    assert!(
        buf.as_slice()[123 + n..].iter().all(|&b| b == 0),
        "bytes after the piece were written"
    );
    // Out of range: refused, nothing written.
    let err = pool
        .copy_to_device(&buf, buf.len() - 10, &pdev, dev.ptr(), 11)
        .unwrap_err();
    assert!(
        matches!(
            err,
            PoolError::Refused {
                kind: ErrorKind::BadRequest,
                ..
            }
        ),
        "{err}"
    );
    let locked = pinwise_testkit::locked_memory_bytes();
    println!("POOL:ok locked={locked}");
    if mode == "hold" {
        buf.as_mut_slice()[..16].copy_from_slice(b"victim-secret-16");
        println!(
            "POOL:map {:x}-{:x}",
            buf.as_slice().as_ptr() as usize,
            buf.as_slice().as_ptr() as usize + buf.len()
        );
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    }
}

/// Connects and expects a refusal (`POOL:refused <message>`).
fn refused(socket: &Path) {
    match PoolClient::connect(socket) {
        Err(PoolError::Refused {
            kind: ErrorKind::NotAllowed,
            message,
        }) => println!("POOL:refused {message}"),
        other => panic!("expected a refusal: {other:?}"),
    }
}

/// Run as another user: may not use the pool, nor map the held client's buffer.
fn other_user(socket: &Path) {
    assert_ne!(
        rustix::process::geteuid().as_raw(),
        0,
        "must run as another user"
    );
    match PoolClient::connect(socket) {
        Err(PoolError::Refused {
            kind: ErrorKind::NotAllowed,
            message,
        }) => {
            println!("POOL:refused {message}")
        }
        other => panic!("another user's connection: {other:?}"),
    }
    let pid = std::env::var("POOL_VICTIM_PID").unwrap();
    let range = std::env::var("POOL_VICTIM_RANGE").unwrap();
    let map_file = format!("/proc/{pid}/map_files/{range}");
    let e = std::fs::File::open(&map_file).unwrap_err();
    println!("POOL:map_files {:?}", e.kind());
    let e = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap_err();
    println!("POOL:mem {:?}", e.kind());
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"));
    println!(
        "POOL:fd_dir {}",
        if fds.is_err() { "denied" } else { "listed" }
    );
}

// ---- helpers for the tests ----

/// A child process killed (SIGKILL) and reaped on drop.
struct Proc {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Proc {
    fn spawn(libs: &StandinLibs, socket: &Path, role: &str, env: &[(&str, String)]) -> Proc {
        Proc::spawn_with(libs, socket, role, env, None, &[])
    }

    fn spawn_with(
        libs: &StandinLibs,
        socket: &Path,
        role: &str,
        env: &[(&str, String)],
        uid: Option<u32>,
        launcher: &[&str],
    ) -> Proc {
        // `launcher`: a command that runs the role (e.g. `unshare --time ...`), or none.
        let mut cmd = match launcher.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(std::env::current_exe().unwrap());
                c
            }
            None => Command::new(std::env::current_exe().unwrap()),
        };
        libs.configure(&mut cmd);
        cmd.args(["--exact", "role_main", "--nocapture", "--test-threads=1"])
            .env("POOL_ROLE", role)
            .env("POOL_SOCKET", socket)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(uid) = uid {
            // SAFETY: between fork and exec only async-signal-safe calls (setgroups, setgid,
            // setuid), as pre_exec requires.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(uid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().expect("spawn role");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                // libtest may print "test role_main ... " before the first line.
                if let Some(at) = l.find("POOL:") {
                    let _ = tx.send(l[at + 5..].to_string());
                }
            }
        });
        Proc { child, lines }
    }

    /// The next `POOL:` line, within `secs`.
    fn line(&self, secs: u64) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(secs))
            .unwrap_or_else(|_| panic!("no POOL: line from pid {} in {secs} s", self.child.id()))
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_ok(mut self) {
        let status = self.child.wait().unwrap();
        assert!(status.success(), "role exited with {status}");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Fixture {
    libs: StandinLibs,
    _dir: tempfile::TempDir,
    socket: PathBuf,
    service: Proc,
}

fn start(test: &str, env: &[(&str, String)]) -> Option<Fixture> {
    if !pinwise_testkit::require_locked_memory(test, 512 * MIB as u64) {
        return None;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pool.sock");
    let service = Proc::spawn(&libs, &socket, "service", env);
    assert_eq!(service.line(30), "ready");
    Some(Fixture {
        libs,
        _dir: dir,
        socket,
        service,
    })
}

fn service_locked_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Polls the pool's stats (through a connection of this process) until `done` or 10 s.
fn wait_stats(
    pool: &PoolClient,
    done: impl Fn(&pinwise_pool::Stats) -> bool,
) -> pinwise_pool::Stats {
    let t0 = Instant::now();
    loop {
        let s = pool.stats().unwrap();
        if done(&s) || t0.elapsed() > Duration::from_secs(10) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---- tests ----

#[test]
fn clients_in_separate_processes_share_one_pool_byte_exact() {
    let Some(f) = start(
        "clients_in_separate_processes_share_one_pool_byte_exact",
        &[],
    ) else {
        return;
    };
    let observer = PoolClient::connect(&f.socket).unwrap();
    let before = observer.stats().unwrap();
    assert_eq!((before.clients, before.buffers, before.bytes), (1, 0, 0));
    let clients: Vec<Proc> = (0..3)
        .map(|i| {
            Proc::spawn(
                &f.libs,
                &f.socket,
                "client",
                &[
                    ("POOL_SEED", format!("{}", i + 10)),
                    ("POOL_LEN", format!("{}", (i + 1) * 3 * MIB + 17)),
                    ("POOL_MODE", "hold".into()),
                ],
            )
        })
        .collect();
    for c in &clients {
        let ok = c.line(60);
        // The client pinned nothing itself: the service did (stand-in pinning is mlock).
        assert_eq!(ok, "ok locked=0", "client {}", c.pid());
        assert!(c.line(10).starts_with("map "));
    }
    // All three hold their buffer and device mapping at once, in one service.
    let held = observer.stats().unwrap();
    assert_eq!(held.clients, 4);
    assert_eq!(held.buffers, 3);
    assert_eq!(held.devices, 3);
    assert!(held.bytes >= (3 + 6 + 9) as u64 * MIB as u64, "{held:?}");
    assert_eq!(held.copies, 6, "two successful copies per client");
    assert!(service_locked_kib(f.service.pid()) * 1024 >= held.bytes);
    for mut c in clients {
        drop(c.child.stdin.take()); // closing stdin ends the hold
        let status = c.child.wait().unwrap();
        assert!(status.success());
    }
    let after = wait_stats(&observer, |s| s.clients == 1 && s.buffers == 0);
    assert_eq!(
        (after.clients, after.buffers, after.bytes, after.devices),
        (1, 0, 0, 0),
        "{after:?}"
    );
    assert_eq!(
        service_locked_kib(f.service.pid()),
        0,
        "the service unpinned everything"
    );
}

#[test]
fn a_named_buffer_is_one_pinned_copy_shared_by_the_clients_of_a_user() {
    let Some(f) = start(
        "a_named_buffer_is_one_pinned_copy_shared_by_the_clients_of_a_user",
        &[],
    ) else {
        return;
    };
    let observer = PoolClient::connect(&f.socket).unwrap();
    let len = 8 * MIB;
    let env = |seed: &str| {
        vec![
            ("POOL_SEED", seed.to_string()),
            ("POOL_LEN", len.to_string()),
            ("POOL_SHARED", "staging".to_string()),
        ]
    };
    let first = Proc::spawn(&f.libs, &f.socket, "client", &env("5"));
    assert_eq!(first.line(60), "ok locked=0");
    // Two more clients ask for the same name: they see the first one's bytes (their own
    // check: "attached", then the copy to their device is byte-exact).
    let others: Vec<Proc> = (0..2)
        .map(|_| Proc::spawn(&f.libs, &f.socket, "client", &env("5")))
        .collect();
    for c in &others {
        assert_eq!(c.line(60), "attached");
        assert_eq!(c.line(60), "ok locked=0");
    }
    let s = observer.stats().unwrap();
    assert_eq!(
        (s.buffers, s.attachments, s.bytes),
        (1, 3, len as u64),
        "one copy: {s:?}"
    );
    assert!(
        service_locked_kib(f.service.pid()) * 1024 < 2 * len as u64,
        "pinned once"
    );
    // The first client leaves: the buffer stays for the others.
    drop(first);
    let s = wait_stats(&observer, |s| s.attachments == 2);
    assert_eq!(
        (s.buffers, s.attachments, s.bytes),
        (1, 2, len as u64),
        "{s:?}"
    );
    drop(others);
    let s = wait_stats(&observer, |s| s.buffers == 0);
    assert_eq!((s.buffers, s.attachments, s.bytes), (0, 0, 0), "{s:?}");
    // A new client asking for the name now gets a new buffer.
    let buf = observer.alloc_shared("staging", MIB).unwrap();
    assert!(buf.created());
}

#[test]
fn a_client_killed_mid_copy_leaks_nothing() {
    // Every async copy of the service waits 200 ms first: the kill lands during a copy.
    let Some(f) = start(
        "a_client_killed_mid_copy_leaks_nothing",
        &[("PINWISE_STANDIN_ASYNC_DELAY_US", "200000".into())],
    ) else {
        return;
    };
    let observer = PoolClient::connect(&f.socket).unwrap();
    let c = Proc::spawn(
        &f.libs,
        &f.socket,
        "client",
        &[
            ("POOL_LEN", format!("{}", 8 * MIB)),
            ("POOL_MODE", "copy_forever".into()),
        ],
    );
    assert_eq!(c.line(60), "copying");
    let during = wait_stats(&observer, |s| s.copies >= 1);
    assert!(
        during.copies >= 1 && during.buffers == 1 && during.devices == 1,
        "{during:?}"
    );
    std::thread::sleep(Duration::from_millis(100)); // inside the next copy's 200 ms
    let mut c = c;
    c.child.kill().unwrap();
    c.child.wait().unwrap();
    let after = wait_stats(&observer, |s| {
        s.clients == 1 && s.buffers == 0 && s.devices == 0
    });
    assert_eq!(
        (after.clients, after.buffers, after.bytes, after.devices),
        (1, 0, 0, 0),
        "{after:?}"
    );
    assert_eq!(
        service_locked_kib(f.service.pid()),
        0,
        "the service unpinned the dead client's buffer"
    );
    // The service still serves.
    let buf = observer.alloc(MIB).unwrap();
    assert_eq!(observer.stats().unwrap().buffers, 1);
    drop(buf);
    assert_eq!(observer.stats().unwrap().bytes, 0);
}

#[test]
fn another_user_cannot_use_the_pool_or_map_a_clients_buffer() {
    if !pinwise_testkit::require_root("another_user_cannot_use_the_pool_or_map_a_clients_buffer") {
        return;
    }
    let Some(f) = start(
        "another_user_cannot_use_the_pool_or_map_a_clients_buffer",
        &[],
    ) else {
        return;
    };
    let victim = Proc::spawn(
        &f.libs,
        &f.socket,
        "client",
        &[("POOL_MODE", "hold".into())],
    );
    assert!(victim.line(60).starts_with("ok"));
    let range = victim.line(10).strip_prefix("map ").unwrap().to_string();
    // Positive control: root can open the victim's buffer through map_files and sees its
    // bytes, so the refusals below are about the user, not a wrong path.
    let seen = std::fs::read(format!("/proc/{}/map_files/{range}", victim.pid())).unwrap();
    assert_eq!(
        &seen[..16],
        b"victim-secret-16",
        "root sees the victim's buffer"
    );
    const NOBODY: u32 = 65534;
    let other = Proc::spawn_with(
        &f.libs,
        &f.socket,
        "other_user",
        &[
            ("POOL_VICTIM_PID", victim.pid().to_string()),
            ("POOL_VICTIM_RANGE", range.clone()),
        ],
        Some(NOBODY),
        &[],
    );
    assert_eq!(
        other.line(30),
        format!("refused uid {NOBODY} may not use this pool")
    );
    assert_eq!(other.line(10), "map_files PermissionDenied");
    assert_eq!(other.line(10), "mem PermissionDenied");
    assert_eq!(other.line(10), "fd_dir denied");
    other.wait_ok();
    // An allowed second client sees none of the victim's buffers either: ids are per
    // connection, and this connection has none.
    let second = PoolClient::connect(&f.socket).unwrap();
    let stats = second.stats().unwrap();
    assert_eq!(stats.buffers, 1, "the victim's buffer exists");
    // Speak the protocol directly: free buffer 1 (the victim's first buffer id).
    use pinwise_pool::proto::{decode, encode, Request, Response};
    use std::os::fd::AsFd;
    let sock = pinwise_pool::wire::connect(&f.socket).unwrap();
    let call = |req: &Request| -> Response {
        pinwise_pool::wire::send(sock.as_fd(), &encode(req), None).unwrap();
        let (bytes, _) = pinwise_pool::wire::recv(sock.as_fd()).unwrap().unwrap();
        decode(&bytes).unwrap()
    };
    assert!(matches!(
        call(&Request::Hello {
            version: pinwise_pool::proto::VERSION
        }),
        Response::Hello { .. }
    ));
    for req in [
        Request::Free { buffer: 1 },
        Request::Copy {
            dir: pinwise_pool::proto::Direction::DeviceToHost,
            buffer: 1,
            buffer_offset: 0,
            device: 2,
            device_offset: 0,
            len: 8,
            deadline_ns: None,
        },
    ] {
        match call(&req) {
            Response::Error {
                kind: ErrorKind::NotFound,
                ..
            } => {}
            other => panic!("{req:?} on another client's id: {other:?}"),
        }
    }
    assert_eq!(
        second.stats().unwrap().buffers,
        1,
        "the victim's buffer is untouched"
    );
    drop(victim);
}

#[test]
fn the_service_absent_or_gone_is_a_clean_error() {
    let dir = tempfile::tempdir().unwrap();
    match PoolClient::connect(&dir.path().join("nobody-here.sock")) {
        Err(e @ PoolError::Unavailable { .. }) => {
            assert!(e.to_string().contains("nobody-here.sock"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    let Some(mut f) = start("the_service_absent_or_gone_is_a_clean_error", &[]) else {
        return;
    };
    let pool = PoolClient::connect(&f.socket).unwrap();
    let mut buf = pool.alloc(MIB).unwrap();
    buf.as_mut_slice()[..4].copy_from_slice(b"kept");
    // Over budget (64 MiB per client in these tests): refused, nothing taken.
    let err = pool.alloc(65 * MIB).unwrap_err();
    assert!(
        matches!(
            err,
            PoolError::Refused {
                kind: ErrorKind::OverBudget,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(pool.stats().unwrap().buffers, 1);
    // The service crashes: calls fail cleanly, the buffer's memory stays readable.
    f.service.child.kill().unwrap();
    f.service.child.wait().unwrap();
    let err = pool.alloc(MIB).unwrap_err();
    assert!(matches!(err, PoolError::Connection(_)), "{err}");
    assert_eq!(&buf.as_slice()[..4], b"kept");
    drop(buf); // its Free fails quietly
}

#[test]
fn a_second_service_on_the_same_socket_is_refused() {
    let Some(f) = start("a_second_service_on_the_same_socket_is_refused", &[]) else {
        return;
    };
    let driver = Driver::load_from(&f.libs.libcuda()).unwrap();
    driver.init().unwrap();
    let ctx = std::sync::Arc::new(driver)
        .device(0)
        .unwrap()
        .primary_context()
        .unwrap();
    let config = ServiceConfig {
        socket: f.socket.clone(),
        capacity: MIB as u64,
        client_budget: MIB as u64,
        allow_uids: vec![],
        huge_pages: false,
        copy_limit: pinwise_pool::DEFAULT_COPY_LIMIT,
    };
    let err = Service::bind(config, ctx).unwrap_err();
    assert!(err.to_string().contains("already serves"), "{err}");
}

#[test]
fn a_client_holds_at_most_the_buffer_limit() {
    let Some(f) = start("a_client_holds_at_most_the_buffer_limit", &[]) else {
        return;
    };
    let pool = PoolClient::connect(&f.socket).unwrap();
    let bufs: Vec<_> = (0..pinwise_pool::MAX_BUFFERS_PER_CLIENT)
        .map(|_| pool.alloc(1).unwrap())
        .collect();
    let err = pool.alloc(1).unwrap_err();
    assert!(
        matches!(err, PoolError::Refused { kind: ErrorKind::OverBudget, ref message } if message.contains(&format!("{} buffers", pinwise_pool::MAX_BUFFERS_PER_CLIENT))),
        "{err}"
    );
    drop(bufs);
    assert_eq!(pool.stats().unwrap().buffers, 0);
    pool.alloc(1).unwrap();
}

#[test]
fn a_copy_past_its_deadline_is_never_made() {
    let Some(f) = start("a_copy_past_its_deadline_is_never_made", &[]) else {
        return;
    };
    let observer = PoolClient::connect(&f.socket).unwrap();
    let c = Proc::spawn(
        &f.libs,
        &f.socket,
        "client",
        &[("POOL_MODE", "late".into())],
    );
    assert_eq!(c.line(60), "late ok");
    c.wait_ok();
    let s = observer.stats().unwrap();
    assert_eq!((s.expired_copies, s.copies), (1, 0), "{s:?}");
}

#[test]
fn a_copy_past_the_services_copy_limit_ends_the_service_and_the_client_sees_it() {
    // Each service copy takes 3 s; the copy limit is 300 ms.
    let Some(mut f) = start(
        "a_copy_past_the_services_copy_limit_ends_the_service_and_the_client_sees_it",
        &[
            ("PINWISE_STANDIN_ASYNC_DELAY_US", "3000000".into()),
            ("POOL_COPY_LIMIT_MS", "300".into()),
        ],
    ) else {
        return;
    };
    let t0 = Instant::now();
    let c = Proc::spawn(
        &f.libs,
        &f.socket,
        "client",
        &[("POOL_MODE", "stuck".into())],
    );
    assert_eq!(c.line(60), "gone ok");
    c.wait_ok();
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    let status = f.service.child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}");
}

#[test]
fn a_process_in_another_time_namespace_is_refused() {
    // Copy deadlines are the client's CLOCK_MONOTONIC readings: a time namespace offsets
    // that clock, so such a client could have a late copy started. Needs root and
    // util-linux's unshare with time namespaces (Linux >= 5.6).
    const TEST: &str = "a_process_in_another_time_namespace_is_refused";
    if !pinwise_testkit::require_root(TEST) {
        return;
    }
    let probe = Command::new("unshare")
        .args(["--time", "--fork", "--monotonic", "1000", "true"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED {TEST}: `unshare --time` is not available here");
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: time namespaces must be available for {TEST}"
        );
        return;
    }
    let Some(f) = start(TEST, &[]) else {
        return;
    };
    let shifted = Proc::spawn_with(
        &f.libs,
        &f.socket,
        "refused",
        &[],
        None,
        &["unshare", "--time", "--fork", "--monotonic", "1000"],
    );
    let line = shifted.line(30);
    assert!(
        line.starts_with("refused pid ") && line.contains("another time namespace"),
        "{line}"
    );
    shifted.wait_ok();
    // Positive control: a client in the service's namespace is let in.
    let client = Proc::spawn(&f.libs, &f.socket, "client", &[]);
    assert!(
        client.line(60).starts_with("ok"),
        "a client in the same namespace works"
    );
}
