//! A conversation's opening (the system prompt with its tool schemas) computed once, ever:
//! its state is saved under a key of the model's weights and the opening's tokens, and a new
//! session that opens the same way starts from it instead of evaluating it again.

use lilypad_engine::Model;
use sha2::{Digest, Sha256};

/// Where opening states are kept between sessions: files natively ([`DirPrefixStore`]), the
/// browser's private file system through its worker (`lilypad-wasm`). Failures to save are the
/// store's to report (a lost cache costs time, never a wrong answer: states carry their key).
pub trait PrefixStore {
    fn load(&mut self, key: &str) -> Option<Vec<u8>>;
    fn save(&mut self, key: &str, state: &[u8]);
}

/// States as files in a folder, `<key>.lpstate`, each written whole before it is named; the
/// folder keeps the [`DirPrefixStore::KEEP`] most recently used.
#[cfg(not(target_arch = "wasm32"))]
pub struct DirPrefixStore {
    dir: std::path::PathBuf,
}

#[cfg(not(target_arch = "wasm32"))]
impl DirPrefixStore {
    /// States kept (each is tens of MiB for a few thousand tokens).
    pub const KEEP: usize = 8;

    pub fn new(dir: impl Into<std::path::PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// Removes all but the most recently modified `KEEP` states.
    fn evict(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut states: Vec<(std::time::SystemTime, std::path::PathBuf)> = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "lpstate"))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        states.sort_by_key(|s| std::cmp::Reverse(s.0));
        for (_, path) in states.into_iter().skip(Self::KEEP) {
            let _ = std::fs::remove_file(path);
        }
    }

    fn path(&self, key: &str) -> std::path::PathBuf {
        self.dir.join(format!("{key}.lpstate"))
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl PrefixStore for DirPrefixStore {
    fn load(&mut self, key: &str) -> Option<Vec<u8>> {
        let path = self.path(key);
        let state = std::fs::read(&path).ok()?;
        // Mark it used, so eviction keeps it.
        if let Ok(file) = std::fs::File::options().append(true).open(&path) {
            let _ = file.set_modified(std::time::SystemTime::now());
        }
        Some(state)
    }

    fn save(&mut self, key: &str, state: &[u8]) {
        let path = self.path(key);
        let tmp = path.with_extension(format!("part{}", std::process::id()));
        let written = std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::write(&tmp, state))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            eprintln!(
                "lilypad: could not save the prompt state to {}: {e}",
                path.display()
            );
        }
        self.evict();
    }
}

/// States in memory, the [`MemoryPrefixStore::KEEP`] most recently used: for one process that
/// runs many sessions opening the same way (a trainer's episodes, an evaluation's tasks).
#[derive(Default)]
pub struct MemoryPrefixStore {
    /// Least recently used first.
    states: Vec<(String, Vec<u8>)>,
}

impl MemoryPrefixStore {
    pub const KEEP: usize = 2;

    pub fn new() -> Self {
        Self::default()
    }
}

impl PrefixStore for MemoryPrefixStore {
    fn load(&mut self, key: &str) -> Option<Vec<u8>> {
        let i = self.states.iter().position(|(k, _)| k == key)?;
        let entry = self.states.remove(i);
        let state = entry.1.clone();
        self.states.push(entry);
        Some(state)
    }

    fn save(&mut self, key: &str, state: &[u8]) {
        self.states.retain(|(k, _)| k != key);
        self.states.push((key.to_string(), state.to_vec()));
        let extra = self.states.len().saturating_sub(Self::KEEP);
        self.states.drain(..extra);
    }
}

/// The key of `opening` evaluated by `model` (its weights and adapter).
pub fn key(model: &Model, opening: &[u32]) -> String {
    let mut hash = Sha256::new();
    hash.update(model.state_key().as_bytes());
    hash.update(b"\0");
    for t in opening {
        hash.update(t.to_le_bytes());
    }
    hash.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_store_keeps_the_most_recently_used_states() {
        let mut store = MemoryPrefixStore::new();
        store.save("a", b"state a");
        store.save("b", b"state b");
        assert_eq!(store.load("a").as_deref(), Some(&b"state a"[..]));
        // "b" is now the least recently used of the two, so a third state pushes it out.
        store.save("c", b"state c");
        assert_eq!(store.load("b"), None);
        assert_eq!(store.load("a").as_deref(), Some(&b"state a"[..]));
        store.save("a", b"state a, again");
        assert_eq!(store.load("a").as_deref(), Some(&b"state a, again"[..]));
        assert_eq!(store.load("c").as_deref(), Some(&b"state c"[..]));
    }
}
