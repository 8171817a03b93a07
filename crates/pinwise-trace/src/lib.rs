//! pinwise-trace: the eBPF tracer.
