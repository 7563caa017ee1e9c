//! The store's one error type.

use std::{fmt, path::PathBuf};

use sqlx::error::ErrorKind;

use super::{Backend, ProfileJobId, constraint};

/// The result of a store operation.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Why a store operation failed.
///
/// Database and migration failures display generically; the driver's detail is the error's source, for
/// logs, not for users.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No row of this kind has this key.
    #[error("{entity} {key} not found")]
    NotFound {
        /// What was looked up, e.g. `"model"`.
        entity: &'static str,
        /// The key it was looked up by.
        key: String,
    },
    /// The write would duplicate a row that a unique constraint allows once.
    #[error("already recorded (unique constraint {constraint})")]
    Conflict {
        /// The constraint's name, one of the [`constraint`] constants for the store's own constraints.
        constraint: String,
    },
    /// The write refers to a row (a model, config, workload, ...) that does not exist.
    #[error("refers to a row that does not exist")]
    UnknownReference,
    /// A profile job was completed that is not running.
    #[error("profile job {id} is not running")]
    JobNotRunning {
        /// The job's id.
        id: ProfileJobId,
    },
    /// The database URL names no backend the store has.
    #[error(
        "unsupported database URL scheme {scheme:?}: expected postgres://, postgresql:// or sqlite:"
    )]
    UnsupportedUrl {
        /// The URL's scheme (the rest is left out: it may hold a password).
        scheme: String,
    },
    /// There is no per-user data folder to put the default database in.
    #[error("no user data folder for the default database")]
    NoDataDir,
    /// The folder for the default database cannot be created.
    #[error("cannot create the database folder {}", path.display())]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// The database cannot be reached or opened.
    #[error("cannot connect to the {backend} database")]
    Connect {
        /// Which backend.
        backend: Backend,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// Applying the migrations failed.
    #[error("database migration failed")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// Any other database failure.
    #[error("database error")]
    Database(#[source] sqlx::Error),
}

impl StoreError {
    /// A [`StoreError::NotFound`] for `entity` looked up by `key`.
    pub fn not_found(entity: &'static str, key: impl fmt::Display) -> Self {
        Self::NotFound {
            entity,
            key: key.to_string(),
        }
    }

    /// Whether this is a [`StoreError::Conflict`] on the named constraint.
    pub fn is_conflict_on(&self, name: &str) -> bool {
        matches!(self, Self::Conflict { constraint } if constraint == name)
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::Database(db) if db.kind() == ErrorKind::UniqueViolation => {
                Self::Conflict {
                    constraint: db.constraint().map_or_else(
                        || constraint::from_sqlite_message(db.message()),
                        str::to_owned,
                    ),
                }
            }
            sqlx::Error::Database(db) if db.kind() == ErrorKind::ForeignKeyViolation => {
                Self::UnknownReference
            }
            _ => Self::Database(error),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(error: sqlx::migrate::MigrateError) -> Self {
        Self::Migrate(error)
    }
}
