//! Repositories end to end: the on-disk repository's confinement, patches checked against real
//! `git`, the in-memory repository's baseline and undo, and archive import/export (including
//! hostile archives).
#![cfg(not(target_arch = "wasm32"))]

use std::fs;
use std::io::{Cursor, Write};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use lilypad_repo::archive::{
    export_zip, import_archive, import_dir, import_files, import_tar_gz, import_zip,
};
use lilypad_repo::patch::{apply, diff};
use lilypad_repo::{
    Change, DiskRepo, EntryKind, ImportLimits, RepoError, RepoPath, Repository, Snapshot,
    VirtualRepo,
};
use tempfile::TempDir;

fn p(s: &str) -> RepoPath {
    RepoPath::new(s).unwrap()
}

fn snap(files: &[(&str, &[u8])]) -> Snapshot {
    files
        .iter()
        .map(|(path, data)| (p(path), data.to_vec()))
        .collect()
}

fn write_tree(dir: &Path, files: &Snapshot) {
    for (path, data) in files {
        let full = dir.join(path.as_str());
        fs::create_dir_all(full.parent().unwrap()).unwrap();
        fs::write(full, data).unwrap();
    }
}

fn tree_snapshot(dir: &Path) -> Snapshot {
    DiskRepo::open(dir).unwrap().snapshot().unwrap()
}

// ---------------------------------------------------------------------------------------------
// DiskRepo

/// A repository folder plus a sibling folder outside it holding `secret.txt`.
struct Sandbox {
    _tmp: TempDir,
    repo: DiskRepo,
    outside: std::path::PathBuf,
}

fn sandbox() -> Sandbox {
    let tmp = TempDir::new().unwrap();
    let inside = tmp.path().join("repo");
    let outside = tmp.path().join("outside");
    fs::create_dir_all(&inside).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret.txt"), "secret").unwrap();
    let repo = DiskRepo::open(&inside).unwrap();
    Sandbox {
        _tmp: tmp,
        repo,
        outside,
    }
}

fn in_repo(s: &Sandbox, rel: &str) -> std::path::PathBuf {
    s.repo.path().join(rel)
}

#[test]
fn disk_repo_files_and_folders() {
    let mut s = sandbox();
    let r = &mut s.repo;
    r.write(&p("src/app/main.py"), b"print(1)\n").unwrap();
    r.write(&p("README.md"), b"hi").unwrap();
    r.create_dir_all(&p("empty/dir")).unwrap();
    r.write(&p(".git/HEAD"), b"ref").unwrap();
    assert_eq!(r.kind(&p("src/app")), Some(EntryKind::Dir));
    assert_eq!(r.kind(&p("README.md")), Some(EntryKind::File));
    assert_eq!(r.kind(&p("nope")), None);
    assert_eq!(r.read(&p("src/app/main.py")).unwrap(), b"print(1)\n");
    let names: Vec<_> = r
        .list_dir(&RepoPath::root())
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, [".git", "README.md", "empty", "src"]);
    assert_eq!(r.list_dir(&RepoPath::root()).unwrap()[1].len, 2);
    assert_eq!(
        r.walk_files(&RepoPath::root()).unwrap(),
        [p("README.md"), p("src/app/main.py")]
    );
    assert!(matches!(r.read(&p("src")), Err(RepoError::IsADirectory(_))));
    assert!(matches!(r.read(&p("nope")), Err(RepoError::NotFound(_))));
    assert!(matches!(
        r.write(&p("README.md/x"), b""),
        Err(RepoError::NotADirectory(_))
    ));
    assert!(matches!(
        r.write(&p("src"), b""),
        Err(RepoError::IsADirectory(_))
    ));
    assert!(matches!(
        r.create_dir_all(&p("README.md")),
        Err(RepoError::AlreadyExists(_))
    ));

    r.rename(&p("src"), &p("lib/src")).unwrap();
    assert_eq!(r.read(&p("lib/src/app/main.py")).unwrap(), b"print(1)\n");
    assert!(r.rename(&p("lib"), &p("lib/inner")).is_err());
    assert!(matches!(
        r.rename(&p("lib"), &p("README.md")),
        Err(RepoError::AlreadyExists(_))
    ));
    r.rename(&p("README.md"), &p("docs/README.md")).unwrap();
    r.remove(&p("lib")).unwrap();
    r.remove(&p("docs/README.md")).unwrap();
    assert_eq!(
        r.walk_files(&RepoPath::root()).unwrap(),
        Vec::<RepoPath>::new()
    );
    assert!(matches!(
        r.remove(&RepoPath::root()),
        Err(RepoError::InvalidPath { .. })
    ));
    assert!(matches!(r.remove(&p("lib")), Err(RepoError::NotFound(_))));
}

