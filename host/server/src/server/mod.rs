//! `sluice server`: wires the owner and the processors of one capture, the gRPC
//! admin API and the HTTP listener (`/metrics`, `/healthz`, `/api/v1/`). Single
//! node for now: the capture registers itself and campaigns for ownership in the
//! meta store with its lease (`sluice_owner::election`), which leaves the seams
//! for a cluster.

mod context;
mod http_forward;
mod listen;
mod standby;
mod work_load;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice_api::tls::Listener;
use sluice_api::{Api, Node};
use sluice_capture::{Agent, Capture};
use sluice_config::ServerLimits;
use sluice_meta::{EmbeddedMetaStore, EtcdMetaStore, MetaStore, keys};
use sluice_owner::election::ElectionError;
use sluice_owner::{
    Assigner, BackoffConfig, CaptureInfo, GiveUp, MetaRecords, Owner, OwnerConfig, Registration,
};
use sluice_registry::PluginRegistry;
use sluice_runtime::{PluginRuntime, RuntimeConfig};
use tokio::sync::mpsc;

use context::ServerContext;

/// `sluice server` options.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Where the server keeps its state: the embedded meta store, plugins,
    /// precompiled artifacts and the plugins' data directories.
    #[arg(long, default_value = ".sluice-server")]
    pub data_dir: PathBuf,
    /// Use etcd at these endpoints (comma-separated) instead of the embedded store.
    #[arg(long, value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// The gRPC admin API (`sluice cli` talks to it).
    #[arg(long, default_value = "127.0.0.1:8300")]
    pub addr: SocketAddr,
    /// The HTTP listener: `/metrics`, `/healthz`, `/api/v1/`.
    #[arg(long, default_value = "127.0.0.1:8301")]
    pub http_addr: SocketAddr,
    /// Where the other servers of a cluster reach this one's gRPC listener
    /// (`host:port`, `[v6]:port` for IPv6): API calls a standby forwards to
    /// the owner, and table shipments. By default --addr as bound, which must
    /// then not be an unspecified address such as 0.0.0.0 with --etcd.
    #[arg(long)]
    pub advertise_addr: Option<String>,
    /// Where the other servers of a cluster reach this one's HTTP listener
    /// (`host:port`): HTTP API calls a standby forwards to the owner. By
    /// default the host of --advertise-addr with the port of --http-addr.
    #[arg(long)]
    pub advertise_http_addr: Option<String>,
    /// Largest plugin upload, in MiB (1 to 1024).
    #[arg(long, default_value_t = 64)]
    pub max_plugin_mib: u64,
    /// Most bytes this server keeps on disk of each of its plugin caches
    /// (precompiled artifacts, and copies of plugin files read from an object
    /// store), in MiB (64 to 1048576): past it the least recently used go, to
    /// be compiled or read again when next loaded.
    #[arg(long, default_value_t = 2048)]
    pub plugin_cache_mib: u64,
    /// Most bytes of all uploads in progress at once, in MiB (at least
    /// --max-plugin-mib, at most 16384): an upload past it is refused, to retry.
    #[arg(long, default_value_t = 256)]
    pub max_uploads_mib: u64,
    /// Wait after the first retryable error of a changefeed, in milliseconds (then
    /// doubling up to --backoff-max-ms, with 10% jitter).
    #[arg(long, default_value_t = 10_000)]
    pub backoff_initial_ms: u64,
    #[arg(long, default_value_t = 600_000)]
    pub backoff_max_ms: u64,
    /// A changefeed whose checkpoint has not moved for this long after an error fails.
    #[arg(long, default_value_t = 1_800_000)]
    pub fail_after_ms: u64,
    /// Largest `call-timeout-ms` (CPU time of one plugin call) a changefeed may
    /// ask for, in milliseconds (1 to 600000).
    #[arg(long, default_value_t = 60_000)]
    pub max_call_timeout_ms: u64,
    /// Largest `host-call-timeout-ms` (wall time of one plugin call, waits in
    /// host calls included) a changefeed may ask for, in milliseconds (1 to 600000).
    #[arg(long, default_value_t = 300_000)]
    pub max_host_call_timeout_ms: u64,
    /// Largest `max-resources` (host resources one plugin instance may hold:
    /// open files, sockets, streams, HTTP fields) a changefeed may ask for (16 to
    /// 65536).
    #[arg(long, default_value_t = 4096)]
    pub max_plugin_resources: u64,
    /// How long a stopping processor (pause, remove, shutdown) may take to write,
    /// flush and close before it is cancelled, in milliseconds (100 to 600000);
    /// a cancelled processor's unflushed rows are replayed, flagged, next time.
    #[arg(long, default_value_t = 30_000)]
    pub stop_timeout_ms: u64,
    /// Plugin instances that may be alive at once in this server (8 to 1024):
    /// the size of the instance pool. Every changefeed holds one per filter and
    /// one for its sink; memories, tables and core instances are pooled at the
    /// per-component maximums times this, so only whole instances can run out.
    #[arg(long, default_value_t = 128)]
    pub max_plugin_instances: u32,
    /// Plugin instances one tenant's changefeeds may hold (each reserves one per
    /// filter and one for its sink while it is not removed), so that one tenant
    /// cannot take the pool others need: 1 to --max-plugin-instances.
    #[arg(long, default_value_t = 64)]
    pub max_tenant_plugin_instances: u32,
    /// Where changefeeds with `[consistent] level = "eventual"` keep their
    /// redo logs (`<tenant>/<changefeed>` under it): `file:///dir` or
    /// `s3://bucket/prefix?endpoint=...&region=...` (credentials best from
    /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY). By default `redo/` in the
    /// data dir, which a disaster that takes the data dir takes too.
    #[arg(long)]
    pub redo_storage: Option<String>,
    /// Where uploaded plugin files are kept, shared by every server of a
    /// cluster (ADR 0012): `file:///dir` (a shared mount) or
    /// `s3://bucket/prefix?endpoint=...&region=...`. The first server started
    /// with it records it, and a server started with another one is refused.
    /// By default `plugins/` in the data dir, which only a single server
    /// reads; a server reads another store's files through a cache in
    /// `plugin-cache/` of its data dir.
    #[arg(long)]
    pub plugin_store: Option<String>,
    /// Ask for a token on `/metrics` and `/healthz` too (by default they
    /// answer anyone who reaches the HTTP listener, for Prometheus and load
    /// balancers; `/api/v1` always needs one). A tenant's token then sees
    /// only its own tenant's series.
    #[arg(long)]
    pub metrics_auth: bool,
    /// Serve both listeners over TLS with this certificate chain (PEM; with
    /// --tls-key). Both files are read again on SIGHUP.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// With --tls-cert in a cluster (--etcd): the CA certificates (PEM) the
    /// other servers' certificates chain to. Servers then reach each other
    /// (a standby forwarding calls to the owner, a capture receiving its
    /// tables' shipment) over TLS, each certificate checked against these and
    /// against the host of the address its server advertises. Every server
    /// of a cluster runs with TLS, or none.
    #[arg(long, requires = "tls_cert")]
    pub peer_ca: Option<PathBuf>,
    /// Audit entries kept in the meta store (the newest; 100 to 1000000).
    #[arg(long, default_value_t = 10_000)]
    pub audit_retention: u64,
    /// The capture's lease, in seconds (2 to 600; TiCDC's capture session
    /// TTL): a killed server's registration and ownership end this long after
    /// its last renewal, and a server that cannot renew it for four fifths of
    /// it stops by itself. A transaction its sinks leave idle downstream for
    /// four fifths of it (the process was paused) is rolled back by MariaDB
    /// and PostgreSQL.
    #[arg(long, default_value_t = sluice_owner::election::DEFAULT_LEASE_TTL.as_secs())]
    pub lease_ttl_s: u64,
}

