//! A command line for the browser's virtual shell: parsed, or refused with an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lilypad_shell::virtual_shell::syntax;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    let _ = syntax::parse(&src);
    let _ = syntax::parse_quoted_text(&src, true);
});
