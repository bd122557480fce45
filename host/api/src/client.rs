//! `sluice cli`: the admin client of `sluice server` (gRPC). Tables for people,
//! `--output json` for scripts; a server error is one line on stderr and a
//! non-zero exit code.

use std::io::Write;
use std::path::PathBuf;

use crate::v1 as pb;
use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::json::{
    audit_json, capture_json, changefeed_json, plugin_json, rollout_json, shadow_json, status_json,
    tenant_json, token_json,
};
use crate::v1::changefeed_service_client::ChangefeedServiceClient;
use crate::v1::cluster_service_client::ClusterServiceClient;
use crate::v1::plugin_service_client::PluginServiceClient;
use crate::v1::tenant_service_client::TenantServiceClient;
use tonic::transport::Channel;

/// `sluice cli`: global options and the command.
#[derive(Debug, Args)]
pub struct CliArgs {
    /// The server's gRPC address.
    #[arg(
        long,
        env = "SLUICE_SERVER",
        default_value = "http://127.0.0.1:8300",
        global = true
    )]
    pub server: String,
    /// How to print results.
    #[arg(long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
    /// The tenant (changefeed ids without `tenant/` and plugins belong to
    /// it); by default the token's own.
    #[arg(long, env = "SLUICE_TENANT", global = true)]
    pub tenant: Option<String>,
    /// The CA certificate (PEM) that signed the server's: talk TLS
    /// (`https://`) to a server started with --tls-cert.
    #[arg(long, env = "SLUICE_CA", global = true)]
    pub ca: Option<PathBuf>,
    /// A file holding the API token. Without it: the SLUICE_TOKEN
    /// environment variable, then `.sluice-server/admin-token` (the token a
    /// server writes into its default data dir at its first start).
    #[arg(long, env = "SLUICE_TOKEN_FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: CliCommand,
}

/// How `sluice cli` prints results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// One JSON document for scripts.
    Json,
}