#[test]
fn disk_repo_root_is_canonical() {
    let tmp = TempDir::new().unwrap();
    fs::create_dir_all(tmp.path().join("real/sub")).unwrap();
    symlink(tmp.path().join("real"), tmp.path().join("alias")).unwrap();
    let repo = DiskRepo::open(tmp.path().join("alias/sub/..")).unwrap();
    let canonical = fs::canonicalize(tmp.path().join("real")).unwrap();
    assert_eq!(repo.root(), canonical.to_str().unwrap());
    assert!(Path::new(repo.root()).is_absolute());
    assert!(matches!(
        DiskRepo::open(tmp.path().join("missing")),
        Err(RepoError::NotFound(_))
    ));
    fs::write(tmp.path().join("file"), "").unwrap();
    assert!(matches!(
        DiskRepo::open(tmp.path().join("file")),
        Err(RepoError::NotADirectory(_))
    ));
}

#[test]
fn disk_repo_paths_resolve_only_inside_the_root() {
    let mut s = sandbox();
    let root = s.repo.root().to_string();
    let cwd = RepoPath::root();
    // `..` past the root and absolute paths elsewhere never become a RepoPath, so they never
    // reach the folder.
    for escape in [
        "../outside/secret.txt",
        "a/../../outside/secret.txt",
        "/etc/passwd",
    ] {
        assert!(
            matches!(
                RepoPath::resolve(&root, &cwd, escape),
                Err(RepoError::OutsideRoot { .. })
            ),
            "{escape}"
        );
    }
    let outside = s.outside.join("secret.txt");
    assert!(matches!(
        RepoPath::resolve(&root, &cwd, outside.to_str().unwrap()),
        Err(RepoError::OutsideRoot { .. })
    ));
    // An absolute path under the root is the same file as its relative form.
    let absolute = RepoPath::resolve(&root, &cwd, &format!("{root}/notes/a.txt")).unwrap();
    s.repo.write(&absolute, b"inside").unwrap();
    assert_eq!(fs::read(in_repo(&s, "notes/a.txt")).unwrap(), b"inside");
    assert_eq!(fs::read(&outside).unwrap(), b"secret");
}

#[test]
fn disk_repo_refuses_a_symlinked_file_leading_out() {
    let mut s = sandbox();
    symlink(s.outside.join("secret.txt"), in_repo(&s, "link.txt")).unwrap();
    let link = p("link.txt");
    let escape = |r: Result<(), RepoError>| matches!(r, Err(RepoError::SymlinkEscape { .. }));
    assert!(matches!(
        s.repo.read(&link),
        Err(RepoError::SymlinkEscape { .. })
    ));
    assert!(escape(s.repo.write(&link, b"pwned")));
    assert!(escape(s.repo.remove(&link)));
    assert!(escape(s.repo.rename(&link, &p("moved.txt"))));
    fs::write(in_repo(&s, "mine.txt"), "mine").unwrap();
    assert!(
        escape(s.repo.rename(&p("mine.txt"), &link)),
        "replacing the link is refused too"
    );
    assert_eq!(s.repo.kind(&link), None);
    // Walks and listings leave it out rather than failing.
    assert_eq!(
        s.repo.walk_files(&RepoPath::root()).unwrap(),
        [p("mine.txt")]
    );
    let names: Vec<_> = s
        .repo
        .list_dir(&RepoPath::root())
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["mine.txt"]);
    assert_eq!(fs::read(s.outside.join("secret.txt")).unwrap(), b"secret");
    assert!(in_repo(&s, "link.txt").is_symlink());
}

#[test]
fn disk_repo_refuses_a_symlinked_folder_leading_out() {
    let mut s = sandbox();
    symlink(&s.outside, in_repo(&s, "out")).unwrap();
    let escape = |r: Result<(), RepoError>| matches!(r, Err(RepoError::SymlinkEscape { .. }));
    assert!(matches!(
        s.repo.read(&p("out/secret.txt")),
        Err(RepoError::SymlinkEscape { .. })
    ));
    assert!(escape(s.repo.write(&p("out/new.txt"), b"x")));
    assert!(escape(s.repo.write(&p("out/deep/new.txt"), b"x")));
    assert!(escape(s.repo.create_dir_all(&p("out/made"))));
    assert!(escape(s.repo.remove(&p("out/secret.txt"))));
    assert!(matches!(
        s.repo.list_dir(&p("out")),
        Err(RepoError::SymlinkEscape { .. })
    ));
    assert!(matches!(
        s.repo.walk_files(&p("out")),
        Err(RepoError::SymlinkEscape { .. })
    ));
    assert!(s.repo.walk_files(&RepoPath::root()).unwrap().is_empty());
    let outside: Vec<_> = fs::read_dir(&s.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside, ["secret.txt"]);
    assert_eq!(fs::read(s.outside.join("secret.txt")).unwrap(), b"secret");
}

#[test]
fn disk_repo_refuses_a_dangling_symlink() {
    let mut s = sandbox();
    let target = s.outside.join("created-by-write.txt");
    symlink(&target, in_repo(&s, "dangling")).unwrap();
    assert!(matches!(
        s.repo.write(&p("dangling"), b"x"),
        Err(RepoError::BrokenSymlink { .. })
    ));
    assert!(!target.exists());
    assert!(s.repo.walk_files(&RepoPath::root()).unwrap().is_empty());
}

