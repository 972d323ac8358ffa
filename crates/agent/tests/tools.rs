//! FrogNano's five tools through `Toolbox::execute`, as the agent loop calls them: every reply
//! and every error case the model can run into.

use std::time::Duration;

use lilypad_agent::{
    Observation, RepoPath, Repository, Shell, ShellOutput, ToolCall, Toolbox, VirtualRepo,
    tool_names, tool_schemas,
};
use serde_json::{Value, json};

/// A shell that answers with a fixed result and records what it was asked.
struct FakeShell {
    reply: ShellOutput,
    asked: Asked,
}

/// The commands and timeouts a [`FakeShell`] was given.
type Asked = std::rc::Rc<std::cell::RefCell<Vec<(String, Duration)>>>;

fn fake_shell(output: &str, exit_code: Option<i32>, timed_out: bool) -> (Toolbox, Asked) {
    let asked = Asked::default();
    let shell = FakeShell {
        reply: ShellOutput {
            output: output.into(),
            exit_code,
            timed_out,
        },
        asked: asked.clone(),
    };
    (Toolbox::new(Box::new(shell)), asked)
}

impl Shell for FakeShell {
    fn run(&mut self, _repo: &mut dyn Repository, command: &str, timeout: Duration) -> ShellOutput {
        self.asked.borrow_mut().push((command.into(), timeout));
        self.reply.clone()
    }
}

/// A toolbox and the repository its calls work on.
struct Bench {
    tb: Toolbox,
    r: VirtualRepo,
}

impl Bench {
    /// `files` in a repository at `/repo`; Bash answers through a silent fake shell.
    fn new(files: &[(&str, &str)]) -> Self {
        Self::with(fake_shell("", Some(0), false).0, files)
    }

    fn with(tb: Toolbox, files: &[(&str, &str)]) -> Self {
        let mut r = VirtualRepo::new("/repo");
        for (path, text) in files {
            r.write(&RepoPath::new(path).unwrap(), text.as_bytes())
                .unwrap();
        }
        Self { tb, r }
    }

    fn call(&mut self, name: &str, arguments: Value) -> Observation {
        self.tb.execute(
            &mut self.r,
            &ToolCall {
                name: name.into(),
                arguments,
            },
        )
    }

    fn ok(&mut self, name: &str, args: Value) -> String {
        let obs = self.call(name, args.clone());
        assert!(!obs.is_error, "{name} {args} failed: {}", obs.content);
        obs.content
    }

    fn err(&mut self, name: &str, args: Value) -> String {
        let obs = self.call(name, args.clone());
        assert!(
            obs.is_error,
            "{name} {args} should fail, got: {}",
            obs.content
        );
        obs.content
    }

    fn text(&self, path: &str) -> String {
        String::from_utf8(self.r.read(&RepoPath::new(path).unwrap()).unwrap()).unwrap()
    }
}

// ---- schemas and dispatch -------------------------------------------------------------------

