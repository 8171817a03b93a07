//! Which functions an ELF file defines, from its symbol tables (`.symtab` when not stripped,
//! and `.dynsym`). Used once per process to see whether the executable brings its own
//! `free`, `realloc` or `munmap`: calls bound inside the executable never reach pinwise's
//! hooks, so pinwise must then not register the program's memory.
//!
//! Parsed with `object` over a [`ReadCache`]: only the header, the section headers and the
//! two symbol tables with their string tables are read (one read each), never the whole
//! file. Runs at start-up (not in a hook or a signal handler): it allocates, and takes no
//! lock the program could hold.

use std::fs::File;
use std::io;
use std::path::Path;

use object::elf::{
    FileHeader64, Sym64, SHT_DYNSYM, SHT_SYMTAB, STB_GLOBAL, STB_WEAK, STT_FUNC, STT_GNU_IFUNC,
};
use object::read::elf::{FileHeader, SectionHeader, Sym};
use object::read::{ReadCache, StringTable};
use object::{Endianness, SectionIndex};

/// Symbol tables larger than this are not read (a huge unstripped binary): unknown.
const MAX_TABLE: u64 = 64 << 20;

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// The names among `wanted` that `path` defines as functions (64-bit little-endian ELF).
/// `Err` when the file cannot be read or is not such an ELF file.
pub fn defined_functions(path: &Path, wanted: &[&str]) -> std::io::Result<Vec<String>> {
    Ok(function_symbols(path, wanted)?
        .into_iter()
        .map(|f| f.name)
        .collect())
}

/// A function symbol: its name, address (as linked: add the load bias) and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSymbol {
    /// The name.
    pub name: String,
    /// `st_value`.
    pub value: u64,
    /// `st_size`.
    pub size: u64,
    /// An indirect function (`STT_GNU_IFUNC`): `value` is its resolver, not the function.
    pub ifunc: bool,
}

