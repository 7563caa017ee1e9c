//! Numbers as the pages print them: fixed digits, thousands kept short, a dash for what is missing.

/// The placeholder for a value that was not measured.
pub(crate) const MISSING: &str = "—";

/// `value` with `digits` decimals, or the placeholder when it is not finite.
pub(crate) fn num(value: f64, digits: usize) -> String {
    if value.is_finite() {
        format!("{value:.digits$}")
    } else {
        MISSING.to_owned()
    }
}

/// [`num`] of a value that may be missing.
pub(crate) fn opt(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| MISSING.to_owned(), |v| num(v, digits))
}

/// A fraction (0 to 1) as a percentage with `digits` decimals.
pub(crate) fn percent(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(
        || MISSING.to_owned(),
        |v| format!("{}%", num(v * 100.0, digits)),
    )
}

/// Dollars: four decimals below one cent per unit, two otherwise.
pub(crate) fn usd(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() && v.abs() < 0.01 && v != 0.0 => format!("${v:.4}"),
        Some(v) if v.is_finite() => format!("${v:.2}"),
        _ => MISSING.to_owned(),
    }
}

/// A byte count in GiB, MiB or (below 1 MiB, as caches are) KiB.
pub(crate) fn bytes(value: i64) -> String {
    let v = value as f64;
    if v >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", v / (1u64 << 30) as f64)
    } else if v >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", v / (1u64 << 20) as f64)
    } else {
        format!("{:.0} KiB", v / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_with_fixed_digits_and_a_dash_when_missing() {
        assert_eq!(num(1.23456, 2), "1.23");
        assert_eq!(num(f64::NAN, 2), MISSING);
        assert_eq!(opt(None, 1), MISSING);
        assert_eq!(percent(Some(0.955), 1), "95.5%");
        assert_eq!(usd(Some(0.004_21)), "$0.0042");
        assert_eq!(usd(Some(12.5)), "$12.50");
        assert_eq!(bytes(3 << 30), "3.00 GiB");
        assert_eq!(bytes(5 << 20), "5.0 MiB");
        assert_eq!(bytes(48 << 10), "48 KiB");
    }
}
