//! The GPU memory that pinned host memory costs: the driver keeps page-table entries on the
//! GPU for every pinned (allocated page-locked or registered) host page, in every process
//! that pins it. Used to weigh pinning against device memory, and to say what sharing one
//! pinned copy between processes (`pinwise pool`) saves.
//!
//! The figure here is the seed's estimate (one 8-byte entry per 4 KiB page: 2 MiB of GPU
//! memory per GiB pinned, 2 GiB per TiB), not a measurement; `bench/gpu/pagetable/run.sh`
//! measures it per page size on the GPU machine, and its recorded result replaces this.

/// GPU bytes per pinned host byte, per process, with 4 KiB pages (estimate: 8 B / 4 KiB).
pub const GPU_BYTES_PER_PINNED_BYTE_4K: f64 = 8.0 / 4096.0;

/// Estimated GPU memory for `pinned` bytes pinned with 4 KiB pages in each of `processes`.
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