#[test]
fn disk_repo_follows_links_that_stay_inside_but_does_not_walk_them() {
    let mut s = sandbox();
    s.repo.write(&p("real/a.txt"), b"a").unwrap();
    symlink(in_repo(&s, "real"), in_repo(&s, "alias")).unwrap();
    symlink("real/a.txt", in_repo(&s, "a-link.txt")).unwrap();
    assert_eq!(s.repo.read(&p("alias/a.txt")).unwrap(), b"a");
    assert_eq!(s.repo.read(&p("a-link.txt")).unwrap(), b"a");
    s.repo.write(&p("alias/b.txt"), b"b").unwrap();
    assert_eq!(fs::read(in_repo(&s, "real/b.txt")).unwrap(), b"b");
    // The folder link is listed but not entered: each file is walked once, by its real path.
    assert_eq!(
        s.repo.walk_files(&RepoPath::root()).unwrap(),
        [p("a-link.txt"), p("real/a.txt"), p("real/b.txt")]
    );
    assert_eq!(s.repo.kind(&p("alias")), Some(EntryKind::Dir));
    // Removing a link removes the link, not its target.
    s.repo.remove(&p("alias")).unwrap();
    assert_eq!(s.repo.read(&p("real/a.txt")).unwrap(), b"a");
}

// ---------------------------------------------------------------------------------------------
// Patches against git

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "core.autocrlf=false",
        ])
        .args([
            "-c",
            "core.quotepath=true",
            "-c",
            "diff.renames=true",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("git output is UTF-8")
}

/// A git repository whose one commit holds `baseline`.
fn committed(baseline: &Snapshot) -> TempDir {
    let tmp = TempDir::new().unwrap();
    git(tmp.path(), &["init", "-q"]);
    write_tree(tmp.path(), baseline);
    git(tmp.path(), &["add", "-A"]);
    git(
        tmp.path(),
        &["commit", "-q", "--allow-empty", "-m", "baseline"],
    );
    tmp
}

/// Makes the work tree hold exactly `files` (tracked files not in it are deleted).
fn replace_tree(dir: &Path, baseline: &Snapshot, files: &Snapshot) {
    for path in baseline.keys() {
        fs::remove_file(dir.join(path.as_str())).unwrap();
    }
    write_tree(dir, files);
}

/// Text changes of every kind the format has to get right.
fn text_cases() -> (Snapshot, Snapshot) {
    let long: String = (1..=40).map(|i| format!("line {i}\n")).collect();
    let long_edited = long
        .replace("line 2\n", "line two\n")
        .replace("line 38\n", "");
    let baseline = snap(&[
        ("long.txt", long.as_bytes()),
        ("gone.txt", b"bye\n"),
        ("gone-empty.txt", b""),
        ("emptied.txt", b"some\ntext\n"),
        ("filled.txt", b""),
        ("gains-newline.txt", b"a\nb"),
        ("loses-newline.txt", b"a\nb\n"),
        ("no-newline-edit.txt", b"x\ny"),
        ("crlf.txt", b"one\r\ntwo\r\nthree\r\n"),
        ("deep/nested/folder/file.rs", b"fn main() {}\n"),
        ("with space.txt", b"old\n"),
        ("caf\u{e9}.txt", b"old\n"),
        ("tab\there.txt", b"old\n"),
        ("same.txt", b"unchanged\n"),
    ]);
    let current = snap(&[
        ("long.txt", long_edited.as_bytes()),
        ("new.txt", b"hello\n"),
        ("new-empty.txt", b""),
        ("new-no-newline.txt", b"tail"),
        ("emptied.txt", b""),
        ("filled.txt", b"now full\n"),
        ("gains-newline.txt", b"a\nb\n"),
        ("loses-newline.txt", b"a\nb"),
        ("no-newline-edit.txt", b"x\nz"),
        ("crlf.txt", b"one\r\nTWO\r\nthree\r\n"),
        ("deep/nested/folder/file.rs", b"fn main() { run(); }\n"),
        ("deep/nested/new/mod.rs", b"mod x;\n"),
        ("with space.txt", b"new\n"),
        ("caf\u{e9}.txt", b"new\n"),
        ("tab\there.txt", b"new\n"),
        ("same.txt", b"unchanged\n"),
    ]);
    (baseline, current)
}

#[test]
fn our_diff_applies_with_git_apply() {
    let (baseline, current) = text_cases();
    let patch = diff(&baseline, &current);
    assert!(patch.contains("diff --git a/deep/nested/new/mod.rs b/deep/nested/new/mod.rs\nnew file mode 100644\n--- /dev/null\n+++ b/deep/nested/new/mod.rs\n@@ -0,0 +1 @@\n+mod x;\n"), "{patch}");
    assert!(
        patch.contains(
            "diff --git a/gone-empty.txt b/gone-empty.txt\ndeleted file mode 100644\ndiff --git"
        ),
        "{patch}"
    );
    assert!(patch.contains("\\ No newline at end of file\n"));
    assert!(patch.contains("\"a/tab\\there.txt\""), "{patch}");
    assert!(!patch.contains("same.txt"));
    let sections: Vec<_> = patch
        .lines()
        .filter(|l| l.starts_with("diff --git "))
        .collect();
    assert_eq!(sections.len(), 17);
    // Path order (quoted names aside, whose escapes sort differently from the raw bytes).
    let plain: Vec<_> = sections.iter().filter(|l| !l.contains('"')).collect();
    let mut sorted = plain.clone();
    sorted.sort();
    assert_eq!(plain, sorted, "files come in path order");

    let repo = committed(&baseline);
    let patch_file = repo.path().join("..").join(format!(
        "{}.patch",
        repo.path().file_name().unwrap().to_str().unwrap()
    ));
    fs::write(&patch_file, &patch).unwrap();
    git(
        repo.path(),
        &["apply", "--check", patch_file.to_str().unwrap()],
    );
    git(repo.path(), &["apply", patch_file.to_str().unwrap()]);
    fs::remove_file(&patch_file).unwrap();
    assert_eq!(tree_snapshot(repo.path()), current);
    // And git agrees nothing else differs: its own diff of the result is ours.
    git(repo.path(), &["add", "-A"]);
    let theirs = git(
        repo.path(),
        &[
            "-c",
            "core.quotepath=false",
            "diff",
            "--cached",
            "--no-renames",
            "--no-color",
        ],
    );
    // Git adds `index` lines and a function-name hint after hunk headers; neither is needed.
    let normalise = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with("index "))
            .map(
                |l| match l.strip_prefix("@@ ").and_then(|r| r.split_once(" @@")) {
                    Some((ranges, _)) => format!("@@ {ranges} @@"),
                    None => l.to_string(),
                },
            )
            .collect::<Vec<_>>()
    };
    assert_eq!(normalise(&theirs), normalise(&patch));
}

