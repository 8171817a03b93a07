//! Safe creation of every file and directory pinwise writes.
//!
//! pinwise often runs as root in directories other users can write to (`/tmp`), so every
//! writer (library, CLI and preload) goes through this module:
//!
//! - **Whole files** ([`write_with`], [`write_bytes`], [`create_replacing`]) are written to a
//!   temporary file in the target's directory, created `O_CREAT|O_EXCL` with an unpredictable
//!   name (the `tempfile` crate) and mode `0600`, synced, then renamed over the target. A
//!   symlink planted at a temporary name cannot be followed (`O_EXCL` fails on any existing
//!   name), and the rename replaces the final directory entry itself, never a file a symlink
//!   points to.
//!   A writer whose wait is bounded (a process about to end) may skip the syncs
//!   ([`Durability::Unsynced`]); everything else about the write is the same.
//! - **Appended files** ([`open_append`], `run --log`) are opened `O_APPEND|O_CREAT|O_NOFOLLOW`,
//!   mode `0600`; an existing file is appended to only if the caller owns it and it has a
//!   single link (no hard link planted to another file).
//! - **Directories** ([`create_private_dir`], [`create_private_dir_all`]) are created `0700`.
//!
//! **The symlink rule.** When the output path the user named is itself a symlink, pinwise
//! follows it only if the symlink is owned by the caller (effective uid) or by root — that
//! is, the user (or the administrator) made it; then the file written is the symlink's
//! target, resolved link by link under the same rule. A symlink owned by anyone else is
//! refused with an error that names it and its owner. Symlinks in the directories above the
//! output are the user's choice of path and are followed as usual.
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Whether a whole file's bytes (and its directory entry) are synced to the disk before
/// the write returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Synced: the file survives a crash of the machine (the default).
    Synced,
    /// Left to the kernel: for a process about to end, whose wait is bounded (a sync can
    /// take seconds on a busy disk); the bytes survive the process, not a machine crash.
    Unsynced,
}

/// How many symlinks [`resolve_output`] follows before giving up.
const MAX_LINKS: usize = 16;

/// The effective uid of this process (the one whose files are trusted).
pub fn caller_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The file to write for output `path` under the module's symlink rule: `path` itself when
/// it is not a symlink (or does not exist), the symlink's target when the symlink is owned by
/// the caller or root, an error naming the symlink and its owner otherwise.
pub fn resolve_output(path: &Path) -> io::Result<PathBuf> {
    let me = caller_uid();
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let meta = match std::fs::symlink_metadata(&current) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(current),
            Err(e) => return Err(e),
        };
        if !meta.file_type().is_symlink() {
            return Ok(current);
        }
        if meta.uid() != me && meta.uid() != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "refusing to write through symlink {}: it is owned by uid {}, not by the \
                     caller (uid {me}) or root; remove it or choose another path",
                    current.display(),
                    meta.uid()
                ),
            ));
        }
        let target = std::fs::read_link(&current)?;
        current = match current.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("too many levels of symlinks at {}", path.display()),
    ))
}

/// The directory a file at `path` lives in (`.` for a bare file name).
fn dir_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// A new `0600` temporary file beside `target`, with an unpredictable name.
fn temp_beside(target: &Path) -> io::Result<tempfile::NamedTempFile> {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .tempfile_in(dir_of(target))
}

/// Syncs the directory holding `path`, so a rename into it survives a crash (best effort).
fn sync_dir(path: &Path) {
    if let Ok(d) = std::fs::File::open(dir_of(path)) {
        let _ = d.sync_all();
    }
}

/// Writes the file `path` through `write`: into a `0600` temporary file, synced, renamed into
/// place (see the module docs). On any error the temporary file is removed and `path` is
/// left as it was.
pub fn write_with<E: From<io::Error>>(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<(), E>,
) -> Result<(), E> {
    write_with_durability(path, Durability::Synced, write)
}

/// [`write_with`], synced or not as `durability` says.
pub fn write_with_durability<E: From<io::Error>>(
    path: &Path,
    durability: Durability,
    write: impl FnOnce(&mut dyn Write) -> Result<(), E>,
) -> Result<(), E> {
    let target = resolve_output(path)?;
    let tmp = temp_beside(&target)?;
    let mut w = io::BufWriter::new(tmp);
    write(&mut w)?;
    let tmp = w.into_inner().map_err(|e| e.into_error())?;
    if durability == Durability::Synced {
        tmp.as_file().sync_all()?;
    }
    tmp.persist(&target).map_err(|e| e.error)?;
    if durability == Durability::Synced {
        sync_dir(&target);
    }
    Ok(())
}

/// Writes `bytes` as the whole file `path` (see [`write_with`]).
pub fn write_bytes(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_with(path, |w| w.write_all(bytes))
}

/// [`write_bytes`], synced or not as `durability` says.
pub fn write_bytes_with(path: &Path, bytes: &[u8], durability: Durability) -> io::Result<()> {
    write_with_durability(path, durability, |w| w.write_all(bytes))
}

/// Replaces `path` with a new empty `0600` file and returns it open for writing, for files
/// written in pieces (periodic binary dumps). The file is created under a temporary name and
/// renamed into place at once.
pub fn create_replacing(path: &Path) -> io::Result<std::fs::File> {
    create_replacing_with(path, Durability::Synced)
}

