//! The escape corpus: commands a model might write to get out of its repository, each run
//! through the native shell in the bubblewrap sandbox, each failing safely — and checked from
//! outside, not only by the command's own exit status. Skipped (with a note) where bwrap is
//! missing, unless LILYPAD_REQUIRE_SANDBOX=1 (scripts/test.sh sets it).

#![cfg(unix)]

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{processes_with, survivors};
use lilypad_agent::{NativeShell, Sandbox, SandboxLimits, Shell, ShellOutput, VirtualRepo};

struct World {
    /// The repository: the one writable place.
    repo: tempfile::TempDir,
    /// A folder next to it that must stay untouched.
    outside: tempfile::TempDir,
    /// Stands for the user's home: hidden.
    home: tempfile::TempDir,
    shell: NativeShell,
}

fn world(limits: SandboxLimits) -> Option<World> {
    let sandbox = match Sandbox::detect() {
        Ok(s) => s,
        Err(e) if std::env::var("LILYPAD_REQUIRE_SANDBOX").as_deref() == Ok("1") => {
            panic!("{e}")
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            return None;
        }
    };
    let (repo, outside, home) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    std::fs::write(home.path().join("secret.txt"), "the user's secret").unwrap();
    std::fs::write(outside.path().join("keep.txt"), "unchanged").unwrap();
    let sandbox = sandbox
        .hiding(home.path().to_path_buf())
        .with_limits(limits);
    let shell = NativeShell::new(repo.path().to_path_buf()).sandboxed(sandbox);
    Some(World {
        repo,
        outside,
        home,
        shell,
    })
}

fn run(w: &mut World, command: &str, timeout: Duration) -> ShellOutput {
    let mut repo = VirtualRepo::new("/repo");
    w.shell.run(&mut repo, command, timeout)
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

const T: Duration = Duration::from_secs(20);

#[test]
fn the_repository_is_writable_and_nothing_else() {
    let Some(mut w) = world(SandboxLimits::default()) else {
        return;
    };
    let out = run(&mut w, "echo inside > made.txt && cat made.txt", T);
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(w.repo.path().join("made.txt")).unwrap(),
        "inside\n"
    );
    for target in [
        format!("{}/new.txt", p(w.outside.path())),
        format!("{}/keep.txt", p(w.outside.path())),
        "/etc/lilypad-escape".to_string(),
        "/usr/lilypad-escape".to_string(),
    ] {
        let out = run(&mut w, &format!("echo escaped > {target}"), T);
        assert_ne!(out.exit_code, Some(0), "{target}: {out:?}");
        assert_ne!(
            std::fs::read_to_string(&target).ok().as_deref(),
            Some("escaped\n"),
            "{target} was written"
        );
    }
    assert!(!w.outside.path().join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(w.outside.path().join("keep.txt")).unwrap(),
        "unchanged"
    );
    // /tmp is the sandbox's own: writable, and gone afterwards.
    let out = run(
        &mut w,
        "echo t > /tmp/lilypad-sandbox-probe && cat /tmp/lilypad-sandbox-probe",
        T,
    );
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(!Path::new("/tmp/lilypad-sandbox-probe").exists());
}

#[test]
fn the_home_folder_is_hidden() {
    let Some(mut w) = world(SandboxLimits::default()) else {
        return;
    };
    let secret = w.home.path().join("secret.txt");
    let command = format!(
        "cat {} 2>/dev/null; echo entries $(ls -A {} | wc -l)",
        p(&secret),
        p(w.home.path())
    );
    let out = run(&mut w, &command, T);
    assert!(!out.output.contains("the user's secret"), "{out:?}");
    assert!(out.output.contains("entries 0"), "{out:?}");
}

#[test]
fn symlinks_lead_nowhere_writable() {
    let Some(mut w) = world(SandboxLimits::default()) else {
        return;
    };
    let target = w.outside.path().join("via-link.txt");
    let home_secret = w.home.path().join("secret.txt");
    let command = format!(
        "ln -s {} out; echo escaped > out/via-link.txt; ln -s {} s; cat s; ln -s {} k; echo x >> k",
        p(w.outside.path()),
        p(&home_secret),
        p(&w.outside.path().join("keep.txt"))
    );
    let out = run(&mut w, &command, T);
    assert!(!target.exists(), "{out:?}");
    assert!(!out.output.contains("the user's secret"), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(w.outside.path().join("keep.txt")).unwrap(),
        "unchanged"
    );
}

#[test]
fn there_is_no_network() {
    let Some(mut w) = world(SandboxLimits::default()) else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = run(
        &mut w,
        &format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected; \
             exec 4<>/dev/tcp/1.1.1.1/80 && echo internet"
        ),
        T,
    );
    assert!(!out.output.contains("connected"), "{out:?}");
    assert!(!out.output.contains("internet"), "{out:?}");
    match listener.accept() {
        Ok((mut s, _)) => {
            let mut b = Vec::new();
            let _ = s.read_to_end(&mut b);
            panic!("the sandbox reached a port on the host");
        }
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
    }
}

