//! How wide the text renderings are and how they look: the terminal's width (`COLUMNS`,
//! else 100 columns, when not a terminal; the caller decides), whether names may be cut and
//! columns left out, whether there is colour. Set for the
//! duration of one rendering ([`with`]); the table and wrapping code reads it.
use std::cell::Cell;

/// The width the tables were designed for; name columns grow or shrink from it.
pub const BASE_WIDTH: usize = 100;

/// Narrowest a name column gets on a narrow terminal before tables leave out columns.
pub const MIN_NAME: usize = 24;

/// Narrowest layout: what a terminal or `COLUMNS` says is raised to this.
pub const MIN_WIDTH: usize = 60;

/// How one rendering is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Columns to fit in.
    pub width: usize,
    /// Full names, never cut (lines may then be wider than `width`).
    pub wide: bool,
    /// ANSI colour and bold (a terminal, `NO_COLOR` unset).
    pub color: bool,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            width: BASE_WIDTH,
            wide: false,
            color: false,
        }
    }
}

thread_local! {
    static CURRENT: Cell<Layout> = Cell::new(Layout::default());
}

/// Runs `f` with `layout` as the current one (restored afterwards, even on panic).
pub fn with<T>(layout: Layout, f: impl FnOnce() -> T) -> T {
    struct Restore(Layout);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.replace(layout)));
    f()
}

/// The current layout.
pub fn current() -> Layout {
    CURRENT.with(Cell::get)
}

/// `text` in bold (a title), when there is colour.
pub(crate) fn bold(text: &str) -> String {
    if current().color {
        format!("\x1b[1m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// `text` highlighted as a warning, when there is colour.
pub(crate) fn warn(text: &str) -> String {
    if current().color {
        format!("\x1b[33m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_is_current_only_while_it_is_used() {
        let narrow = Layout {
            width: 80,
            ..Layout::default()
        };
        assert_eq!(with(narrow, current), narrow);
        assert_eq!(current(), Layout::default(), "restored");
    }
}
