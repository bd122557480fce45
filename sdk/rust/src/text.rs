//! Canonical text for values and glob patterns: what most sinks and filters need.

use crate::view::Value;

impl Value<'_> {
    /// Append the value's canonical text: integers in decimal, floats in shortest
    /// round-trip form, datetimes as `YYYY-MM-DD HH:MM:SS.ffffff`, dates as
    /// `YYYY-MM-DD`, booleans as `1`/`0`, blobs byte-for-char (ISO-8859-1, as
    /// canal-json does). NULL appends nothing; check [`Value::is_null`] first.
    pub fn write_text(&self, out: &mut String) {
        use std::fmt::Write;
        match *self {
            Value::Null => {}
            Value::Int(x) => {
                let _ = write!(out, "{x}");
            }
            Value::UInt(x) => {
                let _ = write!(out, "{x}");
            }
            Value::Float(x) => {
                let _ = write!(out, "{x}");
            }
            Value::Decimal(s) | Value::Text(s) | Value::Json(s) => out.push_str(s),
            Value::Blob(b) => out.extend(b.iter().map(|&c| c as char)),
            Value::DateTime(micros) => {
                let secs = micros.div_euclid(1_000_000);
                let frac = micros.rem_euclid(1_000_000);
                let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
                let tod = secs.rem_euclid(86_400);
                let _ = write!(
                    out,
                    "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{frac:06}",
                    tod / 3600,
                    tod / 60 % 60,
                    tod % 60
                );
            }
            Value::Date(days) => {
                let (y, m, d) = civil_from_days(days);
                let _ = write!(out, "{y:04}-{m:02}-{d:02}");
            }
            Value::Bool(b) => out.push(if b { '1' } else { '0' }),
        }
    }

    /// The canonical text as a new string (`None` for NULL).
    pub fn to_text(&self) -> Option<String> {
        if self.is_null() {
            return None;
        }
        let mut s = String::new();
        self.write_text(&mut s);
        Some(s)
    }
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's civil-from-days algorithm).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Days since 1970-01-01 as `YYYY-MM-DD`.
pub fn date_text(days: i64) -> String {
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Microseconds since 1970-01-01 00:00:00 as `YYYY-MM-DD HH:MM:SS[.ffffff]`
/// (the fraction only when not zero): the text MySQL and PostgreSQL both read.
pub fn datetime_text(us: i64) -> String {
    let days = us.div_euclid(86_400_000_000);
    let rest = us.rem_euclid(86_400_000_000);
    let (secs, micros) = (rest / 1_000_000, rest % 1_000_000);
    let (h, mi, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let date = date_text(days);
    if micros == 0 {
        format!("{date} {h:02}:{mi:02}:{s:02}")
    } else {
        format!("{date} {h:02}:{mi:02}:{s:02}.{micros:06}")
    }
}

/// Whether `text` matches the glob `pattern` (`*` any run, `?` one character;
/// everything else literal, case-sensitive).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_datetimes_and_dates() {
        let v = Value::DateTime(1_700_000_000_123_456);
        assert_eq!(v.to_text().unwrap(), "2023-11-14 22:13:20.123456");
        assert_eq!(Value::Date(0).to_text().unwrap(), "1970-01-01");
        assert_eq!(Value::Date(-1).to_text().unwrap(), "1969-12-31");
        assert_eq!(
            Value::DateTime(-1).to_text().unwrap(),
            "1969-12-31 23:59:59.999999"
        );
    }

    #[test]
    fn glob_matches_stars_and_questions() {
        assert!(glob_match("*.users.email", "app.users.email"));
        assert!(glob_match("phone*", "phone_number"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "abbc"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("app.*", "other.users"));
        assert!(glob_match("*mail*", "email_address"));
    }
}
