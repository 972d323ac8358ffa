//! Environments: each manifest project fetched from the package index (checked against its
//! pinned sha256), unpacked, given a venv with its dependencies and pytest, and its test suite
//! run twice in the sandbox for a per-test baseline. A project whose suite does not mostly pass
//! offline, is flaky throughout or is too slow is kept but marked unusable, with the reason.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::manifest::Project;
use crate::pytest::{Outcome, PLUGIN, PLUGIN_MODULE, TestCommand, TestReport};
use crate::workspace::Workspace;

/// Share of a suite's tests that must pass offline for the project to be usable; the tests
/// that fail are left out of every task (neither FAIL_TO_PASS nor PASS_TO_PASS).
pub const MIN_PASS_RATE: f64 = 0.95;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Environment {
    pub project: Project,
    pub usable: bool,
    /// Why the environment is unusable (empty when usable).
    pub reason: String,
    /// Baseline outcome of each test; tests whose outcome differed between the two baseline
    /// runs are `flaky` and left out of tasks.
    pub baseline: BTreeMap<String, Outcome>,
    pub flaky: Vec<String>,
    /// Wall time of one baseline run of the whole suite, in seconds.
    pub suite_s: f64,
    /// Python source files bugs can be planted in, relative to the project's root.
    pub source_files: Vec<String>,
}

impl Environment {
    pub fn passing(&self) -> impl Iterator<Item = &str> {
        self.baseline
            .iter()
            .filter(|(_, o)| **o == Outcome::Passed)
            .map(|(id, _)| id.as_str())
    }

    pub fn test_command(&self, ws: &Workspace, timeout: Duration) -> TestCommand {
        TestCommand {
            venv: ws.venv(&self.project),
            source: self.project.source.clone(),
            tests: self.project.tests.clone(),
            options: self.project.pytest_args.clone(),
            timeout,
        }
    }
}

#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// The package index's simple API (PEP 691 JSON).
    pub index: String,
    pub python: String,
    pub pytest: String,
    /// A suite slower than this (one run) makes the project unusable.
    pub max_suite: Duration,
    /// Rebuild the venv and the baseline even when present.
    pub force: bool,
}

/// Builds (or reuses) the environment of `project`, reporting each stage through `stage`.
pub fn build(
    ws: &Workspace,
    project: &Project,
    opts: &BuildOptions,
    stage: &mut dyn FnMut(&str),
) -> Result<Environment> {
    if !opts.force
        && let Ok(env) = ws.load_env(project)
        && env.project == *project
    {
        return Ok(env);
    }
    stage("fetching the sdist");
    let sdist = fetch_sdist(ws, project, &opts.index)?;
    stage("unpacking");
    let root = ws.project_src(project);
    unpack_sdist(&sdist, &root)?;
    let source_files = source_files(&root, project)?;
    stage("installing dependencies");
    let mut env = Environment {
        project: project.clone(),
        usable: false,
        reason: String::new(),
        baseline: BTreeMap::new(),
        flaky: Vec::new(),
        suite_s: 0.0,
        source_files,
    };
    if let Err(e) = make_venv(ws, project, opts) {
        env.reason = format!("{e:#}");
        ws.save_env(&env)?;
        return Ok(env);
    }
    if env.source_files.is_empty() {
        env.reason = "no Python source in its modules".into();
        ws.save_env(&env)?;
        return Ok(env);
    }
    let sandbox = ws.sandbox(project)?;
    let timeout = opts.max_suite + Duration::from_secs(30);
    let cmd = env.test_command(ws, timeout);
    let mut runs = Vec::new();
    for i in 0..2 {
        stage(&format!("baseline run {} of 2", i + 1));
        let work = ws.scratch_copy(project, "baseline")?;
        let report = cmd.run(&work, &sandbox, None);
        let _ = std::fs::remove_dir_all(&work);
        let report = report?;
        if let Some(reason) = unusable_run(&report, opts.max_suite) {
            env.reason = reason;
            ws.save_env(&env)?;
            return Ok(env);
        }
        runs.push(report);
    }
    let (a, b) = (&runs[0], &runs[1]);
    for (id, r) in &a.tests {
        match b.tests.get(id) {
            Some(r2) if r2.outcome == r.outcome => {
                env.baseline.insert(id.clone(), r.outcome);
            }
            _ => env.flaky.push(id.clone()),
        }
    }
    env.suite_s = a.wall_s.max(b.wall_s);
    let passed = env.passing().count();
    let failing: Vec<&str> = env
        .baseline
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Failed | Outcome::Error))
        .map(|(id, _)| id.as_str())
        .collect();
    let ran = passed + failing.len() + env.flaky.len();
    if passed == 0 {
        env.reason = "no test passes".into();
    } else if (passed as f64) < MIN_PASS_RATE * ran as f64 {
        env.reason = format!(
            "{} of {ran} tests fail or are flaky offline in the sandbox (first: {})",
            ran - passed,
            failing
                .first()
                .or(env.flaky.first().map(|s| s.as_str()).as_ref())
                .unwrap_or(&"?")
        );
    } else {
        env.usable = true;
    }
    ws.save_env(&env)?;
    Ok(env)
}

