//! Value parsers shared by the subcommands' options: a time that may be relative (`--run-at`),
//! and an interval in the one duration syntax of the command line (`10m`, `90s`, `500ms`).

use std::time::Duration;

use chrono::{DateTime, Utc};

/// `--run-at`: an RFC 3339 time (`2030-01-01T09:00:00Z`), or a delay from now (`90s`, `10m`,
/// `1h 30m`).
pub fn run_at(text: &str) -> Result<DateTime<Utc>, String> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let delay = humantime::parse_duration(text)
        .map_err(|_| format!("{text:?} is neither an RFC 3339 time (2030-01-01T09:00:00Z) nor a delay (90s, 10m)"))?;
    chrono::Duration::from_std(delay)
        .ok()
        .and_then(|d| Utc::now().checked_add_signed(d))
        .ok_or_else(|| format!("{text:?} is too far ahead"))
}

/// An interval: a duration (`500ms`, `5s`, `10m`), or a plain number of seconds (`1.5`, kept
/// from earlier releases); more than zero.
pub fn interval(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let parsed = match humantime::parse_duration(text) {
        Ok(d) => Some(d),
        Err(_) => text.parse::<f64>().ok().and_then(|s| Duration::try_from_secs_f64(s).ok()),
    };
    match parsed {
        Some(d) if !d.is_zero() => Ok(d),
        Some(_) => Err("must be more than zero".into()),
        None => Err(format!("{text:?} is not a duration (500ms, 5s, 10m, or a number of seconds)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_at_takes_a_time_or_a_delay() {
        assert_eq!(run_at("2030-01-01T09:00:00+01:00").unwrap().to_rfc3339(), "2030-01-01T08:00:00+00:00");
        let ahead = run_at("10m").unwrap() - Utc::now();
        assert!(ahead > chrono::Duration::seconds(590) && ahead <= chrono::Duration::seconds(600), "{ahead}");
        assert!(run_at("1h 30m").unwrap() > Utc::now() + chrono::Duration::minutes(89));
        assert!(run_at("tomorrow").unwrap_err().contains("RFC 3339"));
        assert!(run_at("").is_err());
    }

    #[test]
    fn an_interval_is_a_duration_or_seconds() {
        assert_eq!(interval("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(interval("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(interval("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(interval("60"), Ok(Duration::from_secs(60)));
        for bad in ["0", "0s", "-1", "NaN", "inf", "soon", ""] {
            assert!(interval(bad).is_err(), "{bad}");
        }
    }
}

/// A JSON command-line argument, read into `T`; `what` names it in the error.
pub(super) fn json_arg<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> crate::error::Result<T> {
    serde_json::from_str(text).map_err(|e| crate::error::Error::InvalidArgument(format!("{what}: {e}")))
}
