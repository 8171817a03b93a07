//! Where `pinwise run` finds the preload library (`libpinwise_preload.so`).
//!
//! In order: `--preload PATH` (or `PINWISE_PRELOAD_LIB`), then next to the `pinwise` binary
//! (a build tree: `target/release/`), then `<prefix>/lib/pinwise/` and `<prefix>/lib/` for a
//! binary in `<prefix>/bin/` (`scripts/install.sh` and `cargo install` plus the library copied
//! there, as the README's "Install" section says).
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// File name of the preload library.
pub const PRELOAD_FILE: &str = "libpinwise_preload.so";

/// Environment variable naming the preload library (what `--preload` overrides).
pub const PRELOAD_ENV: &str = "PINWISE_PRELOAD_LIB";

/// The places looked at, in order, for a `pinwise` binary at `exe`.
pub fn candidates(exe: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = exe.parent() {
        out.push(dir.join(PRELOAD_FILE));
        if let Some(prefix) = dir.parent() {
            out.push(prefix.join("lib").join("pinwise").join(PRELOAD_FILE));
            out.push(prefix.join("lib").join(PRELOAD_FILE));
        }
    }
    out
}

/// The first of [`candidates`] for this binary that exists, else the list looked at.
pub fn search() -> std::result::Result<PathBuf, Vec<PathBuf>> {
    let Ok(exe) = std::env::current_exe() else {
        return Err(Vec::new());
    };
    // A symlinked `pinwise` (e.g. /usr/local/bin/pinwise -> /opt/pinwise/bin/pinwise) looks
    // beside its target.
    let exe = exe.canonicalize().unwrap_or(exe);
    let all = candidates(&exe);
    all.iter().find(|p| p.is_file()).cloned().ok_or(all)
}

/// What to tell a user who has no preload library where pinwise looks.
pub fn install_hint() -> String {
    format!(
        "build it with `cargo build --release -p pinwise-preload` and copy \
         target/release/{PRELOAD_FILE} next to the pinwise binary or into <prefix>/lib/pinwise/, \
         or pass --preload PATH (or set {PRELOAD_ENV})"
    )
}

/// The preload library: `explicit` (from `--preload` or the environment), else the first
/// of [`candidates`] that exists. Fails when it is missing or its path cannot go into
/// `LD_PRELOAD`.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf> {
    let path = match explicit {
        Some(p) => p
            .canonicalize()
            .with_context(|| format!("the preload library {} is missing", p.display()))?,
        None => match search() {
            Ok(p) => p.canonicalize().unwrap_or(p),
            Err(looked) => bail!(
                "the preload library {PRELOAD_FILE} was not found (looked in: {}): {}",
                looked
                    .iter()
                    .map(|p| p.parent().unwrap_or(p).display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                install_hint()
            ),
        },
    };
    let text = path.to_string_lossy();
    if text.contains(' ') || text.contains(':') {
        bail!(
            "the preload library's path {} contains a space or a colon, which LD_PRELOAD \
             cannot carry: move it",
            path.display()
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installed_binary_looks_beside_itself_then_in_its_prefix_lib() {
        let c = candidates(Path::new("/opt/pw/bin/pinwise"));
        assert_eq!(
            c,
            vec![
                PathBuf::from("/opt/pw/bin/libpinwise_preload.so"),
                PathBuf::from("/opt/pw/lib/pinwise/libpinwise_preload.so"),
                PathBuf::from("/opt/pw/lib/libpinwise_preload.so"),
            ]
        );
    }

    #[test]
    fn a_missing_explicit_library_is_named() {
        let e = locate(Some(Path::new("/nonexistent/libx.so"))).unwrap_err();
        assert!(
            format!("{e:#}").contains("/nonexistent/libx.so is missing"),
            "{e:#}"
        );
    }
}