/// The command groups of `sluice cli`.
#[derive(Debug, Subcommand)]
pub enum CliCommand {
    /// Create, inspect and steer changefeeds.
    #[command(subcommand)]
    Changefeed(ChangefeedCommand),
    /// Upload, list and remove plugins.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// The captures (server processes) of the cluster.
    #[command(subcommand)]
    Capture(CaptureCommand),
    /// Create, inspect and remove tenants (admin).
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Create, list and revoke API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// The audit log: changes made through the API and refused attempts
    /// (of --tenant; an admin without --tenant: every tenant's).
    Audit {
        /// Entries from this long ago on (`1h`, `7d`); without it, all kept.
        #[arg(long)]
        since: Option<String>,
        /// The newest this many.
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
    /// The server's health and owner.
    Status,
}

/// `sluice cli changefeed ...`.
#[derive(Debug, Subcommand)]
pub enum ChangefeedCommand {
    /// Create a changefeed from a changefeed file and start it.
    Create {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
        /// The changefeed file (TOML).
        #[arg(long)]
        config: PathBuf,
        /// Replicate what commits after this ts (0: from the source's beginning).
        #[arg(long, default_value_t = 0)]
        start_ts: u64,
        /// Finish once the checkpoint reaches this ts (0: never).
        #[arg(long, default_value_t = 0)]
        target_ts: u64,
    },
    /// List changefeeds (of --tenant; `--all-tenants` for every tenant).
    List {
        /// List the changefeeds of every tenant.
        #[arg(long)]
        all_tenants: bool,
    },
    /// Show a changefeed with its status.
    Query {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
    },
    /// Stop a changefeed, keeping its checkpoint.
    Pause {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
    },
    /// Start a stopped, failed or finished changefeed again.
    Resume {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
        /// Resume from this checkpoint instead of the changefeed's own.
        #[arg(long)]
        overwrite_checkpoint_ts: Option<u64>,
    },
    /// Replace the description of a stopped or failed changefeed.
    Update {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
        /// The new changefeed file (TOML).
        #[arg(long)]
        config: PathBuf,
        /// A new target ts (0: no end); without it the target stays.
        #[arg(long)]
        target_ts: Option<u64>,
    },
    /// Replace the sink, or one filter, with another version while the
    /// changefeed runs (hot swap at a barrier, with probation and automatic
    /// rollback).
    Swap {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
        /// The sink's new version, `name@version` (uploaded in the tenant).
        #[arg(long, conflicts_with = "filter", required_unless_present = "filter")]
        sink: Option<String>,
        /// Swap this filter instead: its position (0, 1, ...) or its
        /// plugin's name; `--plugin` gives the new version.
        #[arg(long, requires = "plugin")]
        filter: Option<String>,
        /// The filter's new version, `name@version`.
        #[arg(long, requires = "filter")]
        plugin: Option<String>,
        /// A TOML file with the new table (`[sink]` or `[filter]`: config,
        /// limits, capabilities within the running plugin's); without it
        /// only the version changes.
        #[arg(long, visible_alias = "plugin-config")]
        sink_config: Option<PathBuf>,
        /// How long the new version is on trial (ms; default 30000).
        #[arg(long)]
        probation_ms: Option<u64>,
        /// How many acknowledged flushes the trial needs (default 3).
        #[arg(long)]
        probation_flushes: Option<u64>,
        /// Retryable failures tolerated on trial (default 2).
        #[arg(long)]
        probation_retries: Option<u32>,
    },
    /// Run a candidate version beside the sink or a filter without
    /// delivering what it does, compare, then stop or promote it.
    #[command(subcommand)]
    Shadow(ShadowCommand),
    /// Stop a changefeed and drop it.
    Remove {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
    },
    /// Move a running changefeed to another capture (admin): it stops where
    /// it runs (written, flushed, saved) and runs next on that capture.
    Move {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
        /// The capture's id (`capture list`).
        #[arg(long)]
        capture: String,
    },
    /// Move one table of a running changefeed to another capture (admin):
    /// the run stops everywhere and runs next with that table there, its
    /// events shipped from the capture that reads the source. Moving it to
    /// the reading capture takes it back.
    MoveTable {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
        /// `schema.table`.
        #[arg(long)]
        table: String,
        /// The capture's id (`capture list`).
        #[arg(long)]
        capture: String,
    },
    /// Even the running changefeeds over the captures (admin), by their
    /// number or by the rows/s their runs last measured; prints the moves
    /// asked for.
    Rebalance {
        /// What to even out.
        #[arg(long, value_parser = ["changefeeds", "rows"], default_value = "changefeeds")]
        by: String,
    },
    /// Even a running changefeed's tables over the live captures (admin), by
    /// table count or by the rows/s its captures last measured; prints the
    /// moves asked for (carried out in one restart of the run).
    RebalanceTables {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
        /// What to even out.
        #[arg(long, value_parser = ["tables", "rows"], default_value = "tables")]
        by: String,
    },
    /// Whether everything upstream is downstream (TiCDC's synced status).
    Synced {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
    },
}

/// `sluice cli changefeed shadow ...`.
#[derive(Debug, Subcommand)]
pub enum ShadowCommand {
    /// Start a candidate in shadow (checked first; one at a time).
    Start {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
        /// A sink candidate, `name@version`; give it its own table (a
        /// staging target) with `--config`.
        #[arg(long, conflicts_with = "filter", required_unless_present = "filter")]
        sink: Option<String>,
        /// Beside this filter instead (position or name); `--plugin` gives
        /// the candidate.
        #[arg(long, requires = "plugin")]
        filter: Option<String>,
        /// The filter candidate, `name@version`.
        #[arg(long, requires = "filter")]
        plugin: Option<String>,
        /// A TOML file with the candidate's table (config, limits,
        /// capabilities); without it, the live table with the version changed.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Drop a sink candidate whose oldest waiting batch is older (ms;
        /// default 30000).
        #[arg(long)]
        max_lag_ms: Option<u64>,
        /// Or with more bytes waiting for it (default 64 MiB).
        #[arg(long)]
        max_queued_bytes: Option<u64>,
    },
    /// What the shadow did: rows compared, differences, errors, latency.
    Status {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
    },
    /// Stop the shadow.
    Stop {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
    },
    /// Turn the shadow into a swap to its candidate.
    Promote {
        /// `name` or `tenant/name`.
        #[arg(long, short = 'c')]
        changefeed: String,
        /// How long the new version is on trial (ms; default 30000).
        #[arg(long)]
        probation_ms: Option<u64>,
        /// How many acknowledged flushes the trial needs (default 3).
        #[arg(long)]
        probation_flushes: Option<u64>,
        /// Retryable failures tolerated on trial (default 2).
        #[arg(long)]
        probation_retries: Option<u32>,
    },
}

/// `sluice cli plugin ...`.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Upload a component as `name@version`.
    Upload {
        /// The component (.wasm).
        file: PathBuf,
        /// `name@version`.
        #[arg(long)]
        id: String,
        /// The world it implements.
        #[arg(long, value_parser = ["sink", "filter"])]
        kind: String,
    },
    /// List the tenant's plugins.
    List,
    /// Remove `name@version` (refused while a changefeed uses it).
    Remove {
        /// `name@version`.
        #[arg(long)]
        id: String,
    },
    /// Swap every changefeed of the tenant running `--from` to `--to`, a
    /// batch at a time, each until its probation ends; stops at the first
    /// rollback. Prints each step as it happens.
    Rollout {
        /// The version running now, `name@version`.
        #[arg(long)]
        from: String,
        /// The version to run, `name@version`.
        #[arg(long)]
        to: String,
        /// Changefeeds swapped at once (default 1).
        #[arg(long, default_value_t = 1)]
        batch_size: u32,
        /// How long each new version is on trial (ms; default 30000).
        #[arg(long)]
        probation_ms: Option<u64>,
        /// How many acknowledged flushes each trial needs (default 3).
        #[arg(long)]
        probation_flushes: Option<u64>,
        /// Retryable failures tolerated on trial (default 2).
        #[arg(long)]
        probation_retries: Option<u32>,
    },
}

/// `sluice cli tenant ...`.
#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant (admin).
    Create {
        /// The tenant's name.
        name: String,
    },
    /// The tenants the token may see, with what each owns.
    List,
    /// One tenant with what it owns (by default the token's own).
    Get {
        /// The tenant's name.
        name: Option<String>,
    },
    /// Remove a tenant that owns no changefeed and no plugin, with its
    /// tokens (admin).
    Remove {
        /// The tenant's name.
        name: String,
    },
    /// A tenant's quotas (admin).
    #[command(subcommand)]
    Quota(Box<QuotaCommand>),
}