/// The functions among `wanted` that `path` defines, each once (the first definition
/// found), with their addresses and sizes.
pub fn function_symbols(path: &Path, wanted: &[&str]) -> io::Result<Vec<FunctionSymbol>> {
    let cache = ReadCache::new(File::open(path)?);
    let data = &cache;
    let header = FileHeader64::<Endianness>::parse(data).map_err(invalid)?;
    let endian = header.endian().map_err(invalid)?;
    if endian != Endianness::Little {
        return Err(invalid("not a 64-bit little-endian ELF file"));
    }
    let sections = header.sections(endian, data).map_err(invalid)?;
    let mut found: Vec<FunctionSymbol> = Vec::new();
    for section in sections.iter() {
        let kind = section.sh_type(endian);
        if kind != SHT_SYMTAB && kind != SHT_DYNSYM {
            continue;
        }
        let Ok(strings) = sections.section(SectionIndex(section.sh_link(endian) as usize)) else {
            continue;
        };
        if section.sh_size(endian) > MAX_TABLE || strings.sh_size(endian) > MAX_TABLE {
            continue;
        }
        let symbols: &[Sym64<Endianness>] = section.data_as_array(endian, data).map_err(invalid)?;
        // The whole string table in one read (a `ReadCache` would read each name apart).
        let names = strings.data(endian, data).map_err(invalid)?;
        let names = StringTable::new(names, 0, names.len() as u64);
        for sym in symbols {
            let bind = sym.st_bind();
            let kind = sym.st_type();
            let func = kind == STT_FUNC || kind == STT_GNU_IFUNC;
            if sym.is_undefined(endian) || !func || !(bind == STB_GLOBAL || bind == STB_WEAK) {
                continue;
            }
            let Ok(name) = sym.name(endian, names) else {
                continue;
            };
            if let Some(w) = wanted.iter().find(|w| w.as_bytes() == name) {
                if !found.iter().any(|f| f.name == *w) {
                    found.push(FunctionSymbol {
                        name: w.to_string(),
                        value: sym.st_value(endian),
                        size: sym.st_size(endian),
                        ifunc: kind == STT_GNU_IFUNC,
                    });
                }
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_this_test_binary_defines_and_not_what_it_does_not() {
        let exe = std::env::current_exe().unwrap();
        let found = defined_functions(&exe, &["main", "free", "munmap"]).unwrap();
        assert_eq!(found, vec!["main".to_string()]);
    }

    #[test]
    fn a_function_symbol_has_its_address() {
        let exe = std::env::current_exe().unwrap();
        let syms = function_symbols(&exe, &["main"]).unwrap();
        assert_eq!(syms.len(), 1);
        assert!(syms[0].value > 0 && syms[0].size > 0, "{syms:?}");
    }

    #[test]
    fn libc_defines_free() {
        // Whatever libc this test runs on: find it through this process's maps.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("libc.so"))
            .expect("libc is mapped");
        let found = defined_functions(Path::new(libc), &["free", "no_such_function"]).unwrap();
        assert_eq!(found, vec!["free".to_string()]);
    }

    /// A small program defining its own `free`, built with `cc` into `dir`; with a copy
    /// stripped of `.symtab`, and a stripped copy pointing at its debug file by
    /// `.gnu_debuglink`.
    fn own_free_program(
        dir: &Path,
    ) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
        let src = dir.join("own_free.c");
        std::fs::write(
            &src,
            "#include <stddef.h>\n\
             void free(void *p) { (void)p; }\n\
             static int helper(int x) { return x * 3; }\n\
             int main(int argc, char **argv) { (void)argv; return helper(argc); }\n",
        )
        .unwrap();
        let exe = dir.join("own_free");
        let run = |cmd: &mut std::process::Command| {
            let st = cmd.status().unwrap();
            assert!(st.success(), "{cmd:?}");
        };
        run(std::process::Command::new("cc")
            .arg("-O1")
            .arg("-o")
            .arg(&exe)
            .arg(&src));
        let stripped = dir.join("own_free.stripped");
        run(std::process::Command::new("strip")
            .arg("-o")
            .arg(&stripped)
            .arg(&exe));
        let debug = dir.join("own_free.debug");
        run(std::process::Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&exe)
            .arg(&debug));
        let linked = dir.join("own_free.linked");
        run(std::process::Command::new("objcopy")
            .arg("--strip-all")
            .arg(format!("--add-gnu-debuglink={}", debug.display()))
            .arg(&exe)
            .arg(&linked));
        (exe, stripped, linked)
    }

    #[test]
    fn a_stripped_program_still_shows_the_functions_it_exports() {
        let dir = tempfile::tempdir().unwrap();
        let (exe, stripped, linked) = own_free_program(dir.path());
        let wanted = ["free", "main", "helper", "malloc"];
        assert_eq!(defined_functions(&exe, &wanted).unwrap(), ["free", "main"]);
        // `free` overrides libc's, so the linker exports it (`.dynsym`); `main` and the
        // static helper were only in the stripped `.symtab`.
        assert_eq!(defined_functions(&stripped, &wanted).unwrap(), ["free"]);
        // A debug file named by `.gnu_debuglink` is not followed.
        assert_eq!(defined_functions(&linked, &wanted).unwrap(), ["free"]);
        let free = &function_symbols(&stripped, &["free"]).unwrap()[0];
        assert!(free.value > 0 && !free.ifunc, "{free:?}");
        assert_eq!(function_symbols(&exe, &["free"]).unwrap()[0], *free);
    }

    #[test]
    fn headers_other_than_64_bit_little_endian_are_errors_and_no_sections_is_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("h");
        // A 64-bit little-endian header (x86-64 executable) with no sections at all.
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(b"\x7fELF");
        header[4] = 2; // ELFCLASS64
        header[5] = 1; // little-endian
        header[6] = 1; // EV_CURRENT
        header[16] = 2; // ET_EXEC
        header[18] = 62; // EM_X86_64
        header[20] = 1; // e_version
        header[52] = 64; // e_ehsize
        header[54] = 56; // e_phentsize
        header[58] = 64; // e_shentsize
        std::fs::write(&p, &header).unwrap();
        assert_eq!(
            defined_functions(&p, &["free"]).unwrap(),
            Vec::<String>::new()
        );
        for (at, value, what) in [(4, 1, "32-bit"), (5, 2, "big-endian")] {
            let mut h = header.clone();
            h[at] = value;
            std::fs::write(&p, &h).unwrap();
            assert!(defined_functions(&p, &["free"]).is_err(), "{what}");
        }
    }

    #[test]
    fn non_elf_input_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(
            &p,
            b"not an elf file at all, just text long enough for a header ........",
        )
        .unwrap();
        assert!(defined_functions(&p, &["free"]).is_err());
        std::fs::write(&p, b"\x7fELF").unwrap();
        assert!(defined_functions(&p, &["free"]).is_err(), "truncated");
    }
}
