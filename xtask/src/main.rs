//! `cargo xtask <command>`: everything CI runs, runnable in one command.
//!
//! - `build-plugins`: build every plugin and test guest for `wasm32-wasip2` and copy
//!   them to `target/plugins/` and `target/test-plugins/`.
//! - `quickstart`: build the plugins and run `examples/quickstart.toml`.
//! - `release`: build the release `sluice` binary and the plugins, without the
//!   tests (`target/release/sluice`, `target/plugins/`).
//! - `test`: install what is missing (the wasm32-wasip2 target; `protoc`, `etcd`
//!   and MariaDB from Debian's packages; `s3s-fs`, an S3-compatible server, from
//!   crates.io; Node.js and the JS SDK's npm packages), build the plugins, run
//!   the whole test suite.
//! - `ci`: `cargo fmt --check`, clippy and rustdoc with warnings denied, then
//!   `test`.
//! - `bench`: build the plugins and run the boundary benchmark (release build).
//! - `bench-binlog`: the binlog source on a private MariaDB (release build): raw
//!   decode next to `sluice run` → sink-blackhole, and the memory of a 1M-row
//!   transaction.
//! - `bench-swap`: hot swaps through `sluice server` (release build) at 50,000
//!   rows/s into sink-blackhole: the pause of each of 100 swaps (p50, p99) and
//!   the throughput while swapping against steady state.
//! - `bench-replication`: MariaDB -> MariaDB through sink-mysql (release
//!   `sluice run`) next to MariaDB's own parallel replication applying the
//!   same binlog, with sysbench `oltp_insert` and `oltp_write_only`: rows/s of
//!   each and their ratio, and the live lag (p50, p99) at a fixed rate.
//! - `bench-redo`: consistent replication (release build): `sluice run` with
//!   redo on vs off, `sluice redo apply` rows/s, the redo writer's MB/s next to
//!   the disk's with fdatasync, and the redo resolved ts's lag (the RPO, p50
//!   and p95) under load.
//! - `bench-server`: build the plugins and run the control-plane benchmark of
//!   `sluice server` (release build): API latency, cost of saving positions,
//!   recovery after SIGKILL.
//! - `bench-isolation`: build the plugins and run the neighbour-isolation
//!   benchmark (release build): a healthy changefeed's throughput next to 1, 2
//!   and 4 spinning sinks against alone.
//! - `bench-tenancy [noisy|density]`: build the plugins and run the
//!   multi-tenant benchmark (release build): quiet tenants' throughput and API
//!   p99 with and without noisy neighbours, and 1,000 changefeeds' footprint.
//! - `bench-cluster`: build the plugins and run the cluster benchmark
//!   (release build): owner failover times on a private etcd (SIGKILL of the
//!   owner until the standby owns, and until a changefeed's checkpoint moves).
//! - `bench-e2e [--runs N] [--against PATH]`: build the plugins and the release
//!   `sluice`, and time `sluice run` end to end on `examples/bench-blackhole.toml`
//!   and `examples/bench-mask-file.toml` with 200 k and 1 M rows: rows per second
//!   and the 1 M / 200 k time ratio. With `--against`, another `sluice` binary
//!   (say, a build of an older commit) runs the same files in turn, and the ratio
//!   of the two is printed. A first, uncounted round fills the precompiled
//!   plugin cache; each run removes only the saved positions.
//! - `bench-sdk [--rows N] [--runs N]`: `sluice run` (release build) from the
//!   data generator (rate 0, default 1 M rows) into the JavaScript example sink
//!   (`examples/sink-js`, built with sdk/js) and into sink-blackhole (Rust,
//!   reading every value), alternated: rows/s medians, their ratio, and each
//!   sink's peak instance memory and instance stops.
//! - `schema-evolution [--steps N] [--seed S] [--replay FILE] [FILTER]`: build
//!   the plugins and run the random schema-evolution test
//!   (`host/server/tests/schema_evolution.rs`) for longer than CI does: N
//!   generated steps (default 2000) from seed S (default the test's own),
//!   or the steps of a journal or reproduction FILE; FILTER picks one of its
//!   tests (`mariadb`, `postgres`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Plugins shipped to users.
const PLUGINS: [&str; 7] = [
    "sink-file",
    "sink-webhook",
    "sink-mysql",
    "sink-postgres",
    "sink-blackhole",
    "filter-mask",
    "filter-events",
];
/// Guest components used only by tests (and the tutorial example, run by a test).
const TEST_GUESTS: [&str; 2] = ["misbehave", "sink-lines"];
const WASM_TARGET: &str = "wasm32-wasip2";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    std::env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        Some("build-plugins") => build_plugins(&root),
        Some("quickstart") => {
            // Only what the build needs: the quickstart uses no database.
            ensure_tools(&BUILD_TOOLS)?;
            build_plugin_files(&root)?;
            // The host's build in the open: the first one compiles wasmtime,
            // minutes on a small machine, and cargo shows its progress.
            eprintln!(
                "building the sluice binary (the first build compiles wasmtime: about 15 minutes on 2 cores; later ones take seconds)"
            );
            cargo(&["build", "-p", "sluice-server", "--bin", "sluice"])?;
            // Start from an empty output directory so the output is exactly this run.
            let _ = std::fs::remove_dir_all(root.join("target/quickstart"));
            cargo(&[
                "run",
                "--quiet",
                "-p",
                "sluice-server",
                "--bin",
                "sluice",
                "--",
                "run",
                "--config",
                "examples/quickstart.toml",
            ])
        }
        Some("test") => test(&root, &args[1..]),
        Some("release") => {
            build_plugins(&root)?;
            cargo(&["build", "--release", "--locked", "-p", "sluice-server"])?;
            eprintln!(
                "sluice is at {}; the plugins are in target/plugins/",
                target_dir(&root).join("release/sluice").display()
            );
            Ok(())
        }
        Some("ci") => {
            cargo(&["fmt", "--all", "--", "--check"])?;
            ensure_wasm_target()?;
            cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])?;
            run(
                Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                    .args(["doc", "--workspace", "--no-deps"])
                    .env("RUSTDOCFLAGS", "-Dwarnings"),
            )?;
            test(&root, &[])
        }
        Some("bench") => {
            build_plugins(&root)?;
            let mut cmd = vec!["bench", "-p", "sluice-tests", "--bench", "boundary", "--"];
            cmd.extend(args[1..].iter().map(String::as_str));
            cargo(&cmd)
        }
        Some("bench-server") => {
            build_plugins(&root)?;
            cargo(&["bench", "-p", "sluice-server", "--bench", "control_plane"])
        }
        Some("bench-isolation") => {
            build_plugins(&root)?;
            cargo(&["bench", "-p", "sluice-server", "--bench", "isolation"])
        }
        Some("bench-tenancy") => {
            build_plugins(&root)?;
            let mut cmd = vec!["bench", "-p", "sluice-server", "--bench", "tenancy", "--"];
            cmd.extend(args[1..].iter().map(String::as_str));
            cargo(&cmd)
        }
        Some("bench-cluster") => {
            build_plugins(&root)?;
            cargo(&["bench", "-p", "sluice-server", "--bench", "cluster"])
        }
        Some("bench-e2e") => bench_e2e(&root, &args[1..]),
        Some("bench-sdk") => bench_sdk(&root, &args[1..]),
        Some("bench-binlog") => bench_binlog(&root),
        Some("bench-swap") => bench_swap(&root),
        Some("bench-replication") => bench_replication(&root),
        Some("bench-redo") => bench_redo(&root),
        Some("schema-evolution") => schema_evolution(&root, &args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <build-plugins | quickstart | release | test | ci | bench | bench-server | bench-isolation | bench-tenancy [noisy|density] | bench-cluster | bench-e2e | bench-sdk | bench-binlog | bench-swap | bench-replication | bench-redo | schema-evolution>"
            );
            bail!("unknown or missing command")
        }
    }
}