#[test]
fn detached_children_die_with_the_command() {
    let Some(mut w) = world(SandboxLimits::default()) else {
        return;
    };
    // Sleepers that leave the process group and the session, and one that outlives the shell.
    let marker = format!(
        "{}.{}",
        4000 + std::process::id() % 1000,
        std::process::id()
    );
    let out = run(
        &mut w,
        &format!(
            "setsid sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & disown; \
             (sleep {marker} &); echo started"
        ),
        T,
    );
    assert!(out.output.contains("started"), "{out:?}");
    assert_eq!(survivors(&marker), 0, "a sleeper outlived its command");
    // And on timeout: the whole tree is killed, the run ends on time.
    let t0 = Instant::now();
    let out = run(
        &mut w,
        &format!("setsid sleep {marker} & sleep {marker}"),
        Duration::from_secs(1),
    );
    assert!(out.timed_out, "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(processes_with(&marker), 0, "a sleeper outlived the timeout");
}

/// A fork bomb stays within the sandbox's process limit, so the host can still start
/// processes and threads while it runs (checked from outside, every 50 ms), and nothing of it
/// is left afterwards.
#[test]
fn fork_bombs_are_bounded() {
    let Some(mut w) = world(SandboxLimits {
        processes: 64,
        ..Default::default()
    }) else {
        return;
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let host = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match std::process::Command::new("true").status() {
                    Ok(s) if s.success() => ok += 1,
                    other => failed.push(format!("{other:?}")),
                }
                match std::thread::Builder::new().spawn(|| ()) {
                    Ok(t) => t.join().unwrap(),
                    Err(e) => failed.push(e.to_string()),
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            (ok, failed)
        })
    };
    let t0 = Instant::now();
    let out = run(
        &mut w,
        "bomb() { bomb | bomb & }; bomb; sleep 30",
        Duration::from_secs(5),
    );
    let took = t0.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = host.join().unwrap();
    assert_eq!(out.exit_code, None, "{out:?}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert!(
        ok > 0 && failed.is_empty(),
        "the host could not start processes: {failed:?}"
    );
    // Nothing of it is left once the kernel has torn the namespace down.
    let t0 = Instant::now();
    while processes_with("bomb()") > 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(processes_with("bomb()"), 0, "fork bomb processes left");
}

#[test]
fn memory_files_and_open_files_are_limited() {
    let Some(mut w) = world(SandboxLimits {
        memory_bytes: 256 << 20,
        file_bytes: 16 << 20,
        open_files: 64,
        ..Default::default()
    }) else {
        return;
    };
    // A 1 GiB allocation fails under a 256 MiB address space.
    let out = run(
        &mut w,
        "head -c 1073741824 /dev/zero | sort > /dev/null; echo status $?",
        T,
    );
    assert!(!out.output.contains("status 0"), "{out:?}");
    // A file past 16 MiB stops growing there.
    let out = run(
        &mut w,
        "head -c 33554432 /dev/zero > big; echo status $?",
        T,
    );
    assert!(!out.output.contains("status 0"), "{out:?}");
    let size = std::fs::metadata(w.repo.path().join("big")).unwrap().len();
    assert!(size <= 16 << 20, "{size}");
    // The 65th open file is refused.
    let out = run(
        &mut w,
        "for i in $(seq 10 80); do eval \"exec $i>f$i\" || { echo refused at $i; break; }; done",
        T,
    );
    assert!(out.output.contains("refused at"), "{out:?}");
}

#[test]
fn missing_bwrap_is_a_clear_error() {
    let nowhere = std::env::temp_dir().join("lilypad-no-bwrap-here");
    let err = Sandbox::detect_on(Some(nowhere.as_os_str()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("apt install bubblewrap"), "{err}");
    assert!(err.contains("--no-sandbox"), "{err}");
}

/// The tools the user has on PATH still run inside, even from a hidden home folder (a venv
/// under ~/.cache, ~/.cargo/bin): here pytest, when the host has it.
#[test]
fn tools_on_path_still_run() {
    let Some(mut w) = world(SandboxLimits::default()) else {
        return;
    };
    let on_host = std::process::Command::new("pytest")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let out = run(
        &mut w,
        "echo 'def test_ok(): assert 1 + 1 == 2' > test_x.py; pytest -q -p no:cacheprovider test_x.py",
        T,
    );
    if on_host {
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        assert!(out.output.contains("1 passed"), "{out:?}");
    } else {
        eprintln!("pytest is not on PATH here: only the shell was checked");
        let out = run(&mut w, "echo $((6 * 7))", T);
        assert_eq!(out.output.trim(), "42");
    }
}