/// A stable capture id per data dir: task positions are saved under it, so a
/// restarted server finds its own.
fn capture_id(data_dir: &std::path::Path) -> anyhow::Result<String> {
    let path = data_dir.join("capture-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim().to_string();
        keys::validate_name(keys::NameKind::Capture, &id)
            .with_context(|| format!("{} is damaged; delete it", path.display()))?;
        return Ok(id);
    }
    // Unique enough for one cluster: the time, the process and the directory.
    let seed = format!(
        "{:?} {} {}",
        std::time::SystemTime::now(),
        std::process::id(),
        data_dir.display()
    );
    let digest = <sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes());
    let id: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, &id)?;
    std::fs::rename(&tmp, &path)?;
    Ok(id)
}

impl ServeArgs {
    /// Checks every number against its range (before anything starts).
    fn validate(&self) -> anyhow::Result<()> {
        if !(1..=1024).contains(&self.max_plugin_mib) {
            anyhow::bail!(
                "--max-plugin-mib is {}; it must be between 1 and 1024",
                self.max_plugin_mib
            );
        }
        if !(64..=1_048_576).contains(&self.plugin_cache_mib) {
            anyhow::bail!(
                "--plugin-cache-mib is {}; it must be between 64 and 1048576",
                self.plugin_cache_mib
            );
        }
        for (flag, value) in [
            ("--max-call-timeout-ms", self.max_call_timeout_ms),
            ("--max-host-call-timeout-ms", self.max_host_call_timeout_ms),
        ] {
            if !(1..=sluice_config::bounds::MAX_TIMEOUT_MS).contains(&value) {
                anyhow::bail!("{flag} is {value}; it must be between 1 and 600000");
            }
        }
        if !(8..=1024).contains(&self.max_plugin_instances) {
            anyhow::bail!(
                "--max-plugin-instances is {}; it must be between 8 and 1024",
                self.max_plugin_instances
            );
        }
        if !(1..=self.max_plugin_instances).contains(&self.max_tenant_plugin_instances) {
            anyhow::bail!(
                "--max-tenant-plugin-instances is {}; it must be between 1 and --max-plugin-instances ({})",
                self.max_tenant_plugin_instances,
                self.max_plugin_instances
            );
        }
        if !(100..=600_000).contains(&self.stop_timeout_ms) {
            anyhow::bail!(
                "--stop-timeout-ms is {}; it must be between 100 and 600000",
                self.stop_timeout_ms
            );
        }
        if !(100..=1_000_000).contains(&self.audit_retention) {
            anyhow::bail!(
                "--audit-retention is {}; it must be between 100 and 1000000",
                self.audit_retention
            );
        }
        if !(16..=65_536).contains(&self.max_plugin_resources) {
            anyhow::bail!(
                "--max-plugin-resources is {}; it must be between 16 and 65536",
                self.max_plugin_resources
            );
        }
        if !(2..=600).contains(&self.lease_ttl_s) {
            anyhow::bail!(
                "--lease-ttl-s is {}; it must be between 2 and 600",
                self.lease_ttl_s
            );
        }
        if self.tls_cert.is_some() && !self.etcd.is_empty() && self.peer_ca.is_none() {
            anyhow::bail!(
                "--tls-cert with --etcd: give --peer-ca FILE, the CA certificates the other \
                 servers' certificates chain to (the servers reach each other over TLS)"
            );
        }
        if let Some(a) = &self.advertise_http_addr {
            advertised("--advertise-http-addr", a)?;
        }
        if let Some(a) = &self.advertise_addr {
            advertised("--advertise-addr", a)?;
        } else if !self.etcd.is_empty() && self.addr.ip().is_unspecified() {
            anyhow::bail!(
                "--addr {} is not an address other servers can reach; give the one they \
                 reach this server at with --advertise-addr (host:port)",
                self.addr
            );
        }
        if !(self.max_plugin_mib..=16_384).contains(&self.max_uploads_mib) {
            anyhow::bail!(
                "--max-uploads-mib is {}; it must be between --max-plugin-mib ({}) and 16384",
                self.max_uploads_mib,
                self.max_plugin_mib
            );
        }
        Ok(())
    }
}

