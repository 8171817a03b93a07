"""Tests of the installed Python package (scripts/check-packages.sh runs them in a fresh venv
where the wheel was installed): the `pinwise` command and its preload library found where the
wheel put them, and the API (run, trace, load_history) used on a workload that runs on the
CPU stand-ins for libcuda/libcudart (TEST FIXTURES: nothing here is a GPU figure).

Environment: PINWISE_STANDIN_DIR, the directory holding the built stand-ins
(libpinwise_standin_cuda.so, libpinwise_standin_cudart.so: target/debug). The tracing tests
need root and BPF: under CI=true they fail without them, elsewhere they are skipped.
"""
import dataclasses
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import unittest

import pinwise

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "standin_workload.py")
IN_CI = os.environ.get("CI", "").lower() in ("true", "1")


def setUpModule():
    global LIBS, SCRATCH
    build = os.environ.get("PINWISE_STANDIN_DIR")
    if not build:
        raise RuntimeError("set PINWISE_STANDIN_DIR to the directory of the built stand-ins (target/debug)")
    SCRATCH = tempfile.TemporaryDirectory(prefix="pinwise-pytest-")
    LIBS = os.path.join(SCRATCH.name, "libs")
    os.mkdir(LIBS)
    # Laid out as a CUDA library directory, as pinwise_testkit::StandinLibs does.
    for target, links in [
        ("libpinwise_standin_cuda.so", ["libcuda.so.1", "libcuda.so"]),
        ("libpinwise_standin_cudart.so", ["libcudart.so.13", "libcudart.so"]),
    ]:
        path = os.path.join(build, target)
        if not os.path.isfile(path):
            raise RuntimeError("%s is missing: build the workspace first" % path)
        for link in links:
            os.symlink(path, os.path.join(LIBS, link))


def tearDownModule():
    SCRATCH.cleanup()


def standin_env():
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = LIBS
    env["PINWISE_LIBCUDA"] = os.path.join(LIBS, "libcuda.so.1")
    # The preload library must be the wheel's, found by the installed command itself.
    env.pop("PINWISE_PRELOAD_LIB", None)
    env.pop("PINWISE_BIN", None)
    return env


def workload(*extra):
    return [sys.executable, WORKLOAD, os.path.join(LIBS, "libcudart.so.13")] + list(extra)


class Installed(unittest.TestCase):
    def test_the_command_and_the_library_are_where_the_wheel_put_them(self):
        prefix = sys.prefix
        self.assertTrue(pinwise.__file__.startswith(prefix), pinwise.__file__)
        exe = pinwise.binary()
        self.assertEqual(exe, os.path.join(sysconfig.get_path("scripts"), "pinwise"))
        lib = os.path.join(prefix, "lib", "pinwise", "libpinwise_preload.so")
        self.assertTrue(os.path.isfile(lib), lib)
        self.assertTrue(os.path.isfile(os.path.join(prefix, "share", "man", "man1", "pinwise-run.1")))
        # `pinwise doctor` finds that library by itself (no --preload, no environment).
        out = subprocess.run(
            [exe, "doctor", "--no-bpf", "--json"], env=standin_env(), stdout=subprocess.PIPE, text=True
        )
        item = next(i for i in json.loads(out.stdout)["items"] if i["name"] == "preload library")
        self.assertEqual(item["state"], "ok", item)
        self.assertTrue(item["detail"].startswith(lib), item)

    def test_python_dash_m_pinwise_is_the_command(self):
        out = subprocess.run(
            [sys.executable, "-m", "pinwise", "--version"], stdout=subprocess.PIPE, text=True, check=True
        )
        self.assertRegex(out.stdout, r"^pinwise \d+\.\d+\.\d+")


