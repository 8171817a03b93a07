//! The GPU memory that pinned host memory costs: the driver keeps page-table entries on the
//! GPU for every pinned (allocated page-locked or registered) host page, in every process
//! that pins it. Used to weigh pinning against device memory, and to say what sharing one
//! pinned copy between processes (`pinwise pool`) saves.
//!
//! The figure is measured: 2 MiB of GPU memory per GiB pinned, per process (one 8-byte entry
//! per 4 KiB page, the seed's estimate), on an H100 with driver 580.159.04
//! (`bench/results/gpu-pagetable.md`, `bench/gpu/pagetable/run.sh`), with 4 KiB and with
//! 2 MiB hugetlb pages alike, and once per process that registers the same shared pages.

/// GPU bytes per pinned host byte, per process (measured: 8 B per 4 KiB page, whatever the
/// host page size).
pub const GPU_BYTES_PER_PINNED_BYTE_4K: f64 = 8.0 / 4096.0;

/// Estimated GPU memory for `pinned` bytes pinned in each of `processes`.
pub fn estimated_gpu_bytes(pinned: u64, processes: u64) -> u64 {
    (pinned as f64 * processes as f64 * GPU_BYTES_PER_PINNED_BYTE_4K) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_gib_of_gpu_memory_per_tib_pinned_per_process() {
        assert_eq!(estimated_gpu_bytes(1 << 40, 1), 2 << 30);
        assert_eq!(estimated_gpu_bytes(8 << 30, 4), 64 << 20);
        assert_eq!(estimated_gpu_bytes(0, 4), 0);
    }
}
