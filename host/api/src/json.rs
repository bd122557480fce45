//! The JSON shapes of the admin API's messages (kebab-case keys), shared by
//! `sluice cli --output json` and the server's `/api/v1/` so that both say the
//! same thing the same way.

use crate::v1 as pb;
use serde_json::{Value, json};

/// The name of a protobuf `FeedState` value (`normal`, `failed`, ...).
pub fn state_name(s: i32) -> &'static str {
    match pb::FeedState::try_from(s) {
        Ok(pb::FeedState::Normal) => "normal",
        Ok(pb::FeedState::Warning) => "warning",
        Ok(pb::FeedState::Pending) => "pending",
        Ok(pb::FeedState::Failed) => "failed",
        Ok(pb::FeedState::Stopped) => "stopped",
        Ok(pb::FeedState::Finished) => "finished",
        Ok(pb::FeedState::Removed) => "removed",
        _ => "unknown",
    }
}

/// `tenant/name` of a changefeed reference (empty when it is missing).
pub fn id_text(r: &Option<pb::ChangefeedRef>) -> String {
    r.as_ref()
        .map(|r| format!("{}/{}", r.tenant, r.name))
        .unwrap_or_default()
}

/// The wall-clock time of a ts, for people (`2026-01-01T00:00:01.250Z`).
pub fn ts_time(ts: u64) -> String {
    if ts == 0 {
        return String::new();
    }
    let ms = sluice_core::CommitTs::new(ts).physical_millis();
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

/// RFC 3339 text of `ms` since the Unix epoch.
fn ms_time(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A changefeed as JSON.
pub fn changefeed_json(c: &pb::Changefeed) -> Value {
    json!({
        "id": id_text(&c.id),
        "state": state_name(c.state),
        "checkpoint-ts": c.checkpoint_ts,
        "checkpoint-time": ts_time(c.checkpoint_ts),
        "epoch": c.epoch,
        "sink": c.sink,
        "filters": c.filters,
        "start-ts": c.start_ts,
        "target-ts": c.target_ts,
        "created-at-ms": c.created_at_ms,
        "failure": c.failure,
        "swaps": c.swaps.iter().map(swap_json).collect::<Vec<_>>(),
        "shadow": c.shadow.as_ref().map(shadow_record_json),
    })
}

/// A shadow record as JSON.
pub fn shadow_record_json(s: &pb::ShadowRecord) -> Value {
    json!({
        "seq": s.seq,
        "role": s.role,
        "live": s.live,
        "candidate": s.candidate,
        "state": s.state,
        "by": s.by,
        "at": ms_time(s.at_ms),
        "max-lag-ms": s.max_lag_ms,
        "max-queued-bytes": s.max_queued_bytes,
        "reason": s.reason,
        "ended": if s.ended_at_ms == 0 { String::new() } else { ms_time(s.ended_at_ms) },
    })
}

/// What a shadow did, as JSON.
pub fn shadow_json(s: &pb::ShadowStatus) -> Value {
    let latency = |l: Option<pb::CallLatency>| {
        let l = l.unwrap_or_default();
        json!({"calls": l.calls, "mean-us": l.mean_us, "p50-us": l.p50_us, "p99-us": l.p99_us, "max-us": l.max_us})
    };
    json!({
        "shadow": s.shadow.as_ref().map(shadow_record_json),
        "batches": s.batches,
        "rows-compared": s.rows_compared,
        "rows-differing": s.rows_differing,
        "differences": s.differences.iter().map(|d| json!({
            "table": d.table,
            "key": d.key,
            "column": d.column,
            "live": d.live,
            "candidate": d.candidate,
        })).collect::<Vec<_>>(),
        "errors": s.errors,
        "last-error": s.last_error,
        "live-latency": latency(s.live),
        "candidate-latency": latency(s.candidate),
        "rows-written": s.rows_written,
        "flushes": s.flushes,
        "lag-ms": s.lag_ms,
        "dropped": s.dropped,
    })
}

/// A step (or the summary) of a rollout, as JSON.
pub fn rollout_json(e: &pb::RolloutEvent) -> Value {
    if e.changefeed.is_empty() {
        return json!({
            "state": e.state,
            "swapped": e.swapped,
            "failed": e.failed,
            "skipped": e.skipped,
            "remaining": e.remaining,
        });
    }
    json!({
        "changefeed": e.changefeed,
        "role": e.role,
        "state": e.state,
        "seq": e.seq,
        "reason": e.reason,
    })
}

/// A swap record as JSON.
pub fn swap_json(s: &pb::SwapRecord) -> Value {
    json!({
        "seq": s.seq,
        "role": s.role,
        "from": s.from,
        "to": s.to,
        "state": s.state,
        "by": s.by,
        "at": ms_time(s.at_ms),
        "barrier-ts": s.barrier_ts,
        "pause-ms": s.pause_ms,
        "pause-us": s.pause_us,
        "reason": s.reason,
        "ended": if s.ended_at_ms == 0 { String::new() } else { ms_time(s.ended_at_ms) },
    })
}

/// A changefeed's status as JSON.
pub fn status_json(s: &pb::ChangefeedStatus) -> Value {
    let records = |list: &[pb::ErrorRecord]| {
        list.iter()
            .map(|e| json!({"at-ms": e.at_ms, "kind": e.kind, "message": e.message}))
            .collect::<Vec<_>>()
    };
    json!({
        "state": state_name(s.state),
        "checkpoint-ts": s.checkpoint_ts,
        "checkpoint-time": ts_time(s.checkpoint_ts),
        "resolved-ts": s.resolved_ts,
        "resolved-time": ts_time(s.resolved_ts),
        "checkpoint-lag-ms": s.checkpoint_lag_ms,
        "resolved-lag-ms": s.resolved_lag_ms,
        "epoch": s.epoch,
        "source-time": (s.source_time_ms > 0).then(|| ms_time(s.source_time_ms)),
        "source-lag-ms": (s.source_time_ms > 0).then(|| now_ms().saturating_sub(s.source_time_ms)),
        "source-events": s.source_events,
        "source-skipped-statements": s.source_skipped_statements,
        "rows-read": s.rows_read,
        "rows-written": s.rows_written,
        "retries": s.retries,
        "sink-data-dir": s.sink_data_dir,
        "capture": s.capture,
        "failure": s.failure,
        "errors": records(&s.last_errors),
        "warnings": records(&s.last_warnings),
        "validator": s.validator.as_ref().map(|v| json!({
            "mode": v.mode,
            "matched": v.matched,
            "mismatched": v.mismatched,
            "pending": v.pending,
            "skipped": v.skipped,
            "errors": v.errors,
            "last-error": (!v.last_error.is_empty()).then_some(&v.last_error),
            "mismatches": v.mismatches,
        })),
        "redo": s.redo.as_ref().map(|r| json!({
            "resolved-ts": r.resolved_ts,
            "resolved-time": ts_time(r.resolved_ts),
            "resolved-lag-ms": r.resolved_lag_ms,
            "checkpoint-ts": r.checkpoint_ts,
            "bytes-written": r.bytes_written,
            "flushes": r.flushes,
            "flush-ms": r.flush_ms,
            "busy-ms": r.busy_ms,
            "waiting-events": r.waiting_events,
            "failing": r.failing,
        })),
    })
}

/// An uploaded plugin as JSON.
pub fn plugin_json(p: &pb::Plugin) -> Value {
    let id = p.id.clone().unwrap_or_default();
    json!({
        "id": format!("{}@{}", id.name, id.version),
        "tenant": id.tenant,
        "world": match pb::PluginWorld::try_from(p.world) {
            Ok(pb::PluginWorld::Sink) => "sink",
            Ok(pb::PluginWorld::Filter) => "filter",
            _ => "unknown",
        },
        "sha256": p.sha256,
        "size-bytes": p.size_bytes,
        "uploaded-at-ms": p.uploaded_at_ms,
        "used-by": p.used_by.iter().map(|r| format!("{}/{}", r.tenant, r.name)).collect::<Vec<_>>(),
    })
}

/// A tenant as JSON, with what it owns.
pub fn tenant_json(t: &pb::Tenant) -> Value {
    json!({
        "name": t.name,
        "created-at-ms": t.created_at_ms,
        "changefeeds": t.changefeeds,
        "plugins": t.plugins,
        "plugin-bytes": t.plugin_bytes,
        "plugin-memory": t.plugin_memory,
        "buffer-bytes": t.buffer_bytes,
        "sql-connections": t.sql_connections,
        "tokens": t.tokens,
        "quota": t.quota.as_ref().map(|q| json!({
            "max-changefeeds": q.max_changefeeds,
            "max-plugin-bytes": q.max_plugin_bytes,
            "max-plugin-versions": q.max_plugin_versions,
            "max-plugin-memory": q.max_plugin_memory,
            "max-buffer-bytes": q.max_buffer_bytes,
            "max-sql-connections": q.max_sql_connections,
            "cpu-weight": q.cpu_weight,
            "max-cpu-millicores": q.max_cpu_millicores,
            "max-plugin-concurrency": q.max_plugin_concurrency,
            "egress": q.egress.as_ref().map(|e| e.rules.clone()),
        })),
    })
}

/// A token's public part as JSON (never its secret).
pub fn token_json(t: &pb::Token) -> Value {
    let state = if t.revoked_at_ms > 0 {
        "revoked"
    } else if t.expires_at_ms > 0 && t.expires_at_ms <= now_ms() {
        "expired"
    } else {
        "active"
    };
    json!({
        "id": t.id,
        "tenant": t.tenant,
        "role": t.role,
        "state": state,
        "created-at-ms": t.created_at_ms,
        "expires-at-ms": t.expires_at_ms,
        "expires": if t.expires_at_ms > 0 { ms_time(t.expires_at_ms) } else { "never".to_string() },
        "revoked-at-ms": t.revoked_at_ms,
        "description": t.description,
    })
}

/// An audit entry as JSON.
pub fn audit_json(e: &pb::AuditEntry) -> Value {
    json!({
        "at": ms_time(e.at_ms),
        "at-ms": e.at_ms,
        "token": e.token,
        "caller-tenant": e.caller_tenant,
        "role": e.role,
        "address": e.address,
        "action": e.action,
        "tenant": e.tenant,
        "outcome": e.outcome,
        "message": e.message,
    })
}

/// A capture as JSON.
pub fn capture_json(c: &pb::Capture) -> Value {
    json!({
        "id": c.id,
        "address": c.address,
        "owner": c.is_owner,
        // The same, as earlier releases named it.
        "is-owner": c.is_owner,
        "version": c.version,
        "started-at-ms": c.started_at_ms,
        "changefeeds": c.changefeeds,
        "tables": c.tables,
        "rows-per-s": c.rows_per_s,
        "draining": c.draining,
    })
}