class Run(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="pinwise-run-test-")
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_a_run_writes_a_history_and_a_summary_that_count_the_programs_copies(self):
        out = self.path("run.bin")
        r = pinwise.run(workload(), budget="64M", output=out, env=standin_env(), capture_output=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("htod 5 dtoh 1", r.stdout)
        self.assertIn("driver_is_standin", json.dumps(r.summary))
        self.assertEqual(r.summary["format"], "pinwise-run-summary")
        self.assertEqual(r.summary["mode"], "adaptive")
        self.assertEqual(r.summary["totals"]["transfers_htod"], 5, r.summary["totals"])
        self.assertEqual(r.summary["totals"]["transfers_dtoh"], 1, r.summary["totals"])
        # The library was the installed one: 64 MiB is the budget it was told.
        self.assertEqual(r.summary["processes"][0]["engine"]["budget_bytes"], 64 << 20)

        h = r.history()  # binary: through `pinwise convert`
        self.assertIsInstance(h, pinwise.History)
        self.assertEqual(h.path, out)
        self.assertEqual(h.format, "pinwise-history")
        self.assertEqual(h.transfers()["HtoD"], {"transfers": 5, "bytes": 3 * 256 * 1024 + 2 * (1 << 20)})
        self.assertEqual(h.transfers()["DtoH"], {"transfers": 1, "bytes": 1 << 20})
        pinned = [a for a in h.allocations if a.kind == "PINNED_ALLOC"]
        self.assertEqual([a.size for a in pinned], [1 << 20])
        self.assertTrue(pinned[0].pinned)
        self.assertEqual(pinned[0].transfers("HtoD"), 2)
        self.assertEqual(pinned[0].transfers("DtoH"), 1)
        self.assertEqual(pinned[0].final_state, "FREED")
        self.assertTrue(all(isinstance(a, pinwise.Allocation) for a in h.allocations))
        # Plain Python values throughout: the whole history goes through json.dumps.
        json.dumps(dataclasses.asdict(h))

    def test_json_and_binary_histories_of_the_same_program_read_alike(self):
        counts = {}
        for name in ("run.json", "run.bin"):
            r = pinwise.run(workload(), output=self.path(name), env=standin_env(), capture_output=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            h = pinwise.load_history(self.path(name))
            counts[name] = (
                h.transfers(),
                sorted((a.kind, a.size, a.transfer_count) for a in h.allocations if a.transfer_count),
            )
        self.assertEqual(counts["run.json"], counts["run.bin"])
        self.assertEqual(counts["run.json"][0]["HtoD"]["transfers"], 5)

    def test_profile_then_use(self):
        profile = self.path("w.profile.json")
        first = pinwise.run(workload(), mode="profile", profile=profile, env=standin_env(), capture_output=True)
        self.assertEqual(first.returncode, 0, first.stderr)
        with open(profile) as f:
            self.assertIsInstance(json.load(f), dict)
        second = pinwise.run(workload(), mode="use", profile=profile, env=standin_env(), capture_output=True)
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertEqual(second.summary["mode"], "use")
        self.assertIn("htod 5 dtoh 1", second.stdout)

    def test_the_programs_exit_status_passes_through(self):
        r = pinwise.run(workload("--exit", "3"), env=standin_env(), capture_output=True)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertEqual(r.summary["exit_code"], 3)

    def test_mistakes_are_said(self):
        with self.assertRaisesRegex(ValueError, "mode must be one of"):
            pinwise.run(workload(), mode="fast")
        with self.assertRaises(TypeError):
            pinwise.run("python3 train.py")
        with self.assertRaisesRegex(pinwise.PinwiseError, "parsecs"):
            pinwise.run(workload(), budget="5 parsecs", env=standin_env(), capture_output=True)
        out = self.path("exists.bin")
        open(out, "w").close()
        with self.assertRaisesRegex(pinwise.PinwiseError, "exists already"):
            pinwise.run(workload(), output=out, env=standin_env(), capture_output=True)


class LoadHistory(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="pinwise-load-test-")
        self.addCleanup(self.dir.cleanup)

    def write(self, name, data):
        path = os.path.join(self.dir.name, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_what_is_not_a_history_is_named(self):
        cases = [
            (b"", "empty"),
            (b"hello", "neither a pinwise binary history nor a JSON object"),
            (b"{\"format\": \"pinwise-report\", \"version\": 1}", "not a pinwise history"),
            (b"{\"format\": \"pinwise-history\", \"version\": 99}", "version 99"),
            (b"{\"format\": \"pinwise-history\", \"version\": 3}", "missing"),
            (b"{\"format\": ", "not valid JSON"),
            (pinwise.BINARY_MAGIC + b"\x00\x01", "truncated at byte 10"),
        ]
        for data, message in cases:
            with self.subTest(message=message):
                with self.assertRaisesRegex(pinwise.HistoryError, message):
                    pinwise.load_history(self.write("h", data))
        with self.assertRaises(FileNotFoundError):
            pinwise.load_history(os.path.join(self.dir.name, "none.json"))


def require_bpf(test):
    """Skips (or, under CI=true, fails) a tracing test without root and BPF, as
    pinwise_testkit::require_bpf does."""
    missing = None
    if os.geteuid() != 0:
        missing = "needs root for BPF"
    elif not os.path.exists("/proc/sys/kernel/unprivileged_bpf_disabled"):
        missing = "this kernel has no BPF system call"
    if missing and IN_CI:
        test.fail("%s (CI=true, so this fails)" % missing)
    if missing:
        test.skipTest(missing)


class Trace(unittest.TestCase):
    def setUp(self):
        require_bpf(self)
        self.dir = tempfile.TemporaryDirectory(prefix="pinwise-trace-test-")
        self.addCleanup(self.dir.cleanup)
        self.libcuda = ["--libcuda", os.path.join(LIBS, "libcuda.so.1")]

    def test_tracing_a_command_records_its_copies(self):
        out = os.path.join(self.dir.name, "t.json")
        with pinwise.trace(workload(), output=out, args=self.libcuda, env=standin_env()) as t:
            self.assertIsNone(t.returncode, "the block runs while the tracer traces")
        self.assertEqual(t.returncode, 0, t.stderr)
        self.assertEqual(t.summary["format"], "pinwise-trace-summary")
        h = t.history()
        self.assertEqual(h.transfers()["HtoD"]["transfers"], 5, h.stats)
        self.assertEqual(h.transfers()["DtoH"]["transfers"], 1, h.stats)
        self.assertEqual([a.size for a in h.allocations if a.kind == "PINNED_ALLOC"], [1 << 20])

    def test_tracing_a_pid_records_what_it_does_inside_the_block(self):
        program = subprocess.Popen(
            workload("--wait"), env=standin_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.addCleanup(program.stdout.close)
        self.addCleanup(program.stdin.close)
        self.addCleanup(program.kill)
        self.assertEqual(program.stdout.readline().strip(), "ready")
        out = os.path.join(self.dir.name, "pid.bin")
        with pinwise.trace(program.pid, output=out, args=self.libcuda) as t:
            # Attached now: the copies the program makes from here on are seen.
            program.stdin.write("go\n")
            program.stdin.flush()
            self.assertIn("htod 5 dtoh 1", program.stdout.readline())
            self.assertEqual(program.wait(60), 0)
        self.assertEqual(t.returncode, 0, t.stderr)
        h = t.history()
        self.assertEqual(h.transfers()["HtoD"]["transfers"], 5, t.stderr)
        self.assertEqual([a.size for a in h.allocations if a.kind == "PINNED_ALLOC"], [1 << 20])
        self.assertEqual({p["pid"] for p in h.processes}, {program.pid})

    def test_a_tracer_that_cannot_start_raises_with_its_message(self):
        out = os.path.join(self.dir.name, "x.json")
        with self.assertRaisesRegex(pinwise.PinwiseError, "ended before tracing .*no process with PID 999999999"):
            with pinwise.trace(999_999_999, output=out, args=self.libcuda):
                self.fail("the block must not run")


if __name__ == "__main__":
    unittest.main()
