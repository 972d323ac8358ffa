//! The browser workspace natively: imports, the shared repository, git in the shell, a Python
//! runner's file changes, the busy rule during a run, and agent settings from partial JSON.

use lilypad_agent::shell::LocalFuture;
use lilypad_agent::{
    ProgramIo, PythonRunner, RepoPath, Repository, ScriptedModel, ToolCall, Toolbox, run_agent,
};
use lilypad_agent_wasm::{Workspace, WorkspaceError, agent_config};
use serde_json::json;

fn roman() -> Workspace {
    let files = ["TASK.md", "roman.py", "test_roman.py"]
        .iter()
        .map(|f| {
            let data = std::fs::read(format!(
                "{}/../../examples/roman/{f}",
                std::env::var("CARGO_MANIFEST_DIR")
                    .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into())
            ))
            .unwrap();
            (format!("roman/{f}"), data)
        })
        .collect();
    Workspace::from_files(files).unwrap()
}

fn bash(ws: &mut Workspace, command: &str) -> String {
    let call = ToolCall {
        name: "Bash".into(),
        arguments: json!({ "command": command }),
    };
    pollster::block_on(ws.tool(&call)).unwrap().content
}

/// Stands in for Pyodide: writes a file and deletes another, as a Python program might.
struct WritingPython;

impl PythonRunner for WritingPython {
    fn run<'a>(
        &'a mut self,
        repo: &'a mut dyn Repository,
        _cwd: &'a RepoPath,
        argv: &'a [String],
        io: &'a mut ProgramIo,
    ) -> LocalFuture<'a, i32> {
        io.write_stdout(format!("{argv:?}\n").as_bytes());
        repo.write(&RepoPath::new("out.txt").unwrap(), b"written\n")
            .unwrap();
        repo.remove(&RepoPath::new("TASK.md").unwrap()).unwrap();
        Box::pin(std::future::ready(0))
    }
}

#[test]
fn imported_files_diff_and_git_in_the_shell() {
    let mut ws = roman();
    assert_eq!(ws.files(), ["TASK.md", "roman.py", "test_roman.py"]);
    assert_eq!(ws.diff(), "");
    assert_eq!(
        bash(&mut ws, "git status --short"),
        "(Command completed with no output)"
    );
    ws.write("/repo/roman.py", b"X = 1\n").unwrap();
    assert_eq!(ws.changes(), [("roman.py".to_string(), "modified")]);
    assert_eq!(bash(&mut ws, "git status --short"), " M roman.py");
    let diff = bash(&mut ws, "git diff roman.py");
    assert!(
        diff.starts_with("diff --git a/roman.py b/roman.py\n"),
        "{diff}"
    );
    assert!(diff.ends_with("\n+X = 1"), "{diff}");
    assert_eq!(
        bash(&mut ws, "git diff test_roman.py"),
        "(Command completed with no output)"
    );
    assert_eq!(ws.diff().trim_end(), diff);
    ws.undo().unwrap();
    assert_eq!(ws.diff(), "");
    // Paths stay confined.
    assert!(ws.read("../etc/passwd").is_err());
    assert!(ws.write("/etc/passwd", b"x").is_err());
    // The export holds the current files.
    assert!(ws.export_zip().unwrap().starts_with(b"PK"));
}

#[test]
fn python_runs_through_the_runner_and_its_writes_land_in_the_project() {
    let mut ws = roman();
    assert!(bash(&mut ws, "python3 -c 1").contains("python3: command not found"));
    ws.set_python(Some(Box::new(WritingPython))).unwrap();
    assert_eq!(bash(&mut ws, "pytest -q"), "[\"pytest\", \"-q\"]");
    assert_eq!(ws.read("out.txt").unwrap(), b"written\n");
    assert_eq!(
        ws.changes(),
        [
            ("TASK.md".to_string(), "deleted"),
            ("out.txt".to_string(), "added")
        ]
    );
}

#[test]
fn a_run_holds_the_tools_and_the_page_still_reads_files() {
    let mut ws = roman();
    let mut toolbox: Toolbox = ws.begin_run().unwrap();
    assert!(matches!(ws.begin_run(), Err(WorkspaceError::Busy)));
    let call = ToolCall {
        name: "Read".into(),
        arguments: json!({ "file_path": "roman.py" }),
    };
    assert!(matches!(
        pollster::block_on(ws.tool(&call)),
        Err(WorkspaceError::Busy)
    ));
    assert!(matches!(ws.set_python(None), Err(WorkspaceError::Busy)));
    let mut repo = ws.repo();
    let replies = [
        r#"<tool_call>{"name": "Write", "arguments": {"file_path": "/repo/new.py", "content": "A = 1\n"}}</tool_call>"#,
        "Done.",
    ];
    let mut model = ScriptedModel::new("scripted", &replies);
    let mut seen = Vec::new();
    let trajectory = pollster::block_on(run_agent(
        &mut model,
        &mut repo,
        &mut toolbox,
        "add new.py",
        &agent_config(&json!({ "max_steps": 4 })).unwrap(),
        &mut |_: lilypad_agent::AgentEvent<'_>| {
            // The page reads the project between events while the agent holds the tools.
            seen.push(ws.files().len());
            true
        },
    ))
    .unwrap();
    ws.end_run(toolbox);
    assert_eq!(trajectory.steps.len(), 2);
    assert!(seen.contains(&4), "{seen:?}");
    assert_eq!(ws.read("new.py").unwrap(), b"A = 1\n");
    assert_eq!(trajectory.patch, ws.diff());
    assert!(pollster::block_on(ws.tool(&call)).is_ok());
}

#[test]
fn agent_settings_from_partial_json() {
    let c = agent_config(&json!({ "max_steps": 3, "sampling": { "temperature": 0.0 } })).unwrap();
    assert_eq!(c.max_steps, 3);
    assert_eq!(c.sampling.temperature, 0.0);
    assert_eq!(
        c.sampling.top_k, 20,
        "other sampling fields keep FrogNano's defaults"
    );
    assert!(c.enable_thinking);
    assert_eq!(
        agent_config(&serde_json::Value::Null).unwrap(),
        lilypad_agent::AgentConfig::default()
    );
    assert!(
        agent_config(&json!({ "max_stpes": 3 }))
            .unwrap_err()
            .contains("max_stpes")
    );
    assert!(agent_config(&json!({ "max_steps": "many" })).is_err());
    assert!(agent_config(&json!([1])).is_err());
}
