//! The PostgreSQL store: the production backend that controllers and gateways share.

use chrono::{DateTime, Utc};
use sqlx::{
    PgPool, Postgres,
    migrate::Migrator,
    postgres::{PgConnectOptions, PgPoolOptions},
};

use super::{Backend, ProfileJobId, ProfileJobRow, Result, StoreError, shared};

pub(super) static MIGRATOR: Migrator = sqlx::migrate!("../migrations/postgres");

/// The store in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
    const BACKEND: Backend = Backend::Postgres;

    /// Connects to the database at `url` and applies pending migrations.
    pub async fn connect(url: &str) -> Result<Self> {
        let options: PgConnectOptions = url.parse().map_err(|source| StoreError::Connect {
            backend: Self::BACKEND,
            source,
        })?;
        let pool = PgPoolOptions::new()
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Connect {
                backend: Self::BACKEND,
                source,
            })?;
        Self::from_pool(pool).await
    }

    /// Uses an existing pool, applying pending migrations first.
    pub async fn from_pool(pool: PgPool) -> Result<Self> {
        MIGRATOR.run(&pool).await?;
        tracing::debug!("PostgreSQL store ready");
        Ok(Self { pool })
    }

    /// Claims the oldest queued job in one transaction: the row lock taken with `SKIP LOCKED` keeps
    /// concurrent claimers off it without making them wait.
    async fn claim_next(
        &self,
        worker: &str,
        at: DateTime<Utc>,
        expired_before: Option<DateTime<Utc>>,
    ) -> Result<Option<ProfileJobRow>> {
        let mut tx = self.pool.begin().await?;
        let next: Option<ProfileJobId> = sqlx::query_scalar(
            "SELECT id FROM profile_jobs WHERE status = 'queued' \
             OR (status = 'running' AND $1::timestamptz IS NOT NULL AND claimed_at < $1) \
             ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
        )
        .bind(expired_before)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(id) = next else {
            tx.rollback().await?;
            return Ok(None);
        };
        let job = sqlx::query_as::<Postgres, ProfileJobRow>(
            "UPDATE profile_jobs SET status = 'running', claimed_by = $2, claimed_at = $3, \
             attempts = attempts + 1 WHERE id = $1 RETURNING *",
        )
        .bind(id)
        .bind(worker)
        .bind(at)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(job))
    }
}

shared::impl_store!(PgStore, Postgres);