/// The way to the other servers over TLS, trusting the certificates in the
/// PEM file at `path` (--peer-ca); refused at start when it holds none.
fn peer_tls(path: &std::path::Path) -> anyhow::Result<sluice_ship::Peers> {
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(path).with_context(|| format!("--peer-ca {}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("--peer-ca {}: not PEM certificates", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!("--peer-ca {} holds no certificate", path.display());
    }
    Ok(sluice_ship::Peers::tls(&pem))
}

/// The address of the HTTP listener on `port` at the host of the advertised
/// gRPC address `advertised` (`host:port`, `[v6]:port`).
fn http_advertised(advertised: &str, port: u16) -> String {
    match advertised.rsplit_once(':') {
        Some((host, _)) => format!("{host}:{port}"),
        None => format!("{advertised}:{port}"),
    }
}

/// Checks an advertised address given with `flag`: `host:port` with a port
/// of 1 to 65535.
fn advertised(flag: &str, address: &str) -> anyhow::Result<()> {
    let bad = |why: &str| anyhow::anyhow!("{flag} {address:?} {why}");
    if address.len() > 261 || address.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("is not a host:port"));
    }
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| bad("has no :port"))?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(bad("has no port between 1 and 65535")),
    }
    let bare_v6 = host.contains(':') && !(host.starts_with('[') && host.ends_with(']'));
    if host.is_empty() || bare_v6 || host.contains('/') {
        return Err(bad("is not a host:port (an IPv6 address goes in brackets)"));
    }
    if host
        .trim_matches(['[', ']'])
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
    {
        return Err(bad(
            "is an unspecified address; other servers cannot reach it",
        ));
    }
    Ok(())
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    args.validate()?;
    let data_dir = args.data_dir.clone();
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("cannot create the data dir {}", data_dir.display()))?;
    let store: Arc<dyn MetaStore> = if args.etcd.is_empty() {
        Arc::new(EmbeddedMetaStore::open(data_dir.join(EmbeddedMetaStore::FILE_NAME)).await?)
    } else {
        Arc::new(
            EtcdMetaStore::connect(&args.etcd)
                .await
                .with_context(|| format!("cannot reach etcd at {}", args.etcd.join(",")))?,
        )
    };
    keys::ensure_layout(store.as_ref()).await?;
    let backoff = BackoffConfig {
        initial_interval_ms: args.backoff_initial_ms,
        max_interval_ms: args.backoff_max_ms,
        fail_after_ms: args.fail_after_ms,
        ..BackoffConfig::default()
    };
    backoff.validate()?;

    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(sluice_api::tls::Tls::load(cert, key)?),
        _ => None,
    };
    let peers = match &args.peer_ca {
        Some(path) => peer_tls(path)?,
        None => sluice_ship::Peers::plain(),
    };
    // Listeners first, so that a taken port fails before anything starts.
    let grpc_listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("cannot listen on {} (--addr)", args.addr))?;
    let http_listener = tokio::net::TcpListener::bind(args.http_addr)
        .await
        .with_context(|| format!("cannot listen on {} (--http-addr)", args.http_addr))?;
    let addr = grpc_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;
    let grpc_conns = listen::Connections::accept(grpc_listener, tls.as_ref(), Listener::Grpc)?;
    let http_conns = listen::Connections::accept(http_listener, tls.as_ref(), Listener::Http)?;

    let files = plugin_files(&args, store.as_ref()).await?;
    warn_if_records_lost(store.as_ref(), &files).await?;
    let id = capture_id(&data_dir)?;
    let started_at_ms = sluice_owner::Clock::now_ms(&sluice_owner::SystemClock);
    let lease_ttl = Duration::from_secs(args.lease_ttl_s);
    let advertised = args
        .advertise_addr
        .clone()
        .unwrap_or_else(|| addr.to_string());
    // The HTTP listener, as other servers reach it: the advertised host, the
    // listener's port.
    let advertised_http = args
        .advertise_http_addr
        .clone()
        .unwrap_or_else(|| http_advertised(&advertised, http_addr.port()));
    let registration = register(
        store.clone(),
        &id,
        (&advertised, &advertised_http),
        started_at_ms,
        lease_ttl,
    )
    .await?;
    let (fatal, mut fatal_rx) = tokio::sync::watch::channel(None);
    // Stops the server: it can no longer act safely.
    let give_up: GiveUp = Arc::new(move |why: String| {
        tracing::error!(%why, "The server stops.");
        fatal.send_replace(Some(why));
    });
    let keeper = tokio::spawn({
        let (registration, give_up) = (registration.clone(), give_up.clone());
        async move {
            let why = sluice_owner::election::keep_alive(&registration).await;
            give_up(format!("{why}; start it again"));
        }
    });
    // Processors run on a runtime of their own: rows moving as fast as they go
    // never queue the API's requests (or the owner's work) behind them.
    let work = WorkRuntime::start()?;
    let runtime = PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(data_dir.join("precompiled")),
        cache_max_bytes: args.plugin_cache_mib << 20,
        max_instances: args.max_plugin_instances,
        ..RuntimeConfig::default()
    })?;
    let plugin_shares = runtime.shares().clone();
    // Ends when `serve` returns (the sender is dropped).
    let (_shares_kept, shares_stop) = tokio::sync::watch::channel(());
    tokio::spawn(keep_shares(
        sluice_auth::Tenancy::new(store.clone()),
        plugin_shares.clone(),
        shares_stop,
    ));
    // Every capture loads plugins; only the owner writes their records (its
    // guard is added once it is elected).
    let registry = Arc::new(PluginRegistry::new(
        store.clone(),
        runtime,
        files,
        args.max_plugin_mib << 20,
    ));
    let limits = ServerLimits {
        max_call_timeout_ms: args.max_call_timeout_ms,
        max_host_call_timeout_ms: args.max_host_call_timeout_ms,
        max_resources: args.max_plugin_resources,
        max_tenant_instances: u64::from(args.max_tenant_plugin_instances),
    };
    let stop_timeout = Duration::from_millis(args.stop_timeout_ms);
    let redo_root = match &args.redo_storage {
        None => sluice_redo::StorageUri::Local(std::path::absolute(data_dir.join("redo"))?),
        Some(uri) => sluice_redo::StorageUri::parse(uri)
            .map_err(|e| anyhow::anyhow!("--redo-storage: {e}"))?,
    };
    // The shipments of the runs this capture reads for others, served on the
    // gRPC listener whether this capture is the owner or a standby.
    let shipping = sluice_ship::Shipping::default();
    let capture = Arc::new(Capture::new(Arc::new(sluice_capture::Ctx {
        redo_root,
        store: store.clone(),
        registry: registry.clone(),
        data_dir: data_dir.clone(),
        capture_id: id.clone(),
        capture_guard: registration.guard(),
        fence: registration.fence().clone(),
        limits,
        stop_timeout,
        reserved: sluice_capture::Reserved::new(
            vec![("gRPC listener", addr), ("HTTP listener", http_addr)],
            args.etcd.clone(),
        ),
        work: work.handle().clone(),
        shipping: shipping.clone(),
        peers: peers.clone(),
    })));
    let mut term_signal =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut agent = None;
    let term = match registration.try_campaign().await {
        Ok(term) => term,
        Err(ElectionError::OtherOwner { owner }) if args.etcd.is_empty() => {
            // Not in a cluster: another process holds this data dir's store.
            keeper.abort();
            let _ = registration.resign().await;
            anyhow::bail!(
                "capture {} owns this data dir's meta store; run one server per data dir",
                owner.id
            )
        }
        Err(ElectionError::OtherOwner { owner }) => {
            println!(
                "sluice server standby: grpc {addr} http {http_addr} capture {id} owner {}",
                owner.id
            );
            tracing::info!(capture = %id, owner = %owner.id, "Standing by: another capture is the owner; this one takes over when it is gone, and forwards API calls to it meanwhile.");
            // A standby runs the work the owner places on it meanwhile.
            agent = Some(Agent::start(capture.clone()));
            let standby = standby::Standby {
                registration: &registration,
                store: store.clone(),
                capture_id: id.clone(),
                grpc: &grpc_conns,
                http: &http_conns,
                shipping: shipping.clone(),
                peers: peers.clone(),
                metrics: standby::StandbyMetrics {
                    capture: capture.clone(),
                    auth: args.metrics_auth.then(|| {
                        Arc::new(sluice_auth::Authenticator::new(sluice_auth::Tenancy::new(
                            store.clone(),
                        )))
                    }),
                },
            };
            match standby.serve(&mut fatal_rx, &mut term_signal).await {
                Ok(Some(term)) => term,
                Ok(None) => {
                    // Its work is flushed and reported stopped; the owner
                    // places it elsewhere once the registration is gone.
                    eprintln!("sluice server: stopping: flushing every changefeed");
                    if let Some(agent) = agent.take() {
                        agent.stop(false).await;
                    }
                    keeper.abort();
                    let _ = registration.resign().await;
                    eprintln!("sluice server: stopped (a standby)");
                    return Ok(());
                }
                Err(e) => {
                    if let Some(agent) = agent.take() {
                        agent.stop(true).await;
                    }
                    keeper.abort();
                    let _ = registration.resign().await;
                    return Err(e);
                }
            }
        }
        Err(e) => {
            keeper.abort();
            let _ = registration.resign().await;
            return Err(e).context("campaigning for ownership");
        }
    };
    tracing::info!(capture = %id, term = term.term.get(), "This capture is the owner.");
    let owner_guard = term.guard;
    registry.guard_writes(owner_guard.clone());
    // Tenants made before tenants had records keep working; the first start
    // writes the admin token `sluice cli` finds in the data dir.
    let tenancy = sluice_auth::Tenancy::new(store.clone());
    let adopted = tenancy.adopt_tenants().await?;
    if !adopted.is_empty() {
        tracing::info!(tenants = ?adopted, "Tenants without a record were given one.");
    }
    let (token_file, token_works) = tenancy
        .bootstrap_admin(&data_dir, started_at_ms)
        .await
        .context("the server's admin token")?;
    if token_works {
        tracing::info!(file = %token_file.display(), "The admin token is in this file (sluice cli reads it); keep it private.");
    } else {
        tracing::warn!(file = %token_file.display(), "The admin token in this file was revoked; use another admin token, or delete the file and restart to have a new one made.");
    }
    if token_works {
        // `sluice cli` on this machine finds the token by the server's address.
        if let Err(e) = sluice_auth::local::leave_note(addr, &token_file) {
            tracing::debug!(error = %e, "No note of the admin token for local clients.");
        }
    }
    let auth = Arc::new(sluice_auth::Authenticator::new(tenancy.clone()));
    let audit = sluice_auth::AuditLog::start(store.clone(), args.audit_retention)
        .await
        .context("the audit log")?;

    let (wake, woken) = mpsc::unbounded_channel();
    let context = Arc::new(ServerContext {
        records: MetaRecords::new(store.clone(), owner_guard.clone(), give_up.clone()),
        // A stopping processor is cancelled at the stop timeout and then reports.
        assigner: Assigner::new(store.clone(), owner_guard, give_up, id.clone(), wake)
            .with_stop_wait(stop_timeout + Duration::from_secs(10)),
        capture: capture.clone(),
    });
    let owner_config = OwnerConfig {
        backoff,
        max_tenant_instances: limits.max_tenant_instances,
    };
    let (owner, owner_task) = match Owner::start(context, owner_config, woken).await {
        Ok(started) => started,
        Err(e) => {
            keeper.abort();
            let _ = registration.resign().await;
            return Err(e.into());
        }
    };
    // This node's capture runs what the owner assigned to it (started after the
    // owner cleared the assignments of earlier owners and made its own; a
    // standby's runs already).
    let agent = agent.unwrap_or_else(|| Agent::start(capture.clone()));
    let node = Arc::new(Node {
        owner: owner.clone(),
        store: store.clone(),
        registry,
        capture,
        capture_id: id.clone(),
        addr,
        started: Instant::now(),
        started_at_ms,
        uploads: Arc::new(tokio::sync::Semaphore::new(
            (args.max_uploads_mib << 20) as usize,
        )),
        upload_budget_mib: args.max_uploads_mib,
        limits,
        stop_timeout,
        tenancy,
        auth: auth.clone(),
        audit: audit.clone(),
        open_metrics: !args.metrics_auth,
        feed_turns: sluice_api::TenantTurns::default(),
        plugin_turns: sluice_api::TenantTurns::default(),
    });

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let api = Api::new(node.clone());
    // grpc.health.v1 for load balancers and orchestrators: SERVING while the meta
    // store answers, NOT_SERVING when it does not and once the server stops.
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    let health_loop = tokio::spawn(report_health(
        node.clone(),
        health_reporter.clone(),
        stop_rx.clone(),
    ));
    // Long plugin calls take the cores the processors leave.
    tokio::spawn(work_load::WorkLoad::new(work.handle()).follow(plugin_shares, stop_rx.clone()));
    let routes = tonic::transport::Server::builder()
        .layer(tower::util::MapResponseLayer::new(
            sluice_api::remap_codec_errors::<tonic::body::Body>,
        ))
        .layer(sluice_api::auth::AuthLayer::new(auth, audit))
        .add_service(health_service)
        .add_service(api.changefeeds())
        .add_service(api.cluster())
        .add_service(api.plugins())
        .add_service(api.tenants())
        .add_service(sluice_ship::ShipService::new(shipping).into_server());
    let app = sluice_api::http::router(node.clone());
    let stopped = |mut stop: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stop.changed().await;
    };
    let grpc_server = tokio::spawn(
        routes.serve_with_incoming_shutdown(grpc_conns.take().await, stopped(stop_rx.clone())),
    );
    let http_server = tokio::spawn(
        axum::serve(http_conns.take().await, app)
            .with_graceful_shutdown(stopped(stop_rx.clone()))
            .into_future(),
    );
    if let Some(tls) = tls.clone() {
        // SIGHUP reads the certificate and key again (a renewed certificate).
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match tls.reload() {
                    Ok(()) => tracing::info!("The TLS certificate was read again."),
                    Err(e) => tracing::warn!(
                        error = format!("{e:#}"),
                        "The TLS certificate could not be read again; the one in use stays."
                    ),
                }
            }
        });
    }
    // One line on stdout for scripts and tests: where to connect.
    println!(
        "sluice server ready: grpc {addr} http {http_addr} capture {id} data-dir {}",
        data_dir.display()
    );
    tracing::info!(%addr, %http_addr, capture = %id, "Server started.");

    let fatal_reason = tokio::select! {
        _ = tokio::signal::ctrl_c() => None,
        _ = term_signal.recv() => None,
        reason = async {
            let _ = fatal_rx.wait_for(Option::is_some).await;
            fatal_rx.borrow().clone()
        } => reason,
    };
    let rest = async move {
        let _ = health_loop.await;
        let _ = grpc_server.await;
        let _ = http_server.await;
        keeper.abort();
        let _ = registration.resign().await;
    };
    if let Some(reason) = fatal_reason {
        // Another owner may be taking over: stop writing at once. This node's
        // capture cancels its work itself (no store needed), while the owner
        // stops taking commands and writes what it still can; a meta store
        // that does not answer (the usual reason to be here) is not waited
        // for past a grace period.
        eprintln!("sluice server: stopping: cancelling every changefeed");
        let _ = stop_tx.send(true);
        let owner_side = async move {
            owner.close().await;
            owner.shutdown(true).await;
            let _ = owner_task.await;
            rest.await;
        };
        let (_, owner_done) = tokio::join!(
            agent.stop(true),
            tokio::time::timeout(FATAL_STOP_GRACE, owner_side)
        );
        if owner_done.is_err() {
            eprintln!(
                "sluice server: the meta store did not answer within {FATAL_STOP_GRACE:?}; \
                 stopped without the owner's last writes"
            );
        }
        anyhow::bail!("sluice server stopped: {reason}");
    }
    // No new admin jobs or processors from here on; then the listeners drain.
    owner.close().await;
    let _ = stop_tx.send(true);
    eprintln!("sluice server: stopping: flushing every changefeed");
    // The owner stops the work through the assignments; the capture's agent
    // carries the stops out and reports them.
    owner.shutdown(false).await;
    agent.stop(false).await;
    let _ = owner_task.await;
    rest.await;
    eprintln!("sluice server: stopped");
    Ok(())
}