/// `sluice cli tenant quota ...`.
#[derive(Debug, Subcommand)]
pub enum QuotaCommand {
    /// Change some of a tenant's quotas (the others stay); `none` removes
    /// one. Sizes read like `64MiB`, `2GiB` or a number of bytes.
    Set {
        /// The tenant's name.
        name: String,
        /// Changefeeds that are not removed.
        #[arg(long)]
        max_changefeeds: Option<String>,
        /// Bytes of uploaded plugins.
        #[arg(long)]
        max_plugin_bytes: Option<String>,
        /// Uploaded plugin versions.
        #[arg(long)]
        max_plugin_versions: Option<String>,
        /// Summed `limits.memory` of the plugins of its changefeeds.
        #[arg(long)]
        max_plugin_memory: Option<String>,
        /// Summed host-side buffers of its changefeeds (event caches and
        /// shadow queues).
        #[arg(long)]
        max_buffer_bytes: Option<String>,
        /// Summed connections its plugins may open to granted databases.
        #[arg(long)]
        max_sql_connections: Option<String>,
        /// Its share of the plugin threads against other busy tenants
        /// (1-10000; without one, 100).
        #[arg(long)]
        cpu_weight: Option<String>,
        /// The most CPU its plugins may use, in thousandths of a core
        /// (`500`: half a core).
        #[arg(long)]
        max_cpu_millicores: Option<String>,
        /// The most of its plugin calls running guest code at once.
        #[arg(long)]
        max_plugin_concurrency: Option<String>,
        /// What its changefeeds may grant their plugins: comma-separated
        /// `HOST[:PORT]` rules (a name, `*.name`, an address or a network
        /// like `10.0.0.0/8`); `''` grants nothing, `none` anything.
        #[arg(long)]
        egress: Option<String>,
    },
}

/// A flag's duration (`90d`, `12h`).
fn duration_flag(flag: &str, text: &str) -> Result<std::time::Duration, tonic::Status> {
    humantime::parse_duration(text).map_err(|e| {
        tonic::Status::invalid_argument(format!("{flag} `{text}`: {e} (write it like 90d or 12h)"))
    })
}

/// Now, since the Unix epoch.
fn since_epoch() -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// A quota flag's new value: `None` to keep, `Some(None)` to remove.
fn quota_flag(
    flag: &str,
    value: Option<&String>,
    size: bool,
) -> Result<Option<Option<u64>>, tonic::Status> {
    let Some(text) = value else { return Ok(None) };
    if text == "none" {
        return Ok(Some(None));
    }
    let parsed = if size {
        text.parse::<sluice_config::ByteSize>().map(|b| b.0)
    } else {
        text.parse::<u64>().map_err(|e| e.to_string())
    };
    parsed
        .map(|n| Some(Some(n)))
        .map_err(|e| tonic::Status::invalid_argument(format!("{flag} `{text}`: {e} (or `none`)")))
}

/// `sluice cli token ...`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token in --tenant (by default the caller's) and print it once:
    /// it cannot be read again.
    Create {
        /// admin, tenant-admin or viewer.
        #[arg(long)]
        role: String,
        /// How long it works (`90d`, `12h`); without it, until revoked.
        #[arg(long)]
        expires_in: Option<String>,
        /// What it is for.
        #[arg(long, default_value = "")]
        description: String,
    },
    /// The tokens of --tenant (by default the caller's); never their secrets.
    List {
        /// Every tenant's tokens (admin).
        #[arg(long)]
        all_tenants: bool,
    },
    /// Revoke a token: it never works again.
    Revoke {
        /// The token's id (the 16 hex digits after `sluice_`).
        id: String,
    },
    /// The token this command runs with: its id, tenant and role.
    Whoami,
}

/// Adds the bearer token to every call.
#[derive(Clone)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl Bearer {
    /// `authorization: Bearer TOKEN` on every call (none for `None`).
    pub fn new(token: Option<&str>) -> anyhow::Result<Self> {
        token
            .map(|t| {
                format!("Bearer {}", t.trim())
                    .parse()
                    .map_err(|_| anyhow::anyhow!("the token is not printable ASCII text"))
            })
            .transpose()
            .map(Self)
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// A channel that sends the token with every call.
pub type Authorized = tonic::service::interceptor::InterceptedService<Channel, Bearer>;

/// The token `sluice cli` runs with: `--token-file`, else `SLUICE_TOKEN`,
/// else the admin token of a server on this machine at `server` (the note
/// it left), else the default data dir's admin token, else none.
pub fn find_token(
    token_file: Option<&std::path::Path>,
    server: &str,
) -> anyhow::Result<Option<String>> {
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path)
            .map(|t| t.trim().to_string())
            .with_context(|| format!("cannot read the token file {}", path.display()))
    };
    if let Some(path) = token_file {
        return read(path).map(Some);
    }
    if let Ok(token) = std::env::var("SLUICE_TOKEN")
        && !token.trim().is_empty()
    {
        return Ok(Some(token.trim().to_string()));
    }
    if let Some(file) = sluice_auth::local::noted_token_file(server)
        && let Ok(token) = std::fs::read_to_string(&file)
    {
        return Ok(Some(token.trim().to_string()));
    }
    let default = std::path::Path::new(".sluice-server").join(sluice_auth::ADMIN_TOKEN_FILE);
    if default.exists() {
        return read(&default).map(Some);
    }
    Ok(None)
}

