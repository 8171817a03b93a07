//! The checked-in `include/pinwise.h` must be exactly what cbindgen generates from this
//! crate (build.rs writes it to `$OUT_DIR/pinwise.h`). To update the checked-in copy after
//! changing the C ABI: `PINWISE_UPDATE_HEADER=1 cargo test -p pinwise-capi --test header`.

use std::path::PathBuf;

const GENERATED: &str = include_str!(concat!(env!("OUT_DIR"), "/pinwise.h"));

fn checked_in_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../include/pinwise.h")
}

#[test]
fn checked_in_header_is_up_to_date() {
    let path = checked_in_path();
    if std::env::var_os("PINWISE_UPDATE_HEADER").is_some() {
        std::fs::write(&path, GENERATED).expect("write include/pinwise.h");
        eprintln!("updated {}", path.display());
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != GENERATED {
        let first_diff = checked_in
            .lines()
            .zip(GENERATED.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || "one is a prefix of the other".to_string(),
                |i| format!("first difference at line {}", i + 1),
            );
        panic!(
            "include/pinwise.h is not what cbindgen generates from crates/pinwise-capi \
             ({first_diff}); update it with \
             `PINWISE_UPDATE_HEADER=1 cargo test -p pinwise-capi --test header`"
        );
    }
}

#[test]
fn header_declares_both_modules_and_the_call_site_macro() {
    for needle in [
        "pinwise_alloc_create",
        "pinwise_alloc_malloc_at",
        "pinwise_alloc_note_transfer",
        "PinwiseAllocStats",
        "#define pinwise_alloc(a, size, flags)",
        "__builtin_return_address(0)",
    ] {
        assert!(GENERATED.contains(needle), "the header lacks `{needle}`");
    }
}
