//! The connection limits `strata serve` and `strata dashboard` take as flags (the gateway reads the
//! same limits from its `[listener]` table).

use std::time::Duration;

use clap::Args;
use strata_web::listener::{ListenerLimits, MAX_CONNECTIONS};

/// Timeouts and caps of a listener's connections.
#[derive(Debug, Clone, Args)]
pub(crate) struct ListenerArgs {
    /// Seconds a client may take to send a request's headers once it started; then the answer is 408
    /// and the connection closes.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_seconds)]
    header_timeout: Duration,
    /// Seconds a client may take to send a request's body after its headers; then the answer is 408.
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = parse_seconds)]
    body_timeout: Duration,
    /// Seconds a kept-alive connection may wait for its next request; then it closes.
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = parse_seconds)]
    idle_timeout: Duration,
    /// Connections open at once; more wait to be accepted.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1024,
        value_parser = clap::value_parser!(u32).range(1..=MAX_CONNECTIONS as i64)
    )]
    max_connections: u32,
    /// Largest total size of a request's headers, in bytes; more is answered 431.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = 32768,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    max_header_bytes: u32,
}

impl ListenerArgs {
    /// The limits these flags set.
    pub(crate) fn limits(&self) -> ListenerLimits {
        ListenerLimits {
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections as usize,
            max_header_bytes: self.max_header_bytes as usize,
        }
    }
}

/// A positive number of seconds, fractions allowed (`0.5`).
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(format!("must be more than 0 seconds, got {text}"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("`{text}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_positive_numbers() {
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_seconds("10"), Ok(Duration::from_secs(10)));
        for bad in ["0", "-1", "NaN", "ten", "1e30"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }
}
