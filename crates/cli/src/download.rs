//! Resolving `--model`: a local GGUF path, or an http(s) URL fetched once into a cache.
//!
//! Model files are gigabytes, so a download streams to disk, survives interruptions
//! (the next run resumes from the `.part` file with a Range request; bytes go to the file as
//! they arrive, so a killed process loses almost nothing), and is verified (the GGUF magic as
//! soon as it arrives, the size, the GGUF header's own tensor table, and sha256 when the caller
//! or the server knows it) before it is renamed into place. A finished file is reused without
//! touching the network.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lilypad_gguf::{GGUF_MAGIC, GgufFile, MmapSource};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Generous enough for slow links, short enough that a dead server is reported rather than awaited.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// A stalled transfer fails after this long without a single byte arriving.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
const MAX_REDIRECTS: usize = 10;
/// Bounds the restarts a misbehaving server can cause (changed file, ignored ranges, 416).
const MAX_RESTARTS: usize = 3;

/// A local path is returned as is (after checking it exists: clear error otherwise).
///
/// A URL is downloaded once into `cache_dir` as `<hash of the URL>-<last path segment>`,
/// with a progress bar on stderr (hidden when `quiet`), resumed from a `.part` file after an
/// interruption, checked against the announced size and against `expected_sha256` or a
/// sha256 ETag sent by the server (as Hugging Face does for LFS files), then renamed into
/// place. A later call finds the finished file and returns it without network access.
pub fn resolve_model(
    spec: &str,
    cache_dir: &Path,
    expected_sha256: Option<&str>,
    quiet: bool,
) -> Result<PathBuf> {
    resolve(spec, cache_dir, expected_sha256, quiet, READ_TIMEOUT)
}

fn resolve(
    spec: &str,
    cache_dir: &Path,
    expected_sha256: Option<&str>,
    quiet: bool,
    read_timeout: Duration,
) -> Result<PathBuf> {
    if !is_url(spec) {
        let path = PathBuf::from(spec);
        if !path.exists() {
            bail!("model file `{spec}` does not exist (expected a GGUF path or an http(s) URL)");
        }
        return Ok(path);
    }
    let expected = expected_sha256
        .map(|s| parse_sha256(s).with_context(|| format!("`{s}` is not a sha256 (64 hex digits)")))
        .transpose()?;
    let dest = cache_dir.join(cache_file_name(spec));
    if cached(&dest, expected.as_deref(), quiet)? {
        return Ok(dest);
    }
    download(spec, &dest, expected.as_deref(), quiet, read_timeout)
        .with_context(|| format!("could not download {spec}"))?;
    Ok(dest)
}

/// Default cache dir: `$LILYPAD_CACHE/models`, else `$XDG_CACHE_HOME/lilypad/models`,
/// else `~/.cache/lilypad/models`.
pub fn default_cache_dir() -> PathBuf {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = var("LILYPAD_CACHE") {
        return dir.join("models");
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return dir.join("lilypad").join("models");
    }
    let home = var("HOME")
        .or_else(|| var("USERPROFILE"))
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("lilypad").join("models")
}

/// What the `.meta` sidecar remembers: for a `.part`, which file it is a prefix of (so a
/// resume never splices two versions together); for a finished file, its verified hash (so a
/// later `expected_sha256` check need not re-read gigabytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Meta {
    url: String,
    size: Option<u64>,
    sha256: Option<String>,
    etag: Option<String>,
    complete: bool,
}

