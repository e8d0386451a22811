//! Durations in attribute arguments: `"1500ms"`, `"10s"`, `"2m"`, `"1h"`.

use std::time::Duration;

/// Parses `<integer><unit>`; the error says what is expected.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let expected = "expected a whole number and a unit (ms, s, m, h), e.g. \"10s\" or \"1500ms\"";
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    if number.is_empty() {
        return Err(format!("invalid duration {text:?}: {expected}"));
    }
    let Ok(number) = number.parse::<u64>() else {
        return Err(format!("duration {text:?} is too large"));
    };
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(format!("duration {text:?} has no unit: {expected}")),
        _ => return Err(format!("unknown unit {unit:?} in {text:?}: {expected}")),
    };
    number
        .checked_mul(millis_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("duration {text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_unit_and_rejects_the_rest() {
        assert_eq!(parse("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert!(parse("10").unwrap_err().contains("no unit"));
        assert!(parse("ten s").unwrap_err().contains("invalid duration"));
        assert!(parse("1.5s").unwrap_err().contains("unknown unit"));
        assert!(parse("10d").unwrap_err().contains("unknown unit"));
        assert!(
            parse("99999999999999999999h")
                .unwrap_err()
                .contains("too large")
        );
    }
}
