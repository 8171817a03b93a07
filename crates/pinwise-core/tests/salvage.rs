//! A binary history cut short (a tracer killed mid-write) is readable up to its last whole
//! frame; a corrupt one is still refused; a large file that is not a pinwise file is refused
//! from its first bytes. Synthetic histories (not measurements).

use pinwise_core::format::binary::{read, read_salvaging};
use pinwise_core::format::{load_history, BinaryAppender};
use pinwise_core::synth::{SynthConfig, SynthEvents};
use pinwise_core::{HistoryConfig, MemHistory};

/// Nine appends (27 frames) of a growing history; returns the file's bytes and the number of
/// records after each append.
fn appended(dir: &std::path::Path) -> (Vec<u8>, Vec<usize>) {
    let mut h = MemHistory::new(HistoryConfig::default());
    let modules = h.modules();
    let events: Vec<_> = SynthEvents::new(
        SynthConfig {
            seed: 7,
            allocations: 300,
            events: 9000,
            live_window: 30,
            ..SynthConfig::default()
        },
        &modules,
    )
    .collect();
    let path = dir.join("dump.bin");
    let mut app = BinaryAppender::create(&path).unwrap();
    let mut records = Vec::new();
    for chunk in events.chunks(1000) {
        for e in chunk {
            h.ingest(e);
        }
        app.append(&h).unwrap();
        records.push(h.len());
    }
    (std::fs::read(&path).unwrap(), records)
}

#[test]
fn a_cut_dump_keeps_every_whole_frame() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, records) = appended(dir.path());
    assert_eq!(records.len(), 9);
    let (whole, none) = read_salvaging(&bytes).unwrap();
    assert!(none.is_none());
    assert_eq!(whole.len(), records[8]);

    // 10 bytes off: the last frame (stats of the 9th append) is lost, 35 kept (four frames an append since format 2).
    let cut = &bytes[..bytes.len() - 10];
    let strict = read(cut).unwrap_err().to_string();
    assert!(strict.contains("truncated"), "{strict}");
    let (h, s) = read_salvaging(cut).unwrap();
    let s = s.expect("a salvage note");
    assert_eq!(s.frames_kept, 35);
    assert!(s.stats_behind);
    assert!(s.bytes_dropped > 0 && s.bytes_dropped < bytes.len() as u64);
    // The 9th append's records frame is whole: every record is there.
    assert_eq!(h.len(), records[8]);

    // Cut anywhere: never a panic; whatever is salvaged is a prefix of the appends.
    for end in (17..bytes.len()).step_by(1009) {
        match read_salvaging(&bytes[..end]) {
            Ok((h, _)) => assert!(records.contains(&h.len()) || h.len() <= records[8]),
            Err(e) => assert!(e.to_string().contains("truncated"), "{end}: {e}"),
        }
    }
}

#[test]
fn corruption_is_not_salvaged() {
    let dir = tempfile::tempdir().unwrap();
    let (mut bytes, _) = appended(dir.path());
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    let e = read_salvaging(&bytes).unwrap_err().to_string();
    assert!(e.contains("corrupt"), "{e}");
}

/// Bytes this process has read through read(2) so far.
fn bytes_read() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_large_file_with_a_bad_magic_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.bin");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(2 << 30).unwrap(); // 2 GiB of zeros, sparse
    drop(f);
    let before = bytes_read();
    let e = load_history(&path).unwrap_err().to_string();
    let read = bytes_read() - before;
    assert!(e.contains("neither the pinwise binary magic"), "{e}");
    // Other threads of the test binary may read a little too; far below the file's size.
    assert!(read < 16 << 20, "read {read} bytes of a 2 GiB file");
    let e = pinwise_core::Profile::load(&path).unwrap_err().to_string();
    assert!(e.contains("neither the pinwise binary magic"), "{e}");
}