fn is_url(spec: &str) -> bool {
    let lower = spec.get(..8).unwrap_or(spec).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// `<12 hex of sha256(url)>-<last path segment>`: readable, yet two URLs ending in the same
/// file name (different repos or revisions) never share a cache entry.
fn cache_file_name(url: &str) -> String {
    let hash = hex(&Sha256::digest(url.as_bytes()));
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let after_scheme = path.split_once("://").map_or(path, |(_, rest)| rest);
    let segment = after_scheme
        .split_once('/')
        .map_or("", |(_, p)| p.rsplit('/').next().unwrap_or(""));
    let mut name: String = segment
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(180)
        .collect();
    if name.trim_matches('.').is_empty() {
        name = "download".into();
    }
    format!("{}-{name}", &hash[..12])
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lowercase 64-hex sha256, ignoring surrounding quotes and a weak-ETag `W/` prefix.
fn parse_sha256(s: &str) -> Option<String> {
    let s = s.trim();
    let s = s.strip_prefix("W/").unwrap_or(s).trim_matches('"');
    (s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())).then(|| s.to_ascii_lowercase())
}

fn read_meta(path: &Path) -> Option<Meta> {
    serde_json::from_slice(&fs::read(path).ok()?).ok()
}

fn write_meta(path: &Path, meta: &Meta) -> Result<()> {
    let json = serde_json::to_vec_pretty(meta)?;
    fs::write(path, json).with_context(|| format!("writing {}", path.display()))
}

fn hash_reader(mut reader: impl Read) -> io::Result<(Sha256, u64)> {
    let mut hasher = Sha256::new();
    let n = io::copy(&mut reader, &mut hasher)?;
    Ok((hasher, n))
}

/// Whether `dest` is already there (and, when a hash is expected, has it). A finished file
/// with the wrong hash is deleted so the caller downloads it again.
fn cached(dest: &Path, expected: Option<&str>, quiet: bool) -> Result<bool> {
    if !dest.is_file() {
        return Ok(false);
    }
    // An error page cached as a model by an earlier version is fetched again.
    let mut head = Vec::new();
    File::open(dest)
        .and_then(|f| f.take(64).read_to_end(&mut head))
        .with_context(|| format!("reading {}", dest.display()))?;
    if !head.starts_with(&GGUF_MAGIC) {
        if !quiet {
            eprintln!(
                "cached {} is {}, not a GGUF file: downloading it again",
                dest.display(),
                describe_start(&head)
            );
        }
        fs::remove_file(dest).with_context(|| format!("removing {}", dest.display()))?;
        let _ = fs::remove_file(with_suffix(dest, ".meta"));
        return Ok(false);
    }
    let Some(expected) = expected else {
        return Ok(true);
    };
    let meta_path = with_suffix(dest, ".meta");
    let meta = read_meta(&meta_path).filter(|m| m.complete);
    let actual = match meta.as_ref().and_then(|m| m.sha256.clone()) {
        Some(sha) => sha,
        None => {
            let file = File::open(dest).with_context(|| format!("opening {}", dest.display()))?;
            let (hasher, size) = hash_reader(file)?;
            let sha = hex(&hasher.finalize());
            // Best effort: only saves re-hashing next time.
            let _ = write_meta(
                &meta_path,
                &Meta {
                    url: meta.map(|m| m.url).unwrap_or_default(),
                    size: Some(size),
                    sha256: Some(sha.clone()),
                    etag: None,
                    complete: true,
                },
            );
            sha
        }
    };
    if actual == expected {
        return Ok(true);
    }
    if !quiet {
        eprintln!(
            "cached {} has sha256 {actual}, expected {expected}: downloading it again",
            dest.display()
        );
    }
    fs::remove_file(dest).with_context(|| format!("removing {}", dest.display()))?;
    let _ = fs::remove_file(&meta_path);
    Ok(false)
}

fn download(
    url: &str,
    dest: &Path,
    expected: Option<&str>,
    quiet: bool,
    read_timeout: Duration,
) -> Result<()> {
    let dir = dest.parent().unwrap_or(Path::new("."));
    let part_path = with_suffix(dest, ".part");
    let meta_path = with_suffix(dest, ".meta");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_resolve(Some(CONNECT_TIMEOUT))
        .timeout_per_read(Some(read_timeout))
        // Statuses and redirects are handled here: to word errors, and to see the
        // Hugging Face headers on the redirect itself.
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("lilypad/", env!("CARGO_PKG_VERSION")))
        .build()
        .new_agent();

    // Ask the server first so that a bad URL leaves nothing behind in the cache.
    let first = request(&agent, url, existing_part_len(&part_path, &meta_path, url))?;
    if !matches!(first.resp.status().as_u16(), 200 | 206 | 416) {
        bail!("server answered {}", status_text(first.resp.status()));
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut part = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&part_path)
        .with_context(|| format!("opening {}", part_path.display()))?;
    // Two processes appending to one `.part` would corrupt it.
    match part.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            bail!("{} is being downloaded by another process", dest.display())
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", part_path.display()));
        }
    }
    if dest.is_file() {
        // Finished by another process while this one waited for the server.
        drop(part);
        remove_if_empty(&part_path);
        return Ok(());
    }
    let result = fetch(
        &agent, url, first, &mut part, &part_path, &meta_path, expected, quiet,
    );
    match result {
        Ok(meta) => {
            part.sync_all()
                .with_context(|| format!("syncing {}", part_path.display()))?;
            // The header's tensor table says how long the file must be: a file cut short by a
            // server that announced no size, or a broken one, is not called complete.
            let checked =
                MmapSource::open(&part_path).and_then(|map| GgufFile::read(&map).map(drop));
            if let Err(e) = checked {
                drop(part);
                let _ = fs::remove_file(&part_path);
                let _ = fs::remove_file(&meta_path);
                bail!("{url} is not a usable GGUF file ({e}); the download was deleted");
            }
            // Renamed while still locked, so no other process can start appending to it.
            fs::rename(&part_path, dest)
                .with_context(|| format!("moving download into {}", dest.display()))?;
            drop(part);
            // Best effort: without it a later sha check just re-hashes the file.
            let _ = write_meta(&meta_path, &meta);
            Ok(())
        }
        Err(e) => {
            if e.downcast_ref::<NotGguf>().is_some()
                || part.metadata().map(|m| m.len() == 0).unwrap_or(false)
            {
                drop(part);
                let _ = fs::remove_file(&part_path);
                let _ = fs::remove_file(&meta_path);
            }
            Err(e)
        }
    }
}

fn remove_if_empty(path: &Path) {
    if fs::metadata(path).map(|m| m.len() == 0).unwrap_or(false) {
        let _ = fs::remove_file(path);
    }
}

