//! Durations as users write them: `"250ms"`, `"2s"`, `"1m30s"`, and `"48h"` or `"1d12h"` for a
//! `Delay`.

/// Parses `"250ms"`, `"2s"`, `"1m"`, `"1h"` or a sum such as `"1m30s"` into milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    const EXPECTED: &str = "expected whole numbers with units `ms`, `s`, `m` or `h`, like \"250ms\", \"2s\" or \"1m30s\"";
    parse_ms(text, EXPECTED, false)
}

/// As [`parse_duration_ms`], with days (`d`) too: the duration of a `Delay`.
pub fn parse_delay_ms(text: &str) -> Result<u64, String> {
    const EXPECTED: &str = "expected whole numbers with units `ms`, `s`, `m`, `h` or `d`, like \"250ms\", \"48h\" or \"1d12h\"";
    parse_ms(text, EXPECTED, true)
}

fn parse_ms(text: &str, expected: &str, days: bool) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(expected.to_string());
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(expected.to_string());
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| "the number is too large".to_string())?;
        rest = &rest[digits..];
        let unit_len = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let factor = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" if days => 86_400_000,
            "" => {
                // Only the message depends on what follows: a space, a fraction or nothing.
                let word: String = rest
                    .trim_start()
                    .chars()
                    .take_while(char::is_ascii_alphabetic)
                    .collect();
                return Err(match word.as_str() {
                    _ if rest.starts_with('.') => "fractions are not supported; use a smaller unit, as in \"1s500ms\" or \"1500ms\"".to_string(),
                    "ms" | "s" | "m" | "h" => format!("write the unit right after the number, as in \"{number}{word}\""),
                    "d" if days => format!("write the unit right after the number, as in \"{number}{word}\""),
                    "" => format!("missing unit after {number}; {expected}"),
                    other => format!("unknown unit `{other}`; {expected}"),
                });
            }
            other => return Err(format!("unknown unit `{other}`; {expected}")),
        };
        total = number
            .checked_mul(factor)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| "the duration is too long".to_string())?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::parse_duration_ms;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("2s"), Ok(2000));
        assert_eq!(parse_duration_ms("1m30s"), Ok(90_000));
        assert_eq!(parse_duration_ms("1h"), Ok(3_600_000));
        assert!(parse_duration_ms("5 parsecs").is_err());
        assert!(parse_duration_ms("5").is_err());
        assert!(parse_duration_ms("ms").is_err());
        assert!(parse_duration_ms("").is_err());
        assert!(parse_duration_ms("99999999999999999999s").is_err());
        assert!(parse_duration_ms("1d").is_err());
    }

    #[test]
    fn delays_take_days() {
        use super::parse_delay_ms;
        assert_eq!(parse_delay_ms("48h"), Ok(172_800_000));
        assert_eq!(parse_delay_ms("1d12h"), Ok(129_600_000));
        assert_eq!(parse_delay_ms("0ms"), Ok(0));
        let error = parse_delay_ms("2 weeks").expect_err("weeks are no unit");
        assert!(error.contains("`d`"), "{error}");
    }
}