/// The cluster's plugin store (`--plugin-store`, else the data dir's), after
/// checking that it is the one the cluster recorded.
async fn plugin_files(
    args: &ServeArgs,
    store: &dyn MetaStore,
) -> anyhow::Result<sluice_registry::PluginFiles> {
    let uri = match &args.plugin_store {
        None => sluice_redo::StorageUri::Local(std::path::absolute(args.data_dir.join("plugins"))?),
        Some(uri) => sluice_redo::StorageUri::parse(uri)
            .map_err(|e| anyhow::anyhow!("--plugin-store: {e}"))?,
    };
    let files = sluice_registry::PluginFiles::open(&uri, &args.data_dir.join("plugin-cache"))
        .await?
        .with_cache_bound(args.plugin_cache_mib << 20);
    // On etcd other servers may join: the store is recorded, and theirs checked.
    files
        .agree(store, !args.etcd.is_empty())
        .await
        .context("the cluster's plugin store")?;
    Ok(files)
}

/// How long a server that must stop (its lease lost, its store unreachable)
/// waits for the owner's last writes and the listeners after its processors
/// are cancelled.
const FATAL_STOP_GRACE: Duration = Duration::from_secs(5);

/// Says so when the plugin store holds uploaded plugins but the meta store holds no
/// record at all: the store was most likely replaced or lost, and every
/// changefeed and plugin record with it.
async fn warn_if_records_lost(
    store: &dyn MetaStore,
    files: &sluice_registry::PluginFiles,
) -> anyhow::Result<()> {
    let records = store.list(&keys::tenants_prefix()).await?.kvs.len();
    let blobs = files.count().await.unwrap_or(0);
    if records == 0 && blobs > 0 {
        tracing::warn!(
            plugin_files = blobs,
            store = %files.location(),
            "The meta store holds no changefeed or plugin records, but the plugin store holds \
             uploaded plugin files: was the meta store replaced or lost? Restore it from a \
             backup, or upload the plugins and create the changefeeds again."
        );
    }
    Ok(())
}