/// `sluice cli capture ...`.
#[derive(Debug, Subcommand)]
pub enum CaptureCommand {
    /// List the live captures.
    List,
    /// Drain a capture before maintenance (admin): its changefeeds move to
    /// other captures and it gets no new work until it restarts.
    Drain {
        /// The capture's id (`capture list`).
        #[arg(long)]
        capture: String,
        /// Wait until nothing is left on it, showing what remains.
        #[arg(long, conflicts_with = "cancel")]
        wait: bool,
        /// End the drain: the capture takes new work again.
        #[arg(long)]
        cancel: bool,
    },
}

/// Runs one CLI command; a server error becomes one line.
pub async fn run(args: CliArgs) -> anyhow::Result<()> {
    let channel = endpoint(&args.server, args.ca.as_deref())?
        .connect()
        .await
        .with_context(|| format!("cannot reach the server at {}", args.server))?;
    let token = find_token(args.token_file.as_deref(), &args.server)?;
    let out = execute(&args, channel, Bearer::new(token.as_deref())?)
        .await
        .map_err(|status| {
            anyhow::anyhow!(
                "{}: {}",
                code_name(status.code()),
                status
                    .message()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        })?;
    // A closed stdout (`sluice cli ... | head`) ends the output quietly.
    match print(&mut std::io::stdout().lock(), args.output, &out) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}

/// The server at `url`; over TLS when `ca` (the CA's certificate) is given.
pub fn endpoint(
    url: &str,
    ca: Option<&std::path::Path>,
) -> anyhow::Result<tonic::transport::Endpoint> {
    let Some(ca) = ca else {
        if url.starts_with("https://") {
            anyhow::bail!(
                "--server {url} speaks TLS: give the CA certificate that signed its certificate with --ca FILE (or SLUICE_CA)"
            );
        }
        return Channel::from_shared(url.to_string())
            .with_context(|| format!("--server `{url}` is not a URL"));
    };
    let url = match url.strip_prefix("http://") {
        Some(rest) => format!("https://{rest}"),
        None => url.to_string(),
    };
    let pem = std::fs::read(ca).with_context(|| format!("cannot read --ca {}", ca.display()))?;
    let endpoint = Channel::from_shared(url.clone())
        .with_context(|| format!("--server `{url}` is not a URL"))?;
    let host = endpoint.uri().host().unwrap_or("localhost").to_string();
    endpoint
        .tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(pem))
                .domain_name(host.trim_start_matches('[').trim_end_matches(']')),
        )
        .with_context(|| format!("--ca {}", ca.display()))
}

/// What kind of refusal a gRPC code is, as the first part of the one-line error.
pub(crate) fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "ok",
        Cancelled => "cancelled",
        Unknown => "unknown error",
        InvalidArgument => "invalid argument",
        DeadlineExceeded => "timed out",
        NotFound => "not found",
        AlreadyExists => "already exists",
        PermissionDenied => "permission denied",
        ResourceExhausted => "too large",
        FailedPrecondition => "not allowed now",
        Aborted => "aborted",
        OutOfRange => "out of range",
        Unimplemented => "not supported by this server",
        Internal => "internal error",
        Unavailable => "unavailable",
        DataLoss => "data loss",
        Unauthenticated => "not authenticated",
    }
}

/// What a command printed: a list of rows or one object.
enum Out {
    Rows(Vec<&'static str>, Vec<Value>),
    One(Value),
}

fn move_json(m: &pb::ChangefeedMove) -> Value {
    let id =
        m.id.as_ref()
            .map(|r| format!("{}/{}", r.tenant, r.name))
            .unwrap_or_default();
    json!({"id": id, "from": m.from_capture, "to": m.to_capture})
}

fn table_move_json(m: &pb::TableMove) -> Value {
    let id =
        m.id.as_ref()
            .map(|r| format!("{}/{}", r.tenant, r.name))
            .unwrap_or_default();
    json!({"id": id, "table": m.table, "from": m.from_capture, "to": m.to_capture})
}

fn changefeed_ref(tenant: &str, id: &str) -> pb::ChangefeedRef {
    match id.split_once('/') {
        Some((t, n)) => pb::ChangefeedRef {
            tenant: t.into(),
            name: n.into(),
        },
        None => pb::ChangefeedRef {
            tenant: tenant.into(),
            name: id.into(),
        },
    }
}

fn plugin_ref(tenant: &str, id: &str) -> Result<pb::PluginRef, tonic::Status> {
    let (name, version) = id.split_once('@').ok_or_else(|| {
        tonic::Status::invalid_argument(format!(
            "plugin `{id}` has no version; write it as name@version, e.g. `{id}@0.1.0`"
        ))
    })?;
    Ok(pb::PluginRef {
        tenant: tenant.into(),
        name: name.into(),
        version: version.into(),
    })
}

/// Reads a changefeed file, refusing one over the server's size limit before
/// sending it.
fn read(path: &PathBuf) -> Result<String, tonic::Status> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        tonic::Status::invalid_argument(format!("cannot read {}: {e}", path.display()))
    })?;
    let max = sluice_config::bounds::MAX_FILE_BYTES;
    if text.len() > max {
        return Err(tonic::Status::invalid_argument(format!(
            "{}: the changefeed file is {} bytes; at most {max} (128KiB)",
            path.display(),
            text.len()
        )));
    }
    Ok(text)
}

