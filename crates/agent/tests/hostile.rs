//! A hostile repository and hostile commands, natively: FIFOs, link loops, a hard link to a
//! file outside, a 2 GiB sparse file, a deleted root, processes that detach. Every tool call
//! ends with an observation, every run with its trajectory, and no process outlives its command.
#![cfg(target_os = "linux")]

mod common;

use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::survivors;

use lilypad_agent::{
    AgentConfig, DirEntry, DiskRepo, EntryKind, Exit, NativeShell, RepoError, RepoPath, Repository,
    ScriptedModel, Shell, Stamp, ToolCall, Toolbox, Trajectory, run_agent,
};
use serde_json::json;

fn call(name: &str, args: serde_json::Value) -> String {
    format!(
        "<tool_call>\n{}\n</tool_call>",
        json!({"name": name, "arguments": args})
    )
}

fn tool(name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        name: name.into(),
        arguments: args,
    }
}

fn sh(dir: &Path, command: &str) {
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success(), "{command}");
}

/// Runs `f` on another thread; a call that has not returned after 20 s is a hang.
fn within_20s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(f());
    });
    receive
        .recv_timeout(Duration::from_secs(20))
        .expect("the call returns instead of blocking")
}

/// The agent on `dir` with a real (unsandboxed) shell, replying `script`.
fn run_script(dir: &Path, script: Vec<String>) -> Trajectory {
    let mut repo = DiskRepo::open(dir).unwrap();
    run_on(&mut repo, dir, script)
}

fn run_on(repo: &mut dyn Repository, dir: &Path, script: Vec<String>) -> Trajectory {
    let texts: Vec<&str> = script.iter().map(String::as_str).collect();
    let mut model = ScriptedModel::new("scripted", &texts);
    let mut toolbox = Toolbox::new(Box::new(NativeShell::new(dir.to_path_buf())));
    pollster::block_on(run_agent(
        &mut model,
        repo,
        &mut toolbox,
        "Handle the hostile repository.",
        &AgentConfig::default(),
        &mut |_| true,
    ))
    .expect("the run starts")
}

fn observations(t: &Trajectory) -> Vec<(bool, String)> {
    t.steps
        .iter()
        .flat_map(|s| s.calls.iter().map(|c| (c.is_error, c.observation.clone())))
        .collect()
}

#[test]
fn fifos_are_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    sh(dir.path(), "mkfifo pipe && echo hello > text.txt");
    let root = dir.path().to_path_buf();
    let replies = within_20s(move || {
        let mut repo = DiskRepo::open(&root).unwrap();
        let mut tb = Toolbox::new(Box::new(NativeShell::new(root.clone())));
        let path = format!("{}/pipe", repo.root());
        [
            tool("Read", json!({"file_path": path})),
            tool("Write", json!({"file_path": path, "content": "x"})),
            tool(
                "Edit",
                json!({"file_path": path, "old_string": "a", "new_string": "b"}),
            ),
            tool(
                "Edit",
                json!({"file_path": path, "old_string": "", "new_string": "b"}),
            ),
        ]
        .iter()
        .map(|c| tb.execute(&mut repo, c))
        .collect::<Vec<_>>()
    });
    for reply in replies {
        assert!(reply.is_error, "{reply:?}");
        assert!(reply.content.contains("FIFO"), "{reply:?}");
    }
    // A FIFO some process reads is refused too (the open succeeds; the file's type does not).
    let reader = std::process::Command::new("sh")
        .arg("-c")
        .arg("exec cat pipe >/dev/null")
        .current_dir(dir.path())
        .spawn()
        .unwrap();
    let root = dir.path().to_path_buf();
    let write = within_20s(move || {
        let mut repo = DiskRepo::open(&root).unwrap();
        repo.write(&RepoPath::new("pipe").unwrap(), b"x")
    });
    assert!(
        matches!(write, Err(RepoError::NotARegularFile { .. })),
        "{write:?}"
    );
    let mut reader = reader;
    let _ = reader.kill();
    let _ = reader.wait();
    // And the walk and the patch pass it by.
    let t = run_script(dir.path(), vec!["done".into()]);
    assert_eq!(t.exit, Some(Exit::Submitted));
    assert_eq!(t.patch, "");
}

#[test]
fn a_hard_link_to_a_file_outside_is_not_written_through() {
    let outside = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "keep me\n").unwrap();
    std::fs::hard_link(
        outside.path().join("secret.txt"),
        dir.path().join("linked.txt"),
    )
    .unwrap();
    let mut repo = DiskRepo::open(dir.path()).unwrap();
    let mut tb = Toolbox::new(Box::new(NativeShell::new(dir.path().to_path_buf())));
    let path = format!("{}/linked.txt", repo.root());
    let edit = tb.execute(
        &mut repo,
        &tool(
            "Edit",
            json!({"file_path": path, "old_string": "keep", "new_string": "changed"}),
        ),
    );
    assert!(!edit.is_error, "{edit:?}");
    let write = tb.execute(
        &mut repo,
        &tool("Write", json!({"file_path": path, "content": "written\n"})),
    );
    assert!(!write.is_error, "{write:?}");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "keep me\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("linked.txt")).unwrap(),
        "written\n"
    );
}