#[test]
fn schemas_describe_the_five_tools() {
    assert_eq!(tool_names(), ["Read", "Write", "Edit", "Glob", "Bash"]);
    let schemas = tool_schemas();
    let required = |i: usize| schemas[i]["function"]["parameters"]["required"].clone();
    assert_eq!(required(0), json!(["file_path"]));
    assert_eq!(required(1), json!(["file_path", "content"]));
    assert_eq!(
        required(2),
        json!(["file_path", "old_string", "new_string"])
    );
    assert_eq!(required(3), json!(["pattern"]));
    assert_eq!(required(4), json!(["command"]));
    for s in &schemas {
        assert_eq!(s["type"], "function");
        assert_eq!(s["function"]["parameters"]["type"], "object");
        assert_eq!(s["function"]["parameters"]["additionalProperties"], false);
    }
    let description = |i: usize| {
        schemas[i]["function"]["description"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(description(0).contains("absolute path") && description(0).contains("2000"));
    assert!(description(2).contains("replace_all"));
    assert!(description(3).contains("**/*"));
    assert!(description(4).contains("600000") && description(4).contains("30,000"));
}

#[test]
fn unknown_tools_name_the_available_ones() {
    let mut b = Bench::new(&[]);
    let msg = b.err("Delete", json!({}));
    assert!(
        msg.contains("Unknown tool `Delete`") && msg.contains("Read, Write, Edit, Glob, Bash"),
        "{msg}"
    );
    let msg = b.err("read", json!({"file_path": "a"}));
    assert!(msg.contains("Did you mean `Read`?"), "{msg}");
}

#[test]
fn bad_arguments_name_the_problem_and_the_expected_arguments() {
    let mut b = Bench::new(&[("a.txt", "x\n")]);
    for (name, args, needle, usage) in [
        (
            "Read",
            json!({}),
            "missing required argument `file_path`",
            "file_path (string, required)",
        ),
        (
            "Read",
            json!({"file_path": "a.txt", "offset": "3"}),
            "`offset` must be a non-negative integer, not a string",
            "limit (integer, optional)",
        ),
        (
            "Read",
            json!({"file_path": "a.txt", "path": "x"}),
            "unknown argument `path`",
            "offset (integer, optional)",
        ),
        (
            "Write",
            json!({"file_path": "a.txt"}),
            "missing required argument `content`",
            "content (string, required)",
        ),
        (
            "Write",
            json!({"file_path": 7, "content": ""}),
            "`file_path` must be a string, not the number 7",
            "file_path (string, required)",
        ),
        (
            "Edit",
            json!({"file_path": "a.txt", "old_string": "x", "new_string": "y", "replace_all": "yes"}),
            "`replace_all` must be a boolean",
            "replace_all (boolean, optional)",
        ),
        (
            "Edit",
            json!({"file_path": "a.txt", "old": "x", "new_string": "y"}),
            "unknown argument `old`",
            "old_string (string, required)",
        ),
        (
            "Glob",
            json!({"path": "/repo"}),
            "missing required argument `pattern`",
            "pattern (string, required)",
        ),
        (
            "Glob",
            json!({"pattern": ["*"]}),
            "`pattern` must be a string, not an array",
            "path (string, optional)",
        ),
        (
            "Bash",
            json!({"command": "ls", "timeout": -5}),
            "`timeout` must be a non-negative integer",
            "timeout (integer, optional)",
        ),
        (
            "Bash",
            json!({"cmd": "ls"}),
            "unknown argument `cmd`",
            "command (string, required)",
        ),
        (
            "Bash",
            json!("ls -la"),
            "arguments must be a JSON object",
            "description (string, optional)",
        ),
    ] {
        let msg = b.err(name, args);
        assert!(
            msg.starts_with(&format!("Invalid arguments for {name}: ")),
            "{msg}"
        );
        assert!(msg.contains(needle) && msg.contains(usage), "{msg}");
    }
    // Nothing was changed by the refused calls.
    assert_eq!(b.text("a.txt"), "x\n");
}

#[test]
fn every_path_argument_is_confined_to_the_repository() {
    let mut b = Bench::new(&[("src/a.txt", "a\n")]);
    for bad in [
        "../x",
        "../../etc/passwd",
        "/etc/passwd",
        "/repository/x",
        "/repo/../etc/x",
        "src/../../x",
        "/",
    ] {
        for (name, args) in [
            ("Read", json!({"file_path": bad})),
            ("Write", json!({"file_path": bad, "content": "x"})),
            (
                "Edit",
                json!({"file_path": bad, "old_string": "", "new_string": "x"}),
            ),
            ("Glob", json!({"pattern": "*", "path": bad})),
        ] {
            let msg = b.err(name, args);
            assert!(
                msg.contains("outside the repository root `/repo`"),
                "{name} {bad}: {msg}"
            );
        }
    }
    for bad in ["/etc/*", "../*", "src/../../*"] {
        let msg = b.err("Glob", json!({"pattern": bad}));
        assert!(
            msg.contains("outside the repository root") || msg.contains("contains `..`"),
            "{bad}: {msg}"
        );
    }
    let msg = b.err("Read", json!({"file_path": ""}));
    assert!(msg.contains("empty path"), "{msg}");
    assert_eq!(
        b.r.walk_files(&RepoPath::root()).unwrap(),
        [RepoPath::new("src/a.txt").unwrap()]
    );
}

// ---- Read -----------------------------------------------------------------------------------

#[test]
fn read_numbers_lines_like_cat_n() {
    let mut b = Bench::new(&[
        ("src/m.py", "def f():\n\treturn 1\n"),
        ("crlf.txt", "a\r\nb\r\n"),
    ]);
    assert_eq!(
        b.ok("Read", json!({"file_path": "/repo/src/m.py"})),
        "     1\tdef f():\n     2\t\treturn 1"
    );
    // Relative paths are taken from the root; `\r` of CRLF line ends is not shown.
    assert_eq!(
        b.ok("Read", json!({"file_path": "crlf.txt"})),
        "     1\ta\n     2\tb"
    );
}

#[test]
fn read_offset_and_limit_select_lines_and_say_how_to_read_on() {
    let body: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    let mut b = Bench::new(&[("f.txt", &body)]);
    let out = b.ok(
        "Read",
        json!({"file_path": "/repo/f.txt", "offset": 3, "limit": 2}),
    );
    assert_eq!(
        out,
        "     3\tline 3\n     4\tline 4\n\n[Showed lines 3-4 of 10. Read on with offset=5.]"
    );
    let out = b.ok("Read", json!({"file_path": "/repo/f.txt", "offset": 9}));
    assert_eq!(out, "     9\tline 9\n    10\tline 10");
    // Offset 0 means the start.
    assert!(
        b.ok("Read", json!({"file_path": "f.txt", "offset": 0}))
            .starts_with("     1\tline 1\n")
    );
    let msg = b.err("Read", json!({"file_path": "f.txt", "offset": 11}));
    assert!(msg.contains("has 10 lines, fewer than offset 11"), "{msg}");
    let msg = b.err("Read", json!({"file_path": "f.txt", "limit": 0}));
    assert!(msg.contains("limit must be at least 1"), "{msg}");
}

#[test]
fn read_stops_at_2000_lines_by_default() {
    // Empty lines, so 2,000 numbered lines stay under the 20,000-character cut.
    let body = "\n".repeat(2500);
    let mut b = Bench::new(&[("big.txt", &body)]);
    let out = b.ok("Read", json!({"file_path": "big.txt"}));
    assert!(
        out.contains("  2000\t\n\n[Showed lines 1-2000 of 2500. Read on with offset=2001.]"),
        "{}",
        &out[out.len() - 200..]
    );
    assert!(!out.contains("2001\t"));
}

#[test]
fn read_cuts_long_lines_and_long_output() {
    let long = "x".repeat(2500);
    let body: String = (0..30)
        .map(|i| format!("{i}{}\n", "y".repeat(999)))
        .collect();
    let mut b = Bench::new(&[("long.txt", &long), ("wide.txt", &body)]);
    let out = b.ok("Read", json!({"file_path": "long.txt"}));
    assert_eq!(
        out,
        format!(
            "     1\t{}... [line cut: 500 more characters]",
            "x".repeat(2000)
        )
    );

    // 30 lines of ~1,008 characters each: 19 fit under 20,000.
    let out = b.ok("Read", json!({"file_path": "wide.txt"}));
    assert!(out.chars().count() <= 20_000 + 200, "{}", out.len());
    assert!(out.contains("    19\t18y"), "{out}");
    assert!(!out.contains("    20\t19y"));
    assert!(out.ends_with("[Output cut at 20000 characters: showed lines 1-19 of 30. Read on with offset=20 (and a smaller limit if lines are long).]"), "{}", &out[out.len() - 200..]);
    let next = b.ok("Read", json!({"file_path": "wide.txt", "offset": 20}));
    assert!(
        next.starts_with("    20\t19y")
            && next.contains("    30\t29y")
            && !next.contains("[Output cut"),
        "{next}"
    );
}

#[test]
fn read_reports_empty_missing_directory_and_binary_files() {
    let mut b = Bench::new(&[("empty.txt", ""), ("src/a.py", "a")]);
    b.r.write(
        &RepoPath::new("img.png").unwrap(),
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
    )
    .unwrap();
    b.r.write(&RepoPath::new("latin1.txt").unwrap(), b"caf\xe9\n")
        .unwrap();
    assert_eq!(
        b.ok("Read", json!({"file_path": "/repo/empty.txt"})),
        "The file /repo/empty.txt exists but is empty."
    );
    assert_eq!(
        b.err("Read", json!({"file_path": "/repo/nope.py"})),
        "File does not exist: /repo/nope.py"
    );
    let msg = b.err("Read", json!({"file_path": "/repo/src"}));
    assert!(
        msg.contains("/repo/src is a directory") && msg.contains("Glob"),
        "{msg}"
    );
    let msg = b.err("Read", json!({"file_path": "/repo"}));
    assert!(msg.contains("/repo is a directory"), "{msg}");
    let msg = b.err("Read", json!({"file_path": "img.png"}));
    assert!(msg.contains("binary file (16 bytes)"), "{msg}");
    assert_eq!(
        b.ok("Read", json!({"file_path": "latin1.txt"})),
        "     1\tcaf\u{fffd}"
    );
}

// ---- Write ----------------------------------------------------------------------------------

#[test]
fn write_creates_with_parents_and_then_updates() {
    let mut b = Bench::new(&[("README.md", "hi")]);
    let out = b.ok(
        "Write",
        json!({"file_path": "/repo/new/deep/x.py", "content": "print(1)\n"}),
    );
    assert_eq!(out, "File created successfully at: /repo/new/deep/x.py");
    assert_eq!(b.text("new/deep/x.py"), "print(1)\n");
    let out = b.ok(
        "Write",
        json!({"file_path": "new/deep/x.py", "content": ""}),
    );
    assert_eq!(out, "The file /repo/new/deep/x.py has been updated.");
    assert_eq!(b.text("new/deep/x.py"), "");
}

#[test]
fn write_refuses_directories_and_files_as_folders() {
    let mut b = Bench::new(&[("README.md", "hi"), ("src/a.py", "")]);
    let msg = b.err("Write", json!({"file_path": "/repo/src", "content": "x"}));
    assert!(msg.contains("/repo/src` is a directory"), "{msg}");
    let msg = b.err(
        "Write",
        json!({"file_path": "/repo/README.md/x", "content": "x"}),
    );
    assert!(msg.contains("is not a directory"), "{msg}");
    assert_eq!(b.text("README.md"), "hi");
}

// ---- Edit -----------------------------------------------------------------------------------

#[test]
fn edit_replaces_a_unique_match() {
    let mut b = Bench::new(&[("m.py", "def f():\n    return 1\n")]);
    let out = b.ok(
        "Edit",
        json!({"file_path": "/repo/m.py", "old_string": "return 1", "new_string": "return 2"}),
    );
    assert_eq!(
        out,
        "The file /repo/m.py has been updated: 1 replacement made."
    );
    assert_eq!(b.text("m.py"), "def f():\n    return 2\n");
}

#[test]
fn edit_needs_a_unique_match_unless_replace_all() {
    let mut b = Bench::new(&[("m.py", "x = 1\ny = x\nz = x\n")]);
    let msg = b.err(
        "Edit",
        json!({"file_path": "m.py", "old_string": "x", "new_string": "w"}),
    );
    assert!(
        msg.starts_with("Found 3 matches of old_string in /repo/m.py, but replace_all is false."),
        "{msg}"
    );
    assert!(
        msg.contains("set replace_all to true") && msg.contains("surrounding"),
        "{msg}"
    );
    assert_eq!(b.text("m.py"), "x = 1\ny = x\nz = x\n");
    let out = b.ok("Edit",
        json!({"file_path": "m.py", "old_string": "y = x", "new_string": "y = 2", "replace_all": false}),
    );
    assert!(out.ends_with("1 replacement made."), "{out}");
    let out = b.ok(
        "Edit",
        json!({"file_path": "m.py", "old_string": "x", "new_string": "w", "replace_all": true}),
    );
    assert_eq!(
        out,
        "The file /repo/m.py has been updated: 2 replacements made."
    );
    assert_eq!(b.text("m.py"), "w = 1\ny = 2\nz = w\n");
}

#[test]
fn edit_errors_on_missing_text_same_strings_and_missing_files() {
    let mut b = Bench::new(&[("m.py", "a = 1\n"), ("blob.bin", "a\0b")]);
    let msg = b.err(
        "Edit",
        json!({"file_path": "m.py", "old_string": "a = 2", "new_string": "a = 3"}),
    );
    assert!(
        msg.starts_with("String to replace not found in /repo/m.py.") && msg.contains("whitespace"),
        "{msg}"
    );
    let msg = b.err(
        "Edit",
        json!({"file_path": "m.py", "old_string": "     1\ta = 1", "new_string": "a = 3"}),
    );
    assert!(msg.contains("line-number prefix"), "{msg}");
    let msg = b.err(
        "Edit",
        json!({"file_path": "m.py", "old_string": "a", "new_string": "a"}),
    );
    assert_eq!(
        msg,
        "No changes to make: old_string and new_string are exactly the same."
    );
    let msg = b.err(
        "Edit",
        json!({"file_path": "/repo/nope.py", "old_string": "a", "new_string": "b"}),
    );
    assert_eq!(msg, "File does not exist: /repo/nope.py");
    let msg = b.err(
        "Edit",
        json!({"file_path": "/repo", "old_string": "a", "new_string": "b"}),
    );
    assert!(msg.contains("is a directory"), "{msg}");
    let msg = b.err(
        "Edit",
        json!({"file_path": "blob.bin", "old_string": "a", "new_string": "b"}),
    );
    assert!(msg.contains("binary file"), "{msg}");
    assert_eq!(b.text("m.py"), "a = 1\n");
}

#[test]
fn edit_with_empty_old_string_creates_only_new_or_empty_files() {
    let mut b = Bench::new(&[("empty.py", ""), ("full.py", "x")]);
    let out = b.ok(
        "Edit",
        json!({"file_path": "/repo/pkg/new.py", "old_string": "", "new_string": "n = 1\n"}),
    );
    assert_eq!(out, "File created successfully at: /repo/pkg/new.py");
    assert_eq!(b.text("pkg/new.py"), "n = 1\n");
    let out = b.ok(
        "Edit",
        json!({"file_path": "empty.py", "old_string": "", "new_string": "e"}),
    );
    assert_eq!(out, "The file /repo/empty.py has been updated.");
    assert_eq!(b.text("empty.py"), "e");
    let msg = b.err(
        "Edit",
        json!({"file_path": "full.py", "old_string": "", "new_string": "y"}),
    );
    assert!(
        msg.contains("old_string is empty but /repo/full.py already has content"),
        "{msg}"
    );
    assert_eq!(b.text("full.py"), "x");
}

#[test]
fn edit_matches_lines_copied_from_crlf_files() {
    let mut b = Bench::new(&[("w.txt", "one\r\ntwo\r\nthree\r\n")]);
    let out = b.ok(
        "Edit",
        json!({"file_path": "w.txt", "old_string": "one\ntwo", "new_string": "1\n2"}),
    );
    assert!(out.ends_with("1 replacement made."), "{out}");
    assert_eq!(b.text("w.txt"), "1\r\n2\r\nthree\r\n");
}

// ---- Glob -----------------------------------------------------------------------------------

#[test]
fn glob_matches_below_the_root_or_a_path() {
    let mut b = Bench::new(&[
        ("b.py", ""),
        ("src/a.py", ""),
        ("src/pkg/c.py", ""),
        ("src/pkg/d.rs", ""),
        (".git/x.py", ""),
        ("docs/e.md", ""),
    ]);
    assert_eq!(
        b.ok("Glob", json!({"pattern": "**/*.py"})),
        "/repo/b.py\n/repo/src/a.py\n/repo/src/pkg/c.py"
    );
    // `*` stays within one path component.
    assert_eq!(b.ok("Glob", json!({"pattern": "*.py"})), "/repo/b.py");
    assert_eq!(
        b.ok("Glob", json!({"pattern": "*.py", "path": "/repo/src"})),
        "/repo/src/a.py"
    );
    assert_eq!(
        b.ok("Glob", json!({"pattern": "**/*.{rs,md}", "path": "src"})),
        "/repo/src/pkg/d.rs"
    );
    assert_eq!(
        b.ok("Glob", json!({"pattern": "src/**/[cd].*"})),
        "/repo/src/pkg/c.py\n/repo/src/pkg/d.rs"
    );
    assert_eq!(
        b.ok("Glob", json!({"pattern": "/repo/src/*/*.py"})),
        "/repo/src/pkg/c.py"
    );
    assert_eq!(
        b.ok("Glob", json!({"pattern": "./docs/*"})),
        "/repo/docs/e.md"
    );
    assert_eq!(
        b.ok("Glob", json!({"pattern": "**/*.java"})),
        "No files found"
    );
}

#[test]
fn glob_caps_results_at_1000() {
    let names: Vec<String> = (0..1005).map(|i| format!("f/{i:04}.txt")).collect();
    let files: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "")).collect();
    let out = Bench::new(&files).ok("Glob", json!({"pattern": "**/*.txt"}));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1001);
    assert_eq!(
        (lines[0], lines[999]),
        ("/repo/f/0000.txt", "/repo/f/0999.txt")
    );
    assert_eq!(
        lines[1000],
        "(Results are truncated: showing the first 1000 of 1005 files. Use a more specific path or pattern.)"
    );
}

