//! The store's typed rows: a `New*` struct for each insert, a `*Row` struct for what comes back (its id,
//! the same fields, and when it was recorded), typed ids, and the small enums kept in text columns.
//!
//! Units are in the field names (`_ms`, `_bytes`, `_usd`, `_per_s`). Timestamps are UTC and kept to the
//! microsecond on both backends; integers are `i64` because that is what both databases store.

use std::fmt;

use chrono::{DateTime, NaiveDate, NaiveTime, Utc};
use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$doc:meta] $name:ident;)*) => {$(
        #[$doc]
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, sqlx::Type,
        )]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    )*};
}

id_type! {
    /// The id of a [`HardwareRow`].
    HardwareId;
    /// The id of a [`ModelRow`].
    ModelId;
    /// The id of a [`ConfigRow`].
    ConfigId;
    /// The id of a [`ProfileRunRow`].
    ProfileRunId;
    /// The id of a [`CapacityResultRow`].
    CapacityResultId;
    /// The id of a [`QualityResultRow`].
    QualityResultId;
    /// The id of a [`CatalogPriceRow`].
    CatalogPriceId;
    /// The id of a [`WorkloadRow`].
    WorkloadId;
    /// The id of a [`PlanRow`].
    PlanId;
    /// The id of a [`PilotRow`].
    PilotId;
    /// The id of a [`GatewayDecisionRow`].
    GatewayDecisionId;
    /// The id of a [`LedgerEntryRow`].
    LedgerEntryId;
    /// The id of a [`ProfileJobRow`].
    ProfileJobId;
    /// The id of an [`EndpointRow`].
    EndpointId;
    /// The id of an [`EndpointRunRow`].
    EndpointRunId;
}

/// Declares a `New*` struct (what an insert takes) and its `*Row` (what the store gives back), writing
/// each field, its docs and its `#[sqlx]` attributes once. The row holds its `id`, then at `..` every
/// field of the `New*` struct in order, then its own fields (when it was recorded, for most).
macro_rules! new_and_row {
    (
        $(#[$new_meta:meta])*
        pub struct $new:ident {
            $( $(#[$field_meta:meta])* pub $field:ident: $ty:ty, )*
        }

        $(#[$row_meta:meta])*
        pub struct $row:ident {
            $(#[$id_meta:meta])* pub id: $id:ty,
            ..
            $( $(#[$own_meta:meta])* pub $own:ident: $own_ty:ty, )*
        }
    ) => {
        $(#[$new_meta])*
        pub struct $new {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        $(#[$row_meta])*
        pub struct $row {
            $(#[$id_meta])* pub id: $id,
            $( $(#[$field_meta])* pub $field: $ty, )*
            $( $(#[$own_meta])* pub $own: $own_ty, )*
        }
    };
}

mod measured;
mod planned;
mod spending;
mod status;
mod summary;

pub use self::{measured::*, planned::*, spending::*, status::*, summary::*};

/// A half-open span of time, `start <= t < end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindow {
    /// The first instant inside.
    pub start: DateTime<Utc>,
    /// The first instant after.
    pub end: DateTime<Utc>,
}

impl TimeWindow {
    /// The UTC calendar day `date`.
    pub fn day(date: NaiveDate) -> Self {
        let start = date.and_time(NaiveTime::MIN).and_utc();
        Self {
            start,
            end: start + chrono::Days::new(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_window_spans_one_utc_day() {
        let window = TimeWindow::day(NaiveDate::from_ymd_opt(2026, 3, 1).unwrap());
        assert_eq!(window.start.to_rfc3339(), "2026-03-01T00:00:00+00:00");
        assert_eq!(window.end.to_rfc3339(), "2026-03-02T00:00:00+00:00");
    }
}