/// Why a baseline run makes the project unusable, if it does.
fn unusable_run(report: &TestReport, max_suite: Duration) -> Option<String> {
    let tail = report.output_tail.lines().rev().take(6).collect::<Vec<_>>();
    let tail: String = tail.into_iter().rev().collect::<Vec<_>>().join(" | ");
    if report.timed_out || report.wall_s > max_suite.as_secs_f64() {
        return Some(format!(
            "the suite takes longer than {} s",
            max_suite.as_secs()
        ));
    }
    match report.exit_status {
        Some(0 | 1) => None,
        Some(5) => Some("pytest collected no tests".into()),
        Some(s) => Some(format!("pytest exited with status {s}: {tail}")),
        None => Some(format!("pytest wrote no report: {tail}")),
    }
}

/// The sdist in the cache, fetched from the index when missing; its sha256 is checked
/// against the manifest either way.
pub fn fetch_sdist(ws: &Workspace, project: &Project, index: &str) -> Result<PathBuf> {
    let dir = ws.root.join("sdists");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{}.sdist", project.key()));
    if path.is_file() && sha256_file(&path)? == project.sha256 {
        return Ok(path);
    }
    let url = find_sdist_url(project, index)?;
    let mut body = Vec::new();
    http_agent()
        .get(&url)
        .call()
        .with_context(|| format!("downloading {url}"))?
        .into_body()
        .into_reader()
        .take(512 << 20)
        .read_to_end(&mut body)
        .with_context(|| format!("downloading {url}"))?;
    let got = hex(&Sha256::digest(&body));
    if got != project.sha256 {
        bail!(
            "{url}: sha256 {got} does not match the manifest's {}",
            project.sha256
        );
    }
    let tmp = path.with_extension("part");
    std::fs::write(&tmp, &body)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// The sdist's download URL, found on the index by the pinned sha256 (PEP 691's JSON form of
/// the simple API, which pip itself reads).
fn find_sdist_url(project: &Project, index: &str) -> Result<String> {
    #[derive(Deserialize)]
    struct Page {
        files: Vec<File>,
    }
    #[derive(Deserialize)]
    struct File {
        filename: String,
        url: String,
        hashes: BTreeMap<String, String>,
    }
    let name: String = project.name.to_ascii_lowercase().replace(['_', '.'], "-");
    let page_url = format!("{}/{name}/", index.trim_end_matches('/'));
    let text = http_agent()
        .get(&page_url)
        .header("Accept", "application/vnd.pypi.simple.v1+json")
        .call()
        .with_context(|| format!("asking the package index for {}", project.name))?
        .into_body()
        .read_to_string()
        .with_context(|| format!("reading {page_url}"))?;
    let page: Page = serde_json::from_str(&text).with_context(|| format!("parsing {page_url}"))?;
    let file = page
        .files
        .into_iter()
        .find(|f| f.hashes.get("sha256") == Some(&project.sha256))
        .with_context(|| {
            format!(
                "{page_url} lists no file with sha256 {} ({} {})",
                project.sha256, project.name, project.version
            )
        })?;
    if !(file.filename.ends_with(".tar.gz") || file.filename.ends_with(".tgz")) {
        bail!("{}: only .tar.gz sdists are supported", file.filename);
    }
    // The index may give a relative URL.
    Ok(if file.url.starts_with("http") {
        file.url
    } else {
        format!("{}/{}", page_url.trim_end_matches('/'), file.url)
    })
}

/// An HTTP client trusting the system's certificate store (`SSL_CERT_FILE`, else Debian's
/// bundle), as pip does, so an index behind a TLS-inspecting proxy works; Mozilla's roots
/// where the system has none.
fn http_agent() -> ureq::Agent {
    use ureq::tls::{PemItem, RootCerts, TlsConfig};
    let bundle = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/ssl/certs/ca-certificates.crt"));
    let certs: Vec<_> = std::fs::read(&bundle)
        .map(|pem| {
            ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let roots = if certs.is_empty() {
        RootCerts::WebPki
    } else {
        RootCerts::new_with_certs(&certs)
    };
    ureq::Agent::config_builder()
        .tls_config(TlsConfig::builder().root_certs(roots).build())
        .timeout_global(Some(Duration::from_secs(300)))
        .build()
        .into()
}

/// Unpacks a .tar.gz sdist into `dest` (replacing it), dropping its top folder. Entries that
/// would land outside `dest`, links and devices are skipped.
pub fn unpack_sdist(sdist: &Path, dest: &Path) -> Result<()> {
    let tmp = dest.with_extension("unpacking");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let file = std::fs::File::open(sdist)?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    for entry in archive
        .entries()
        .with_context(|| format!("reading {}", sdist.display()))?
    {
        let mut entry = entry.with_context(|| format!("reading {}", sdist.display()))?;
        let path = entry.path()?.into_owned();
        let rel: PathBuf = path.components().skip(1).collect();
        if rel.as_os_str().is_empty()
            || !rel.components().all(|c| matches!(c, Component::Normal(_)))
        {
            continue;
        }
        let target = tmp.join(&rel);
        match entry.header().entry_type() {
            tar::EntryType::Directory => std::fs::create_dir_all(&target)?,
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                let mut out = std::fs::File::create(&target)?;
                std::io::copy(&mut entry, &mut out)?;
            }
            _ => {}
        }
    }
    let _ = std::fs::remove_dir_all(dest);
    std::fs::rename(&tmp, dest)?;
    Ok(())
}

/// The project's Python sources under its modules, without tests, sorted.
fn source_files(root: &Path, project: &Project) -> Result<Vec<String>> {
    let mut files = Vec::new();
    for m in &project.modules {
        let start = root.join(&project.source).join(m);
        let start = if start.exists() {
            start
        } else {
            start.with_extension("py")
        };
        walk(&start, &mut |p| {
            if p.extension().is_some_and(|e| e == "py")
                && let Ok(rel) = p.strip_prefix(root)
            {
                let rel = rel.to_string_lossy().replace('\\', "/");
                if !is_test_path(&rel) {
                    files.push(rel);
                }
            }
        })?;
    }
    files.sort();
    files.dedup();
    Ok(files)
}

pub fn is_test_path(rel: &str) -> bool {
    rel.split('/').any(|c| {
        c == "tests"
            || c == "test"
            || c == "testing"
            || c == "conftest.py"
            || c.starts_with("test_")
            || c.ends_with("_test.py")
            || c == "tests.py"
            || c == "benchmarks"
    })
}

fn walk(path: &Path, f: &mut dyn FnMut(&Path)) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(_) => return Ok(()),
    };
    if meta.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)?.filter_map(|e| e.ok()).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            walk(&e.path(), f)?;
        }
    } else if meta.is_file() {
        f(path);
    }
    Ok(())
}