#[test]
fn our_apply_accepts_git_diff_output() {
    let (mut baseline, mut current) = text_cases();
    // Renames (with and without edits) show up in git's output as `rename from`/`rename to`.
    let body: String = (1..=20).map(|i| format!("row {i}\n")).collect();
    baseline.insert(p("old/name.txt"), body.clone().into_bytes());
    current.insert(p("new/name.txt"), body.clone().into_bytes());
    baseline.insert(p("edited-move.txt"), body.clone().into_bytes());
    current.insert(
        p("moved/edited.txt"),
        body.replace("row 10\n", "row ten\n").into_bytes(),
    );
    let repo = committed(&baseline);
    replace_tree(repo.path(), &baseline, &current);
    git(repo.path(), &["add", "-A"]);
    let patch = git(repo.path(), &["diff", "--cached", "--no-color"]);
    assert!(
        patch.contains("rename from old/name.txt\nrename to new/name.txt\n"),
        "{patch}"
    );
    assert!(patch.contains("rename from edited-move.txt\n"), "{patch}");
    let mut applied = baseline.clone();
    apply(&mut applied, &patch).unwrap();
    assert_eq!(applied, current);
    // Zero context lines, as `git diff -U0` writes, apply too.
    let tight = git(
        repo.path(),
        &["diff", "--cached", "--no-color", "-U0", "--no-renames"],
    );
    let mut applied = baseline.clone();
    apply(&mut applied, &tight).unwrap();
    assert_eq!(applied, current);
}

