//! A PostgreSQL server of the test's own (initdb in a temporary folder, run as the `postgres` user),
//! listening on the bridge's root address, so that it can be restarted without touching the machine's.

use std::{
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// The test's PostgreSQL server; stopped on drop.
pub(crate) struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    _dir: tempfile::TempDir,
    addr: Ipv4Addr,
    port: u16,
}

/// Runs `program` with `args` as the `postgres` user, failing with its output.
fn as_postgres(program: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {}: {e}", program.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {} failed: {}{}",
            program.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The folder of PostgreSQL's server programs (`pg_config --bindir`, else Debian's layout).
fn bindir() -> Result<PathBuf, String> {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return Ok(dir);
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| {
            format!("no PostgreSQL server programs (pg_config, /usr/lib/postgresql): {e}")
        })?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("initdb").exists())
        .collect();
    found.sort();
    found
        .pop()
        .ok_or_else(|| "no initdb under /usr/lib/postgresql".to_owned())
}

impl Postgres {
    /// Creates a cluster with trust authentication for `subnet` and starts it on `addr:port`.
    pub(crate) fn start(addr: Ipv4Addr, port: u16) -> Result<Self, String> {
        let bin = bindir()?;
        let dir = tempfile::Builder::new()
            .prefix("strata-multihost-pg")
            .tempdir()
            .map_err(|e| format!("temporary folder: {e}"))?;
        let data = dir.path().join("data");
        std::fs::create_dir(&data).map_err(|e| format!("creating {}: {e}", data.display()))?;
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status()
            .map_err(|e| format!("chown: {e}"))?;
        if !status.success() {
            return Err(format!("chown postgres {} failed", dir.path().display()));
        }
        let data_arg = data.to_str().ok_or("non-UTF-8 temporary path")?;
        as_postgres(
            &bin.join("initdb"),
            &[
                "-D",
                data_arg,
                "--auth=trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
            ],
        )?;
        let octets = addr.octets();
        let hba = format!(
            "host all all {}.{}.{}.0/24 trust\n",
            octets[0], octets[1], octets[2]
        );
        let hba_path = data.join("pg_hba.conf");
        let mut text = std::fs::read_to_string(&hba_path).map_err(|e| e.to_string())?;
        text.push_str(&hba);
        std::fs::write(&hba_path, text).map_err(|e| e.to_string())?;
        let pg = Self {
            bin,
            data,
            _dir: dir,
            addr,
            port,
        };
        pg.up()?;
        Ok(pg)
    }

    /// `postgres://postgres@ADDR:PORT/DB`.
    pub(crate) fn url(&self, db: &str) -> String {
        format!("postgres://postgres@{}:{}/{db}", self.addr, self.port)
    }

    /// Starts the server and waits until it accepts connections.
    pub(crate) fn up(&self) -> Result<(), String> {
        let options = format!(
            "-c listen_addresses={} -p {} -c unix_socket_directories={} -c max_connections=200",
            self.addr,
            self.port,
            self.data.display()
        );
        let log = self.data.join("server.log");
        as_postgres(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                self.data.to_str().expect("UTF-8"),
                "-o",
                &options,
                "-l",
                log.to_str().expect("UTF-8"),
                "-w",
                "start",
            ],
        )
    }

    /// Stops the server at once (`-m fast`: open connections are cut).
    pub(crate) fn down(&self) -> Result<(), String> {
        as_postgres(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                self.data.to_str().expect("UTF-8"),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
        )
    }

    /// Creates database `name`.
    pub(crate) fn create_database(&self, name: &str) -> Result<(), String> {
        let sql = format!("CREATE DATABASE {name}");
        let port = self.port.to_string();
        let host = self.addr.to_string();
        as_postgres(
            &self.bin.join("psql"),
            &["-h", &host, "-p", &port, "-d", "postgres", "-c", &sql],
        )
        .or_else(|_| {
            // Debian keeps psql in /usr/bin only.
            as_postgres(
                Path::new("psql"),
                &["-h", &host, "-p", &port, "-d", "postgres", "-c", &sql],
            )
        })
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = as_postgres(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                self.data.to_str().unwrap_or_default(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }
}