#[test]
fn glob_errors_on_bad_patterns_and_paths() {
    let mut b = Bench::new(&[("a.py", "")]);
    let msg = b.err("Glob", json!({"pattern": "[a"}));
    assert!(msg.starts_with("Invalid glob pattern"), "{msg}");
    assert!(
        b.err("Glob", json!({"pattern": ""}))
            .contains("pattern is empty")
    );
    assert_eq!(
        b.err("Glob", json!({"pattern": "*", "path": "/repo/nope"})),
        "Directory does not exist: /repo/nope"
    );
    let msg = b.err("Glob", json!({"pattern": "*", "path": "/repo/a.py"}));
    assert!(msg.contains("is a file, not a directory"), "{msg}");
}

// ---- Bash through a recording shell -----------------------------------------------------------

#[test]
fn bash_timeout_defaults_to_two_minutes_and_is_held_to_ten() {
    let (tb, asked) = fake_shell("hi\n", Some(0), false);
    let mut b = Bench::with(tb, &[]);
    assert_eq!(
        b.ok(
            "Bash",
            json!({"command": "echo hi", "description": "Say hi"})
        ),
        "hi"
    );
    b.ok("Bash", json!({"command": "a", "timeout": 5000}));
    b.ok("Bash", json!({"command": "b", "timeout": 9_000_000}));
    let timeouts: Vec<u128> = asked.borrow().iter().map(|(_, t)| t.as_millis()).collect();
    assert_eq!(timeouts, [120_000, 5_000, 600_000]);
    assert_eq!(asked.borrow()[0].0, "echo hi");
    assert!(
        b.err("Bash", json!({"command": "a", "timeout": 0}))
            .contains("at least 1 millisecond")
    );
    assert!(
        b.err("Bash", json!({"command": "  "}))
            .contains("command is empty")
    );
    assert_eq!(asked.borrow().len(), 3);
}