#[test]
fn link_loops_and_a_deleted_root_end_with_a_trajectory() {
    let dir = tempfile::tempdir().unwrap();
    let repo_dir = dir.path().join("repo");
    std::fs::create_dir(&repo_dir).unwrap();
    sh(
        &repo_dir,
        "echo 'print(1)' > main.py && ln -s self self && ln -s b a && ln -s a b",
    );
    let root = std::fs::canonicalize(&repo_dir).unwrap();
    let root = root.display();
    let t = run_script(
        &repo_dir,
        vec![
            call("Glob", json!({"pattern": "**/*"})),
            // The model makes another loop, then writes through the tools.
            call(
                "Bash",
                json!({"command": "mkdir d && ln -s ../d d/up && ln -s loop2 loop2"}),
            ),
            call(
                "Write",
                json!({"file_path": format!("{root}/new.py"), "content": "x = 1\n"}),
            ),
            call("Read", json!({"file_path": format!("{root}/self")})),
            call("Bash", json!({"command": "rm -rf \"$PWD\""})),
            call("Bash", json!({"command": "echo still here"})),
            "done".into(),
        ],
    );
    let seen = observations(&t);
    assert_eq!(t.exit, Some(Exit::Submitted), "{seen:#?}");
    assert!(
        seen[0].1.ends_with("/main.py") && !seen[0].0,
        "Glob lists the one file: {seen:?}"
    );
    assert!(!seen[2].0, "{seen:?}");
    assert!(
        seen[3].0 && seen[3].1.contains("symbolic links"),
        "{seen:?}"
    );
    assert!(
        seen[5].0 && seen[5].1.contains("does not exist"),
        "{seen:?}"
    );
    // The root is gone: every file the run started with is deleted in the patch.
    assert!(
        t.patch.contains("deleted file mode 100644") && t.patch.contains("-print(1)"),
        "{}",
        t.patch
    );
    assert!(!t.patch.contains("new.py"), "{}", t.patch);
    assert_eq!(t.patch_error, None);
}

/// A repository that counts the bytes read from it.
struct Counting {
    inner: DiskRepo,
    read: Rc<Cell<u64>>,
}

impl Repository for Counting {
    fn root(&self) -> &str {
        self.inner.root()
    }
    fn kind(&self, path: &RepoPath) -> Option<EntryKind> {
        self.inner.kind(path)
    }
    fn read(&self, path: &RepoPath) -> Result<Vec<u8>, RepoError> {
        let data = self.inner.read(path)?;
        self.read.set(self.read.get() + data.len() as u64);
        Ok(data)
    }
    fn file_len(&self, path: &RepoPath) -> Result<u64, RepoError> {
        self.inner.file_len(path)
    }
    fn read_head(&self, path: &RepoPath, max: usize) -> Result<Vec<u8>, RepoError> {
        let data = self.inner.read_head(path, max)?;
        self.read.set(self.read.get() + data.len() as u64);
        Ok(data)
    }
    fn stamp(&self, path: &RepoPath) -> Option<Stamp> {
        self.inner.stamp(path)
    }
    fn write(&mut self, path: &RepoPath, data: &[u8]) -> Result<(), RepoError> {
        self.inner.write(path, data)
    }
    fn remove(&mut self, path: &RepoPath) -> Result<(), RepoError> {
        self.inner.remove(path)
    }
    fn create_dir_all(&mut self, path: &RepoPath) -> Result<(), RepoError> {
        self.inner.create_dir_all(path)
    }
    fn rename(&mut self, from: &RepoPath, to: &RepoPath) -> Result<(), RepoError> {
        self.inner.rename(from, to)
    }
    fn list_dir(&self, path: &RepoPath) -> Result<Vec<DirEntry>, RepoError> {
        self.inner.list_dir(path)
    }
    fn walk_files(&self, path: &RepoPath) -> Result<Vec<RepoPath>, RepoError> {
        self.inner.walk_files(path)
    }
}

