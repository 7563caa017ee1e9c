//! Whether a database's schema is current, read without changing anything: a deployment applies the
//! migrations once (one job) and every other process waits until they are in.

use std::str::FromStr;

use sqlx::{
    migrate::Migrator,
    postgres::PgPoolOptions,
    sqlite::{SqliteConnectOptions, SqlitePoolOptions},
};

use super::{Backend, Result, StoreError, postgres, sqlite};

/// The migrations this build carries that the database at `url` has not applied, as
/// `VERSION DESCRIPTION`; empty when its schema is current. Never migrates or creates anything.
pub async fn pending_migrations(url: &str) -> Result<Vec<String>> {
    let backend = Backend::from_url(url)?;
    let connect = |source| StoreError::Connect { backend, source };
    let applied: Vec<i64> = match backend {
        Backend::Postgres => {
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .connect(url)
                .await
                .map_err(connect)?;
            let exists: bool =
                sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
                    .fetch_one(&pool)
                    .await?;
            let applied = if exists {
                sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                    .fetch_all(&pool)
                    .await?
            } else {
                Vec::new()
            };
            pool.close().await;
            applied
        }
        Backend::Sqlite => {
            let options = SqliteConnectOptions::from_str(url)
                .map_err(connect)?
                .create_if_missing(false)
                .read_only(true);
            let pool = SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
                .map_err(connect)?;
            let exists: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
            )
            .fetch_one(&pool)
            .await?;
            let applied = if exists > 0 {
                sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                    .fetch_all(&pool)
                    .await?
            } else {
                Vec::new()
            };
            pool.close().await;
            applied
        }
    };
    let migrator: &Migrator = match backend {
        Backend::Postgres => &postgres::MIGRATOR,
        Backend::Sqlite => &sqlite::MIGRATOR,
    };
    Ok(not_applied(migrator, &applied))
}

/// The up-migrations of `migrator` whose version is not in `applied`.
fn not_applied(migrator: &Migrator, applied: &[i64]) -> Vec<String> {
    migrator
        .iter()
        .filter(|m| m.migration_type.is_up_migration() && !applied.contains(&m.version))
        .map(|m| format!("{} {}", m.version, m.description))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_new_database_has_every_migration_pending_and_an_opened_one_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = super::super::sqlite_url(&dir.path().join("s.db"));
        // Make the file without migrating it.
        drop(std::fs::File::create(dir.path().join("s.db")).expect("creates the file"));
        let pending = pending_migrations(&url).await.expect("reads the schema");
        assert_eq!(pending.len(), sqlite::MIGRATOR.iter().count());
        assert!(pending[0].starts_with("1 "), "{pending:?}");
        super::super::open(&url).await.expect("opens and migrates");
        assert_eq!(
            pending_migrations(&url).await.expect("reads the schema"),
            Vec::<String>::new()
        );
    }
}
