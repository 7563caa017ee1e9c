//! The SQLite store: the embedded default, one file on the local disk.

use std::{str::FromStr, time::Duration};

use chrono::{DateTime, Utc};
use sqlx::{
    Sqlite, SqlitePool,
    migrate::Migrator,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions},
};

use super::{Backend, ProfileJobRow, Result, StoreError, shared};

pub(super) static MIGRATOR: Migrator = sqlx::migrate!("../migrations/sqlite");

/// How long a writer waits for another connection's write to finish.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The store in a SQLite database.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    const BACKEND: Backend = Backend::Sqlite;

    /// Opens the database at `url`, creating the file if it is missing, with write-ahead logging and
    /// foreign keys on, and applies pending migrations.
    pub async fn connect(url: &str) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|source| StoreError::Connect {
                backend: Self::BACKEND,
                source,
            })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let mut pool = SqlitePoolOptions::new();
        if is_in_memory(url) {
            // Each connection to a private in-memory database sees its own; keep one, for good.
            pool = pool
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        }
        let pool = pool
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Connect {
                backend: Self::BACKEND,
                source,
            })?;
        Self::from_pool(pool).await
    }

    /// Uses an existing pool, applying pending migrations first. The pool's connections should have
    /// foreign keys on.
    pub async fn from_pool(pool: SqlitePool) -> Result<Self> {
        MIGRATOR.run(&pool).await?;
        tracing::debug!("SQLite store ready");
        Ok(Self { pool })
    }

    /// Claims the oldest queued job in a single statement: SQLite runs one writer at a time, so the
    /// statement's read and write cannot interleave with another claimer's.
    async fn claim_next(
        &self,
        worker: &str,
        at: DateTime<Utc>,
        expired_before: Option<DateTime<Utc>>,
    ) -> Result<Option<ProfileJobRow>> {
        let job = sqlx::query_as::<Sqlite, ProfileJobRow>(
            "UPDATE profile_jobs SET status = 'running', claimed_by = $1, claimed_at = $2, \
             attempts = attempts + 1 \
             WHERE id = (SELECT id FROM profile_jobs WHERE status = 'queued' \
               OR (status = 'running' AND $3 IS NOT NULL AND claimed_at < $3) \
               ORDER BY id LIMIT 1) \
             RETURNING *",
        )
        .bind(worker)
        .bind(at)
        .bind(expired_before)
        .fetch_optional(&self.pool)
        .await?;
        Ok(job)
    }
}

/// Whether a SQLite URL names an in-memory database.
fn is_in_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

shared::impl_store!(SqliteStore, Sqlite);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{NewWorkload, Store};

    #[test]
    fn in_memory_urls_are_recognized() {
        assert!(is_in_memory("sqlite::memory:"));
        assert!(is_in_memory("sqlite://?mode=memory"));
        assert!(!is_in_memory("sqlite:///var/lib/strata/strata.db"));
    }

    /// An in-memory database lives as long as the store: what one call writes, the next one reads.
    #[tokio::test]
    async fn in_memory_store_keeps_its_data() {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        let spec = serde_json::json!({"rps": 1});
        let workload = NewWorkload {
            name: "w".to_owned(),
            spec,
        };
        let row = store.insert_workload(&workload).await.unwrap();
        assert_eq!(store.list_workloads().await.unwrap(), vec![row]);
        store.close().await;
    }
}