#[test]
fn binary_changes_are_named_like_git_and_refused_on_apply() {
    let png: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\xff\xfe";
    let baseline = snap(&[
        ("img/logo.png", png),
        ("old.bin", b"\0\x01\x02"),
        ("text.txt", b"t\n"),
    ]);
    let current = snap(&[
        ("img/logo.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\x00\x01"),
        ("new.bin", b"\xff\0"),
        ("text.txt", b"t\n"),
    ]);
    let ours = diff(&baseline, &current);
    let repo = committed(&baseline);
    replace_tree(repo.path(), &baseline, &current);
    git(repo.path(), &["add", "-A"]);
    let theirs = git(
        repo.path(),
        &["diff", "--cached", "--no-color", "--no-renames"],
    );
    let binary_lines = |s: &str| {
        s.lines()
            .filter(|l| l.starts_with("Binary files"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(binary_lines(&ours).len(), 3, "{ours}");
    assert_eq!(binary_lines(&ours), binary_lines(&theirs));
    assert!(ours.contains("Binary files /dev/null and b/new.bin differ"));
    assert!(ours.contains("Binary files a/old.bin and /dev/null differ"));

    let mut applied = baseline.clone();
    let err = apply(&mut applied, &theirs).unwrap_err().to_string();
    assert!(
        err.contains("img/logo.png") && err.contains("binary"),
        "{err}"
    );
    assert_eq!(applied, baseline, "nothing applied");
}

#[test]
fn apply_fails_whole_and_says_where() {
    let baseline = snap(&[("a.txt", b"1\n2\n3\n"), ("b.txt", b"x\n")]);
    let cases: &[(&str, &[&str])] = &[
        // Second file's context does not match: the first file's change is not kept either.
        (
            "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-nope\n+y\n",
            &["b.txt", "hunk #1"],
        ),
        (
            "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+dup\n",
            &["a.txt", "already exists"],
        ),
        (
            "--- a/missing.txt\n+++ b/missing.txt\n@@ -1 +1 @@\n-a\n+b\n",
            &["missing.txt", "does not exist"],
        ),
        (
            "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
            &["etc/passwd", "outside"],
        ),
        (
            "diff --git a/b.txt b/b.txt\ndeleted file mode 100644\n--- a/b.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-other\n",
            &["b.txt"],
        ),
        ("this is not a patch\n", &["no"]),
        ("", &["no"]),
    ];
    for (patch, needles) in cases {
        let mut s = baseline.clone();
        let err = apply(&mut s, patch).expect_err(patch).to_string();
        assert!(err.starts_with("patch: "), "{err}");
        for needle in *needles {
            assert!(err.contains(needle), "{patch:?}: {err}");
        }
        assert_eq!(s, baseline, "{patch:?} changed the snapshot");
    }
}

#[test]
fn apply_finds_hunks_whose_line_numbers_drifted() {
    let mut s = snap(&[("a.txt", b"new first\n1\n2\n3\n")]);
    apply(
        &mut s,
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n",
    )
    .unwrap();
    assert_eq!(s, snap(&[("a.txt", b"new first\n1\ntwo\n3\n")]));
}

// ---------------------------------------------------------------------------------------------
// VirtualRepo: baseline, diff, patches and undo

#[test]
fn virtual_repo_diffs_against_its_baseline() {
    let mut r = VirtualRepo::new("/repo");
    r.write(&p("a.txt"), b"a\n").unwrap();
    r.write(&p("b.txt"), b"b\n").unwrap();
    r.write(&p(".git/HEAD"), b"ref").unwrap();
    r.set_baseline();
    assert_eq!(r.baseline(), &snap(&[("a.txt", b"a\n"), ("b.txt", b"b\n")]));
    assert_eq!(r.diff(), "");
    assert!(r.changed_files().is_empty());

    r.write(&p("a.txt"), b"A\n").unwrap();
    r.remove(&p("b.txt")).unwrap();
    r.write(&p("src/c.txt"), b"c\n").unwrap();
    r.write(&p(".git/HEAD"), b"other").unwrap();
    assert_eq!(
        r.changed_files(),
        [
            (p("a.txt"), Change::Modified),
            (p("b.txt"), Change::Deleted),
            (p("src/c.txt"), Change::Added)
        ]
    );
    let patch = r.diff();
    assert_eq!(patch, diff(r.baseline(), &r.snapshot().unwrap()));

    // The patch rebuilds the current files from the baseline in another repository.
    let mut other = VirtualRepo::new("/repo");
    other.write(&p("a.txt"), b"a\n").unwrap();
    other.write(&p("b.txt"), b"b\n").unwrap();
    other.apply_patch(&patch).unwrap();
    assert_eq!(other.snapshot().unwrap(), r.snapshot().unwrap());
    assert_eq!(other.kind(&p("src")), Some(EntryKind::Dir));
}

#[test]
fn virtual_repo_patches_are_one_undoable_step() {
    let mut r = VirtualRepo::new("/repo");
    r.write(&p("keep/a.txt"), b"1\n2\n").unwrap();
    r.write(&p("dir/only.txt"), b"x\n").unwrap();
    r.set_baseline();
    let before = r.snapshot().unwrap();
    let patch = "diff --git a/keep/a.txt b/keep/a.txt\n--- a/keep/a.txt\n+++ b/keep/a.txt\n@@ -1,2 +1,2 @@\n 1\n-2\n+two\n\
                 diff --git a/dir/only.txt b/dir/only.txt\ndeleted file mode 100644\n--- a/dir/only.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n\
                 diff --git a/n/new.txt b/n/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/n/new.txt\n@@ -0,0 +1 @@\n+new\n";
    r.apply_patch(patch).unwrap();
    assert_eq!(r.read(&p("keep/a.txt")).unwrap(), b"1\ntwo\n");
    assert_eq!(
        r.kind(&p("dir")),
        None,
        "a folder emptied by the patch goes, as with git apply"
    );
    assert_eq!(r.read(&p("n/new.txt")).unwrap(), b"new\n");
    assert_eq!(r.undo_steps(), 3, "two writes, then the patch");
    r.undo().unwrap();
    assert_eq!(r.snapshot().unwrap(), before);
    assert_eq!(r.kind(&p("dir")), Some(EntryKind::Dir));
    assert_eq!(r.kind(&p("n")), None);
    assert_eq!(r.undo_steps(), 2);

    // A failing patch changes nothing and leaves no undo step.
    let bad = "--- a/keep/a.txt\n+++ b/keep/a.txt\n@@ -1 +1 @@\n-1\n+one\n--- a/keep/a.txt\n+++ b/keep/a.txt\n@@ -1 +1 @@\n-zzz\n+y\n";
    assert!(r.apply_patch(bad).is_err());
    assert_eq!(r.snapshot().unwrap(), before);
    assert_eq!(r.undo_steps(), 2);
    // A patch that creates a file where a folder is fails as a whole too.
    let onto_dir = "--- /dev/null\n+++ b/q.txt\n@@ -0,0 +1 @@\n+q\n--- /dev/null\n+++ b/keep\n@@ -0,0 +1 @@\n+k\n";
    assert!(matches!(
        r.apply_patch(onto_dir),
        Err(RepoError::IsADirectory(_))
    ));
    assert_eq!(r.kind(&p("q.txt")), None);
}

// ---------------------------------------------------------------------------------------------
// Archives

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in entries {
        if name.ends_with('/') {
            w.add_directory(*name, opts).unwrap();
        } else {
            w.start_file(*name, opts).unwrap();
            w.write_all(data).unwrap();
        }
    }
    w.finish().unwrap().into_inner()
}

/// A tar.gz with raw entry names (the tar crate's own setters refuse `..`, which is the point).
fn tar_gz_of(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (name, kind, data) in entries {
        let mut h = tar::Header::new_old();
        let raw = &mut h.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_entry_type(*kind);
        h.set_mode(0o644);
        if *kind == tar::EntryType::Symlink {
            h.set_link_name_literal(data).unwrap();
            h.set_size(0);
            h.set_cksum();
            b.append(&h, &[][..]).unwrap();
        } else {
            h.set_size(data.len() as u64);
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
    }
    b.into_inner().unwrap().finish().unwrap()
}

fn files_of(r: &VirtualRepo) -> Vec<(String, Vec<u8>)> {
    r.snapshot()
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k.as_str().to_string(), v))
        .collect()
}

#[test]
fn zip_import_unwraps_the_top_folder() {
    let data = zip_of(&[
        ("proj-main/", b""),
        ("proj-main/README.md", b"# hi\n"),
        ("proj-main/src/lib.rs", b"pub fn x() {}\n"),
        ("proj-main/empty/", b""),
        ("proj-main/.git/config", b"[core]\n"),
        ("__MACOSX/proj-main/._README.md", b"junk"),
    ]);
    let r = import_zip("/repo", &data, ImportLimits::default()).unwrap();
    assert_eq!(
        files_of(&r),
        [
            ("README.md".into(), b"# hi\n".to_vec()),
            ("src/lib.rs".into(), b"pub fn x() {}\n".to_vec())
        ]
    );
    assert_eq!(r.kind(&p("empty")), Some(EntryKind::Dir));
    assert_eq!(r.kind(&p(".git")), None);
    // Imported files are the baseline: nothing changed yet, nothing to undo.
    assert_eq!(r.diff(), "");
    assert_eq!(r.undo_steps(), 0);

    // Two top-level entries: nothing is unwrapped.
    let data = zip_of(&[("a/x.txt", b"x"), ("b.txt", b"b")]);
    let r = import_archive("/repo", &data, ImportLimits::default()).unwrap();
    assert_eq!(
        r.walk_files(&RepoPath::root()).unwrap(),
        [p("a/x.txt"), p("b.txt")]
    );
}

#[test]
fn tar_gz_import_like_a_github_archive() {
    let data = tar_gz_of(&[
        (
            "pax_global_header",
            tar::EntryType::XGlobalHeader,
            b"52 comment=0123456789abcdef0123456789abcdef01234567\n",
        ),
        ("proj-1.0/", tar::EntryType::Directory, b""),
        ("proj-1.0/main.py", tar::EntryType::Regular, b"print(1)\n"),
        ("proj-1.0/pkg/mod.py", tar::EntryType::Regular, b"x = 1\n"),
        ("proj-1.0/etc-link", tar::EntryType::Symlink, b"/etc/passwd"),
    ]);
    let r = import_tar_gz("/repo", &data, ImportLimits::default()).unwrap();
    assert_eq!(
        files_of(&r),
        [
            ("main.py".into(), b"print(1)\n".to_vec()),
            ("pkg/mod.py".into(), b"x = 1\n".to_vec())
        ]
    );
    let r = import_archive("/repo", &data, ImportLimits::default()).unwrap();
    assert_eq!(r.walk_files(&RepoPath::root()).unwrap().len(), 2);
}

#[test]
fn archive_entries_escaping_the_root_fail_the_whole_import() {
    let limits = ImportLimits::default();
    for bad in [
        "../evil.sh",
        "proj/../../evil.sh",
        "/etc/cron.d/evil",
        "..\\evil.bat",
    ] {
        let zip = zip_of(&[("proj/ok.txt", b"ok"), (bad, b"pwned")]);
        let err = import_zip("/repo", &zip, limits).unwrap_err().to_string();
        assert!(err.starts_with("archive: entry `"), "{bad}: {err}");
        assert!(err.contains("evil"), "{bad}: {err}");
        let tgz = tar_gz_of(&[
            ("proj/ok.txt", tar::EntryType::Regular, b"ok"),
            (bad, tar::EntryType::Regular, b"pwned"),
        ]);
        let err = import_tar_gz("/repo", &tgz, limits)
            .unwrap_err()
            .to_string();
        assert!(err.contains("evil"), "{bad}: {err}");
    }
}

#[test]
fn archive_bombs_are_refused() {
    let limits = ImportLimits {
        max_total_bytes: 1 << 20,
        max_entries: 50,
    };
    // 4 MiB of zeros compresses to a few KiB.
    let zeros = vec![0u8; 4 << 20];
    let zip = zip_of(&[("bomb.bin", &zeros)]);
    assert!(zip.len() < 64 << 10);
    let err = import_zip("/repo", &zip, limits).unwrap_err().to_string();
    assert!(err.contains("more than 1048576 bytes"), "{err}");
    let tgz = tar_gz_of(&[("bomb.bin", tar::EntryType::Regular, &zeros)]);
    let err = import_tar_gz("/repo", &tgz, limits)
        .unwrap_err()
        .to_string();
    assert!(err.contains("more than 1048576 bytes"), "{err}");
    // Many small files that add up past the cap.
    let chunk = vec![b'a'; 300 << 10];
    let names: Vec<String> = (0..4).map(|i| format!("f{i}.txt")).collect();
    let entries: Vec<(&str, &[u8])> = names
        .iter()
        .map(|n| (n.as_str(), chunk.as_slice()))
        .collect();
    assert!(
        import_zip("/repo", &zip_of(&entries), limits)
            .unwrap_err()
            .to_string()
            .contains("bytes")
    );

    let names: Vec<String> = (0..51).map(|i| format!("f{i}.txt")).collect();
    let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
    let err = import_zip("/repo", &zip_of(&entries), limits)
        .unwrap_err()
        .to_string();
    assert!(err.contains("more than 50 entries"), "{err}");
    let tar_entries: Vec<_> = names
        .iter()
        .map(|n| (n.as_str(), tar::EntryType::Regular, &b"x"[..]))
        .collect();
    let err = import_tar_gz("/repo", &tar_gz_of(&tar_entries), limits)
        .unwrap_err()
        .to_string();
    assert!(err.contains("more than 50 entries"), "{err}");
}

#[test]
fn unreadable_archives_give_clear_errors() {
    let limits = ImportLimits::default();
    let err = import_archive("/repo", b"hello", limits)
        .unwrap_err()
        .to_string();
    assert!(err.contains("neither a zip nor a .tar.gz"), "{err}");
    let err = import_zip("/repo", b"PK\x03\x04 truncated", limits)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a readable zip"), "{err}");
    let err = import_tar_gz("/repo", &[0x1f, 0x8b, 8, 0, 0, 0], limits)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a readable .tar.gz"), "{err}");
}

#[test]
fn export_zip_round_trips() {
    let mut r = VirtualRepo::new("/work/myproj");
    r.write(&p("src/main.rs"), b"fn main() {}\n").unwrap();
    r.write(&p("README.md"), b"\xff binary-ish \0").unwrap();
    r.write(&p(".git/HEAD"), b"ref").unwrap();
    r.create_dir_all(&p("assets/empty")).unwrap();
    let zip = export_zip(&r).unwrap();
    let names: Vec<String> = {
        let archive = zip::ZipArchive::new(Cursor::new(&zip)).unwrap();
        archive
            .file_names()
            .map(|n| n.unwrap().into_owned())
            .collect()
    };
    assert!(names.iter().all(|n| n.starts_with("myproj/")), "{names:?}");
    assert!(!names.iter().any(|n| n.contains(".git")), "{names:?}");
    let back = import_zip("/work/myproj", &zip, ImportLimits::default()).unwrap();
    assert_eq!(back.snapshot().unwrap(), r.snapshot().unwrap());
    assert_eq!(back.kind(&p("assets/empty")), Some(EntryKind::Dir));
}

#[test]
fn folder_import_skips_git_and_refuses_links_out() {
    let tmp = TempDir::new().unwrap();
    let folder = tmp.path().join("proj");
    write_tree(
        &folder,
        &snap(&[("a.txt", b"a"), ("src/b.rs", b"b"), (".git/HEAD", b"ref")]),
    );
    symlink("a.txt", folder.join("inside-link.txt")).unwrap();
    let r = import_dir("/repo", &folder, ImportLimits::default()).unwrap();
    assert_eq!(
        files_of(&r),
        [
            ("a.txt".into(), b"a".to_vec()),
            ("inside-link.txt".into(), b"a".to_vec()),
            ("src/b.rs".into(), b"b".to_vec())
        ]
    );
    assert_eq!(r.undo_steps(), 0);
    assert_eq!(r.diff(), "");

    let small = ImportLimits {
        max_total_bytes: 2,
        max_entries: 10,
    };
    let err = import_dir("/repo", &folder, small).unwrap_err().to_string();
    assert!(err.contains("more than 2 bytes"), "{err}");

    fs::write(tmp.path().join("secret"), "s").unwrap();
    symlink(tmp.path().join("secret"), folder.join("src/out-link")).unwrap();
    assert!(matches!(
        import_dir("/repo", &folder, ImportLimits::default()),
        Err(RepoError::SymlinkEscape { path }) if path.ends_with("src/out-link")
    ));
}

#[test]
fn picked_files_import_like_an_archive() {
    let limits = ImportLimits::default();
    let files = vec![
        ("roman/roman.py".to_string(), b"def f(): pass\n".to_vec()),
        (
            "roman/tests/test_roman.py".to_string(),
            b"import roman\n".to_vec(),
        ),
        (
            "roman/__pycache__/roman.cpython-314.pyc".to_string(),
            vec![0, 1, 2],
        ),
        ("roman/.git/HEAD".to_string(), b"ref: x\n".to_vec()),
    ];
    let repo = import_files("/repo", files, limits).unwrap();
    // The picked folder is unwrapped; caches and version-control internals stay out.
    assert_eq!(
        repo.walk_files(&RepoPath::root()).unwrap(),
        vec![p("roman.py"), p("tests/test_roman.py")]
    );
    assert_eq!(repo.diff(), "");
    assert_eq!(repo.undo_steps(), 0);
    // Names are confined, and the size cap holds.
    let escape = vec![("../etc/passwd".to_string(), b"x".to_vec())];
    assert!(import_files("/repo", escape, limits).is_err());
    let small = ImportLimits {
        max_total_bytes: 4,
        max_entries: 10,
    };
    let big = vec![("a.txt".to_string(), b"hello".to_vec())];
    assert!(
        import_files("/repo", big, small)
            .unwrap_err()
            .to_string()
            .contains("more than 4 bytes")
    );
}

/// An in-memory repository refuses a write past its size limit, leaving what it held.
#[test]
fn virtual_repo_is_bounded() {
    let mut r = VirtualRepo::new("/repo").with_max_bytes(1000);
    r.write(&p("a.txt"), &[b'a'; 600]).unwrap();
    // Replacing a file counts its new size, not both.
    r.write(&p("a.txt"), &[b'b'; 900]).unwrap();
    let err = r.write(&p("b.txt"), &[b'c'; 200]).unwrap_err();
    assert!(
        matches!(err, RepoError::RepositoryFull { limit: 1000, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("/repo/b.txt"), "{err}");
    assert_eq!(r.kind(&p("b.txt")), None);
    assert_eq!(r.read(&p("a.txt")).unwrap(), vec![b'b'; 900]);
}

/// In memory (no stamps), a file too large to keep is compared by hash: untouched it is not
/// in the patch, changed it is named as a binary change.
#[test]
fn change_tracking_without_stamps_hashes_large_files() {
    use lilypad_repo::{ChangeTracker, TrackLimits};
    let mut r = VirtualRepo::new("/repo");
    r.write(&p("big.txt"), &[b'a'; 100]).unwrap();
    r.write(&p("small.txt"), b"s\n").unwrap();
    let limits = TrackLimits {
        max_file_bytes: 10,
        max_total_bytes: 1 << 20,
    };
    let mut t = ChangeTracker::new(&r, limits).unwrap();
    r.write(&p("small.txt"), b"t\n").unwrap();
    t.update(&r).unwrap();
    assert!(!t.patch().contains("big.txt"), "{}", t.patch());
    assert!(t.patch().contains("+t"), "{}", t.patch());
    r.write(&p("big.txt"), &[b'b'; 100]).unwrap();
    t.update(&r).unwrap();
    assert!(
        t.patch()
            .contains("Binary files a/big.txt and b/big.txt differ"),
        "{}",
        t.patch()
    );
}

/// The ignore rules are those of the start: a `.gitignore` edited during the run neither
/// hides a file that was tracked (it would look deleted) nor reveals one that was not.
#[test]
fn edits_to_gitignore_do_not_change_what_is_tracked() {
    use lilypad_repo::{ChangeTracker, TrackLimits};
    let mut r = VirtualRepo::new("/repo");
    r.write(&p(".gitignore"), b"*.tmp\n").unwrap();
    r.write(&p("debug.log"), b"kept\n").unwrap();
    r.write(&p("scratch.tmp"), b"ignored\n").unwrap();
    let mut t = ChangeTracker::new(&r, TrackLimits::default()).unwrap();
    r.write(&p(".gitignore"), b"*.log\n").unwrap();
    r.write(&p("scratch.tmp"), b"changed\n").unwrap();
    t.update(&r).unwrap();
    let files: Vec<String> = t.changes().iter().map(|(p, _)| p.to_string()).collect();
    assert_eq!(files, [".gitignore"], "{}", t.patch());
}
