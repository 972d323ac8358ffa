//! The GPU context tests share: one per test binary. Without an adapter the tests skip,
//! unless LILYPAD_REQUIRE_GPU=1 (as CI sets) makes that a failure. Included by the engine's
//! kernel tests too, so both suites follow one rule.

use std::sync::{Arc, OnceLock};

use lilypad_engine::{AdapterOptions, GpuContext};

pub fn gpu() -> Option<Arc<GpuContext>> {
    static CTX: OnceLock<Option<Arc<GpuContext>>> = OnceLock::new();
    CTX.get_or_init(
        || match pollster::block_on(GpuContext::new(&AdapterOptions::from_env())) {
            Ok(c) => Some(c),
            Err(e) => {
                assert!(
                    std::env::var("LILYPAD_REQUIRE_GPU").as_deref() != Ok("1"),
                    "no GPU adapter: {e}"
                );
                eprintln!("skipping GPU tests: {e}");
                None
            }
        },
    )
    .clone()
}