async fn execute(args: &CliArgs, channel: Channel, bearer: Bearer) -> Result<Out, tonic::Status> {
    let tenant = args.tenant.as_deref().unwrap_or("");
    let mut feeds = ChangefeedServiceClient::with_interceptor(channel.clone(), bearer.clone());
    let mut plugins = PluginServiceClient::with_interceptor(channel.clone(), bearer.clone());
    let mut tenants = TenantServiceClient::with_interceptor(channel.clone(), bearer.clone());
    let mut cluster = ClusterServiceClient::with_interceptor(channel, bearer);
    let one = |c: pb::Changefeed| Out::One(changefeed_json(&c));
    Ok(match &args.command {
        CliCommand::Changefeed(cmd) => match cmd {
            ChangefeedCommand::Create {
                changefeed,
                config,
                start_ts,
                target_ts,
            } => one(feeds
                .create_changefeed(pb::CreateChangefeedRequest {
                    id: Some(changefeed_ref(tenant, changefeed)),
                    config_toml: read(config)?,
                    start_ts: *start_ts,
                    target_ts: *target_ts,
                })
                .await?
                .into_inner()),
            ChangefeedCommand::List { all_tenants } => {
                // An empty tenant lists every tenant the token may see; without
                // --all-tenants, only --tenant or the token's own.
                let tenant = match (all_tenants, tenant) {
                    (true, _) => String::new(),
                    (false, "") => {
                        tenants
                            .who_am_i(pb::WhoAmIRequest {})
                            .await?
                            .into_inner()
                            .tenant
                    }
                    (false, t) => t.to_string(),
                };
                let list = feeds
                    .list_changefeeds(pb::ListChangefeedsRequest { tenant })
                    .await?
                    .into_inner();
                Out::Rows(
                    vec![
                        "id",
                        "state",
                        "checkpoint-time",
                        "checkpoint-ts",
                        "epoch",
                        "sink",
                    ],
                    list.changefeeds.iter().map(changefeed_json).collect(),
                )
            }
            ChangefeedCommand::Query { changefeed } => {
                let r = changefeed_ref(tenant, changefeed);
                let info = feeds.get_changefeed(r.clone()).await?.into_inner();
                let status = feeds.get_status(r.clone()).await?.into_inner();
                let mut v = changefeed_json(&info);
                v["status"] = status_json(&status);
                // Where it runs: each capture's part.
                let processors = cluster
                    .list_processors(pb::ListProcessorsRequest {
                        tenant: r.tenant.clone(),
                        changefeed: r.name.clone(),
                    })
                    .await?
                    .into_inner()
                    .processors;
                v["processors"] = processors
                    .iter()
                    .map(|p| {
                        json!({
                            "capture": p.capture_id,
                            "reads": p.reads,
                            // Empty: every table no other capture runs.
                            "tables": p.tables,
                            "checkpoint-ts": p.checkpoint_ts,
                            "resolved-ts": p.resolved_ts,
                        })
                    })
                    .collect();
                v["config"] = json!(info.config_toml);
                Out::One(v)
            }
            ChangefeedCommand::Pause { changefeed } => one(feeds
                .pause_changefeed(changefeed_ref(tenant, changefeed))
                .await?
                .into_inner()),
            ChangefeedCommand::Resume {
                changefeed,
                overwrite_checkpoint_ts,
            } => one(feeds
                .resume_changefeed(pb::ResumeChangefeedRequest {
                    id: Some(changefeed_ref(tenant, changefeed)),
                    overwrite_checkpoint_ts: *overwrite_checkpoint_ts,
                })
                .await?
                .into_inner()),
            ChangefeedCommand::Update {
                changefeed,
                config,
                target_ts,
            } => one(feeds
                .update_changefeed(pb::UpdateChangefeedRequest {
                    id: Some(changefeed_ref(tenant, changefeed)),
                    config_toml: read(config)?,
                    target_ts: *target_ts,
                })
                .await?
                .into_inner()),
            ChangefeedCommand::Swap {
                changefeed,
                sink,
                filter,
                plugin,
                sink_config,
                probation_ms,
                probation_flushes,
                probation_retries,
            } => one(feeds
                .swap_sink(pb::SwapSinkRequest {
                    id: Some(changefeed_ref(tenant, changefeed)),
                    plugin: sink.clone().or_else(|| plugin.clone()).unwrap_or_default(),
                    sink_toml: match sink_config {
                        Some(path) => read(path)?,
                        None => String::new(),
                    },
                    probation_ms: *probation_ms,
                    probation_flushes: *probation_flushes,
                    probation_retries: *probation_retries,
                    filter: filter.clone().unwrap_or_default(),
                })
                .await?
                .into_inner()),
            ChangefeedCommand::Shadow(cmd) => match cmd {
                ShadowCommand::Start {
                    changefeed,
                    sink,
                    filter,
                    plugin,
                    config,
                    max_lag_ms,
                    max_queued_bytes,
                } => one(feeds
                    .start_shadow(pb::StartShadowRequest {
                        id: Some(changefeed_ref(tenant, changefeed)),
                        plugin: sink.clone().or_else(|| plugin.clone()).unwrap_or_default(),
                        filter: filter.clone().unwrap_or_default(),
                        table_toml: match config {
                            Some(path) => read(path)?,
                            None => String::new(),
                        },
                        max_lag_ms: *max_lag_ms,
                        max_queued_bytes: *max_queued_bytes,
                    })
                    .await?
                    .into_inner()),
                ShadowCommand::Status { changefeed } => Out::One(shadow_json(
                    &feeds
                        .get_shadow(changefeed_ref(tenant, changefeed))
                        .await?
                        .into_inner(),
                )),
                ShadowCommand::Stop { changefeed } => one(feeds
                    .stop_shadow(changefeed_ref(tenant, changefeed))
                    .await?
                    .into_inner()),
                ShadowCommand::Promote {
                    changefeed,
                    probation_ms,
                    probation_flushes,
                    probation_retries,
                } => one(feeds
                    .promote_shadow(pb::PromoteShadowRequest {
                        id: Some(changefeed_ref(tenant, changefeed)),
                        probation_ms: *probation_ms,
                        probation_flushes: *probation_flushes,
                        probation_retries: *probation_retries,
                    })
                    .await?
                    .into_inner()),
            },
            ChangefeedCommand::Move {
                changefeed,
                capture,
            } => Out::One(move_json(
                &cluster
                    .move_changefeed(pb::MoveChangefeedRequest {
                        id: Some(changefeed_ref(tenant, changefeed)),
                        capture_id: capture.clone(),
                    })
                    .await?
                    .into_inner(),
            )),
            ChangefeedCommand::MoveTable {
                changefeed,
                table,
                capture,
            } => {
                let m = cluster
                    .move_table(pb::MoveTableRequest {
                        id: Some(changefeed_ref(tenant, changefeed)),
                        table: table.clone(),
                        capture_id: capture.clone(),
                    })
                    .await?
                    .into_inner();
                Out::One(table_move_json(&m))
            }
            ChangefeedCommand::RebalanceTables { changefeed, by } => Out::Rows(
                vec!["id", "table", "from", "to"],
                cluster
                    .rebalance_tables(pb::RebalanceTablesRequest {
                        id: Some(changefeed_ref(tenant, changefeed)),
                        by: by.clone(),
                    })
                    .await?
                    .into_inner()
                    .moves
                    .iter()
                    .map(table_move_json)
                    .collect(),
            ),
            ChangefeedCommand::Rebalance { by } => Out::Rows(
                vec!["id", "from", "to"],
                cluster
                    .rebalance_changefeeds(pb::RebalanceChangefeedsRequest { by: by.clone() })
                    .await?
                    .into_inner()
                    .moves
                    .iter()
                    .map(move_json)
                    .collect(),
            ),
            ChangefeedCommand::Remove { changefeed } => one(feeds
                .remove_changefeed(changefeed_ref(tenant, changefeed))
                .await?
                .into_inner()),
            ChangefeedCommand::Synced { changefeed } => {
                let s = feeds
                    .get_synced_status(changefeed_ref(tenant, changefeed))
                    .await?
                    .into_inner();
                Out::One(json!({
                    "synced": s.synced,
                    "checkpoint-ts": s.checkpoint_ts,
                    "puller-resolved-ts": s.puller_resolved_ts,
                    "last-synced-ts": s.last_synced_ts,
                    "now-ts": s.now_ts,
                    "info": s.info,
                }))
            }
        },
        CliCommand::Plugin(cmd) => match cmd {
            PluginCommand::Upload { file, id, kind } => {
                let bytes = std::fs::read(file).map_err(|e| {
                    tonic::Status::invalid_argument(format!("cannot read {}: {e}", file.display()))
                })?;
                let sha256 = sluice_registry::hex_sha256(&bytes);
                let world = if kind == "sink" {
                    pb::PluginWorld::Sink
                } else {
                    pb::PluginWorld::Filter
                };
                let header = pb::UploadPluginRequest {
                    part: Some(pb::upload_plugin_request::Part::Header(pb::PluginHeader {
                        id: Some(plugin_ref(tenant, id)?),
                        world: world.into(),
                        sha256,
                    })),
                };
                let chunks = bytes.chunks(1 << 20).map(|c| pb::UploadPluginRequest {
                    part: Some(pb::upload_plugin_request::Part::Chunk(c.to_vec())),
                });
                let messages: Vec<_> = std::iter::once(header).chain(chunks).collect();
                let p = plugins
                    .upload_plugin(tokio_stream::iter(messages))
                    .await?
                    .into_inner();
                Out::One(plugin_json(&p))
            }
            PluginCommand::List => {
                let list = plugins
                    .list_plugins(pb::ListPluginsRequest {
                        tenant: tenant.into(),
                    })
                    .await?
                    .into_inner();
                Out::Rows(
                    vec!["id", "world", "size-bytes", "sha256", "used-by"],
                    list.plugins.iter().map(plugin_json).collect(),
                )
            }
            PluginCommand::Remove { id } => Out::One(plugin_json(
                &plugins
                    .delete_plugin(plugin_ref(tenant, id)?)
                    .await?
                    .into_inner(),
            )),
            PluginCommand::Rollout {
                from,
                to,
                batch_size,
                probation_ms,
                probation_flushes,
                probation_retries,
            } => {
                let mut stream = plugins
                    .rollout_plugin(pb::RolloutRequest {
                        tenant: tenant.into(),
                        from: from.clone(),
                        to: to.clone(),
                        batch_size: *batch_size,
                        probation_ms: *probation_ms,
                        probation_flushes: *probation_flushes,
                        probation_retries: *probation_retries,
                    })
                    .await?
                    .into_inner();
                let mut steps = Vec::new();
                let mut last = None;
                while let Some(event) = stream.message().await? {
                    let v = rollout_json(&event);
                    if event.changefeed.is_empty() {
                        last = Some(event);
                        break;
                    }
                    // Each step as it happens (a rollout waits for every
                    // probation), unless one JSON document is wanted.
                    if args.output == Output::Table {
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(
                            out,
                            "{:<32}  {:<10}  {:<12}  {}",
                            event.changefeed, event.role, event.state, event.reason
                        );
                        let _ = out.flush();
                    }
                    steps.push(v);
                }
                let Some(last) = last else {
                    return Err(tonic::Status::unavailable(
                        "the server ended the rollout without a summary; see each changefeed's swaps",
                    ));
                };
                if last.state == "stopped" {
                    return Err(tonic::Status::aborted(format!(
                        "the rollout stopped: {} swapped, {} failed, {} skipped, {} not tried",
                        last.swapped, last.failed, last.skipped, last.remaining
                    )));
                }
                let summary = rollout_json(&last);
                match args.output {
                    Output::Json => Out::One(json!({"steps": steps, "summary": summary})),
                    Output::Table => Out::One(summary),
                }
            }
        },
        CliCommand::Tenant(cmd) => {
            let named = |name: &str| pb::TenantRef { name: name.into() };
            match cmd {
                TenantCommand::Create { name } => Out::One(tenant_json(
                    &tenants.create_tenant(named(name)).await?.into_inner(),
                )),
                TenantCommand::List => {
                    let list = tenants
                        .list_tenants(pb::ListTenantsRequest {})
                        .await?
                        .into_inner();
                    Out::Rows(
                        vec!["name", "changefeeds", "plugins", "plugin-bytes", "tokens"],
                        list.tenants.iter().map(tenant_json).collect(),
                    )
                }
                TenantCommand::Get { name } => Out::One(tenant_json(
                    &tenants
                        .get_tenant(named(name.as_deref().unwrap_or(tenant)))
                        .await?
                        .into_inner(),
                )),
                TenantCommand::Remove { name } => Out::One(tenant_json(
                    &tenants.remove_tenant(named(name)).await?.into_inner(),
                )),
                TenantCommand::Quota(quota) => {
                    let QuotaCommand::Set {
                        name,
                        max_changefeeds,
                        max_plugin_bytes,
                        max_plugin_versions,
                        max_plugin_memory,
                        max_buffer_bytes,
                        max_sql_connections,
                        cpu_weight,
                        max_cpu_millicores,
                        max_plugin_concurrency,
                        egress,
                    } = &**quota;
                    let current = tenants.get_tenant(named(name)).await?.into_inner();
                    let mut quota = current.quota.unwrap_or_default();
                    if let Some(text) = egress {
                        quota.egress = (text != "none").then(|| pb::Egress {
                            rules: text
                                .split(',')
                                .map(str::trim)
                                .filter(|r| !r.is_empty())
                                .map(String::from)
                                .collect(),
                        });
                    }
                    for (slot, flag, value, size) in [
                        (
                            &mut quota.max_changefeeds,
                            "--max-changefeeds",
                            max_changefeeds,
                            false,
                        ),
                        (
                            &mut quota.max_plugin_bytes,
                            "--max-plugin-bytes",
                            max_plugin_bytes,
                            true,
                        ),
                        (
                            &mut quota.max_plugin_versions,
                            "--max-plugin-versions",
                            max_plugin_versions,
                            false,
                        ),
                        (
                            &mut quota.max_plugin_memory,
                            "--max-plugin-memory",
                            max_plugin_memory,
                            true,
                        ),
                        (
                            &mut quota.max_buffer_bytes,
                            "--max-buffer-bytes",
                            max_buffer_bytes,
                            true,
                        ),
                        (
                            &mut quota.max_sql_connections,
                            "--max-sql-connections",
                            max_sql_connections,
                            false,
                        ),
                        (&mut quota.cpu_weight, "--cpu-weight", cpu_weight, false),
                        (
                            &mut quota.max_cpu_millicores,
                            "--max-cpu-millicores",
                            max_cpu_millicores,
                            false,
                        ),
                        (
                            &mut quota.max_plugin_concurrency,
                            "--max-plugin-concurrency",
                            max_plugin_concurrency,
                            false,
                        ),
                    ] {
                        if let Some(v) = quota_flag(flag, value.as_ref(), size)? {
                            *slot = v;
                        }
                    }
                    Out::One(tenant_json(
                        &tenants
                            .set_tenant_quota(pb::SetTenantQuotaRequest {
                                name: name.clone(),
                                quota: Some(quota),
                            })
                            .await?
                            .into_inner(),
                    ))
                }
            }
        }
        CliCommand::Token(cmd) => match cmd {
            TokenCommand::Create {
                role,
                expires_in,
                description,
            } => {
                let expires_at_ms = match expires_in {
                    None => 0,
                    Some(text) => {
                        let (now, d) = (since_epoch(), duration_flag("--expires-in", text)?);
                        now.checked_add(d)
                            .and_then(|at| u64::try_from(at.as_millis()).ok())
                            .ok_or_else(|| {
                                tonic::Status::invalid_argument("--expires-in is too far away")
                            })?
                    }
                };
                let made = tenants
                    .create_token(pb::CreateTokenRequest {
                        tenant: tenant.into(),
                        role: role.clone(),
                        expires_at_ms,
                        description: description.clone(),
                    })
                    .await?
                    .into_inner();
                let mut v = token_json(&made.info.unwrap_or_default());
                v["token"] = Value::String(made.token);
                Out::One(v)
            }
            TokenCommand::List { all_tenants } => {
                let list = tenants
                    .list_tokens(pb::ListTokensRequest {
                        tenant: if *all_tenants {
                            "*".into()
                        } else {
                            tenant.into()
                        },
                    })
                    .await?
                    .into_inner();
                Out::Rows(
                    vec!["id", "tenant", "role", "state", "expires", "description"],
                    list.tokens.iter().map(token_json).collect(),
                )
            }
            TokenCommand::Revoke { id } => Out::One(token_json(
                &tenants
                    .revoke_token(pb::TokenRef { id: id.clone() })
                    .await?
                    .into_inner(),
            )),
            TokenCommand::Whoami => Out::One(token_json(
                &tenants.who_am_i(pb::WhoAmIRequest {}).await?.into_inner(),
            )),
        },
        CliCommand::Audit { since, limit } => {
            let since_ms = match since {
                None => 0,
                Some(text) => {
                    let d = duration_flag("--since", text)?;
                    since_epoch().saturating_sub(d).as_millis() as u64
                }
            };
            let list = tenants
                .list_audit(pb::ListAuditRequest {
                    tenant: tenant.into(),
                    since_ms,
                    limit: *limit,
                })
                .await?
                .into_inner();
            Out::Rows(
                vec![
                    "at", "token", "role", "address", "action", "tenant", "outcome", "message",
                ],
                list.entries.iter().map(audit_json).collect(),
            )
        }
        CliCommand::Capture(CaptureCommand::List) => {
            let list = cluster
                .list_captures(pb::ListCapturesRequest {})
                .await?
                .into_inner();
            Out::Rows(
                vec![
                    "id",
                    "address",
                    "owner",
                    "changefeeds",
                    "tables",
                    "rows-per-s",
                    "draining",
                    "version",
                ],
                list.captures.iter().map(capture_json).collect(),
            )
        }
        CliCommand::Capture(CaptureCommand::Drain {
            capture,
            wait,
            cancel,
        }) => {
            let request = pb::DrainCaptureRequest {
                capture_id: capture.clone(),
                cancel: *cancel,
            };
            let mut remaining = cluster
                .drain_capture(request.clone())
                .await?
                .into_inner()
                .remaining;
            let started = std::time::Instant::now();
            while *wait && remaining > 0 {
                eprintln!(
                    "draining {capture}: {remaining} changefeed(s) left after {} s",
                    started.elapsed().as_secs()
                );
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                remaining = cluster
                    .drain_capture(request.clone())
                    .await?
                    .into_inner()
                    .remaining;
            }
            Out::One(json!({"capture": capture, "draining": !cancel, "remaining": remaining}))
        }
        CliCommand::Status => {
            let health = cluster.health(pb::HealthRequest {}).await?.into_inner();
            let owner = cluster
                .get_owner(pb::GetOwnerRequest {})
                .await
                .map(|r| r.into_inner());
            Out::One(json!({
                "healthy": health.healthy,
                "detail": health.detail,
                "owner": owner.as_ref().map(|o| o.id.clone()).unwrap_or_default(),
                "owner-address": owner.map(|o| o.address).unwrap_or_default(),
            }))
        }
    })
}

fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(cell).collect::<Vec<_>>().join(","),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn print(w: &mut impl Write, output: Output, out: &Out) -> std::io::Result<()> {
    match (output, out) {
        (Output::Json, Out::Rows(_, rows)) => {
            writeln!(w, "{}", serde_json::to_string_pretty(rows).expect("json"))
        }
        (Output::Json, Out::One(v)) => {
            writeln!(w, "{}", serde_json::to_string_pretty(v).expect("json"))
        }
        (Output::Table, Out::Rows(columns, rows)) => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| columns.iter().map(|c| cell(&r[*c])).collect())
                .collect();
            let widths: Vec<usize> = columns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    cells
                        .iter()
                        .map(|r| r[i].len())
                        .chain([c.len()])
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let mut line = |values: Vec<String>| {
                let text: Vec<String> = values
                    .iter()
                    .zip(&widths)
                    .map(|(v, w)| format!("{v:<w$}"))
                    .collect();
                writeln!(w, "{}", text.join("  ").trim_end())
            };
            line(columns.iter().map(|c| c.to_uppercase()).collect())?;
            for r in cells {
                line(r)?;
            }
            Ok(())
        }
        (Output::Table, Out::One(v)) => print_object(w, v, ""),
    }
}

fn print_object(w: &mut impl Write, v: &Value, indent: &str) -> std::io::Result<()> {
    let Some(map) = v.as_object() else {
        return writeln!(w, "{indent}{}", cell(v));
    };
    // The changefeed file is long: it goes last.
    let long_last = map
        .iter()
        .filter(|(k, _)| k.as_str() != "config")
        .chain(map.get_key_value("config"));
    for (k, v) in long_last {
        match v {
            Value::Object(_) => {
                writeln!(w, "{indent}{k}:")?;
                print_object(w, v, &format!("{indent}  "))?;
            }
            Value::String(s) if s.contains('\n') => {
                writeln!(w, "{indent}{k}: |")?;
                for line in s.lines() {
                    writeln!(w, "{indent}  {line}")?;
                }
            }
            Value::Array(a) if a.iter().any(Value::is_object) => {
                writeln!(w, "{indent}{k}:")?;
                for item in a {
                    writeln!(
                        w,
                        "{indent}  - {}",
                        serde_json::to_string(item).expect("json")
                    )?;
                }
            }
            _ => writeln!(w, "{indent}{k}: {}", cell(v))?,
        }
    }
    Ok(())
}
