//! Runtime, quota and capability settings.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// The bound of a plugin cache on disk, unless set: 2 GiB.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 2 << 30;

/// Engine-wide settings.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where precompiled artifacts are kept (`None`: compile on every load).
    pub cache_dir: Option<PathBuf>,
    /// Most bytes of artifacts kept there; past it the least recently used
    /// go (the most recent one stays whatever its size).
    pub cache_max_bytes: u64,
    /// Instances that may be alive at once (pooling allocator slots).
    pub max_instances: u32,
    /// Hard ceiling for any one linear memory, whatever a plugin's quota says.
    pub max_memory_bytes: u64,
    /// Epoch tick; CPU deadlines are rounded up to whole ticks, and a guest
    /// yields to the executor once per tick of guest code.
    pub epoch_tick: Duration,
    /// Most linear memories one component may have (checked when it is loaded:
    /// at upload, a component past it is refused).
    pub max_memories_per_component: u32,
    /// Most tables one component may have.
    pub max_tables_per_component: u32,
    /// Most core instances one component may create.
    pub max_core_instances_per_component: u32,
    /// Polls of guest code on plugin threads that may run at once, shared
    /// between tenants by weight (`None`: one per core).
    pub plugin_turns: Option<usize>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            cache_max_bytes: DEFAULT_CACHE_MAX_BYTES,
            max_instances: 128,
            max_memory_bytes: 1 << 30,
            epoch_tick: Duration::from_millis(5),
            max_memories_per_component: 4,
            max_tables_per_component: 16,
            max_core_instances_per_component: 32,
            plugin_turns: None,
        }
    }
}

/// Quotas of one plugin instance.
#[derive(Debug, Clone)]
pub struct PluginLimits {
    /// Sum of all linear memories of the instance.
    pub memory_bytes: u64,
    /// CPU time per call: the CPU time of the thread running the call while the
    /// guest is polled; waiting (for a host call or for a core) is not counted.
    pub call_timeout: Duration,
    /// Time a call may spend in total, host calls (HTTP, sockets) included.
    pub host_call_timeout: Duration,
    /// Largest batch (wire bytes) sent in one call; defaults to a quarter of the
    /// memory quota, since lowering a batch allocates it inside the guest.
    pub max_batch_bytes: Option<u64>,
    /// Host resources (open files, sockets, streams, HTTP fields, requests and
    /// bodies) one instance may hold at once; creating one more fails the call.
    pub max_resources: usize,
    /// Connections the host may open to each granted database (shared by the
    /// plugin's instances).
    pub sql_connections: usize,
}

impl Default for PluginLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            call_timeout: Duration::from_secs(5),
            host_call_timeout: Duration::from_secs(30),
            max_batch_bytes: None,
            max_resources: 1024,
            sql_connections: 4,
        }
    }
}

impl PluginLimits {
    /// The effective batch bound in bytes.
    pub fn batch_bytes(&self) -> u64 {
        self.max_batch_bytes.unwrap_or(self.memory_bytes / 4)
    }
}

/// What a plugin may touch. Everything is denied unless granted here.
#[derive(Debug, Clone, Default)]
pub struct Capabilities {
    /// A private host directory, visible to the plugin as `/data` (read-write).
    pub data_dir: Option<PathBuf>,
    /// TCP peers the plugin may connect to.
    pub tcp_allow: Vec<SocketAddr>,
    /// Hosts (`name` or `name:port`) the plugin may send HTTP requests to.
    pub http_allow: Vec<String>,
    /// Addresses the plugin never reaches, whatever its grants (a server's
    /// own listeners): an HTTP request whose host resolves to one of them
    /// when it is sent is refused (see [`reaches`]).
    pub reserved: Vec<SocketAddr>,
    /// Databases the host runs statements on for the plugin (the `sql`
    /// interface): (grant name, DSN). A sink only.
    pub sql: Vec<(String, String)>,
    /// Until when the plugin may write anything outside: once it closes, a
    /// sink's calls, its `sql` statements, HTTP requests and new TCP
    /// connections are refused (a capture whose lease may have ended). Open
    /// by default.
    pub fence: sluice_core::WriteFence,
}

/// Everything needed to run one plugin instance.
#[derive(Debug, Clone)]
pub struct PluginSettings {
    /// A name for logs and errors (e.g. `sink-file@0.1.0`).
    pub name: String,
    /// The changefeed the plugin runs for (`tenant/name`), as the plugin reads
    /// it (`host.changefeed`).
    pub changefeed: String,
    /// The plugin's configuration as JSON text.
    pub config_json: String,
    /// Quotas of each instance: exceeding the memory, CPU, host-call or resource
    /// quota stops the instance (`PluginError::Stopped`); a batch over the batch
    /// bound is refused before the plugin sees it (`PluginError::Refused`).
    pub limits: PluginLimits,
    /// What the plugin may reach outside its sandbox (a data directory, TCP peers,
    /// HTTP hosts); nothing by default.
    pub capabilities: Capabilities,
}

impl PluginSettings {
    /// The tenant whose CPU share the plugin runs in: the part of
    /// `changefeed` before its `/` (`default` without one).
    pub fn tenant(&self) -> &str {
        match self.changefeed.split_once('/') {
            Some((tenant, _)) if !tenant.is_empty() => tenant,
            _ => "default",
        }
    }

    /// Settings with default limits and no capabilities.
    pub fn new(name: impl Into<String>, config_json: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            changefeed: String::new(),
            config_json: config_json.into(),
            limits: PluginLimits::default(),
            capabilities: Capabilities::default(),
        }
    }
}

/// Whether a connection to `ip` (at `port`, or at any port when `None`) may
/// reach what listens on `listener`: the same address, or both this
/// machine's (a listener on 0.0.0.0 takes connections to every local
/// address).
pub fn reaches(ip: IpAddr, port: Option<u16>, listener: SocketAddr) -> bool {
    if port.is_some_and(|p| p != listener.port()) {
        return false;
    }
    let (a, b) = (ip.to_canonical(), listener.ip().to_canonical());
    a == b || (is_local(a) && is_local(b))
}

/// Whether `ip` is this machine's: loopback, unspecified (a connection to it
/// goes to this machine), or an address of one of its interfaces (one it can
/// bind to).
fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback()
        || ip.is_unspecified()
        || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}