/// Bytes of a `.part` worth resuming from: only one whose sidecar says which URL it is from.
fn existing_part_len(part_path: &Path, meta_path: &Path, url: &str) -> u64 {
    match read_meta(meta_path) {
        Some(m) if m.url == url && !m.complete => fs::metadata(part_path).map_or(0, |m| m.len()),
        _ => 0,
    }
}

/// A final (non-redirect) response, with what the redirect chain said about the file.
struct Answer {
    resp: ureq::http::Response<ureq::Body>,
    sha256: Option<String>,
    etag: Option<String>,
}

/// GET `url` (from byte `offset` when nonzero), following redirects by hand so that the
/// `x-linked-etag` Hugging Face puts on its redirect to the CDN is not lost.
fn request(agent: &ureq::Agent, url: &str, offset: u64) -> Result<Answer> {
    let mut current = url.to_string();
    let mut sha256 = None;
    let mut first_etag = None;
    for hop in 0..=MAX_REDIRECTS {
        let mut req = agent
            .get(current.as_str())
            .header("Accept-Encoding", "identity");
        if offset > 0 {
            req = req.header("Range", format!("bytes={offset}-"));
        }
        if let Some(token) = hf_token(&current) {
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        let resp = req
            .call()
            .with_context(|| format!("requesting {current}"))?;
        let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok());
        if sha256.is_none() {
            sha256 = header("x-linked-etag").and_then(parse_sha256);
        }
        if hop == 0 {
            // Only the URL's own ETag describes the file: a CDN's may be some other hash.
            first_etag = header("etag").map(str::to_string);
            if sha256.is_none() {
                sha256 = first_etag.as_deref().and_then(parse_sha256);
            }
        }
        if resp.status().is_redirection() {
            let Some(location) = header("location") else {
                bail!(
                    "server answered {} without a Location",
                    status_text(resp.status())
                );
            };
            current = join_url(&current, location);
            continue;
        }
        let etag = first_etag.or_else(|| header("etag").map(str::to_string));
        return Ok(Answer { resp, sha256, etag });
    }
    bail!("more than {MAX_REDIRECTS} redirects")
}

/// `HF_TOKEN` unlocks gated Hugging Face repos; it is sent to huggingface.co only, never to
/// the CDN it redirects to or any other host.
fn hf_token(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority
        .rsplit('@')
        .next()?
        .split(':')
        .next()?
        .to_ascii_lowercase();
    if host != "huggingface.co" && !host.ends_with(".huggingface.co") {
        return None;
    }
    std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty())
}

