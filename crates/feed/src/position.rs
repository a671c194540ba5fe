//! Position specs, the RSM UIDs of Smart Feeds: `cursor:T_O_C`, `id:ITEM`, `time:RFC3339`.

use super::cursor::Cursor;
use chrono::DateTime;

/// A position in a view, as a client names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Position {
    /// A T+O+C cursor the service handed out.
    Cursor(Cursor),
    /// The item with this id, wherever it is now.
    Id(String),
    /// A time in Unix milliseconds; inclusive when paging.
    Time(i64),
}

/// Why a position spec did not parse (`bad-request`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PositionError {
    #[error("position spec has no type (expected cursor:, id: or time:)")]
    NoType,
    #[error("unknown position type {0:?} (expected cursor, id or time)")]
    UnknownType(String),
    #[error("malformed cursor (expected T_O_C)")]
    BadCursor,
    #[error("malformed time (expected RFC 3339)")]
    BadTime,
    #[error("empty item id")]
    EmptyId,
    #[error("position spec is longer than {MAX_POSITION_LEN} bytes")]
    TooLong,
}

/// No valid spec is anywhere near this long; refusing early keeps hostile input cheap.
pub const MAX_POSITION_LEN: usize = 3072;

impl Position {
    pub fn parse(s: &str) -> Result<Position, PositionError> {
        if s.len() > MAX_POSITION_LEN {
            return Err(PositionError::TooLong);
        }
        let (kind, value) = s.split_once(':').ok_or(PositionError::NoType)?;
        match kind {
            "cursor" => Cursor::parse(value).map(Position::Cursor).ok_or(PositionError::BadCursor),
            "id" if value.is_empty() => Err(PositionError::EmptyId),
            "id" => Ok(Position::Id(value.to_string())),
            "time" => DateTime::parse_from_rfc3339(value)
                .map(|t| Position::Time(t.timestamp_millis()))
                .map_err(|_| PositionError::BadTime),
            other => Err(PositionError::UnknownType(other.chars().take(32).collect())),
        }
    }
}

/// Formats Unix milliseconds as RFC 3339 UTC with milliseconds.
pub fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms).unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_types() {
        assert_eq!(Position::parse("cursor:10_1_99"), Ok(Position::Cursor(Cursor { t: 10, o: 1, c: 99 })));
        assert_eq!(Position::parse("id:a:b"), Ok(Position::Id("a:b".into())));
        assert_eq!(Position::parse("time:1970-01-01T00:00:01.5Z"), Ok(Position::Time(1500)));
        assert_eq!(Position::parse("time:2023-11-14T22:13:20+01:00"), Ok(Position::Time(1_699_996_400_000)));
    }

    #[test]
    fn rejects_malformed_specs() {
        assert_eq!(Position::parse("8f4a1546"), Err(PositionError::NoType));
        assert_eq!(Position::parse("seq:4"), Err(PositionError::UnknownType("seq".into())));
        assert_eq!(Position::parse("cursor:8f4a1546"), Err(PositionError::BadCursor));
        assert_eq!(Position::parse("time:yesterday"), Err(PositionError::BadTime));
        assert_eq!(Position::parse("id:"), Err(PositionError::EmptyId));
        let huge = format!("cursor:{}", "1".repeat(1 << 20));
        assert_eq!(Position::parse(&huge), Err(PositionError::TooLong));
    }

    #[test]
    fn rfc3339_round_trips_through_time_specs() {
        let ms = 1_700_000_000_123;
        assert_eq!(Position::parse(&format!("time:{}", rfc3339(ms))), Ok(Position::Time(ms)));
    }
}
