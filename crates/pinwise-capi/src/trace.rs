//! C ABI of the tracer agent (`pinwise_tracer_*`).