#[test]
fn a_huge_file_is_never_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    // 12 KiB of text, then zeros up to 2 GiB without using the disk (a sparse file).
    let text: String = (0..1000).map(|i| format!("line {i:06}\n")).collect();
    std::fs::write(dir.path().join("huge.log"), &text).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("huge.log"))
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    std::fs::write(dir.path().join("small.py"), "a = 1\n").unwrap();
    std::fs::write(dir.path().join("zeros.bin"), vec![0u8; 100]).unwrap();
    let read = Rc::new(Cell::new(0));
    let mut repo = Counting {
        inner: DiskRepo::open(dir.path()).unwrap(),
        read: read.clone(),
    };
    let root = repo.root().to_string();
    let t = run_on(
        &mut repo,
        dir.path(),
        vec![
            call("Read", json!({"file_path": format!("{root}/huge.log")})),
            call("Read", json!({"file_path": format!("{root}/zeros.bin")})),
            call("Bash", json!({"command": "echo 'b = 2' >> small.py"})),
            call("Bash", json!({"command": "echo more >> huge.log"})),
            "done".into(),
        ],
    );
    let seen = observations(&t);
    assert!(
        seen[0].0 && seen[0].1.contains("more than the 32 MiB") && seen[0].1.contains("sed -n"),
        "{seen:?}"
    );
    assert!(
        seen[1].0 && seen[1].1.contains("binary file (100 bytes)"),
        "{seen:?}"
    );
    // The tools read 8 KiB heads; the tracker reads the small files, twice for the changed one.
    assert!(read.get() < 64 << 10, "{} bytes read", read.get());
    assert!(t.patch.contains("+b = 2"), "{}", t.patch);
    // A change to a file too large to keep is named, as git names a binary change.
    assert!(
        t.patch
            .contains("Binary files a/huge.log and b/huge.log differ"),
        "{}",
        t.patch
    );
}

#[test]
fn build_outputs_and_ignored_files_stay_out_of_the_patch() {
    let dir = tempfile::tempdir().unwrap();
    sh(
        dir.path(),
        "printf '*.log\\n!keep.log\\n/out/\\n' > .gitignore && mkdir -p src && echo 'x = 1' > src/a.py \
         && printf 'cache/\\n' > src/.gitignore",
    );
    let t = run_script(
        dir.path(),
        vec![
            call(
                "Bash",
                json!({"command": "mkdir -p target node_modules/p out src/cache && \
                    echo 1 > target/t && echo 2 > node_modules/p/i.js && echo 3 > out/o && \
                    echo 4 > a.log && echo 5 > keep.log && echo 6 > src/cache/c && \
                    echo 'x = 2' > src/a.py && echo 7 > src/out"}),
            ),
            "done".into(),
        ],
    );
    let files: Vec<&str> = t
        .patch
        .lines()
        .filter_map(|l| l.strip_prefix("diff --git a/"))
        .collect();
    assert_eq!(
        files,
        [
            "keep.log b/keep.log",
            "src/a.py b/src/a.py",
            "src/out b/src/out"
        ],
        "{}",
        t.patch
    );
}

#[test]
fn detached_processes_die_without_a_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let mut shell = NativeShell::new(dir.path().to_path_buf());
    let mut repo = DiskRepo::open(dir.path()).unwrap();
    let marker = format!(
        "{}.{}",
        5000 + std::process::id() % 1000,
        std::process::id()
    );
    // Processes that leave the group and the session, and GNU timeout's own group.
    let out = shell.run(
        &mut repo,
        &format!(
            "setsid sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & disown; \
             (setsid sh -c 'sleep {marker}' &); timeout 1000 sleep {marker} & echo started"
        ),
        Duration::from_secs(10),
    );
    assert!(out.output.contains("started"), "{out:?}");
    assert!(out.output.contains("left running"), "{out:?}");
    assert_eq!(survivors(&marker), 0, "a sleeper outlived its command");
    // A foreground `timeout` past the tool's own timeout: stopped, and on time.
    let t0 = Instant::now();
    let out = shell.run(
        &mut repo,
        &format!("timeout 1000 sleep {marker}; echo after"),
        Duration::from_millis(1500),
    );
    assert!(out.timed_out && !out.output.contains("after"), "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(survivors(&marker), 0, "a sleeper outlived the timeout");
}

/// A folder linked to its own parent is tracked once, never walked through the link (which
/// would repeat its files at every depth).
#[test]
fn a_linked_parent_folder_is_tracked_once() {
    let dir = tempfile::tempdir().unwrap();
    sh(dir.path(), "mkdir d && echo x > d/x && ln -s ../d d/up");
    let t = run_script(
        dir.path(),
        vec![
            call("Bash", json!({"command": "echo y > d/x && echo z > d/new"})),
            "done".into(),
        ],
    );
    let files: Vec<&str> = t
        .patch
        .lines()
        .filter_map(|l| l.strip_prefix("diff --git a/"))
        .collect();
    assert_eq!(files, ["d/new b/d/new", "d/x b/d/x"], "{}", t.patch);
}