fn join_url(base: &str, location: &str) -> String {
    if is_url(location) {
        return location.to_string();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("https", base));
    if let Some(rest) = location.strip_prefix("//") {
        return format!("{scheme}://{rest}");
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let origin = &base[..scheme.len() + 3 + authority_end];
    if location.starts_with('/') {
        return format!("{origin}{location}");
    }
    let path = rest[authority_end..].split(['?', '#']).next().unwrap_or("");
    let dir = path.rfind('/').map_or("/", |i| &path[..=i]);
    format!("{origin}{dir}{location}")
}

fn status_text(status: ureq::http::StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// `Content-Range: bytes start-end/total` → (start, end inclusive, total if known).
fn parse_content_range(value: &str) -> Option<(u64, u64, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes")?.trim_start();
    let (range, total) = rest.split_once('/')?;
    let (start, end) = range.split_once('-')?;
    let (start, end) = (start.trim().parse().ok()?, end.trim().parse().ok()?);
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    (start <= end && total.is_none_or(|t| end < t)).then_some((start, end, total))
}

/// Whether a `.part` started under `old` can be continued with the file described by `new`.
fn same_file(old: &Meta, new: &Meta) -> bool {
    if old.url != new.url || old.size.is_none() || old.size != new.size {
        return false;
    }
    match (&old.sha256, &new.sha256) {
        (Some(a), Some(b)) => a == b,
        _ => match (&old.etag, &new.etag) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        },
    }
}

fn progress_bar(total: Option<u64>, name: &str, quiet: bool) -> ProgressBar {
    let target = if quiet {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    };
    let template = if total.is_some() {
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{spinner} {msg} {bytes} {bytes_per_sec}"
    };
    let style = ProgressStyle::with_template(template)
        .expect("static progress template")
        .progress_chars("=> ");
    ProgressBar::with_draw_target(total, target)
        .with_style(style)
        .with_message(name.to_string())
}

/// Streams the body(ies) into `part`, resuming from its current length when the server
/// allows it, and returns the verified description of the finished file.
#[allow(clippy::too_many_arguments)]
fn fetch(
    agent: &ureq::Agent,
    url: &str,
    first: Answer,
    part: &mut File,
    part_path: &Path,
    meta_path: &Path,
    expected: Option<&str>,
    quiet: bool,
) -> Result<Meta> {
    let mut written = existing_part_len(part_path, meta_path, url).min(part.metadata()?.len());
    let mut started_from = read_meta(meta_path).filter(|_| written > 0);
    let mut hasher = Sha256::new();
    // The file's first bytes, until the magic can be checked.
    let mut head: Vec<u8> = Vec::new();
    if written > 0 {
        part.seek(SeekFrom::Start(0))?;
        let (h, n) = hash_reader(Read::take(&mut *part, written))?;
        if n != written {
            bail!("{} changed while being read", part_path.display());
        }
        hasher = h;
        part.seek(SeekFrom::Start(0))?;
        Read::take(&mut *part, 64).read_to_end(&mut head)?;
        if head.len() >= GGUF_MAGIC.len() && !head.starts_with(&GGUF_MAGIC) {
            return Err(NotGguf(describe_start(&head)).into());
        }
    }
    let name = part_path
        .file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".part").to_string())
        .unwrap_or_default();
    let mut bar: Option<ProgressBar> = None;
    let mut restarts = 0;
    let mut next = Some(first);
    let mut buf = vec![0u8; 256 * 1024];

    let restart = |part: &mut File, hasher: &mut Sha256, written: &mut u64| -> Result<()> {
        part.set_len(0)?;
        *hasher = Sha256::new();
        *written = 0;
        Ok(())
    };

    loop {
        let asked_from = written;
        let mut answer = match next.take() {
            Some(a) => a,
            None => request(agent, url, written)?,
        };
        let status = answer.resp.status();
        let header = |name: &str| {
            answer
                .resp
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        if let Some(enc) = header("content-encoding")
            && !enc.eq_ignore_ascii_case("identity")
        {
            bail!("server sent a `{enc}`-encoded body, which cannot be resumed or verified");
        }
        let (start, body_len, total) = match status.as_u16() {
            200 => {
                let len = header("content-length").and_then(|v| v.trim().parse().ok());
                (0, len, len)
            }
            206 => {
                let Some((start, end, total)) = header("content-range")
                    .as_deref()
                    .and_then(parse_content_range)
                else {
                    bail!("server answered 206 without a valid Content-Range");
                };
                (start, Some(end - start + 1), total)
            }
            416 if asked_from > 0 && restarts < MAX_RESTARTS => {
                // The `.part` does not fit the file on the server any more.
                restarts += 1;
                restart(part, &mut hasher, &mut written)?;
                started_from = None;
                continue;
            }
            _ => bail!("server answered {}", status_text(status)),
        };
        let this = Meta {
            url: url.to_string(),
            size: total,
            sha256: expected.map(str::to_string).or(answer.sha256.clone()),
            etag: answer.etag.clone(),
            complete: false,
        };
        if let (Some(want), Some(server)) = (expected, &answer.sha256)
            && want != server
        {
            bail!("the server reports sha256 {server}, but {want} was expected");
        }
        if start != written {
            if start == 0 {
                // The server ignored the Range (200): take the whole file from this answer.
                restart(part, &mut hasher, &mut written)?;
            } else {
                bail!("server resumed at byte {start} instead of {written}");
            }
        } else if written > 0
            && !started_from
                .as_ref()
                .is_some_and(|old| same_file(old, &this))
        {
            // The file changed on the server since the `.part` was begun.
            if restarts == MAX_RESTARTS {
                bail!("the file keeps changing on the server");
            }
            restarts += 1;
            restart(part, &mut hasher, &mut written)?;
            started_from = None;
            continue;
        }
        if started_from.as_ref() != Some(&this) {
            write_meta(meta_path, &this)?;
            started_from = Some(this.clone());
        }
        if let Some(total) = total
            && written + body_len.unwrap_or(0) > total
        {
            bail!("server announced more bytes than the file holds");
        }

        let pb = bar.get_or_insert_with(|| progress_bar(total, &name, quiet));
        pb.set_position(written);
        pb.reset_eta();
        part.seek(SeekFrom::Start(written))?;
        let mut reader = answer.resp.body_mut().as_reader();
        let mut received = 0u64;
        let outcome: io::Result<()> = loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => break Err(e),
            };
            if body_len.is_some_and(|len| received + n as u64 > len) {
                break Err(io::Error::other("server sent more bytes than announced"));
            }
            if head.len() < 64 && written + received == head.len() as u64 {
                head.extend_from_slice(&buf[..n.min(64 - head.len())]);
                if head.len() >= GGUF_MAGIC.len() && !head.starts_with(&GGUF_MAGIC) {
                    pb.abandon();
                    return Err(NotGguf(describe_start(&head)).into());
                }
            }
            // Unbuffered: what arrived is in the file at once, so a kill loses at most
            // one read.
            if let Err(e) = part.write_all(&buf[..n]) {
                break Err(e);
            }
            hasher.update(&buf[..n]);
            received += n as u64;
            pb.inc(n as u64);
        };
        written = part.stream_position()?;
        let total_text = total.map_or("?".to_string(), |t| t.to_string());
        if let Err(e) = outcome {
            pb.abandon();
            return Err(anyhow::Error::new(e).context(format!(
                "transfer interrupted after {written} of {total_text} bytes; run again to resume"
            )));
        }
        if body_len.is_some_and(|len| received != len) {
            pb.abandon();
            bail!("connection closed after {written} of {total_text} bytes; run again to resume");
        }
        match total {
            // A server may answer a range with less than the rest of the file.
            Some(total) if written < total && received > 0 => continue,
            Some(total) if written != total => {
                pb.abandon();
                bail!("got {written} bytes, but the file has {total}");
            }
            _ => break,
        }
    }
    if let Some(pb) = &bar {
        pb.finish();
    }

    let actual = hex(&hasher.finalize());
    let want = started_from.as_ref().and_then(|m| m.sha256.clone());
    if let Some(want) = want
        && want != actual
    {
        let _ = fs::remove_file(part_path);
        let _ = fs::remove_file(meta_path);
        bail!("sha256 mismatch: expected {want}, got {actual}; the download was deleted");
    }
    Ok(Meta {
        url: url.to_string(),
        size: Some(written),
        sha256: Some(actual),
        etag: started_from.and_then(|m| m.etag),
        complete: true,
    })
}

