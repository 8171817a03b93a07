//! C ABI of the smart pinning allocator (`pinwise_alloc_*`).
