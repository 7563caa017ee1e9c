//! Names of the store's unique constraints, the same on both backends.
//!
//! PostgreSQL reports the name of a violated constraint; SQLite reports only the columns
//! (`UNIQUE constraint failed: models.sha256`). [`from_sqlite_columns`] maps those columns back to the
//! name the migrations give the constraint, so that callers can match a [`StoreError::Conflict`] on one
//! name whatever the backend.
//!
//! [`StoreError::Conflict`]: super::StoreError::Conflict

/// A hardware fingerprint hash is recorded once.
pub const HARDWARE_FINGERPRINT_HASH: &str = "hardware_fingerprint_hash_key";
/// A model name is recorded once.
pub const MODELS_NAME: &str = "models_name_key";
/// A model file (by content hash) is recorded once.
pub const MODELS_SHA256: &str = "models_sha256_key";
/// A config (model and all settings) is recorded once.
pub const CONFIGS_SETTINGS: &str = "configs_settings_key";
/// One price per provider, region, instance type and date.
pub const CATALOG_PRICES_INSTANCE_DATE: &str = "catalog_prices_instance_date_key";
/// A workload name is recorded once.
pub const WORKLOADS_NAME: &str = "workloads_name_key";
/// An endpoint (base URL and served model name) is recorded once.
pub const ENDPOINTS_URL_MODEL: &str = "endpoints_url_model_key";

/// Every unique constraint: its name, its table and its columns in declaration order.
pub(crate) const UNIQUE: &[(&str, &str, &[&str])] = &[
    (HARDWARE_FINGERPRINT_HASH, "hardware", &["fingerprint_hash"]),
    (MODELS_NAME, "models", &["name"]),
    (MODELS_SHA256, "models", &["sha256"]),
    (
        CONFIGS_SETTINGS,
        "configs",
        &[
            "model_id",
            "weight_type",
            "threads",
            "max_batch",
            "numa_policy",
            "kv_memory_mib",
        ],
    ),
    (
        CATALOG_PRICES_INSTANCE_DATE,
        "catalog_prices",
        &["provider", "region", "instance_type", "price_date"],
    ),
    (WORKLOADS_NAME, "workloads", &["name"]),
    (
        ENDPOINTS_URL_MODEL,
        "endpoints",
        &["base_url", "model_name"],
    ),
];

/// The constraint name for a SQLite unique-violation message, or the message's column list when no known
/// constraint matches.
pub(crate) fn from_sqlite_message(message: &str) -> String {
    let columns = message
        .split_once("constraint failed:")
        .map_or(message, |(_, columns)| columns)
        .trim();
    from_sqlite_columns(columns).map_or_else(|| columns.to_owned(), str::to_owned)
}

/// The constraint whose columns SQLite lists as `table.a, table.b`.
fn from_sqlite_columns(columns: &str) -> Option<&'static str> {
    let listed: Vec<(&str, &str)> = columns
        .split(',')
        .map(|column| column.trim().split_once('.'))
        .collect::<Option<_>>()?;
    UNIQUE.iter().find_map(|&(name, table, names)| {
        let same = listed.len() == names.len()
            && listed
                .iter()
                .zip(names)
                .all(|(&(t, c), n)| t == table && c == *n);
        same.then_some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_messages_map_to_constraint_names() {
        let message = "UNIQUE constraint failed: models.sha256";
        assert_eq!(from_sqlite_message(message), MODELS_SHA256);
        let message = "UNIQUE constraint failed: configs.model_id, configs.weight_type, configs.threads, \
                       configs.max_batch, configs.numa_policy, configs.kv_memory_mib";
        assert_eq!(from_sqlite_message(message), CONFIGS_SETTINGS);
    }

    #[test]
    fn unknown_columns_keep_the_message_columns() {
        let message = "UNIQUE constraint failed: models.path";
        assert_eq!(from_sqlite_message(message), "models.path");
    }

    /// Every named constraint is declared, with the same columns, in every migration dialect.
    #[test]
    fn constraints_are_declared_in_both_dialects() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
        for dialect in ["postgres", "sqlite"] {
            let sql = read_all_sql(&root.join(dialect));
            for &(name, _, columns) in UNIQUE {
                let declared = format!("CONSTRAINT {name} UNIQUE ({})", columns.join(", "));
                assert!(
                    sql.contains(&declared),
                    "{dialect} migrations lack `{declared}`"
                );
            }
        }
    }

    fn read_all_sql(dir: &std::path::Path) -> String {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
            .collect();
        files.sort();
        let text: String = files
            .iter()
            .map(|path| std::fs::read_to_string(path).unwrap())
            .collect();
        // Constraints may wrap over lines; compare them on one.
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}