/// The workspace `cargo xtask` was run in: the nearest directory upwards from the
/// current one whose `Cargo.toml` has `[workspace]`. Found at run time, not from
/// where xtask was compiled, because checkouts may share one target dir.
fn workspace_root() -> PathBuf {
    let start = std::env::current_dir().expect("a current directory");
    start
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|text| text.contains("[workspace]"))
        })
        .map(Path::to_path_buf)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("xtask lives in the workspace")
                .to_path_buf()
        })
}

fn cargo(args: &[&str]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run(Command::new(cargo).args(args))
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("+ {cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

/// Install the wasm32-wasip2 standard library if rustup lacks it.
fn ensure_wasm_target() -> Result<()> {
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("rustup is needed to add the wasm32-wasip2 target")?;
    if !String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == WASM_TARGET)
    {
        run(Command::new("rustup").args(["target", "add", WASM_TARGET]))?;
    }
    Ok(())
}

/// What building the host needs: protoc and protobuf's well-known types (the
/// gRPC API and etcd-client are generated from .proto files).
const BUILD_TOOLS: [(&str, &str); 2] = [
    ("command -v protoc", "protobuf-compiler"),
    (
        "test -f /usr/include/google/protobuf/descriptor.proto",
        "libprotobuf-dev",
    ),
];

/// Install the system tools the build and tests need, from Debian's packages, if
/// missing: `protoc` with protobuf's well-known types (the etcd client's and the
/// admin API's build), `etcd` (the meta store tests), MariaDB's and
/// PostgreSQL's servers and clients (tests start private servers from them)
/// and sysbench (the replication benchmark).
fn ensure_system_tools() -> Result<()> {
    ensure_tools(&BUILD_TOOLS)?;
    ensure_tools(&[
        ("command -v etcd", "etcd-server"),
        (
            "command -v mariadbd || test -x /usr/sbin/mariadbd",
            "mariadb-server",
        ),
        ("command -v mariadb", "mariadb-client"),
        ("ls /usr/lib/postgresql/*/bin/initdb", "postgresql"),
        ("command -v psql", "postgresql-client"),
        ("command -v sysbench", "sysbench"),
        ("command -v curl", "curl"),
    ])
}

/// Installs with apt-get the packages of `tools` (a check command and its
/// package) whose check fails.
fn ensure_tools(tools: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|(check, _)| {
            !Command::new("sh")
                .args(["-c", check])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(|(_, package)| package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("installing {} with apt-get", missing.join(" "));
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
    .with_context(|| {
        format!(
            "installing the system tools failed; install {} yourself",
            missing.join(", ")
        )
    })
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

fn build_plugins(root: &Path) -> Result<()> {
    ensure_system_tools()?;
    build_plugin_files(root)
}

/// The plugins and test guests, built for wasm32-wasip2 and copied to
/// target/plugins and target/test-plugins.
fn build_plugin_files(root: &Path) -> Result<()> {
    ensure_wasm_target()?;
    let mut args = vec!["build", "--target", WASM_TARGET, "--profile", "plugin"];
    for p in PLUGINS.iter().chain(&TEST_GUESTS) {
        args.extend(["-p", p]);
    }
    cargo(&args)?;
    let built = target_dir(root).join(WASM_TARGET).join("plugin");
    for (names, dir) in [
        (&PLUGINS[..], "plugins"),
        (&TEST_GUESTS[..], "test-plugins"),
    ] {
        let dest = root.join("target").join(dir);
        std::fs::create_dir_all(&dest)?;
        for name in names {
            let from = built.join(format!("{}.wasm", name.replace('-', "_")));
            let to = dest.join(format!("{name}.wasm"));
            std::fs::copy(&from, &to)
                .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        }
    }
    eprintln!("plugins are in target/plugins/, test guests in target/test-plugins/");
    Ok(())
}

/// The S3-compatible server the redo log's S3 tests start (`s3s-fs`, which
/// keeps objects in a directory, so a restarted server still has them), from
/// crates.io if missing.
fn ensure_s3_server() -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("HOME or CARGO_HOME")?;
    let on_path = Command::new("sh")
        .args(["-c", "command -v s3s-fs"])
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path || home.join("bin/s3s-fs").exists() {
        return Ok(());
    }
    eprintln!(
        "installing s3s-fs (an S3-compatible server for the S3 tests of the redo log and the plugin store)"
    );
    cargo(&[
        "install",
        "s3s-fs@0.14.1",
        "--features",
        "binary",
        "--locked",
    ])
    .context("installing s3s-fs failed; install it with `cargo install s3s-fs@0.14.1 --features binary --locked`")
}

fn test(root: &Path, extra: &[String]) -> Result<()> {
    build_plugins(root)?;
    ensure_s3_server()?;
    ensure_js_sdk(root)?;
    let mut args = vec!["test", "--workspace"];
    args.extend(extra.iter().map(String::as_str));
    cargo(&args)
}

/// Node.js (Debian's package) and the JS SDK's packages (`npm ci` in sdk/js,
/// from its lock file), for the JavaScript example's test.
fn ensure_js_sdk(root: &Path) -> Result<()> {
    ensure_tools(&[("command -v node", "nodejs"), ("command -v npm", "npm")])?;
    let sdk = root.join("sdk/js");
    if sdk
        .join("node_modules/@bytecodealliance/componentize-js")
        .is_dir()
        && sdk.join("node_modules/esbuild").is_dir()
        && sdk.join("node_modules/typescript").is_dir()
    {
        return Ok(());
    }
    run(Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&sdk))
    .context("installing sdk/js's packages (npm ci) failed")
}

/// `cargo xtask bench-sdk`: see the module docs.
fn bench_sdk(root: &Path, args: &[String]) -> Result<()> {
    let mut rows = 1_000_000u64;
    let mut runs = 3usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rows" => rows = it.next().context("--rows N")?.parse()?,
            "--runs" => runs = it.next().context("--runs N")?.parse()?,
            other => bail!("bench-sdk: unknown argument {other}"),
        }
    }
    build_plugins(root)?;
    ensure_js_sdk(root)?;
    cargo(&["build", "--release", "-p", "sluice-server"])?;
    let sluice = target_dir(root).join("release/sluice");
    let work = root.join("target/bench-sdk");
    std::fs::create_dir_all(&work)?;
    let js = work.join("sink-js.wasm");
    run(Command::new("node")
        .arg(root.join("sdk/js/bin/build.mjs"))
        .arg(root.join("examples/sink-js/sink.js"))
        .args(["--kind", "sink", "--out"])
        .arg(&js))?;
    let blackhole = root
        .join("target/plugins/sink-blackhole.wasm")
        .display()
        .to_string();
    let js = js.display().to_string();
    // (name, plugin, [sink.config] lines)
    let sinks = [
        ("JS, rows", js.clone(), "read = \"rows\""),
        ("JS, columns", js, "read = \"columns\""),
        ("Rust, rows", blackhole.clone(), "read = \"rows\""),
        ("Rust, columns", blackhole, "read = \"columns\""),
    ];
    let mut files = Vec::new();
    for (i, (_, plugin, options)) in sinks.iter().enumerate() {
        let file = work.join(format!("sink-{i}.toml"));
        std::fs::write(
            &file,
            format!(
                "data-dir = {:?}\n\n[changefeed]\nid = \"bench-sdk\"\n\n[source]\ntype = \"datagen\"\nseed = 42\ntotal-rows = {rows}\nrate = 0\n\n[sink]\nplugin = {plugin:?}\n\n[sink.config]\n{options}\n",
                work.join("state").display().to_string()
            ),
        )?;
        files.push(file);
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); sinks.len()];
    let mut lines: Vec<String> = vec![String::new(); sinks.len()];
    // Alternated rounds; the first fills the precompiled plugin cache and is
    // not counted.
    for round in 0..=runs {
        for (i, file) in files.iter().enumerate() {
            let _ = std::fs::remove_file(work.join("state/meta.redb"));
            let started = std::time::Instant::now();
            let out = Command::new(&sluice)
                .args(["run", "--quiet", "--config"])
                .arg(file)
                .env_remove("RUST_BACKTRACE")
                .output()
                .with_context(|| format!("cannot start {}", sluice.display()))?;
            let secs = started.elapsed().as_secs_f64();
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                bail!(
                    "{} failed: {stdout}{}",
                    sinks[i].0,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            if round > 0 {
                times[i].push(secs);
                if let Some(l) = stdout.lines().find(|l| l.starts_with("sink ")) {
                    lines[i] = l.to_string();
                }
            }
        }
    }
    println!(
        "{rows} rows, datagen (rate 0) -> sink (default quotas), {runs} alternated runs each; \
         every sink but `Rust, columns` decodes every value"
    );
    let mut rates = Vec::new();
    for (i, (name, _, _)) in sinks.iter().enumerate() {
        let median = median(&mut times[i]);
        rates.push(rows as f64 / median);
        println!(
            "{name:<14} median {median:>7.2} s {:>10.0} rows/s   {}",
            rows as f64 / median,
            lines[i].split(": ").nth(1).unwrap_or("")
        );
    }
    println!(
        "JavaScript / Rust decoding every value: rows {:.3}, columns {:.3} (whole process, \
         source and pipeline included)",
        rates[0] / rates[2],
        rates[1] / rates[2]
    );
    Ok(())
}

