//! RFC 3339 `date-time` values that remember the exact text they came from.
//!
//! A SIWE signature covers the message bytes, so a timestamp must render back
//! exactly as the signer wrote it (`.000Z`, `-02:00`, no fraction...). Parsing
//! is a small exact parser of the RFC 3339 grammar, so the crate needs no
//! date-time dependency.

use std::fmt;
use std::str::FromStr;

/// An RFC 3339 `date-time` (`2022-01-27T17:09:38.578Z`), kept with its text.
///
/// Comparisons use the instant (nanoseconds since the Unix epoch); the text is
/// what [`Display`](fmt::Display) writes back, byte for byte.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Timestamp {
    text: String,
    unix_nanos: i128,
}

/// Why a text is not an RFC 3339 `date-time`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidTimestamp;

impl fmt::Display for InvalidTimestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not an RFC 3339 date-time such as 2022-01-27T17:09:38.578Z")
    }
}

impl std::error::Error for InvalidTimestamp {}

const NANOS_PER_MILLI: i128 = 1_000_000;
const NANOS_PER_SEC: i128 = 1_000_000_000;
const SECS_PER_DAY: i64 = 86_400;

impl Timestamp {
    /// The instant `unix_millis` milliseconds after the epoch, written the way
    /// JavaScript's `Date.toISOString()` does (`YYYY-MM-DDTHH:MM:SS.mmmZ`),
    /// which is what browser and Node SIWE clients put in `Issued At`.
    ///
    /// Instants outside the years 0000-9999 saturate to those bounds.
    pub fn from_unix_millis(unix_millis: i64) -> Self {
        // 0000-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.
        const MIN_MILLIS: i64 = -62_167_219_200_000;
        const MAX_MILLIS: i64 = 253_402_300_799_999;
        let unix_millis = unix_millis.clamp(MIN_MILLIS, MAX_MILLIS);
        let days = unix_millis.div_euclid(SECS_PER_DAY * 1000);
        let millis_of_day = unix_millis.rem_euclid(SECS_PER_DAY * 1000);
        let (year, month, day) = civil_from_days(days);
        let secs_of_day = millis_of_day / 1000;
        let text = format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            secs_of_day / 3600,
            secs_of_day / 60 % 60,
            secs_of_day % 60,
            millis_of_day % 1000,
        );
        Self {
            text,
            unix_nanos: i128::from(unix_millis) * NANOS_PER_MILLI,
        }
    }

    /// The text, exactly as parsed or written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Nanoseconds since the Unix epoch (negative before 1970).
    pub fn unix_nanos(&self) -> i128 {
        self.unix_nanos
    }

    /// Milliseconds since the Unix epoch, rounded down.
    pub fn unix_millis(&self) -> i64 {
        // Years 0000-9999 with offsets of at most a day always fit.
        i64::try_from(self.unix_nanos.div_euclid(NANOS_PER_MILLI)).unwrap_or(i64::MAX)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Timestamp {
    type Err = InvalidTimestamp;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let unix_nanos = parse_rfc3339(text.as_bytes()).ok_or(InvalidTimestamp)?;
        Ok(Self {
            text: text.to_owned(),
            unix_nanos,
        })
    }
}

/// A cursor over ASCII digits and fixed separators.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn digits(&mut self, count: usize) -> Option<u32> {
        let end = self.pos.checked_add(count)?;
        let slice = self.bytes.get(self.pos..end)?;
        let mut value = 0u32;
        for &b in slice {
            if !b.is_ascii_digit() {
                return None;
            }
            value = value * 10 + u32::from(b - b'0');
        }
        self.pos = end;
        Some(value)
    }

    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn expect(&mut self, want: u8) -> Option<()> {
        (self.byte()? == want).then_some(())
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }
}