/// [`create_replacing`], the directory entry synced or not as `durability` says.
pub fn create_replacing_with(path: &Path, durability: Durability) -> io::Result<std::fs::File> {
    let target = resolve_output(path)?;
    let tmp = temp_beside(&target)?;
    let file = tmp.persist(&target).map_err(|e| e.error)?;
    if durability == Durability::Synced {
        sync_dir(&target);
    }
    Ok(file)
}

/// Opens `path` for appending (`O_APPEND|O_CREAT|O_NOFOLLOW`, mode `0600` when created).
/// An existing file must be a regular file owned by the caller with a single link.
pub fn open_append(path: &Path) -> io::Result<std::fs::File> {
    let target = resolve_output(path)?;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&target)?;
    let meta = file.metadata()?;
    let me = caller_uid();
    let refuse = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refusing to append to {}: {why}", target.display()),
        ))
    };
    if !meta.file_type().is_file() {
        return refuse("not a regular file".into());
    }
    if meta.uid() != me {
        return refuse(format!(
            "owned by uid {}, not by the caller (uid {me})",
            meta.uid()
        ));
    }
    if meta.nlink() > 1 {
        return refuse(format!("it has {} hard links", meta.nlink()));
    }
    Ok(file)
}

/// Creates the directory `path` with mode `0700`; fails if it exists.
pub fn create_private_dir(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().mode(0o700).create(path)
}

/// Creates `path` and any missing parents with mode `0700` (existing ones are left as they are).
pub fn create_private_dir_all(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(path)
}

/// Checks, before a run, that an output file can be created at `path`: its directory exists
/// and a temporary file can be created in it, and the symlink rule allows it. Nothing is left
/// behind.
pub fn check_writable(path: &Path) -> io::Result<()> {
    let target = resolve_output(path)?;
    if target.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is a directory", target.display()),
        ));
    }
    temp_beside(&target).map(drop).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot create files in {}: {e}", dir_of(&target).display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn whole_files_are_0600_and_replace_the_old_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.json");
        std::fs::write(&p, "old content that is longer").unwrap();
        write_bytes(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(mode(&p), 0o600);
        // Nothing but the output is left in the directory.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn unsynced_whole_files_are_written_as_safely_as_synced_ones() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.json");
        std::fs::write(&p, "old content that is longer").unwrap();
        write_bytes_with(&p, b"new", Durability::Unsynced).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(mode(&p), 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let q = dir.path().join("fresh.bin");
        let f = create_replacing_with(&q, Durability::Unsynced).unwrap();
        drop(f);
        assert_eq!(mode(&q), 0o600);
        assert_eq!(std::fs::read(&q).unwrap(), b"");
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.bin");
        std::fs::write(&p, "old").unwrap();
        let r: io::Result<()> = write_with(&p, |w| {
            w.write_all(b"partial")?;
            Err(io::Error::other("boom"))
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn own_symlinks_are_followed_to_their_target() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink("real.json", &link).unwrap();
        write_bytes(&link, b"x").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"x");
        assert_eq!(resolve_output(&link).unwrap(), dir.path().join("real.json"));
    }

    #[test]
    fn symlink_loops_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::os::unix::fs::symlink("a", &a).unwrap();
        let e = write_bytes(&a, b"x").unwrap_err();
        assert!(e.to_string().contains("too many levels"), "{e}");
    }

    #[test]
    fn symlinks_of_other_users_are_refused_and_their_targets_untouched() {
        if caller_uid() != 0 {
            eprintln!("SKIPPED: needs root to give a symlink to another uid");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.path().join("out.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        let e = write_bytes(&link, b"x").unwrap_err();
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
        let e = open_append(&link).unwrap_err();
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
        assert!(create_replacing(&link).is_err());
        assert!(check_writable(&link).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn appending_creates_0600_and_refuses_foreign_or_linked_files() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("run.log");
        open_append(&log).unwrap().write_all(b"a\n").unwrap();
        open_append(&log).unwrap().write_all(b"b\n").unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "a\nb\n");
        assert_eq!(mode(&log), 0o600);
        let hard = dir.path().join("hard.log");
        std::fs::hard_link(&log, &hard).unwrap();
        let e = open_append(&hard).unwrap_err();
        assert!(e.to_string().contains("hard links"), "{e}");
        if caller_uid() == 0 {
            let foreign = dir.path().join("foreign.log");
            std::fs::write(&foreign, "theirs").unwrap();
            std::os::unix::fs::chown(&foreign, Some(65534), None).unwrap();
            let e = open_append(&foreign).unwrap_err();
            assert!(e.to_string().contains("owned by uid 65534"), "{e}");
            assert_eq!(std::fs::read_to_string(&foreign).unwrap(), "theirs");
        }
    }

    #[test]
    fn replacing_create_gives_an_empty_0600_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dump.bin");
        std::fs::write(&p, "old").unwrap();
        let mut f = create_replacing(&p).unwrap();
        f.write_all(b"new").unwrap();
        drop(f);
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(mode(&p), 0o600);
    }

    #[test]
    fn private_dirs_are_0700() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("a/b");
        create_private_dir_all(&d).unwrap();
        assert_eq!(mode(&d), 0o700);
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        let e = dir.path().join("c");
        create_private_dir(&e).unwrap();
        assert_eq!(mode(&e), 0o700);
        assert!(create_private_dir(&e).is_err());
    }

    #[test]
    fn writability_is_checked_without_leaving_files() {
        let dir = tempfile::tempdir().unwrap();
        check_writable(&dir.path().join("x.json")).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let e = check_writable(&dir.path().join("missing/x.json")).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        assert!(check_writable(dir.path()).is_err());
    }
}