/// `cargo xtask bench-e2e`: see the module docs.
/// The binlog source against a private MariaDB (release build): raw decode and
/// `sluice run` → sink-blackhole side by side, and the memory high-water of a
/// 1M-row transaction (see tests/benches/binlog.rs).
fn bench_binlog(root: &Path) -> Result<()> {
    ensure_system_tools()?;
    build_plugins(root)?;
    cargo(&["build", "--release", "-p", "sluice-server"])?;
    let bin = target_dir(root).join("release/sluice");
    run(Command::new(env!("CARGO"))
        .args(["bench", "-p", "sluice-tests", "--bench", "binlog"])
        .env("SLUICE_BIN", &bin)
        .env_remove("RUST_BACKTRACE"))
}

/// Hot swaps through the server (see tests/benches/swap.rs).
fn bench_swap(root: &Path) -> Result<()> {
    ensure_system_tools()?;
    build_plugins(root)?;
    cargo(&["build", "--release", "-p", "sluice-server"])?;
    let bin = target_dir(root).join("release/sluice");
    run(Command::new(env!("CARGO"))
        .args(["bench", "-p", "sluice-tests", "--bench", "swap"])
        .env("SLUICE_BIN", &bin)
        .env_remove("RUST_BACKTRACE"))
}

/// Consistent replication's cost and speed (see tests/benches/redo.rs).
fn bench_redo(root: &Path) -> Result<()> {
    build_plugins(root)?;
    cargo(&["build", "--release", "-p", "sluice-server"])?;
    let bin = target_dir(root).join("release/sluice");
    run(Command::new(env!("CARGO"))
        .args(["bench", "-p", "sluice-tests", "--bench", "redo"])
        .env("SLUICE_BIN", &bin)
        .env_remove("RUST_BACKTRACE"))
}

