//! Values as text in a form both engines share, and equality by meaning.

/// `text` with the spelling differences between engines taken out: an
/// instant's `+00` zone (both sides are read in UTC) and trailing zeros of
/// fractional seconds (`10:00:00.120` and `10:00:00.12` are one time).
pub fn normal(text: &str) -> String {
    let t = text.strip_suffix("+00").unwrap_or(text);
    if is_time_like(t)
        && let Some((whole, fraction)) = t.rsplit_once('.')
        && fraction.bytes().all(|b| b.is_ascii_digit())
    {
        let fraction = fraction.trim_end_matches('0');
        return if fraction.is_empty() {
            whole.to_string()
        } else {
            format!("{whole}.{fraction}")
        };
    }
    t.to_string()
}

/// `HH:MM:SS[.f]`, possibly after a date and possibly negative or over 24
/// hours (MySQL TIME, PostgreSQL interval).
fn is_time_like(t: &str) -> bool {
    let time = t.rsplit_once(' ').map_or(t, |(_, time)| time);
    let time = time.strip_prefix('-').unwrap_or(time);
    let mut parts = time.split(':');
    let (Some(h), Some(m), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let seconds = s.split_once('.').map_or(s, |(whole, _)| whole);
    digits(h) && m.len() == 2 && digits(m) && seconds.len() == 2 && digits(seconds)
}

/// Whether two values (NULL as `None`) mean the same: equal after
/// [`normal`], or equal JSON documents, or (for floating-point columns)
/// numbers within a relative 1e-6.
pub fn same(a: &Option<String>, b: &Option<String>, float: bool) -> bool {
    let (a, b) = match (a, b) {
        (None, None) => return true,
        (Some(a), Some(b)) => (a, b),
        _ => return false,
    };
    if a == b {
        return true;
    }
    let (na, nb) = (normal(a), normal(b));
    if na == nb {
        return true;
    }
    if float && let (Ok(x), Ok(y)) = (na.parse::<f64>(), nb.parse::<f64>()) {
        return x == y || (x - y).abs() <= 1e-6 * x.abs().max(y.abs());
    }
    let document = |t: &str| {
        let t = t.trim_start();
        (t.starts_with('{') || t.starts_with('['))
            .then(|| serde_json::from_str::<serde_json::Value>(t).ok())
            .flatten()
    };
    matches!((document(&na), document(&nb)), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: &str) -> Option<String> {
        Some(t.to_string())
    }

    #[test]
    fn engines_spellings_of_one_value_are_the_same() {
        assert!(same(
            &s("2026-11-01 10:00:00.120"),
            &s("2026-11-01 10:00:00.12"),
            false
        ));
        assert!(same(
            &s("2026-11-01 10:00:00.000"),
            &s("2026-11-01 10:00:00+00"),
            false
        ));
        assert!(same(&s("838:59:59.500000"), &s("838:59:59.5"), false));
        assert!(same(
            &s(r#"{"a": 1, "b": [1, 2]}"#),
            &s(r#"{"b":[1,2],"a":1}"#),
            false
        ));
        assert!(same(&s("1e20"), &s("1e+20"), true));
        assert!(same(&s("0.100000001490116"), &s("0.1"), true));
        assert!(same(&None, &None, false));
    }

    #[test]
    fn different_values_stay_different() {
        assert!(!same(&s("1.0"), &s("1"), false));
        assert!(!same(&s("0.5"), &s("0.6"), true));
        assert!(!same(&s(""), &None, false));
        assert!(!same(
            &s("2026-11-01 10:00:00.1"),
            &s("2026-11-01 10:00:00.2"),
            false
        ));
        assert!(!same(&s(r#"{"a": 1}"#), &s(r#"{"a": 2}"#), false));
        assert_eq!(normal("ab.100"), "ab.100");
    }
}
