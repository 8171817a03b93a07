//! Which frames are the program's own: the innermost frame outside installed packages and
//! the standard library is the line a reader can change ("train.py:88 in load_batch"
//! rather than torch/nn/modules/module.py).

/// Whether `file` (a frame's `co_filename`) belongs to installed packages, the standard
/// library or the interpreter itself rather than to the program: paths under
/// `site-packages/` or `dist-packages/`, under `lib/python3.N/` (the standard library),
/// and frozen modules (`<frozen runpy>`).
pub fn is_library_file(file: &str) -> bool {
    if file.starts_with("<frozen ") {
        return true;
    }
    if file.contains("/site-packages/") || file.contains("/dist-packages/") {
        return true;
    }
    // The standard library: .../lib/python3.N/... (also lib64, and Windows-style Lib/).
    file.split('/').collect::<Vec<_>>().windows(2).any(|w| {
        matches!(w[0], "lib" | "lib64" | "Lib")
            && w[1]
                .strip_prefix("python3.")
                .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()))
    })
}

/// The index of the innermost frame whose file is the program's own (see
/// [`is_library_file`]), given the frames' files innermost first.
pub fn user_frame_index<'a>(files: impl IntoIterator<Item = &'a str>) -> Option<usize> {
    files.into_iter().position(|f| !is_library_file(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_stdlib_and_frozen_modules_are_library_files() {
        for f in [
            "/usr/lib/python3/dist-packages/numpy/core/numeric.py",
            "/home/u/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
            "/usr/lib/python3.12/threading.py",
            "/root/.pyenv/versions/3.11.7/lib/python3.11/runpy.py",
            "/opt/conda/lib64/python3.10/asyncio/events.py",
            "<frozen runpy>",
            "<frozen importlib._bootstrap>",
        ] {
            assert!(is_library_file(f), "{f}");
        }
        for f in [
            "/home/u/project/train.py",
            "train.py",
            "<string>",
            "<stdin>",
            "/srv/lib/python3/tool.py",
            "/home/u/lib/python3.x/notes.py",
            "/home/u/python3.12/train.py",
        ] {
            assert!(!is_library_file(f), "{f}");
        }
    }

    #[test]
    fn the_user_frame_is_the_innermost_of_the_programs_own() {
        let stack = [
            "/venv/lib/python3.12/site-packages/torch/_tensor.py",
            "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
            "/home/u/model.py",
            "/home/u/train.py",
            "<frozen runpy>",
        ];
        assert_eq!(user_frame_index(stack), Some(2));
        assert_eq!(user_frame_index(["/usr/lib/python3.11/threading.py"]), None);
        assert_eq!(user_frame_index([]), None);
    }
}
