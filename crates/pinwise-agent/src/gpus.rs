//! Which GPUs a process uses, from the NVIDIA device files it has open.
//!
//! The NVIDIA kernel driver gives each GPU a character device `/dev/nvidia<N>` with major
//! number [`NVIDIA_MAJOR`] (195) and minor number N; `/dev/nvidiactl` (minor 255) and
//! `/dev/nvidia-modeset` (254) are not GPUs, and `/dev/nvidia-uvm` has a major of its own.
//! libcuda opens the device file of each GPU it initialises, so the open file descriptors
//! in `/proc/PID/fd` say which GPUs a process holds.
//!
//! Cost and timing: the agent lists a live process's descriptors (one `readdir`, one `stat`
//! each) at the first tick after its first CUDA call and every `--labels-every` (10 s)
//! after, under the process table's lock. A process that ends within a tick of its first
//! CUDA call may have no `gpu` label. Reading another user's `/proc/PID/fd` needs
//! CAP_SYS_PTRACE; without it the label stays empty for those processes.
//!
//! # What the `gpu` label means
//!
//! The label lists the **minor numbers** N of the GPU device files the process has had
//! open (e.g. `0` or `0,3`), found by `stat` of each descriptor (the device number of the
//! open file itself, right in any mount namespace), else by the link's name
//! `/dev/nvidia<N>`. N is the "Minor Number" of `nvidia-smi -q` and the
//! `Device Minor` of `/proc/driver/nvidia/gpus/<PCI bus id>/information`. It is often, not
//! always, `nvidia-smi`'s index (which orders GPUs by PCI bus id), and it is **not** CUDA's
//! device ordinal in the process: CUDA numbers only the GPUs `CUDA_VISIBLE_DEVICES` lets
//! it see, from 0, fastest first by default. A GPU named in the label is one the driver
//! opened for the process, which is not proof that it copied to that GPU: the tracer's copy
//! events carry device pointers, not device numbers, so the label is per process, not per
//! copy. Whether the driver also opens the files of GPUs that `CUDA_VISIBLE_DEVICES`
//! hides was not checked on a machine with several GPUs (`bench/gpu/agent/labels.sh`
//! records the descriptors and the label with and without it).

use std::path::Path;

/// The major device number of the NVIDIA GPU device files.
pub const NVIDIA_MAJOR: u32 = 195;

/// Minor numbers at and above this are control devices (`nvidia-modeset` 254,
/// `nvidiactl` 255), not GPUs.
pub const FIRST_CONTROL_MINOR: u32 = 254;

/// The GPU minor number of a character device `(major, minor)`, if it is a GPU's file.
pub fn gpu_of_device(major: u32, minor: u32) -> Option<u32> {
    (major == NVIDIA_MAJOR && minor < FIRST_CONTROL_MINOR).then_some(minor)
}

/// The GPU minor number in a device file's path (`/dev/nvidia<N>`), if it names one.
pub fn gpu_of_path(path: &Path) -> Option<u32> {
    let name = path.to_str()?.strip_prefix("/dev/nvidia")?;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) || name.len() > 3 {
        return None;
    }
    name.parse().ok().filter(|&n| n < FIRST_CONTROL_MINOR)
}

/// The GPU minor numbers of the device files open in `fd_dir` (a `/proc/PID/fd`), sorted,
/// without repeats; `None` when the directory cannot be read (the process is gone, or the
/// agent may not look).
pub fn open_gpus(fd_dir: &Path) -> Option<Vec<u32>> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let entries = std::fs::read_dir(fd_dir).ok()?;
    let mut gpus = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        // Only device files are looked at: `stat` through the link of a file on a hung
        // network or FUSE mount would block the agent, a link's name never does.
        let Some(target) = std::fs::read_link(&path).ok() else {
            continue;
        };
        if !target.starts_with("/dev") {
            continue;
        }
        let by_device = std::fs::metadata(&path).ok().and_then(|m| {
            if !m.file_type().is_char_device() {
                return None;
            }
            let rdev = m.rdev();
            Some(gpu_of_device(libc::major(rdev), libc::minor(rdev)))
        });
        let gpu = match by_device {
            // A character device: its numbers decide.
            Some(g) => g,
            // Not openable here (another mount namespace's path): the link's name.
            None => gpu_of_path(&target),
        };
        if let Some(g) = gpu {
            gpus.push(g);
        }
    }
    gpus.sort_unstable();
    gpus.dedup();
    Some(gpus)
}

/// The `gpu` label value: minor numbers joined with `,` (empty when none).
pub fn label(gpus: &[u32]) -> String {
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn only_nvidia_gpu_minors_are_gpus() {
        assert_eq!(gpu_of_device(195, 0), Some(0));
        assert_eq!(gpu_of_device(195, 7), Some(7));
        assert_eq!(gpu_of_device(195, 255), None, "nvidiactl");
        assert_eq!(gpu_of_device(195, 254), None, "nvidia-modeset");
        assert_eq!(gpu_of_device(1, 3), None, "/dev/null");
        assert_eq!(gpu_of_path(Path::new("/dev/nvidia3")), Some(3));
        for not in [
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-caps/nvidia-cap1",
            "/dev/nvidia",
            "/dev/nvidia255",
            "/tmp/dev/nvidia1",
            "socket:[1234]",
        ] {
            assert_eq!(gpu_of_path(Path::new(not)), None, "{not}");
        }
        assert_eq!(label(&[0, 3]), "0,3");
        assert_eq!(label(&[]), "");
    }

    #[test]
    fn open_gpus_reads_a_fake_fd_directory() {
        let dir = tempfile::tempdir().unwrap();
        let fd = dir.path().join("fd");
        std::fs::create_dir(&fd).unwrap();
        let regular = dir.path().join("file");
        std::fs::write(&regular, b"x").unwrap();
        // Links as /proc/PID/fd shows them: device files of another mount namespace (not
        // openable here), a real character device that is no GPU, a file, a socket.
        let links = [
            ("3", "/dev/nvidiactl".into()),
            ("4", "/dev/nvidia2".into()),
            ("5", "/dev/nvidia0".into()),
            ("6", "/dev/nvidia2".into()),
            ("7", "/dev/nvidia-uvm".into()),
            ("8", "/dev/null".into()),
            ("9", regular.display().to_string()),
            ("10", "socket:[99]".into()),
        ];
        for (n, target) in links {
            symlink(target, fd.join(n)).unwrap();
        }
        // Where /dev/nvidia0 and /dev/nvidia2 exist on this machine they are the real GPU
        // device files, whose numbers say the same.
        assert_eq!(open_gpus(&fd), Some(vec![0, 2]));
        assert_eq!(open_gpus(&dir.path().join("gone")), None);
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert_eq!(open_gpus(&empty), Some(vec![]));
    }
}