/// Applies the tenants' CPU settings (weight, concurrency, cap) to this
/// capture's plugin threads at start and every few seconds (owner or not), so
/// that a quota set through another server arrives here too; until `stop`
/// is dropped.
async fn keep_shares(
    tenancy: sluice_auth::Tenancy,
    shares: sluice_runtime::CpuShares,
    mut stop: tokio::sync::watch::Receiver<()>,
) {
    loop {
        if let Err(e) = sluice_api::apply_shares(&tenancy, &shares).await {
            tracing::debug!(error = %e, "Tenant CPU shares not refreshed; the last ones stay.");
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(3)) => {}
            _ = stop.changed() => break,
        }
    }
}

/// Keeps the standard health service's answer in step with the server's health
/// (the meta store answers), every second, until the server stops.
async fn report_health(
    node: Arc<Node>,
    reporter: tonic_health::server::HealthReporter,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    use tonic_health::ServingStatus;
    let services = [
        "",
        "sluice.v1.ChangefeedService",
        "sluice.v1.ClusterService",
        "sluice.v1.PluginService",
        "sluice.v1.TenantService",
    ];
    loop {
        let (healthy, _) = node.health().await;
        let status = if healthy {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for service in services {
            reporter.set_service_status(service, status).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => break,
        }
    }
    for service in services {
        reporter
            .set_service_status(service, ServingStatus::NotServing)
            .await;
    }
}

/// Registers the capture (refused while a live capture holds the same id:
/// the same data dir in another process), and ends a drain of it.
async fn register(
    store: Arc<dyn MetaStore>,
    id: &str,
    (address, http_address): (&str, &str),
    started_at_ms: u64,
    lease_ttl: Duration,
) -> anyhow::Result<Registration> {
    let info = CaptureInfo {
        version: 1,
        id: id.to_string(),
        address: address.to_string(),
        http_address: http_address.to_string(),
        sluice_version: env!("CARGO_PKG_VERSION").to_string(),
        started_at_ms,
    };
    match Registration::register(store.clone(), info, lease_ttl).await {
        Ok(registration) => {
            // Back after a drain (a restart for maintenance): it takes work again.
            if store.delete(&keys::drain(id)?).await? {
                tracing::info!("This capture was drained; it takes work again.");
            }
            Ok(registration)
        }
        Err(e @ ElectionError::AlreadyRegistered { .. }) => Err(e.into()),
        Err(e) => Err(e).context("registering the capture"),
    }
}

/// The runtime a server's processors run on, shut down (without waiting for
/// what still runs on it: the agent has stopped every processor by then) when
/// the server's `serve` returns.
struct WorkRuntime(Option<tokio::runtime::Runtime>);

impl WorkRuntime {
    fn start() -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name("sluice-work")
            .enable_all()
            .build()
            .context("the processors' runtime")?;
        Ok(Self(Some(runtime)))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("running until dropped").handle()
    }
}

