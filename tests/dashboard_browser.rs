//! The dashboard in a real browser: seed a SQLite store with the producers' own types (profiling's
//! load points, the builtin catalog's prices, the planner's plan of the example workload, a pilot's
//! replay through the gateway), start `strata dashboard` on it, open each page in headless Chromium, check the tables and charts are in
//! the DOM and the console stayed clean, and save screenshots (light and dark) under
//! `target/dashboard-screens/`.
//!
//! Chromium is Debian's `/usr/bin/chromium` (or `STRATA_CHROMIUM`). Without it the test fails under
//! `CI=true` and is skipped, loudly, elsewhere.

#[path = "../web/tests/common/seed.rs"]
mod seed;

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use strata_controller::store;

/// Kills the dashboard when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("STRATA_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    path.exists().then_some(path)
}

/// Where screenshots go: `<target>/dashboard-screens/`.
fn screens_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("dashboard-screens");
    std::fs::create_dir_all(&dir).expect("screenshot folder");
    dir
}

/// Runs headless Chromium on `url` with `extra` flags; returns stdout and stderr.
fn browse(chromium: &Path, profile: &Path, url: &str, extra: &[String]) -> (String, String) {
    let output = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=6000",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("run chromium");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "chromium failed on {url}:\n{stderr}"
    );
    (stdout, stderr)
}

/// Console messages Chromium logged (the pages log nothing, so any is a failure).
fn console_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("CONSOLE")).collect()
}

#[test]
fn every_page_renders_in_chromium_without_console_errors() {
    let Some(chromium) = chromium() else {
        if std::env::var("CI").is_ok_and(|ci| ci == "true") {
            panic!("chromium is not installed (CI=true needs it: apt-get install -y chromium)");
        }
        eprintln!(
            "SKIPPED dashboard browser test: /usr/bin/chromium not found (apt-get install -y chromium)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = store::sqlite_url(&dir.path().join("strata.db"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let seeded = runtime.block_on(async {
        let store = store::open(&url).await.unwrap();
        let seeded = seed::demo(&*store).await;
        store.close().await;
        seeded
    });

    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["dashboard", "--bind", "127.0.0.1:0", "--database-url", &url])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start strata dashboard");
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let base = line
        .trim()
        .strip_prefix("dashboard listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();

    let screens = screens_dir();
    let run = format!("/runs/{}", seeded.q8_run);
    let pages: [(&str, &str, &[&str]); 5] = [
        (
            "configs",
            "/configs",
            &[
                "id=\"configs-table\"",
                "id=\"pareto-chart\"",
                "<svg",
                "<circle",
                // Every config priced, the frontier drawn and the GPU baseline a labelled point.
                "c4-standard-16 (16 vCPUs",
                "Pareto frontier",
                "GPU baseline g2-standard-8",
                "id=\"gpu-baseline\"",
            ],
        ),
        (
            "run",
            &run,
            &[
                "id=\"latency-table\"",
                "id=\"latency-chart\"",
                "id=\"capacity-latency-chart\"",
                "id=\"capacity-throughput-chart\"",
                "offered load (requests/s)",
                "<svg",
            ],
        ),
        (
            "plans",
            "/plans",
            &["class=\"plan-hours\"", "plan-chart", "<svg", "<rect"],
        ),
        (
            "pilots",
            "/pilots",
            &[
                "id=\"pilots-table\"",
                "class=\"pilot-quality\"",
                "not enough tasks to tell",
                "class=\"pilot-replay\"",
            ],
        ),
        (
            "gateway",
            "/gateway",
            &[
                "id=\"traffic-table\"",
                "id=\"breakers-table\"",
                "cpu-a",
                "pilot:smol-support",
            ],
        ),
    ];
    for (name, path, needles) in pages {
        let page_url = format!("{base}{path}");
        let profile = tempfile::tempdir().unwrap();
        let (dom, stderr) = browse(
            &chromium,
            profile.path(),
            &page_url,
            &["--dump-dom".to_owned()],
        );
        for needle in needles {
            assert!(
                dom.contains(needle),
                "{name}: {needle:?} missing from the DOM:\n{dom}"
            );
        }
        let console = console_lines(&stderr);
        assert!(
            console.is_empty(),
            "{name}: console messages:\n{}",
            console.join("\n")
        );

        for (theme, flags) in [
            ("light", vec![]),
            ("dark", vec!["--force-dark-mode".to_owned()]),
        ] {
            let shot = screens.join(format!("{name}-{theme}.png"));
            let _ = std::fs::remove_file(&shot);
            let mut args = vec![format!("--screenshot={}", shot.display())];
            args.extend(flags);
            let (_, stderr) = browse(&chromium, profile.path(), &page_url, &args);
            let console = console_lines(&stderr);
            assert!(
                console.is_empty(),
                "{name} ({theme}): console messages:\n{}",
                console.join("\n")
            );
            let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
            assert!(
                size > 10_000,
                "{name} ({theme}): screenshot {} is {size} bytes",
                shot.display()
            );
        }
    }
    drop(server);
    // Keep the runtime (and the store's folder) alive until the server is gone.
    std::thread::sleep(Duration::from_millis(10));
    drop(runtime);
}