/// A venv with the released package (its dependencies and its installed metadata, which
/// some packages read for their version), pytest, the test-only deps and the report plugin.
/// Skipped when the same requirements were installed before.
fn make_venv(ws: &Workspace, project: &Project, opts: &BuildOptions) -> Result<()> {
    let venv = ws.venv(project);
    let mut reqs = vec![
        format!("{}=={}", project.name, project.version),
        opts.pytest.clone(),
    ];
    reqs.extend(project.deps.iter().cloned());
    let stamp = venv.join(".lilypad-requirements");
    if !opts.force && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&reqs.join("\n")) {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(&venv);
    run(
        Command::new(&opts.python).args(["-m", "venv"]).arg(&venv),
        "creating a venv",
    )?;
    let pip = venv.join("bin/pip");
    run(
        Command::new(&pip)
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-input",
            ])
            .args(&reqs)
            .env("PIP_CACHE_DIR", ws.root.join("pip-cache")),
        "pip install",
    )?;
    let site = std::fs::read_dir(venv.join("lib"))?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.is_dir())
        .context("the venv has no site-packages")?;
    std::fs::write(site.join(format!("{PLUGIN_MODULE}.py")), PLUGIN)?;
    std::fs::write(&stamp, reqs.join("\n"))?;
    Ok(())
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: starting {cmd:?}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last: Vec<&str> = err.lines().rev().take(4).collect();
        bail!(
            "{what} failed ({}): {}",
            out.status,
            last.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    Ok(())
}

pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One line per environment for `envs list`.
pub fn summary_row(env: &Environment) -> String {
    let passed = env.passing().count();
    format!(
        "{:<16} {:<10} {:<5} {:<8} {:>6}/{:<6} {:>7.1} {:>5}  {}",
        env.project.name,
        env.project.version,
        env.project.split,
        if env.usable { "usable" } else { "unusable" },
        passed,
        env.baseline.len() + env.flaky.len(),
        env.suite_s,
        env.source_files.len(),
        env.reason
    )
}

pub fn summary_header() -> String {
    format!(
        "{:<16} {:<10} {:<5} {:<8} {:>13} {:>7} {:>5}  reason",
        "project", "version", "split", "status", "passed/tests", "suite s", "files"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_paths_are_recognised() {
        assert!(is_test_path("toolz/tests/test_x.py"));
        assert!(is_test_path("src/pkg/conftest.py"));
        assert!(is_test_path("test_six.py"));
        assert!(!is_test_path("src/attr/_make.py"));
        assert!(!is_test_path("pyparsing/testing.py"));
    }
}
