//! Small helpers the benchmarks share.

/// The number in environment variable `key`, or `default`.
pub fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `v` (the upper one of an even count).
///
/// # Panics
/// When `v` is empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The `p` quantile (0 to 1) of sorted samples, nearest rank; NaN when
/// there are none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
