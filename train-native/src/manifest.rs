//! The pinned list of Python projects environments are built from (`projects.toml`).

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// The manifest that ships with train-native.
pub const BUILTIN: &str = include_str!("../projects.toml");

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The pytest requirement installed in every environment.
    pub pytest: String,
    #[serde(rename = "project")]
    pub projects: Vec<Project>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Train,
    Eval,
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Split::Train => "train",
            Split::Eval => "eval",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Project {
    /// The name on the package index.
    pub name: String,
    pub version: String,
    /// sha256 of the sdist.
    pub sha256: String,
    pub split: Split,
    /// The folder inside the sdist put first on PYTHONPATH ("." or "src").
    pub source: String,
    /// Packages or modules, relative to `source`, that bugs are planted in.
    pub modules: Vec<String>,
    /// pytest's arguments: the test folders or files, relative to the sdist's root.
    pub tests: Vec<String>,
    /// Test-only requirements installed beside the released package.
    #[serde(default)]
    pub deps: Vec<String>,
    /// Extra pytest options (`--ignore=…`, `-o ini_option=…`), given before the test paths.
    #[serde(default)]
    pub pytest_args: Vec<String>,
}

impl Project {
    /// `name-version`: the environment's folder name and the prefix of its task ids.
    pub fn key(&self) -> String {
        format!("{}-{}", self.name, self.version)
    }
}

impl Manifest {
    pub fn builtin() -> Self {
        Self::parse(BUILTIN).expect("the built-in projects.toml is valid")
    }

    pub fn load(path: Option<&Path>) -> Result<Self> {
        match path {
            None => Ok(Self::builtin()),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading {}", p.display()))?;
                Self::parse(&text).with_context(|| format!("in {}", p.display()))
            }
        }
    }

    pub fn parse(text: &str) -> Result<Self> {
        let manifest: Manifest = toml::from_str(text)?;
        let mut seen = std::collections::HashSet::new();
        for p in &manifest.projects {
            if !seen.insert(p.name.as_str()) {
                bail!("project {} is listed twice", p.name);
            }
            if p.sha256.len() != 64 || !p.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("project {}: sha256 is not 64 hex digits", p.name);
            }
            for path in p.modules.iter().chain(&p.tests).chain([&p.source]) {
                if Path::new(path).is_absolute() || path.split('/').any(|c| c == "..") {
                    bail!("project {}: {path} leaves the project's folder", p.name);
                }
            }
            if p.modules.is_empty() || p.tests.is_empty() {
                bail!("project {}: needs modules and tests", p.name);
            }
        }
        Ok(manifest)
    }

    /// The projects named in `only` (all when empty), in manifest order.
    pub fn select(&self, only: &[String]) -> Result<Vec<&Project>> {
        if let Some(unknown) = only
            .iter()
            .find(|n| !self.projects.iter().any(|p| &p.name == *n))
        {
            bail!("no project named {unknown} in the manifest");
        }
        Ok(self
            .projects
            .iter()
            .filter(|p| only.is_empty() || only.contains(&p.name))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_manifest_has_disjoint_splits_and_enough_projects() {
        let m = Manifest::builtin();
        assert!(m.projects.len() >= 30, "{} projects", m.projects.len());
        let eval = m.projects.iter().filter(|p| p.split == Split::Eval).count();
        assert!(
            eval >= 5 && eval < m.projects.len() / 2,
            "{eval} eval projects"
        );
    }

    #[test]
    fn rejects_paths_out_of_the_project_and_bad_hashes() {
        let base = |extra: &str| {
            format!(
                "pytest = \"pytest\"\n[[project]]\nname = \"a\"\nversion = \"1\"\nsha256 = \"{}\"\nsplit = \"train\"\nsource = \".\"\nmodules = [\"a\"]\ntests = [\"tests\"]\n{extra}",
                "0".repeat(64)
            )
        };
        assert!(Manifest::parse(&base("")).is_ok());
        let escaped = base("").replace("[\"tests\"]", "[\"../x\"]");
        assert!(
            Manifest::parse(&escaped)
                .unwrap_err()
                .to_string()
                .contains("leaves")
        );
        let short = base("").replace(&"0".repeat(64), "abc");
        assert!(
            Manifest::parse(&short)
                .unwrap_err()
                .to_string()
                .contains("sha256")
        );
        assert!(Manifest::parse(&base("colour = 1")).is_err());
    }
}