/// MariaDB -> MariaDB by sink-mysql next to MariaDB's own replication,
/// with sysbench (see tests/benches/replication.rs).
fn bench_replication(root: &Path) -> Result<()> {
    ensure_system_tools()?;
    build_plugins(root)?;
    cargo(&["build", "--release", "-p", "sluice-server"])?;
    let bin = target_dir(root).join("release/sluice");
    run(Command::new(env!("CARGO"))
        .args(["bench", "-p", "sluice-tests", "--bench", "replication"])
        .env("SLUICE_BIN", &bin)
        .env_remove("RUST_BACKTRACE"))
}

/// The random schema-evolution test with its knobs set through the
/// environment (see the module docs); its output is shown as it runs.
fn schema_evolution(root: &Path, args: &[String]) -> Result<()> {
    let mut steps = "2000".to_string();
    let mut seed = None;
    let mut replay = None;
    let mut filter = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--steps" => steps = it.next().context("--steps N")?.clone(),
            "--seed" => seed = Some(it.next().context("--seed S")?.clone()),
            "--replay" => {
                let file = PathBuf::from(it.next().context("--replay FILE")?);
                // The test runs in host/server: make the path absolute.
                replay = Some(std::env::current_dir()?.join(file));
            }
            other if other.starts_with("--") => bail!("schema-evolution: unknown argument {other}"),
            other => filter.push(other.to_string()),
        }
    }
    build_plugins(root)?;
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args([
        "test",
        "-p",
        "sluice-server",
        "--test",
        "schema_evolution",
        "--",
    ])
    .args(&filter)
    .args(["--nocapture", "--test-threads=1"])
    .env("SLUICE_SCHEMA_STEPS", &steps);
    if let Some(seed) = seed {
        cmd.env("SLUICE_SCHEMA_SEED", seed);
    }
    if let Some(file) = replay {
        cmd.env("SLUICE_SCHEMA_REPLAY", file);
    }
    run(&mut cmd)
}

