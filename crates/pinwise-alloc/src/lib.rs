//! pinwise-alloc: the smart pinning host allocator.
