//! Test support shared by the workspace's PostgreSQL tests: a fresh database per test on the server at
//! [`ENV_TEST_POSTGRES_URL`], dropped afterwards. Not part of the store's API.

use std::{
    env,
    future::Future,
    sync::atomic::{AtomicU32, Ordering},
    time::{SystemTime, UNIX_EPOCH},
};

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// The environment variable naming the PostgreSQL server tests create their databases on.
pub const ENV_TEST_POSTGRES_URL: &str = "STRATA_TEST_POSTGRES_URL";

/// The server tests use when [`ENV_TEST_POSTGRES_URL`] is not set.
pub const DEFAULT_TEST_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Whether this run is CI (`CI` set, and not to `0` or `false`), where PostgreSQL must be reachable.
pub fn in_ci() -> bool {
    env::var("CI").is_ok_and(|ci| !ci.is_empty() && ci != "0" && ci != "false")
}

/// Runs `test` with the URL of a fresh, empty PostgreSQL database, dropped afterwards whatever the
/// outcome; a failing `test` fails the caller. Without a reachable server it panics under CI and
/// otherwise returns after saying, on stderr, that test `name` was skipped and why.
pub async fn with_postgres<F, Fut>(name: &str, test: F)
where
    F: FnOnce(String) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let server =
        env::var(ENV_TEST_POSTGRES_URL).unwrap_or_else(|_| DEFAULT_TEST_POSTGRES_URL.to_owned());
    let mut admin = match PgConnection::connect(&server).await {
        Ok(admin) => admin,
        Err(err) if in_ci() => {
            panic!("postgres test {name}: cannot reach {server}: {err} (CI needs PostgreSQL)")
        }
        Err(err) => {
            eprintln!("SKIPPED postgres test {name}: cannot reach {server}: {err}");
            return;
        }
    };
    let database = unique_database_name();
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin)
        .await
        .expect("create test database");

    let outcome = tokio::spawn(test(with_database(&server, &database))).await;

    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .expect("drop test database");
    admin.close().await.ok();
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure.into_panic());
    }
}

/// A database name no other test of this or a concurrent process uses.
fn unique_database_name() -> String {
    static SEQUENCE: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("strata_test_{}_{sequence}_{nanos:x}", std::process::id())
}

/// `server` (a `postgres://` URL) with its database replaced by `database`.
fn with_database(server: &str, database: &str) -> String {
    let (base, query) = server
        .split_once('?')
        .map_or((server, None), |(b, q)| (b, Some(q)));
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut url = format!("{}/{database}", &base[..path_start]);
    if let Some(query) = query {
        url = format!("{url}?{query}");
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_swap_the_database() {
        assert_eq!(
            with_database("postgres://u@h:5432/postgres", "t"),
            "postgres://u@h:5432/t"
        );
        assert_eq!(with_database("postgres://u@h", "t"), "postgres://u@h/t");
        assert_eq!(
            with_database("postgresql://h/x?sslmode=disable", "t"),
            "postgresql://h/t?sslmode=disable"
        );
    }

    #[test]
    fn database_names_differ_per_call() {
        assert_ne!(unique_database_name(), unique_database_name());
    }
}