fn bench_e2e(root: &Path, args: &[String]) -> Result<()> {
    let mut runs = 3usize;
    let mut against: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--runs" => runs = it.next().context("--runs N")?.parse()?,
            "--against" => against = Some(PathBuf::from(it.next().context("--against PATH")?)),
            other => bail!("bench-e2e: unknown argument {other}"),
        }
    }
    build_plugins(root)?;
    cargo(&["build", "--release", "-p", "sluice-server"])?;
    let ours = target_dir(root).join("release/sluice");
    let work = root.join("target/bench-e2e");
    std::fs::create_dir_all(&work)?;
    let mut binaries = vec![("this build", ours)];
    if let Some(other) = against {
        binaries.push(("--against", other));
    }
    println!(
        "{:<18} {:>9} {:<12} {:>9} {:>12}",
        "workload", "rows", "binary", "median s", "rows/s"
    );
    for example in ["bench-blackhole", "bench-mask-file"] {
        let text = std::fs::read_to_string(root.join(format!("examples/{example}.toml")))?;
        let mut medians: Vec<Vec<f64>> = vec![Vec::new(); binaries.len()];
        for rows in [200_000u64, 1_000_000] {
            let file = work.join(format!("{example}-{rows}.toml"));
            std::fs::write(
                &file,
                text.replace("total-rows = 1000000", &format!("total-rows = {rows}")),
            )?;
            let mut times: Vec<Vec<f64>> = vec![Vec::new(); binaries.len()];
            // Alternate the binaries so that drift of a shared machine hits both.
            // The first round is a warm-up, not counted: it fills the precompiled
            // plugin cache in the data dir, which later runs keep (as a user's
            // repeated `sluice run`s do); only the saved positions are removed, so
            // that every run starts from the beginning.
            for round in 0..=runs {
                for (i, (_, binary)) in binaries.iter().enumerate() {
                    let _ = std::fs::remove_dir_all(work.join("out"));
                    let _ = std::fs::remove_file(work.join("state/meta.redb"));
                    let started = std::time::Instant::now();
                    let out = Command::new(binary)
                        .args(["run", "--quiet", "--config"])
                        .arg(&file)
                        .env_remove("RUST_BACKTRACE")
                        .output()
                        .with_context(|| format!("cannot start {}", binary.display()))?;
                    let secs = started.elapsed().as_secs_f64();
                    if !out.status.success() {
                        bail!(
                            "{} failed on {}: {}",
                            binary.display(),
                            file.display(),
                            String::from_utf8_lossy(&out.stderr)
                        );
                    }
                    if round > 0 {
                        times[i].push(secs);
                    }
                }
            }
            for (i, (name, _)) in binaries.iter().enumerate() {
                let median = median(&mut times[i]);
                medians[i].push(median);
                println!(
                    "{example:<18} {rows:>9} {name:<12} {median:>9.3} {:>12.0}",
                    rows as f64 / median
                );
            }
        }
        for (i, (name, _)) in binaries.iter().enumerate() {
            println!(
                "{example:<18} {name}: 1 M rows took {:.2} times as long as 200 k",
                medians[i][1] / medians[i][0]
            );
        }
        if binaries.len() == 2 {
            for (k, rows) in ["200 k", "1 M"].iter().enumerate() {
                println!(
                    "{example:<18} {rows} rows: this build is {:.2} times as fast as --against",
                    medians[1][k] / medians[0][k]
                );
            }
        }
    }
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
