//! Naming call sites for people: function and file:line when a [`SourceResolver`] knows them,
//! else module and offset.
//!
//! This crate does not symbolize by itself (it would need the ELF/DWARF machinery the
//! tracer already has): the caller passes a resolver. The `pinwise` command passes one
//! backed by blazesym; tests pass their own; [`NoSymbols`] resolves nothing.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use pinwise_core::{ModuleIdentity, ModuleTable, Site, SymbolTable};

/// Where a call site is in the source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceLocation {
    /// The function (demangled).
    pub function: String,
    /// The source file, when debug information says.
    pub file: Option<String>,
    /// The line, when debug information says.
    pub line: Option<u32>,
}

/// Turns a module and an offset in its file into a source location.
pub trait SourceResolver {
    /// The source location of the call site at `offset` (a file offset, as in
    /// [`Site::offset`]) in `module`, or `None` when unknown (file gone, rebuilt, no
    /// symbol there).
    fn resolve(&mut self, module: &ModuleIdentity, offset: u64) -> Option<SourceLocation>;
}

/// A resolver that knows nothing: every site is named by module and offset.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSymbols;

impl SourceResolver for NoSymbols {
    fn resolve(&mut self, _module: &ModuleIdentity, _offset: u64) -> Option<SourceLocation> {
        None
    }
}

/// A call site, named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteLabel {
    /// The module's identity key (`buildid:<hex>` or `path:<path>`): what matches across runs.
    pub module_key: String,
    /// The module's path when it was recorded.
    pub module_path: String,
    /// Offset of the call site in the module's file.
    pub offset: u64,
    /// Function and source location, when resolved.
    pub location: Option<SourceLocation>,
}

impl SiteLabel {
    /// The label of a site nobody could attribute, or of a module the history lacks.
    pub fn unknown(offset: u64) -> Self {
        SiteLabel {
            module_key: "path:?".into(),
            module_path: "?".into(),
            offset,
            location: None,
        }
    }

    /// `module+0xoffset`, with the module's file name only.
    pub fn module_offset(&self) -> String {
        let name = Path::new(&self.module_path)
            .file_name()
            .map_or_else(|| self.module_path.clone(), |n| n.to_string_lossy().into());
        format!("{name}+{:#x}", self.offset)
    }

    /// `function (file.c:12)` with the file's name only, or `function`, or
    /// `module+0xoffset` when unresolved: what a table cell shows.
    pub fn short(&self) -> String {
        match &self.location {
            Some(loc) => match &loc.file {
                Some(file) => {
                    let name = Path::new(file)
                        .file_name()
                        .map_or_else(|| file.clone(), |n| n.to_string_lossy().into());
                    match loc.line {
                        Some(line) => format!("{} ({name}:{line})", loc.function),
                        None => format!("{} ({name})", loc.function),
                    }
                }
                None => format!("{} [{}]", loc.function, self.module_offset()),
            },
            None => self.module_offset(),
        }
    }

    /// [`SiteLabel::short`] in at most `width` characters: a long function name is cut
    /// before the file and line are, and keeps its end (`…::Buffer::resize`: the end tells
    /// functions of one class or namespace apart; their beginnings are alike). When that
    /// would leave the function fewer than 16 characters, the file and line go instead.
    pub fn short_fit(&self, width: usize) -> String {
        let short = self.short();
        if short.chars().count() <= width {
            return short;
        }
        if let Some(loc) = &self.location {
            let suffix = &short[loc.function.len()..];
            let room = width.saturating_sub(suffix.chars().count());
            if room >= 16.min(loc.function.chars().count()) {
                return format!("{}{suffix}", crate::units::fit(&loc.function, room, true));
            }
            return crate::units::fit(&loc.function, width, true);
        }
        crate::units::fit(&short, width, true)
    }

    /// Everything known: function, full file path and line, module and offset.
    pub fn long(&self) -> String {
        match &self.location {
            Some(loc) => {
                let mut s = loc.function.clone();
                if let Some(file) = &loc.file {
                    s.push_str(&format!(" at {file}"));
                    if let Some(line) = loc.line {
                        s.push_str(&format!(":{line}"));
                    }
                }
                format!("{s} [{}]", self.module_offset())
            }
            None => self.module_offset(),
        }
    }
}

/// Names sites with the names a history stored, else with a resolver, once each
/// (resolving can mean parsing DWARF).
pub struct SiteNames<'r> {
    resolver: &'r mut dyn SourceResolver,
    cache: HashMap<(String, u64), SiteLabel>,
    stored: SymbolTable,
}

