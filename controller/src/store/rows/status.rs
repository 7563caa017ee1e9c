//! The statuses kept as text columns: a pilot's and a profiling job's.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// Where a pilot evaluation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PilotStatus {
    /// Recorded, not started.
    Pending,
    /// Being evaluated.
    Running,
    /// Finished with a verdict.
    Done,
    /// Stopped by an error.
    Failed,
}

/// Where a profiling job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Waiting for a controller.
    Queued,
    /// Claimed by a controller.
    Running,
    /// Finished.
    Done,
    /// Stopped by an error.
    Failed,
}

/// A status name that is not one of the enum's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} status {name:?}")]
pub struct UnknownStatus {
    kind: &'static str,
    name: String,
}

macro_rules! text_enum {
    ($ty:ident, $kind:literal, { $($variant:ident => $name:literal,)* }) => {
        impl $ty {
            /// The name stored in the database.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)*
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = UnknownStatus;

            fn from_str(name: &str) -> Result<Self, Self::Err> {
                match name {
                    $($name => Ok(Self::$variant),)*
                    _ => Err(UnknownStatus { kind: $kind, name: name.to_owned() }),
                }
            }
        }

        impl TryFrom<String> for $ty {
            type Error = UnknownStatus;

            fn try_from(name: String) -> Result<Self, Self::Error> {
                name.parse()
            }
        }
    };
}

text_enum!(PilotStatus, "pilot", {
    Pending => "pending",
    Running => "running",
    Done => "done",
    Failed => "failed",
});

text_enum!(JobStatus, "job", {
    Queued => "queued",
    Running => "running",
    Done => "done",
    Failed => "failed",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_their_names() {
        for status in [
            JobStatus::Queued,
            JobStatus::Running,
            JobStatus::Done,
            JobStatus::Failed,
        ] {
            assert_eq!(status.as_str().parse::<JobStatus>(), Ok(status));
        }
        for status in [
            PilotStatus::Pending,
            PilotStatus::Running,
            PilotStatus::Done,
            PilotStatus::Failed,
        ] {
            assert_eq!(status.to_string().parse::<PilotStatus>(), Ok(status));
        }
        assert_eq!(
            "paused".parse::<JobStatus>().unwrap_err().to_string(),
            "unknown job status \"paused\""
        );
    }
}
