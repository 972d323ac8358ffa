//! A patch applied to a repository of two files: it applies whole or leaves the files as they
//! were, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lilypad_repo::{RepoPath, Snapshot, patch};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The first file's contents, then a NUL and the patch.
    let (contents, diff) = text.split_once('\0').unwrap_or(("a\nb\nc\n", &text));
    let mut snapshot = Snapshot::new();
    snapshot.insert(RepoPath::new("a.py").unwrap(), contents.as_bytes().to_vec());
    snapshot.insert(RepoPath::new("dir/b.txt").unwrap(), b"x\ny\n".to_vec());
    let before = snapshot.clone();
    if patch::apply(&mut snapshot, diff).is_err() {
        assert_eq!(snapshot, before, "a failed patch changed the files");
    }
});