impl<'r> SiteNames<'r> {
    /// Names through `resolver`.
    pub fn new(resolver: &'r mut dyn SourceResolver) -> Self {
        Self::with_stored(resolver, SymbolTable::new())
    }

    /// Names from `stored` (a history's [`MemHistory::symbols`](pinwise_core::MemHistory::symbols),
    /// which [`SiteNames::site`] is then used with), else through `resolver`.
    pub fn with_stored(resolver: &'r mut dyn SourceResolver, stored: SymbolTable) -> Self {
        SiteNames {
            resolver,
            cache: HashMap::new(),
            stored,
        }
    }

    /// The label of a site of a history whose modules are `modules`.
    pub fn site(&mut self, modules: &ModuleTable, site: Site) -> SiteLabel {
        if let (Some(sym), Some(identity)) = (self.stored.get(&site), modules.get(site.module)) {
            return SiteLabel {
                module_key: identity.key(),
                module_path: identity.path.clone(),
                offset: site.offset,
                location: Some(SourceLocation {
                    function: sym.function.clone(),
                    file: sym.file.clone(),
                    line: sym.line,
                }),
            };
        }
        match modules.get(site.module) {
            Some(identity) if site.module != pinwise_core::ModuleId::UNKNOWN => {
                self.module_offset(&identity, site.offset)
            }
            _ => SiteLabel::unknown(site.offset),
        }
    }

    /// The label of `offset` in the module with this identity.
    pub fn module_offset(&mut self, identity: &ModuleIdentity, offset: u64) -> SiteLabel {
        let key = identity.key();
        if let Some(label) = self.cache.get(&(key.clone(), offset)) {
            return label.clone();
        }
        let location = self.resolver.resolve(identity, offset);
        let label = SiteLabel {
            module_key: key.clone(),
            module_path: identity.path.clone(),
            offset,
            location,
        };
        self.cache.insert((key, offset), label.clone());
        label
    }

    /// The label of a site of a profile: its module key (`buildid:<hex>` or
    /// `path:<path>`), the path recorded with it, and the offset.
    pub fn profile_site(&mut self, key: &str, path: &str, offset: u64) -> SiteLabel {
        self.module_offset(&identity_from_key(key, path), offset)
    }
}

/// The module identity a key stands for (the inverse of [`ModuleIdentity::key`]).
pub fn identity_from_key(key: &str, path: &str) -> ModuleIdentity {
    match key.strip_prefix("buildid:").and_then(parse_hex) {
        Some(id) => ModuleIdentity::with_build_id(path, id),
        None => ModuleIdentity::from_path(path),
    }
}

fn parse_hex(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counting(u32);
    impl SourceResolver for Counting {
        fn resolve(&mut self, module: &ModuleIdentity, offset: u64) -> Option<SourceLocation> {
            self.0 += 1;
            (offset == 0x10).then(|| SourceLocation {
                function: "fill_batch".into(),
                file: Some(format!("/src/{}.c", module.path.trim_start_matches('/'))),
                line: Some(42),
            })
        }
    }

    #[test]
    fn labels_say_function_and_line_or_module_and_offset() {
        let table = ModuleTable::new();
        let m = table.intern(&ModuleIdentity::with_build_id("/opt/app", vec![0xab]));
        let mut r = Counting(0);
        let mut names = SiteNames::new(&mut r);
        let known = names.site(
            &table,
            Site {
                module: m,
                offset: 0x10,
            },
        );
        assert_eq!(known.short(), "fill_batch (app.c:42)");
        assert_eq!(known.long(), "fill_batch at /src/opt/app.c:42 [app+0x10]");
        let unknown = names.site(
            &table,
            Site {
                module: m,
                offset: 0x20,
            },
        );
        assert_eq!(unknown.short(), "app+0x20");
        let again = names.site(
            &table,
            Site {
                module: m,
                offset: 0x10,
            },
        );
        assert_eq!(again, known);
        let nobody = names.site(&table, Site::UNKNOWN);
        assert_eq!(nobody.short(), "?+0x0");
        drop(names);
        assert_eq!(r.0, 2, "each site resolved once; the unknown module never");
    }

    #[test]
    fn keys_turn_back_into_identities() {
        let id = ModuleIdentity::with_build_id("/a", vec![0x01, 0xfe]);
        assert_eq!(identity_from_key(&id.key(), "/a"), id);
        let p = ModuleIdentity::from_path("/b");
        assert_eq!(identity_from_key(&p.key(), "/b"), p);
        assert_eq!(identity_from_key("buildid:zz", "/c").build_id, None);
    }
}
