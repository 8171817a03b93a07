//! Turning a [`Site`](pinwise_core::Site)'s module and offset into a function name and a
//! source location, for reports. Uses blazesym on the module's file (its DWARF when it has
//! some, else its symbol table). A file whose build ID no longer matches the one recorded
//! is not used: a rebuilt binary would name the wrong function.

use std::path::Path;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};
use pinwise_core::ModuleIdentity;

/// Where a call site is in the source.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Symbol {
    /// The function (demangled).
    pub function: String,
    /// The source file, when debug information says.
    pub file: Option<String>,
    /// The line, when debug information says.
    pub line: Option<u32>,
}

impl std::fmt::Display for Symbol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.function)?;
        if let Some(file) = &self.file {
            write!(f, " ({file}")?;
            if let Some(line) = self.line {
                write!(f, ":{line}")?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

/// A reusable symbolizer (it caches parsed files).
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// A symbolizer with demangling and source locations on.
    pub fn new() -> Self {
        Symbolizer {
            inner: blazesym::symbolize::Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(false)
                .enable_demangling(true)
                .build(),
        }
    }

    /// The function and source location at `offset` (a file offset) in `module`'s file,
    /// or `None` when the file is gone, has another build ID, or has no symbol there.
    pub fn symbolize(&self, module: &ModuleIdentity, offset: u64) -> Option<Symbol> {
        self.symbolize_many(module, &[offset]).pop().flatten()
    }

    /// [`Symbolizer::symbolize`] for many offsets of one module (one file check, one
    /// batched lookup): one answer per offset, in order.
    pub fn symbolize_many(&self, module: &ModuleIdentity, offsets: &[u64]) -> Vec<Option<Symbol>> {
        let none = || vec![None; offsets.len()];
        let Some(path) = usable_file(module) else {
            return none();
        };
        let source = Source::Elf(Elf::new(path));
        // A return address points after the call; the call itself is one byte earlier,
        // which matters for the line when the call ends a line.
        let before: Vec<u64> = offsets.iter().map(|o| o.saturating_sub(1)).collect();
        match self.inner.symbolize(&source, Input::FileOffset(&before)) {
            Ok(found) if found.len() == offsets.len() => found.into_iter().map(to_symbol).collect(),
            _ => none(),
        }
    }
}

/// The module's file, when it exists and has the build ID recorded (if one was).
fn usable_file(module: &ModuleIdentity) -> Option<&Path> {
    let path = Path::new(&module.path);
    if !path.is_file() {
        return None;
    }
    if let Some(expected) = &module.build_id {
        let actual = blazesym::helper::read_elf_build_id(path).ok().flatten()?;
        if actual.as_ref() != expected.as_slice() {
            return None;
        }
    }
    Some(path)
}

fn to_symbol(found: Symbolized<'_>) -> Option<Symbol> {
    match found {
        Symbolized::Sym(sym) => {
            let (file, line) = match sym.code_info.as_deref() {
                Some(info) => (Some(info.to_path().display().to_string()), info.line),
                None => (None, None),
            };
            Some(Symbol {
                function: sym.name.into_owned(),
                file,
                line,
            })
        }
        Symbolized::Unknown(_) => None,
    }
}

impl From<Symbol> for pinwise_core::Symbol {
    fn from(s: Symbol) -> Self {
        pinwise_core::Symbol {
            function: s.function,
            file: s.file,
            line: s.line,
        }
    }
}

/// Names every site `history` refers to that has no name yet (see
/// [`pinwise_core::MemHistory::symbolize_with`]), from the modules' files as they are now.
/// A source calls it when its trace ends, while the files are surely there, so that
/// reports made after the binaries are gone (or on another machine) still name functions.
/// Returns how many sites were named.
pub fn store_symbols(history: &mut pinwise_core::MemHistory) -> usize {
    let symbolizer = Symbolizer::new();
    history.symbolize_with(|module, offsets| {
        symbolizer
            .symbolize_many(module, offsets)
            .into_iter()
            .map(|s| s.map(Into::into))
            .collect()
    })
}

/// One-shot [`Symbolizer::symbolize`].
pub fn symbolize(module: &ModuleIdentity, offset: u64) -> Option<Symbol> {
    Symbolizer::new().symbolize(module, offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sites::SiteResolver;
    use pinwise_core::ModuleTable;

    #[inline(never)]
    fn a_function_with_a_known_name() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn names_a_function_of_this_binary() {
        let table = ModuleTable::shared();
        let mut resolver = SiteResolver::new(table.clone());
        let addr = a_function_with_a_known_name as *const () as u64 + 1;
        assert_eq!(a_function_with_a_known_name(), 42);
        let site = resolver.site(std::process::id(), addr).unwrap();
        let module = table.get(site.module).unwrap();
        let sym = Symbolizer::new()
            .symbolize(&module, site.offset + 1)
            .expect("symbolized");
        assert!(
            sym.function.contains("a_function_with_a_known_name"),
            "{sym:?}"
        );
        assert!(
            sym.file.as_deref().unwrap_or("").ends_with("symbolize.rs"),
            "{sym:?}"
        );
    }

    #[test]
    fn refuses_a_file_with_another_build_id() {
        let exe = std::env::current_exe().unwrap();
        let wrong = ModuleIdentity::with_build_id(exe.display().to_string(), vec![0xde, 0xad]);
        assert_eq!(symbolize(&wrong, 0x1000), None);
        let gone = ModuleIdentity::from_path("/nonexistent/lib.so");
        assert_eq!(symbolize(&gone, 0x1000), None);
    }
}
