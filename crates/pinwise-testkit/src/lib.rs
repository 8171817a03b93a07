//! Test support for pinwise's own tests.
