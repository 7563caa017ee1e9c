//! The planner's one error type. Every variant names what was wrong: the file kind, the entry, the key
//! or the line, so a user can fix the input without reading code.

/// Errors from parsing planner inputs or planning with them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlannerError {
    /// A TOML document did not parse or did not match the expected shape (the message carries line and key).
    #[error("{what}: {message}")]
    Toml {
        /// Which input: "catalog", "workload", "profiles".
        what: &'static str,
        /// The parser's message, which names the line, column and key.
        message: String,
    },
    /// A JSON document did not parse or did not match the expected shape.
    #[error("{what}: {message}")]
    Json {
        /// Which input.
        what: &'static str,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A field parsed but holds a value the planner cannot use.
    #[error("{what}: {entry}: `{key}` {problem}")]
    InvalidField {
        /// Which input.
        what: &'static str,
        /// The entry (instance name, class name, config id) holding the field.
        entry: String,
        /// The offending key.
        key: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A CSV trace line could not be used.
    #[error("trace line {line}: {problem}")]
    Csv {
        /// 1-based line number in the CSV text.
        line: usize,
        /// What is wrong with the line.
        problem: String,
    },
    /// A name refers to nothing (an unknown instance type, endpoint, class or config).
    #[error("{what} `{name}` not found")]
    NotFound {
        /// Kind of thing looked up.
        what: &'static str,
        /// The name that was looked up.
        name: String,
    },
    /// The inputs parse but leave nothing to plan with (no CPU candidate, no classes).
    #[error("nothing to plan: {0}")]
    Infeasible(String),
    /// A price model string is not one of the four known ones.
    #[error("unknown price model `{0}` (expected on-demand, spot, committed-1y or committed-3y)")]
    UnknownPriceModel(String),
}

/// Result with [`PlannerError`] as the default error.
pub type Result<T, E = PlannerError> = std::result::Result<T, E>;

/// Checks that `v` is finite and `>= 0`, naming the field otherwise.
pub(crate) fn non_negative(
    what: &'static str,
    entry: &str,
    key: &'static str,
    v: f64,
) -> Result<()> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(invalid(
            what,
            entry,
            key,
            format!("must be a finite number >= 0, got {v}"),
        ))
    }
}

/// Checks that `v` is finite and `> 0`, naming the field otherwise.
pub(crate) fn positive(what: &'static str, entry: &str, key: &'static str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(invalid(
            what,
            entry,
            key,
            format!("must be a finite number > 0, got {v}"),
        ))
    }
}

/// Builds an [`PlannerError::InvalidField`].
pub(crate) fn invalid(
    what: &'static str,
    entry: &str,
    key: &'static str,
    problem: String,
) -> PlannerError {
    PlannerError::InvalidField {
        what,
        entry: entry.to_string(),
        key,
        problem,
    }
}