/// The server sent something other than a GGUF file (an HTML login or error page, most often).
#[derive(Debug)]
struct NotGguf(String);

impl std::fmt::Display for NotGguf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server sent {}, not a GGUF file", self.0)
    }
}

impl std::error::Error for NotGguf {}

/// What a file's first bytes look like, for messages.
fn describe_start(head: &[u8]) -> String {
    let text = String::from_utf8_lossy(head);
    let start: String = text.trim_start().chars().take(24).collect();
    if start.starts_with('<') {
        format!("an HTML page (starting `{}`)", start.escape_debug())
    } else {
        format!(
            "a file starting with `{}`",
            head[..head.len().min(16)].escape_ascii()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    /// One logged request: path and the `Range` header, if any.
    type Log = Arc<Mutex<Vec<(String, Option<String>)>>>;

    #[derive(Clone, Default)]
    struct Behavior {
        /// Cut the body after this many bytes...
        cut_after: Option<usize>,
        /// ...on this many first requests to the file (usize::MAX: always).
        cut_times: usize,
        /// Answer 200 with the whole file even when a Range is asked for.
        ignore_range: bool,
        /// ETag to send with the file.
        etag: Option<String>,
        /// Send this many body bytes, then go silent without closing.
        stall_after: Option<usize>,
        /// Send the body in pieces of this many bytes, pausing between them.
        throttle: Option<(usize, Duration)>,
    }

    struct Server {
        base: String,
        log: Log,
        data: Arc<Vec<u8>>,
    }

    impl Server {
        fn url(&self, path: &str) -> String {
            format!("{}{path}", self.base)
        }
        fn requests(&self) -> Vec<(String, Option<String>)> {
            self.log.lock().unwrap().clone()
        }
    }

    /// A GGUF of about `len` bytes whose one tensor holds incompressible, reproducible bytes.
    fn test_data(len: usize) -> Vec<u8> {
        // xorshift
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let floats = len / 4 - 64;
        let bytes: Vec<u8> = (0..floats * 4)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        let mut w = lilypad_gguf::GgufWriter::new();
        w.metadata(
            "general.architecture",
            lilypad_gguf::Value::String("test".into()),
        );
        w.tensor("blob", &[floats as u64], lilypad_gguf::GgmlType::F32, bytes)
            .unwrap();
        w.to_bytes()
    }

    /// A hand-written HTTP/1.1 server: `/model.gguf` is the file, `/redirect` sends a
    /// Hugging Face style 302 to it with an `x-linked-etag`, anything else is 404.
    fn serve(behavior: Behavior) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let log: Log = Arc::default();
        let data = Arc::new(test_data(300_000));
        let served = Arc::new(AtomicUsize::new(0));
        let (log2, data2) = (log.clone(), data.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (log, data, behavior, served) = (
                    log2.clone(),
                    data2.clone(),
                    behavior.clone(),
                    served.clone(),
                );
                std::thread::spawn(move || {
                    let _ = handle(stream, &log, &data, &behavior, &served);
                });
            }
        });
        Server { base, log, data }
    }

    fn handle(
        mut stream: TcpStream,
        log: &Log,
        data: &[u8],
        behavior: &Behavior,
        served: &AtomicUsize,
    ) -> io::Result<()> {
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut range = None;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.trim().eq_ignore_ascii_case("range")
            {
                range = Some(v.trim().to_string());
            }
        }
        log.lock().unwrap().push((path.clone(), range.clone()));

        let sha = hex(&Sha256::digest(data));
        let head = |status: &str, extra: &str, len: usize| {
            format!(
                "HTTP/1.1 {status}\r\nContent-Length: {len}\r\nConnection: close\r\n{extra}\r\n"
            )
        };
        match path.as_str() {
            "/model.gguf" => {}
            "/login" => {
                let page = b"<!DOCTYPE html>\n<html><body>Please sign in</body></html>\n";
                let extra = "Content-Type: text/html\r\n";
                stream.write_all(head("200 OK", extra, page.len()).as_bytes())?;
                stream.write_all(page)?;
                return Ok(());
            }
            "/redirect" => {
                let extra = format!("Location: /model.gguf\r\nX-Linked-Etag: \"{sha}\"\r\n");
                stream.write_all(head("302 Found", &extra, 0).as_bytes())?;
                return Ok(());
            }
            _ => {
                stream.write_all(head("404 Not Found", "", 9).as_bytes())?;
                stream.write_all(b"not found")?;
                return Ok(());
            }
        }
        let start = range
            .as_deref()
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|s| s.parse::<usize>().ok())
            .filter(|_| !behavior.ignore_range);
        let mut extra = String::new();
        if let Some(etag) = &behavior.etag {
            extra += &format!("ETag: \"{etag}\"\r\n");
        }
        let (status, body) = match start {
            Some(s) => {
                extra += &format!(
                    "Content-Range: bytes {s}-{}/{}\r\n",
                    data.len() - 1,
                    data.len()
                );
                ("206 Partial Content", &data[s..])
            }
            None => ("200 OK", data),
        };
        stream.write_all(head(status, &extra, body.len()).as_bytes())?;
        let n = served.fetch_add(1, Ordering::SeqCst);
        if let Some(stall) = behavior.stall_after {
            stream.write_all(&body[..stall])?;
            stream.flush()?;
            std::thread::sleep(Duration::from_secs(30));
            return Ok(());
        }
        if let Some((piece, pause)) = behavior.throttle {
            for chunk in body.chunks(piece) {
                stream.write_all(chunk)?;
                stream.flush()?;
                std::thread::sleep(pause);
            }
            return stream.shutdown(Shutdown::Write);
        }
        match behavior.cut_after {
            Some(cut) if n < behavior.cut_times => {
                stream.write_all(&body[..cut.min(body.len())])?
            }
            _ => stream.write_all(body)?,
        }
        stream.flush()?;
        stream.shutdown(Shutdown::Write)
    }

    /// A fresh, empty directory removed at the end of the test.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            static N: AtomicUsize = AtomicUsize::new(0);
            let n = N.fetch_add(1, Ordering::SeqCst);
            let dir =
                std::env::temp_dir().join(format!("lilypad-dl-{}-{tag}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            TempDir(dir)
        }
        fn files(&self) -> Vec<String> {
            let mut names: Vec<String> = fs::read_dir(&self.0)
                .map(|rd| {
                    rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn sha_of(data: &[u8]) -> String {
        hex(&Sha256::digest(data))
    }

    #[test]
    fn fresh_download_is_verified_and_then_cached() {
        let server = serve(Behavior::default());
        let cache = TempDir::new("fresh");
        let url = server.url("/model.gguf");
        let sha = sha_of(&server.data);
        let path = resolve_model(&url, &cache.0, Some(&sha.to_uppercase()), true).unwrap();
        assert_eq!(fs::read(&path).unwrap(), *server.data);
        assert!(
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .ends_with("-model.gguf")
        );
        assert_eq!(server.requests(), vec![("/model.gguf".to_string(), None)]);
        let meta = read_meta(&with_suffix(&path, ".meta")).unwrap();
        assert!(meta.complete);
        assert_eq!(meta.sha256.as_deref(), Some(sha.as_str()));

        // Second call: no request at all, with or without an expected hash.
        let again = resolve_model(&url, &cache.0, Some(&sha), true).unwrap();
        let again2 = resolve_model(&url, &cache.0, None, true).unwrap();
        assert_eq!((again.clone(), again2), (path.clone(), path));
        assert_eq!(server.requests().len(), 1);
    }

    #[test]
    fn interrupted_download_resumes_with_range() {
        let cut = 100_000;
        let server = serve(Behavior {
            cut_after: Some(cut),
            cut_times: 1,
            ..Default::default()
        });
        let cache = TempDir::new("resume");
        let url = server.url("/model.gguf");
        let err = resolve_model(&url, &cache.0, None, true).unwrap_err();
        assert!(format!("{err:#}").contains("resume"), "{err:#}");
        let part = cache
            .files()
            .into_iter()
            .find(|f| f.ends_with(".part"))
            .expect(".part left");
        assert_eq!(fs::metadata(cache.0.join(part)).unwrap().len(), cut as u64);

        let path = resolve_model(&url, &cache.0, Some(&sha_of(&server.data)), true).unwrap();
        assert_eq!(fs::read(&path).unwrap(), *server.data);
        let log = server.requests();
        assert_eq!(log.len(), 2);
        assert_eq!(log[1].1.as_deref(), Some(format!("bytes={cut}-").as_str()));
        assert!(!cache.files().iter().any(|f| f.ends_with(".part")));
    }

    #[test]
    fn server_ignoring_range_still_yields_the_file() {
        let server = serve(Behavior {
            cut_after: Some(50_000),
            cut_times: 1,
            ignore_range: true,
            ..Default::default()
        });
        let cache = TempDir::new("norange");
        let url = server.url("/model.gguf");
        assert!(resolve_model(&url, &cache.0, None, true).is_err());
        let path = resolve_model(&url, &cache.0, None, true).unwrap();
        assert_eq!(fs::read(&path).unwrap(), *server.data);
        assert_eq!(server.requests()[1].1.as_deref(), Some("bytes=50000-"));
    }

    #[test]
    fn not_found_is_an_error_and_leaves_nothing() {
        let server = serve(Behavior::default());
        let cache = TempDir::new("404");
        let url = server.url("/missing.gguf");
        let err = format!(
            "{:#}",
            resolve_model(&url, &cache.0, None, true).unwrap_err()
        );
        assert!(err.contains("404 Not Found") && err.contains(&url), "{err}");
        assert!(cache.files().is_empty(), "{:?}", cache.files());
    }

    #[test]
    fn sha_mismatch_is_an_error_and_leaves_nothing() {
        let server = serve(Behavior::default());
        let cache = TempDir::new("sha");
        let url = server.url("/model.gguf");
        let wrong = sha_of(b"something else");
        let err = format!(
            "{:#}",
            resolve_model(&url, &cache.0, Some(&wrong), true).unwrap_err()
        );
        assert!(err.contains("sha256 mismatch"), "{err}");
        assert!(cache.files().is_empty(), "{:?}", cache.files());
        assert!(resolve_model(&url, &cache.0, Some("not-a-hash"), true).is_err());
    }

    #[test]
    fn server_etag_sha_is_checked() {
        let wrong = Behavior {
            etag: Some(sha_of(b"other")),
            ..Default::default()
        };
        let server = serve(wrong);
        let cache = TempDir::new("etag");
        let err = resolve_model(&server.url("/model.gguf"), &cache.0, None, true).unwrap_err();
        assert!(format!("{err:#}").contains("sha256 mismatch"), "{err:#}");
        assert!(cache.files().is_empty(), "{:?}", cache.files());

        let server = serve(Behavior {
            etag: Some(sha_of(&test_data(300_000))),
            ..Default::default()
        });
        let path = resolve_model(&server.url("/model.gguf"), &cache.0, None, true).unwrap();
        assert_eq!(fs::read(path).unwrap(), *server.data);
    }

    #[test]
    fn redirect_with_linked_etag_is_followed_and_checked() {
        let server = serve(Behavior::default());
        let cache = TempDir::new("redirect");
        let url = server.url("/redirect");
        let path = resolve_model(&url, &cache.0, None, true).unwrap();
        assert_eq!(fs::read(&path).unwrap(), *server.data);
        let meta = read_meta(&with_suffix(&path, ".meta")).unwrap();
        assert_eq!(meta.sha256, Some(sha_of(&server.data)));
        let paths: Vec<String> = server.requests().into_iter().map(|(p, _)| p).collect();
        assert_eq!(paths, ["/redirect", "/model.gguf"]);
        // The server's hash contradicts the caller's: refused before any body is stored.
        let cache2 = TempDir::new("redirect2");
        let err = resolve_model(&url, &cache2.0, Some(&sha_of(b"x")), true).unwrap_err();
        assert!(
            format!("{err:#}").contains("server reports sha256"),
            "{err:#}"
        );
        assert!(cache2.files().is_empty(), "{:?}", cache2.files());
    }

    #[test]
    fn truncated_body_is_an_error_not_a_finished_file() {
        let server = serve(Behavior {
            cut_after: Some(1234),
            cut_times: usize::MAX,
            ..Default::default()
        });
        let cache = TempDir::new("trunc");
        let url = server.url("/model.gguf");
        assert!(resolve_model(&url, &cache.0, None, true).is_err());
        assert!(resolve_model(&url, &cache.0, None, true).is_err());
        let finished: Vec<String> = cache
            .files()
            .into_iter()
            .filter(|f| !f.ends_with(".part") && !f.ends_with(".meta"))
            .collect();
        assert!(finished.is_empty(), "{finished:?}");
    }

    #[test]
    fn stalled_server_times_out() {
        let server = serve(Behavior {
            stall_after: Some(10_000),
            ..Default::default()
        });
        let cache = TempDir::new("stall");
        let url = server.url("/model.gguf");
        let t = std::time::Instant::now();
        let err = resolve(&url, &cache.0, None, true, Duration::from_millis(300)).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let expected = format!("after 10000 of {} bytes", server.data.len());
        assert!(format!("{err:#}").contains(&expected), "{err:#}");
    }

    #[test]
    fn local_paths() {
        let cache = TempDir::new("local");
        let err = resolve_model("/no/such/model.gguf", &cache.0, None, true).unwrap_err();
        assert!(
            err.to_string().contains("/no/such/model.gguf")
                && err.to_string().contains("does not exist")
        );
        let here = std::env::current_exe().unwrap();
        let spec = here.to_str().unwrap();
        assert_eq!(resolve_model(spec, &cache.0, None, true).unwrap(), here);
    }

    #[test]
    fn helpers() {
        let a = cache_file_name("https://huggingface.co/a/b/resolve/main/m.gguf?download=true");
        let b = cache_file_name("https://huggingface.co/c/d/resolve/main/m.gguf");
        assert!(a.ends_with("-m.gguf") && b.ends_with("-m.gguf") && a != b);
        assert!(cache_file_name("http://host").ends_with("-download"));
        assert_eq!(join_url("https://h.co/a/b?x", "/c"), "https://h.co/c");
        assert_eq!(join_url("https://h.co/a/b", "c"), "https://h.co/a/c");
        assert_eq!(
            join_url("https://h.co/a", "https://o.co/z"),
            "https://o.co/z"
        );
        assert_eq!(parse_content_range("bytes 5-9/10"), Some((5, 9, Some(10))));
        assert_eq!(parse_content_range("bytes 5-10/10"), None);
        assert_eq!(
            parse_sha256(&format!("W/\"{}\"", "A".repeat(64))),
            Some("a".repeat(64))
        );
        assert!(parse_sha256(&"a".repeat(40)).is_none());
        assert!(hf_token("https://cdn.example/x").is_none());
    }

    #[test]
    fn an_html_page_is_refused_and_not_cached() {
        let server = serve(Behavior::default());
        let cache = TempDir::new("html");
        let err = resolve_model(&server.url("/login"), &cache.0, None, true).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("an HTML page (starting `<!DOCTYPE html>"),
            "{msg}"
        );
        assert!(msg.contains("not a GGUF file"), "{msg}");
        assert_eq!(cache.files(), Vec::<String>::new(), "nothing is kept");
    }

    #[test]
    fn a_cached_error_page_is_downloaded_again() {
        let server = serve(Behavior::default());
        let cache = TempDir::new("cached-html");
        let url = server.url("/model.gguf");
        // What an earlier version could leave: a page cached as a finished model.
        let dest = cache.0.join(cache_file_name(&url));
        fs::create_dir_all(&cache.0).unwrap();
        fs::write(&dest, "<html>sign in</html>").unwrap();
        let path = resolve_model(&url, &cache.0, None, true).unwrap();
        assert_eq!(path, dest);
        assert_eq!(fs::read(&path).unwrap(), *server.data);
        assert_eq!(server.requests().len(), 1);
    }

    #[test]
    fn a_gguf_cut_short_without_a_size_is_not_called_complete() {
        // The server closes early and never said how long the file is: only the GGUF's own
        // tensor table shows that bytes are missing.
        let data = test_data(300_000);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/model.gguf", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let mut req = [0u8; 4096];
                let _ = stream.read(&mut req);
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
                let _ = stream.write_all(&data[..200_000]);
            }
        });
        let cache = TempDir::new("unsized");
        let err = resolve_model(&url, &cache.0, None, true).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("is not a usable GGUF file"), "{msg}");
        assert_eq!(cache.files(), Vec::<String>::new());
    }

    /// Run by `killed_downloads_resume_to_a_verified_file` in a child process that it kills.
    #[test]
    #[ignore = "a child process of killed_downloads_resume_to_a_verified_file"]
    fn download_in_a_child_process() {
        let (Ok(url), Ok(dir)) = (
            std::env::var("LILYPAD_DL_URL"),
            std::env::var("LILYPAD_DL_DIR"),
        ) else {
            panic!("run by killed_downloads_resume_to_a_verified_file");
        };
        let sha = std::env::var("LILYPAD_DL_SHA").unwrap();
        resolve_model(&url, Path::new(&dir), Some(&sha), true).unwrap();
    }

    #[test]
    fn killed_downloads_resume_to_a_verified_file() {
        // 300 kB in 2 KiB pieces 5 ms apart: about 0.75 s per whole download.
        let server = serve(Behavior {
            throttle: Some((2048, Duration::from_millis(5))),
            ..Behavior::default()
        });
        let cache = TempDir::new("killed");
        let url = server.url("/model.gguf");
        let sha = sha_of(&server.data);
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let (mut kills, mut finished) = (0, false);
        for _ in 0..60 {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "download::tests::download_in_a_child_process"])
                .args(["--ignored", "--quiet"])
                .env("LILYPAD_DL_URL", &url)
                .env("LILYPAD_DL_DIR", &cache.0)
                .env("LILYPAD_DL_SHA", &sha)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            // SIGKILL at a random moment between 30 and 180 ms in.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            std::thread::sleep(Duration::from_millis(30 + x % 150));
            if child.try_wait().unwrap().is_some() {
                finished = child.wait().unwrap().success();
                assert!(finished, "the download failed on its own");
                break;
            }
            child.kill().unwrap();
            child.wait().unwrap();
            kills += 1;
        }
        assert!(finished, "not finished after {kills} kills");
        eprintln!("{kills} kills before the download finished");
        assert!(
            kills >= 3,
            "only {kills} kills: the download was too quick to test this"
        );
        let file = cache.0.join(cache_file_name(&url));
        assert_eq!(fs::read(&file).unwrap(), *server.data);
        assert!(read_meta(&with_suffix(&file, ".meta")).unwrap().complete);
        // Every run after the first resumed where the last one's file ended, never behind
        // an earlier resume point.
        let starts: Vec<u64> = server
            .requests()
            .iter()
            .map(|(_, range)| {
                range
                    .as_deref()
                    .and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok())
                    .unwrap_or(0)
            })
            .collect();
        assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
        eprintln!("requests started at {starts:?}");
        assert!(starts.iter().filter(|&&s| s > 0).count() >= 2, "{starts:?}");
    }
}
