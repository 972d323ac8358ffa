//! Helpers shared by the native shell's test files.

use std::time::{Duration, Instant};

/// Processes whose command line holds `marker`, anywhere on the machine.
pub fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .count()
}

/// [`processes_with`] once they had up to 5 s to go.
pub fn survivors(marker: &str) -> usize {
    let t0 = Instant::now();
    while processes_with(marker) > 0 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    processes_with(marker)
}
