//! Child servers the controller supervises (`strata serve`, `strata gateway`): started with
//! `--exit-with-stdin` so that they die with their supervisor, found by the `listening on URL` line they
//! print first, and killed when dropped.

use std::{
    fs::File,
    io::{BufRead, Read, Seek},
    process::{Child, Command, Stdio},
};

/// A running child server.
pub struct ChildServer {
    child: Child,
    /// `http://127.0.0.1:PORT`, from its first line.
    pub base_url: String,
}

impl ChildServer {
    /// Spawns `command` (which must print `listening on URL` as its first line) with `--exit-with-stdin`
    /// and waits for that line.
    ///
    /// # Errors
    /// A message naming `what` when the process does not start or prints something else first.
    pub async fn spawn(mut command: Command, what: &str) -> Result<Self, String> {
        // Its log goes to an unnamed file, read back only to explain a failed start.
        let mut log = tempfile::tempfile().map_err(|e| format!("{what}: {e}"))?;
        let log_for_child = log.try_clone().map_err(|e| format!("{what}: {e}"))?;
        let mut child = command
            .arg("--exit-with-stdin")
            .env("NO_COLOR", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_for_child))
            .spawn()
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            return Err(format!("{what}: no standard output"));
        };
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .map(|_| line)
        })
        .await
        .map_err(|e| format!("{what}: {e}"))?
        .map_err(|e| format!("{what}: {e}"))?;
        match line.trim().strip_prefix("listening on ") {
            Some(url) => Ok(Self {
                base_url: url.to_owned(),
                child,
            }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "{what} did not start (its first line: {line:?}; its log: {})",
                    tail(&mut log)
                ))
            }
        }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }
}

/// The last lines of a child's log file.
fn tail(log: &mut File) -> String {
    let mut text = String::new();
    if log.rewind().is_err() || log.read_to_string(&mut text).is_err() {
        return "unreadable".into();
    }
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(5);
    lines[start..].join(" | ")
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