/// RFC 3339 section 5.6 `date-time`; returns nanoseconds since the epoch.
fn parse_rfc3339(bytes: &[u8]) -> Option<i128> {
    let mut c = Cursor { bytes, pos: 0 };
    let year = c.digits(4)?;
    c.expect(b'-')?;
    let month = c.digits(2)?;
    c.expect(b'-')?;
    let day = c.digits(2)?;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    // RFC 3339 allows a lowercase separator and zone letter (section 5.6 note).
    if !matches!(c.byte()?, b'T' | b't') {
        return None;
    }
    let hour = c.digits(2)?;
    c.expect(b':')?;
    let minute = c.digits(2)?;
    c.expect(b':')?;
    // 60 is a leap second; it is counted as the first second of the next minute.
    let second = c.digits(2)?;
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut fraction_nanos: i128 = 0;
    if c.peek() == Some(b'.') {
        c.pos += 1;
        let mut digits = 0u32;
        while let Some(b) = c.peek().filter(u8::is_ascii_digit) {
            // Digits past nanoseconds are valid but below our resolution.
            if digits < 9 {
                fraction_nanos = fraction_nanos * 10 + i128::from(b - b'0');
            }
            digits += 1;
            c.pos += 1;
        }
        if digits == 0 {
            return None;
        }
        fraction_nanos *= 10i128.pow(9u32.saturating_sub(digits));
    }
    let offset_secs: i64 = match c.byte()? {
        b'Z' | b'z' => 0,
        sign @ (b'+' | b'-') => {
            let offset_hour = c.digits(2)?;
            c.expect(b':')?;
            let offset_minute = c.digits(2)?;
            if offset_hour > 23 || offset_minute > 59 {
                return None;
            }
            let secs = i64::from(offset_hour * 3600 + offset_minute * 60);
            if sign == b'+' { secs } else { -secs }
        }
        _ => return None,
    };
    if c.pos != bytes.len() {
        return None;
    }
    let days = days_from_civil(i64::from(year), i64::from(month), i64::from(day));
    let local_secs =
        days * SECS_PER_DAY + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second);
    let utc_secs = local_secs - offset_secs;
    Some(i128::from(utc_secs) * NANOS_PER_SEC + fraction_nanos)
}

fn is_leap_year(year: u32) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let shifted_month = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn millis(text: &str) -> i64 {
        text.parse::<Timestamp>().unwrap().unix_millis()
    }

    #[test]
    fn utc_with_millis_matches_known_instant() {
        // 2022-01-27T17:09:38.578Z, as `Date.parse` gives it.
        assert_eq!(millis("2022-01-27T17:09:38.578Z"), 1_643_303_378_578);
        assert_eq!(millis("1970-01-01T00:00:00Z"), 0);
    }

    #[test]
    fn offsets_shift_to_utc() {
        assert_eq!(
            millis("2021-09-30T16:25:24-02:00"),
            millis("2021-09-30T18:25:24Z")
        );
        assert_eq!(
            millis("2021-09-30T16:25:24+05:30"),
            millis("2021-09-30T10:55:24.000Z")
        );
    }

    #[test]
    fn text_is_kept_exactly() {
        for text in [
            "2021-09-30T16:25:24Z",
            "2021-09-30T16:25:24.000Z",
            "2021-09-30t16:25:24.123456789123z",
            "2021-09-30T16:25:24-02:00",
        ] {
            assert_eq!(text.parse::<Timestamp>().unwrap().to_string(), text);
        }
    }

    #[test]
    fn impossible_dates_are_refused() {
        for text in [
            "2022-02-31T17:09:38.578Z",
            "2023-02-29T00:00:00Z",
            "2022-13-01T00:00:00Z",
            "2022-00-10T00:00:00Z",
            "2022-01-01T24:00:00Z",
            "2022-01-01T00:60:00Z",
            "2022-01-01T00:00:61Z",
            "2022-01-01T00:00:00",
            "2022-01-01T00:00:00.Z",
            "2022-01-01 00:00:00Z",
            "2022-01-01T00:00:00+0200",
            "2022-01-01T00:00:00Z ",
            "Wed Oct 05 2011 16:48:00 GMT+0200 (CEST)",
            "",
        ] {
            assert!(text.parse::<Timestamp>().is_err(), "{text}");
        }
        assert!("2024-02-29T00:00:00Z".parse::<Timestamp>().is_ok());
        assert!("2000-02-29T00:00:00Z".parse::<Timestamp>().is_ok());
    }

    #[test]
    fn from_unix_millis_writes_iso_strings_that_parse_back() {
        for unix_millis in [0, 1_643_303_378_578, 951_782_400_000, -1, 4_102_444_800_123] {
            let ts = Timestamp::from_unix_millis(unix_millis);
            assert_eq!(ts.unix_millis(), unix_millis);
            assert_eq!(millis(ts.as_str()), unix_millis);
        }
        assert_eq!(
            Timestamp::from_unix_millis(1_643_303_378_578).as_str(),
            "2022-01-27T17:09:38.578Z"
        );
        assert_eq!(
            Timestamp::from_unix_millis(-1).as_str(),
            "1969-12-31T23:59:59.999Z"
        );
    }
}
