//! Bugs written by a model ("FeatAdd"): the agent is asked to add a small feature to, or
//! change, one source file of a project, in the sandbox; whatever its edits of source files
//! break in the project's tests becomes a task, validated exactly like a mutation (at least
//! one baseline-passing test fails, every other one passes, nothing vanishes). Accidental
//! bugs from feature work are more varied than the procedural ones.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use lilypad_agent::{AgentConfig, DiskRepo, LanguageModel, Repository, Toolbox};
use sha2::{Digest, Sha256};

use crate::envs::Environment;
use crate::rollout::{agent_shell, graded, run_recorded};
use crate::synth::{Attempt, PlantedFile, Validator, Verdict};
use crate::task::{BugSite, Task};
use crate::workspace::Workspace;

/// What the model is asked, `{file}` naming the source file.
pub const REQUESTS: &[&str] = &[
    "Add a small feature to `{file}`: give one of its functions a new optional argument that \
     changes what it does when given, and use it where it makes sense. Keep the change small \
     and do not edit the tests.",
    "Change how one function in `{file}` handles unusual input (empty values, None, negative \
     numbers, very long values), in the way you think is most useful. Keep the change small \
     and do not edit the tests.",
    "Simplify one function in `{file}`: fewer branches or fewer lines, the same purpose. Do \
     not edit the tests.",
    "Make one function in `{file}` faster, for example by returning early, caching a value or \
     avoiding repeated work. Do not edit the tests.",
];

/// The prompt for attempt `n` on `file`.
pub fn request(n: usize, file: &str) -> String {
    REQUESTS[n % REQUESTS.len()].replace("{file}", file)
}

/// Runs the agent on a clean copy of `env`'s project with `request`, and validates its edits
/// of existing source files as a bug. The trajectory is written to `trajectory`.
#[allow(clippy::too_many_arguments)]
pub fn attempt<M: LanguageModel>(
    ws: &Workspace,
    env: &Environment,
    validator: &Validator,
    model: &mut M,
    config: &AgentConfig,
    file: &str,
    request: &str,
    trajectory: &Path,
    hint_level: u8,
) -> Result<(Attempt, Option<Task>)> {
    let work = ws.fixed_scratch_copy(&env.project, "featadd")?;
    let result = (|| {
        let mut repo = DiskRepo::open(&work)?;
        let clean = repo.snapshot()?;
        let mut toolbox = Toolbox::new(Box::new(agent_shell(ws, env, &work, &validator.sandbox)?));
        let start = Instant::now();
        run_recorded(
            model,
            &mut repo,
            &mut toolbox,
            request,
            config,
            trajectory,
            &mut |_| {},
        )?;
        let now = repo.snapshot()?;
        let files: Vec<PlantedFile> = clean
            .iter()
            .filter(|(p, data)| graded(p, &clean) && now.get(*p).is_some_and(|d| d != *data))
            .map(|(p, data)| PlantedFile {
                file: p.as_str().to_string(),
                original: String::from_utf8_lossy(data).into_owned(),
                buggy: String::from_utf8_lossy(&now[p]).into_owned(),
            })
            .collect();
        let mut h = Sha256::new();
        h.update(env.project.key());
        for f in &files {
            h.update(&f.file);
            h.update(&f.buggy);
        }
        let key: String = h.finalize()[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mut attempt = Attempt {
            key: key.clone(),
            project: env.project.name.clone(),
            operator: "featadd".into(),
            file: files.first().map_or(file.to_string(), |f| f.file.clone()),
            line: files
                .first()
                .map_or(0, |f| first_changed_line(&f.original, &f.buggy)),
            verdict: Verdict::NoChange,
            fail_to_pass: 0,
            seconds: start.elapsed().as_secs_f64(),
        };
        if files.is_empty() {
            return Ok((attempt, None));
        }
        let bugs = files
            .iter()
            .map(|f| BugSite {
                operator: "featadd".into(),
                file: f.file.clone(),
                line: first_changed_line(&f.original, &f.buggy),
                function: String::new(),
            })
            .collect();
        let id = format!("{}.featadd.{key}", env.project.key());
        let v = validator.validate(&files, bugs, id, hint_level)?;
        attempt.verdict = v.verdict;
        attempt.fail_to_pass = v.fail_to_pass;
        Ok((attempt, v.task))
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

/// The 1-based number of the first line where `a` and `b` differ.
fn first_changed_line(a: &str, b: &str) -> usize {
    a.lines()
        .zip(b.lines())
        .position(|(x, y)| x != y)
        .unwrap_or_else(|| a.lines().count().min(b.lines().count()))
        + 1
}

#[cfg(test)]
mod tests {
    //! The mechanism with scripted replies on the built inflection environment.

    use super::*;
    use crate::testing::{built_inflection, call};
    use lilypad_agent::ScriptedModel;

    #[test]
    fn model_written_changes_become_tasks_when_tests_catch_them() {
        let Some((ws, env)) = built_inflection() else {
            return;
        };
        let validator = Validator::new(&ws, &env).unwrap();
        let file = env.source_files[0].clone();
        let original = std::fs::read_to_string(ws.project_src(&env.project).join(&file)).unwrap();
        let out = tempfile::tempdir().unwrap();
        let config = AgentConfig {
            max_steps: 4,
            ..AgentConfig::default()
        };
        let ask = request(0, &file);
        assert!(ask.contains(&file));
        let run = |texts: &[String], n: &str| {
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            let mut model = ScriptedModel::new(n, &texts);
            let traj = out.path().join(format!("{n}.json"));
            let r = attempt(
                &ws, &env, &validator, &mut model, &config, &file, &ask, &traj, 1,
            );
            assert!(traj.exists());
            r.unwrap()
        };

        // A "feature" whose default changes what camelize returns breaks its tests: a task.
        let signature = "def camelize(string: str, uppercase_first_letter: bool = True) -> str:";
        assert!(original.contains(signature));
        let broken = original.replacen(
            signature,
            "def camelize(string: str, uppercase_first_letter: bool = True, lowercase: bool = True) -> str:\n    \
             if lowercase:\n        return string.lower()",
            1,
        );
        let (a, task) = run(
            &[
                call("Read", serde_json::json!({"file_path": file})),
                call(
                    "Write",
                    serde_json::json!({"file_path": file, "content": broken}),
                ),
                "Added a lowercase option.".into(),
            ],
            "broken",
        );
        assert_eq!(a.operator, "featadd");
        assert_eq!(a.verdict, Verdict::Valid, "{a:?}");
        let task = task.unwrap();
        assert!(!task.fail_to_pass.is_empty());
        assert_eq!(task.bugs[0].file, file);
        assert!(task.bug_patch.contains("lowercase"));
        assert!(task.problem_statement.contains("fail"));

        // A change the tests cannot see is no task.
        let harmless = format!("{original}\n# a comment\n");
        let (a, task) = run(
            &[
                call(
                    "Write",
                    serde_json::json!({"file_path": file, "content": harmless}),
                ),
                "Done.".into(),
            ],
            "harmless",
        );
        assert_eq!(a.verdict, Verdict::NoTestFails);
        assert!(task.is_none());

        // Edits of tests only are not a bug in the source.
        let tests_file = "test_inflection.py";
        let (a, _) = run(
            &[
                call(
                    "Write",
                    serde_json::json!({"file_path": tests_file, "content": "def test_x():\n    assert False\n"}),
                ),
                "Done.".into(),
            ],
            "tests-only",
        );
        assert_eq!(a.verdict, Verdict::NoChange);
    }
}
