//! pinwise-capi: the C ABI of pinwise.
