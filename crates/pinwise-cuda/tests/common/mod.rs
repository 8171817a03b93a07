//! Shared setup for the tests that run pinwise-cuda against the CPU stand-in for libcuda
//! (a TEST FIXTURE, not a GPU; nothing here measures anything).

#![allow(dead_code)]

use std::sync::Arc;

use pinwise_cuda::{Context, Driver};
use pinwise_testkit::StandinLibs;

/// The stand-in libraries, the driver loaded from them (initialized), and device 0's
/// primary context made current on this thread.
pub struct Standin {
    pub libs: StandinLibs,
    pub driver: Arc<Driver>,
    pub ctx: Context,
}

pub fn standin() -> Standin {
    let libs = StandinLibs::new();
    let driver = Arc::new(Driver::load_from(&libs.libcuda()).expect("load the stand-in"));
    driver.init().expect("cuInit");
    let ctx = driver
        .device(0)
        .expect("device 0")
        .primary_context()
        .expect("primary context");
    ctx.make_current().expect("make current");
    Standin { libs, driver, ctx }
}

/// A recognizable byte pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
