//! Compiles the BPF programs in `src/bpf/` with clang into `OUT_DIR/<name>.bpf.o` (embedded
//! in the library with `include_bytes!`) and generates their libbpf-rs skeletons, whose
//! `types` module is the Rust side of `pinwise_events.h` (generated from the objects' BTF).
//! Needs clang with the BPF target (Debian's `clang` package) and the kernel's UAPI headers
//! (`linux-libc-dev`); `CLANG=/path/to/clang` picks another compiler.
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const OBJECTS: [&str; 2] = ["pinwise", "pinwise_nvidia"];
const HEADERS: [&str; 2] = ["src/bpf/pinwise_events.h", "src/bpf/pinwise_common.bpf.h"];

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = env::var_os("CLANG").unwrap_or_else(|| "clang".into());
    // `asm/ptrace.h` and `asm/types.h` live in the multiarch include directory.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");

    for name in OBJECTS {
        let source = format!("src/bpf/{name}.bpf.c");
        let skeleton = out_dir.join(format!("{name}.skel.rs"));
        let object = out_dir.join(format!("{name}.bpf.o"));
        if let Err(err) = SkeletonBuilder::new()
            .source(&source)
            .obj(&object)
            .clang(&clang)
            .clang_args([multiarch.as_str(), "-Wall", "-Werror"])
            .build_and_generate(&skeleton)
        {
            panic!(
                "building BPF object {source} failed: {err:#}\n\
                 (pinwise needs clang with the BPF target and linux-libc-dev: \
                 `apt-get install clang linux-libc-dev`, or run scripts/setup.sh)"
            );
        }
        println!("cargo:rerun-if-changed={source}");
    }
    for header in HEADERS {
        println!("cargo:rerun-if-changed={header}");
    }
    println!("cargo:rerun-if-env-changed=CLANG");
}