#[test]
fn bash_reports_exit_codes_timeouts_and_empty_output() {
    let bench = |output: &str, exit_code, timed_out| {
        Bench::with(fake_shell(output, exit_code, timed_out).0, &[])
    };
    let mut b = bench("", Some(0), false);
    assert_eq!(
        b.ok("Bash", json!({"command": "true"})),
        "(Command completed with no output)"
    );
    let mut b = bench("boom\n", Some(2), false);
    assert_eq!(b.err("Bash", json!({"command": "x"})), "boom\nExit code: 2");
    let mut b = bench("", Some(1), false);
    assert_eq!(b.err("Bash", json!({"command": "false"})), "Exit code: 1");
    let mut b = bench("partial\n", None, true);
    assert_eq!(
        b.err("Bash", json!({"command": "sleep 9", "timeout": 1500})),
        "partial\nCommand timed out after 1500 ms and was stopped, with every process it started."
    );
    let mut b = bench("failed to start a shell: x", None, false);
    assert!(
        b.err("Bash", json!({"command": "ls"}))
            .ends_with("did not finish normally (no exit code).")
    );
}

#[test]
fn bash_cuts_output_over_30000_characters_in_the_middle() {
    let long = format!(
        "{}{}{}",
        "a".repeat(20_000),
        "b".repeat(10_000),
        "c".repeat(20_000)
    );
    let out =
        Bench::with(fake_shell(&long, Some(0), false).0, &[]).ok("Bash", json!({"command": "x"}));
    let expected = format!(
        "{}\n\n[... 20000 characters cut ...]\n\n{}",
        "a".repeat(15_000),
        "c".repeat(15_000)
    );
    assert_eq!(out, expected);
}