impl Drop for WorkRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn check(args: &[&str]) -> Result<(), String> {
        let cli = Cli::try_parse_from(std::iter::once("server").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.serve.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn every_number_is_checked_against_its_range() {
        check(&[]).unwrap();
        check(&["--lease-ttl-s", "2"]).unwrap();
        check(&["--lease-ttl-s", "600"]).unwrap();
        for bad in ["0", "1", "601"] {
            assert_eq!(
                check(&["--lease-ttl-s", bad]).unwrap_err(),
                format!("--lease-ttl-s is {bad}; it must be between 2 and 600")
            );
        }
        assert_eq!(
            check(&["--max-plugin-mib", "0"]).unwrap_err(),
            "--max-plugin-mib is 0; it must be between 1 and 1024"
        );
        assert_eq!(
            check(&["--max-plugin-instances", "4"]).unwrap_err(),
            "--max-plugin-instances is 4; it must be between 8 and 1024"
        );
        assert_eq!(
            check(&["--max-uploads-mib", "32"]).unwrap_err(),
            "--max-uploads-mib is 32; it must be between --max-plugin-mib (64) and 16384"
        );
        assert_eq!(
            check(&["--plugin-cache-mib", "63"]).unwrap_err(),
            "--plugin-cache-mib is 63; it must be between 64 and 1048576"
        );
        check(&["--plugin-cache-mib", "64"]).unwrap();
    }

    #[test]
    fn the_advertised_address_is_one_other_servers_can_reach() {
        // The HTTP listener is advertised at the same host.
        assert_eq!(http_advertised("10.0.0.7:8300", 8301), "10.0.0.7:8301");
        assert_eq!(http_advertised("[fd00::7]:8300", 8301), "[fd00::7]:8301");
        assert_eq!(
            http_advertised("cdc-1.internal:8300", 80),
            "cdc-1.internal:80"
        );
        for good in ["10.0.0.7:8300", "cdc-1.internal:8300", "[fd00::7]:8300"] {
            check(&["--advertise-addr", good]).unwrap();
            check(&["--advertise-http-addr", good]).unwrap();
        }
        for bad in [
            "10.0.0.7",
            "10.0.0.7:0",
            "10.0.0.7:99999",
            ":8300",
            "fd00::7:8300",
            "0.0.0.0:8300",
            "[::]:8300",
            "a b:8300",
            "http://x:8300",
        ] {
            let e = check(&["--advertise-addr", bad]).unwrap_err();
            assert!(e.starts_with("--advertise-addr"), "{bad}: {e}");
            let e = check(&["--advertise-http-addr", bad]).unwrap_err();
            assert!(e.starts_with("--advertise-http-addr"), "{bad}: {e}");
        }
        // Listening on every address with etcd needs one.
        let e = check(&["--addr", "0.0.0.0:8300", "--etcd", "http://127.0.0.1:2379"]).unwrap_err();
        assert!(e.contains("--advertise-addr"), "{e}");
        check(&["--addr", "0.0.0.0:8300"]).unwrap();
        // TLS in a cluster needs the CA the other servers' certificates
        // chain to.
        let tls = ["--tls-cert", "c.pem", "--tls-key", "k.pem"];
        check(&tls).unwrap();
        let e = check(&[&tls[..], &["--etcd", "http://127.0.0.1:2379"]].concat()).unwrap_err();
        assert!(e.contains("give --peer-ca FILE"), "{e}");
        check(
            &[
                &tls[..],
                &["--etcd", "http://127.0.0.1:2379", "--peer-ca", "ca.pem"],
            ]
            .concat(),
        )
        .unwrap();
        check(&[
            "--addr",
            "0.0.0.0:8300",
            "--etcd",
            "http://127.0.0.1:2379",
            "--advertise-addr",
            "10.0.0.7:8300",
        ])
        .unwrap();
    }
}