// ---- Bash through the native shell ------------------------------------------------------------

#[cfg(unix)]
mod native {
    use std::path::Path;
    use std::time::Instant;

    use lilypad_agent::NativeShell;

    use super::*;

    fn shell_in(dir: &Path) -> Toolbox {
        Toolbox::new(Box::new(NativeShell::new(dir.to_path_buf())))
    }

    fn run(dir: &Path, command: &str, timeout_ms: u64) -> Observation {
        Bench::with(shell_in(dir), &[])
            .call("Bash", json!({"command": command, "timeout": timeout_ms}))
    }

    /// Gone, or a zombie waiting for a reaper that is not ours. SIGKILL takes effect
    /// asynchronously, so a dying process gets a moment to finish exiting.
    #[cfg(target_os = "linux")]
    fn dies(pid: &str) -> bool {
        let dead = || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with(['Z', 'X'])),
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        while !dead() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    #[test]
    fn runs_in_the_folder_with_stderr_merged_in_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("here.txt"), "x").unwrap();
        let obs = run(
            dir.path(),
            "ls; echo out; echo err >&2; echo out2; cat",
            10_000,
        );
        assert_eq!(obs, Observation::ok("here.txt\nout\nerr\nout2"));
    }

    #[test]
    fn reports_exit_codes_and_signals() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            run(dir.path(), "echo no >&2; exit 3", 10_000),
            Observation::error("no\nExit code: 3")
        );
        assert_eq!(
            run(dir.path(), "kill -9 $$", 10_000),
            Observation::error("Exit code: 137")
        );
        let obs = run(dir.path(), "no-such-command-xyz", 10_000);
        assert!(
            obs.is_error && obs.content.ends_with("Exit code: 127"),
            "{obs:?}"
        );
    }

    #[test]
    fn timeout_kills_the_whole_process_tree() {
        let dir = tempfile::tempdir().unwrap();
        let command = "sleep 30 & echo $! >> pids; \
                       (sleep 2; echo survived > marker) & echo $! >> pids; \
                       echo started; sleep 30; wait";
        let start = Instant::now();
        let obs = run(dir.path(), command, 500);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(
            obs,
            Observation::error(
                "started\nCommand timed out after 500 ms and was stopped, with every process it started."
            )
        );
        let pids = std::fs::read_to_string(dir.path().join("pids")).unwrap();
        assert_eq!(pids.lines().count(), 2);
        #[cfg(target_os = "linux")]
        for pid in pids.lines() {
            assert!(dies(pid), "process {pid} survived");
        }
        // Past the moment the job would have written its marker.
        std::thread::sleep(Duration::from_millis(2500).saturating_sub(start.elapsed()));
        assert!(
            !dir.path().join("marker").exists(),
            "a background job outlived the timeout"
        );
    }

    #[test]
    fn background_jobs_end_with_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let start = Instant::now();
        let obs = run(
            dir.path(),
            "(sleep 2; echo survived > marker) & echo started",
            60_000,
        );
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        // The job is named, so the model knows it is gone (the subshell, and its sleep once
        // it has started: how many depends on timing).
        assert!(!obs.is_error, "{obs:?}");
        assert!(obs.content.starts_with("started\n\n["), "{obs:?}");
        assert!(
            obs.content.ends_with(
                "the command left running in the background were stopped when it ended]"
            ) || obs.content.ends_with(
                "1 process the command left running in the background was stopped when it ended]"
            ),
            "{obs:?}"
        );
        // Past the moment the job would have written its marker.
        std::thread::sleep(Duration::from_millis(2500).saturating_sub(start.elapsed()));
        assert!(
            !dir.path().join("marker").exists(),
            "a background job outlived its command"
        );
    }

    #[test]
    fn huge_output_is_capped_while_reading_and_cut_for_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let mut shell = NativeShell::new(dir.path().to_path_buf()).with_output_limit(1000);
        let out = shell.run(
            &mut VirtualRepo::new("/repo"),
            "head -c 50000000 /dev/zero | tr '\\0' a; echo; echo end",
            Duration::from_secs(60),
        );
        assert_eq!(out.exit_code, Some(0));
        assert!(out.output.len() < 1100, "{}", out.output.len());
        assert!(
            out.output.starts_with(&"a".repeat(500)) && out.output.ends_with("a\nend\n"),
            "{}",
            out.output
        );
        assert!(
            out.output.contains("[... 49999005 characters cut ...]"),
            "{}",
            out.output
        );

        // Through the tool, the shell's cut and the tool's add up.
        let obs = run(dir.path(), "head -c 3000000 /dev/zero | tr '\\0' a", 60_000);
        assert!(!obs.is_error);
        assert_eq!(
            obs.content,
            format!(
                "{}\n\n[... 2970000 characters cut ...]\n\n{}",
                "a".repeat(15_000),
                "a".repeat(15_000)
            )
        );
    }

    #[test]
    fn a_missing_folder_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let obs = run(&gone, "true", 1_000);
        assert!(
            obs.is_error && obs.content.contains("does not exist"),
            "{obs:?}"
        );
    }
}

#[test]
fn bash_starts_every_command_at_the_root_in_the_browser_shell_too() {
    let mut repo = VirtualRepo::new("/repo");
    repo.write(&RepoPath::new("src/a.py").unwrap(), b"x = 1\n")
        .unwrap();
    let mut toolbox = Toolbox::new(Box::new(lilypad_agent::VirtualShell::new()));
    let mut bash = |command: &str| {
        toolbox
            .execute(
                &mut repo,
                &ToolCall {
                    name: "Bash".into(),
                    arguments: json!({"command": command}),
                },
            )
            .content
    };
    assert_eq!(bash("cd src && pwd && ls").trim(), "/repo/src\na.py");
    assert_eq!(
        bash("pwd").trim(),
        "/repo",
        "cd does not carry over, as the tool says"
    );
}
