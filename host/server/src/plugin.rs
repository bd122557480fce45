//! `sluice plugin new|build|test`: make, build and check a plugin without a server.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use clap::Subcommand;
use sluice_runtime::{PluginKind, PluginRuntime, PluginSettings, RuntimeConfig};

const WASM_TARGET: &str = "wasm32-wasip2";

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Make a plugin project: a sink or filter that builds small, with a native test.
    New {
        /// The project's name (a crate name: letters, digits, `-`, `_`); also its directory.
        name: String,
        /// Which world the plugin implements.
        #[arg(long, value_parser = ["sink", "filter"], default_value = "sink")]
        kind: String,
        /// The language of the project: `rust` (a crate over sdk/rust) or `js`
        /// (an ES module over sdk/js, built with componentize-js).
        #[arg(long, value_parser = ["rust", "js"], default_value = "rust")]
        lang: String,
        /// Where to make the directory (default: the current one).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The SDK (`sdk/rust` or `sdk/js` of a Sluice checkout); default: the
        /// one of the checkout this binary was built from.
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Build a plugin project for wasm32-wasip2 (adding the target if missing)
    /// and check the component implements its world.
    Build {
        /// The project directory (default: the current one).
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Copy the component here (default: `{dir}/{name}.wasm`).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Run a built component through the real runtime with generated rows and
    /// check what every plugin must do: typed config errors, repeated flushes,
    /// DDL, replay after a restart (sinks); determinism and the replay flag
    /// (filters). No server is needed.
    Test {
        /// The component (.wasm).
        file: PathBuf,
        /// Which world it implements (default: whichever it does).
        #[arg(long, value_parser = ["sink", "filter"])]
        kind: Option<String>,
        /// The plugin's options: a JSON or TOML file (what goes in `[sink.config]`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Rows to generate (every column type; inserts, updates, deletes).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        rows: u64,
        /// Rows per batch.
        #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        batch_rows: u64,
        /// Grant the plugin an HTTP host (`host` or `host:port`; repeat for more).
        #[arg(long = "allow-http")]
        allow_http: Vec<String>,
        /// Grant the plugin a TCP address (`ip:port`; repeat for more).
        #[arg(long = "allow-tcp")]
        allow_tcp: Vec<std::net::SocketAddr>,
        /// The plugin's data directory (default: a temporary one, removed after).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
}

pub async fn plugin(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::New {
            name,
            kind,
            lang,
            dir,
            sdk,
        } => new(&name, &kind, &lang, dir.as_deref(), sdk.as_deref()),
        PluginCommand::Build { dir, out } => build(&dir, out.as_deref()).map(|_| ()),
        PluginCommand::Test {
            file,
            kind,
            config,
            rows,
            batch_rows,
            allow_http,
            allow_tcp,
            data_dir,
        } => {
            let options = sluice_compliance::Options {
                rows,
                batch_rows,
                ..Default::default()
            };
            test(
                &file,
                kind.as_deref(),
                config.as_deref(),
                &options,
                (allow_http, allow_tcp),
                data_dir,
            )
            .await
        }
    }
}

/// The type name for a crate name: `my-hook` → `MyHook`.
fn type_name(name: &str) -> String {
    name.split(['-', '_'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn new(
    name: &str,
    kind: &str,
    lang: &str,
    dir: Option<&Path>,
    sdk: Option<&Path>,
) -> anyhow::Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        bail!(
            "`{name}` is not a plugin name: start with a letter, then letters, digits, `-` or `_` (at most 64)"
        );
    }
    let sdk_dir = if lang == "js" { "sdk/js" } else { "sdk/rust" };
    let sdk = match sdk {
        Some(p) => p.to_path_buf(),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(sdk_dir),
    };
    let sdk = sdk.canonicalize().with_context(|| {
        format!(
            "the SDK is not at {}; pass --sdk with the path of {sdk_dir} in a Sluice checkout",
            sdk.display()
        )
    })?;
    let marker = if lang == "js" {
        "package.json"
    } else {
        "Cargo.toml"
    };
    if !sdk.join(marker).is_file() {
        bail!("{} is not {sdk_dir} (no {marker})", sdk.display());
    }
    let root = dir.unwrap_or(Path::new(".")).join(name);
    if root.exists() {
        bail!(
            "{} exists already; pick another name or remove it",
            root.display()
        );
    }
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{type}}", &type_name(name))
            .replace("{{kind}}", kind)
            .replace("{{sdk}}", &sdk.display().to_string().replace('\\', "/"))
    };
    let files: Vec<(&str, &str)> = match (lang, kind) {
        ("js", "sink") => vec![
            (
                "plugin.js",
                include_str!("../../../sdk/templates/js/sink.js.in"),
            ),
            ("sluice.json", JS_PROJECT),
        ],
        ("js", _) => vec![
            (
                "plugin.js",
                include_str!("../../../sdk/templates/js/filter.js.in"),
            ),
            ("sluice.json", JS_PROJECT),
        ],
        (_, kind) => vec![
            (
                "Cargo.toml",
                include_str!("../../../sdk/templates/rust/Cargo.toml.in"),
            ),
            (
                ".cargo/config.toml",
                include_str!("../../../sdk/templates/rust/cargo-config.toml.in"),
            ),
            (
                ".gitignore",
                include_str!("../../../sdk/templates/rust/gitignore.in"),
            ),
            (
                "src/lib.rs",
                if kind == "sink" {
                    include_str!("../../../sdk/templates/rust/sink.rs.in")
                } else {
                    include_str!("../../../sdk/templates/rust/filter.rs.in")
                },
            ),
        ],
    };
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("a file in the project"))
            .with_context(|| format!("cannot create {}", root.display()))?;
        std::fs::write(&path, fill(text))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let test = if lang == "js" {
        String::new()
    } else {
        format!("\n  test natively:  cd {} && cargo test", root.display())
    };
    println!(
        "made {kind} `{name}` in {}{test}\n  build:          sluice plugin build {}\n  check:          sluice plugin test {}/{name}.wasm",
        root.display(),
        root.display(),
        root.display()
    );
    Ok(())
}

/// `sluice.json` of a JavaScript project.
const JS_PROJECT: &str = "{\n  \"name\": \"{{name}}\",\n  \"kind\": \"{{kind}}\",\n  \"lang\": \"js\",\n  \"entry\": \"plugin.js\",\n  \"sdk\": \"{{sdk}}\"\n}\n";

/// What a project's Cargo.toml says about the plugin.
struct Project {
    name: String,
    kind: Option<PluginKind>,
}

fn read_project(dir: &Path) -> anyhow::Result<Project> {
    let path = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "no plugin project at {}: cannot read {}",
            dir.display(),
            path.display()
        )
    })?;
    let manifest: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))?;
    let package = manifest
        .get("package")
        .and_then(|p| p.as_table())
        .with_context(|| format!("{} has no [package]", path.display()))?;
    let name = package
        .get("name")
        .and_then(|n| n.as_str())
        .with_context(|| format!("{} has no package.name", path.display()))?
        .to_string();
    let kind = match package
        .get("metadata")
        .and_then(|m| m.get("sluice"))
        .and_then(|s| s.get("kind"))
        .and_then(|k| k.as_str())
    {
        None => None,
        Some("sink") => Some(PluginKind::Sink),
        Some("filter") => Some(PluginKind::Filter),
        Some(other) => bail!(
            "{}: package.metadata.sluice.kind = {other:?}; use \"sink\" or \"filter\"",
            path.display()
        ),
    };
    Ok(Project { name, kind })
}

/// Adds the wasm target with rustup when it is missing (no rustup: cargo
/// says what is wrong).
fn ensure_target() {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    if let Ok(out) = installed
        && out.status.success()
        && !String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim() == WASM_TARGET)
    {
        eprintln!("adding the {WASM_TARGET} target (rustup target add {WASM_TARGET})");
        let _ = Command::new("rustup")
            .args(["target", "add", WASM_TARGET])
            .status();
    }
}

fn build(dir: &Path, out: Option<&Path>) -> anyhow::Result<PathBuf> {
    if dir.join("sluice.json").is_file() {
        return build_js(dir, out);
    }
    let project = read_project(dir)?;
    ensure_target();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // Cargo's progress and diagnostics go to the terminal; the artifacts' names
    // come on stdout as JSON.
    let output = Command::new(&cargo)
        .current_dir(dir)
        .args([
            "build",
            "--release",
            "--target",
            WASM_TARGET,
            "--message-format",
            "json-render-diagnostics",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", cargo.to_string_lossy()))?;
    if !output.status.success() {
        bail!("the build failed (cargo's messages are above)");
    }
    let wasm = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| {
            m["target"]["name"].as_str().map(|n| n.replace('_', "-"))
                == Some(project.name.replace('_', "-"))
        })
        .flat_map(|m| {
            m["filenames"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|f| f.as_str().map(PathBuf::from))
        })
        .find(|f| f.extension().is_some_and(|e| e == "wasm"))
        .with_context(|| {
            format!(
                "cargo built no .wasm for {}; is it a library with crate-type = [\"cdylib\", ...]?",
                project.name
            )
        })?;
    let dest = match out {
        Some(p) => p.to_path_buf(),
        None => dir.join(format!("{}.wasm", project.name)),
    };
    std::fs::copy(&wasm, &dest)
        .with_context(|| format!("cannot copy {} to {}", wasm.display(), dest.display()))?;
    check_built(&dest, project.kind)
}

/// Loads a built component and says what it is.
fn check_built(dest: &Path, kind: Option<PluginKind>) -> anyhow::Result<PathBuf> {
    let runtime = PluginRuntime::new(RuntimeConfig::default())?;
    let (kind, component) = load_any(&runtime, dest, kind)?;
    let size = std::fs::metadata(dest).map(|m| m.len()).unwrap_or(0);
    println!(
        "{}: ok, implements the {} world, {} KiB, sha256 {}",
        dest.display(),
        kind.world(),
        size.div_ceil(1024),
        component.digest()
    );
    Ok(dest.to_path_buf())
}

/// Builds a JavaScript project (`sluice.json`) with the JS SDK's build script.
fn build_js(dir: &Path, out: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = dir.join("sluice.json");
    let project: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?,
    )
    .with_context(|| format!("{} is not valid JSON", path.display()))?;
    let field = |k: &str| {
        project[k]
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("{}: `{k}` is missing", path.display()))
    };
    let (name, kind, entry, sdk) = (
        field("name")?,
        field("kind")?,
        field("entry")?,
        field("sdk")?,
    );
    let kind = match kind.as_str() {
        "sink" => PluginKind::Sink,
        "filter" => PluginKind::Filter,
        other => bail!(
            "{}: kind = {other:?}; use \"sink\" or \"filter\"",
            path.display()
        ),
    };
    let sdk = PathBuf::from(sdk);
    if !sdk
        .join("node_modules/@bytecodealliance/componentize-js")
        .is_dir()
    {
        bail!(
            "the JS SDK's packages are not installed; run `npm ci` in {}",
            sdk.display()
        );
    }
    let dest = match out {
        Some(p) => p.to_path_buf(),
        None => dir.join(format!("{name}.wasm")),
    };
    let status = Command::new("node")
        .arg(sdk.join("bin/build.mjs"))
        .arg(dir.join(&entry))
        .args([
            "--kind",
            if kind == PluginKind::Sink {
                "sink"
            } else {
                "filter"
            },
            "--out",
        ])
        .arg(&dest)
        .status()
        .context("cannot run node; install Node.js 20 or later")?;
    if !status.success() {
        bail!("the build failed (its messages are above)");
    }
    check_built(&dest, Some(kind))
}

/// Loads `path` as `kind`, or as whichever world it implements.
fn load_any(
    runtime: &PluginRuntime,
    path: &Path,
    kind: Option<PluginKind>,
) -> anyhow::Result<(PluginKind, sluice_runtime::PluginComponent)> {
    let load = |k: PluginKind| {
        runtime
            .load_file(k, path)
            .with_context(|| format!("{} is not a usable {} plugin", path.display(), k.world()))
    };
    if let Some(k) = kind {
        return Ok((k, load(k)?));
    }
    match load(PluginKind::Sink) {
        Ok(c) => Ok((PluginKind::Sink, c)),
        Err(as_sink) => match load(PluginKind::Filter) {
            Ok(c) => Ok((PluginKind::Filter, c)),
            Err(_) => {
                Err(as_sink.context("nor a filter; pass --kind to see why it is not that one"))
            }
        },
    }
}

/// The options in `path` (JSON, or TOML converted to JSON).
fn read_config(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config {}", path.display()))?;
    if path.extension().is_some_and(|e| e == "toml") {
        let table: toml::Table = toml::from_str(&text)
            .with_context(|| format!("{} is not valid TOML", path.display()))?;
        return Ok(serde_json::to_string(&table)?);
    }
    let value: serde_json::Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not valid JSON (name a .toml file for TOML)",
            path.display()
        )
    })?;
    Ok(value.to_string())
}

async fn test(
    file: &Path,
    kind: Option<&str>,
    config: Option<&Path>,
    options: &sluice_compliance::Options,
    (allow_http, allow_tcp): (Vec<String>, Vec<std::net::SocketAddr>),
    data_dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    let kind = kind.map(|k| {
        if k == "sink" {
            PluginKind::Sink
        } else {
            PluginKind::Filter
        }
    });
    let runtime = PluginRuntime::new(RuntimeConfig::default())?;
    let (kind, component) = load_any(&runtime, file, kind)?;
    let config_json = match config {
        Some(p) => read_config(p)?,
        None => "{}".to_string(),
    };
    let name = file
        .file_stem()
        .map_or("plugin".to_string(), |s| s.to_string_lossy().into_owned());
    let mut settings = PluginSettings::new(&name, config_json);
    settings.changefeed = "default/plugin-test".into();
    settings.capabilities.http_allow = allow_http;
    settings.capabilities.tcp_allow = allow_tcp;
    // The quota a changefeed that gives none would get.
    let mut limits = sluice_config::Limits::default();
    limits.resolve_memory(component.declared_memory());
    settings.limits.memory_bytes = limits.memory_bytes();
    let (dir, temporary) = match data_dir {
        Some(d) => (d, false),
        None => (
            std::env::temp_dir().join(format!("sluice-plugin-test-{}", std::process::id())),
            true,
        ),
    };
    if kind == PluginKind::Sink {
        settings.capabilities.data_dir = Some(dir.clone());
    }
    println!(
        "{}: testing as a {} with {} generated rows in batches of {}, memory quota {} MiB{}",
        file.display(),
        kind.world(),
        options.rows,
        options.batch_rows,
        settings.limits.memory_bytes >> 20,
        if component.declared_memory().is_some() {
            " (declared by the plugin)"
        } else {
            ""
        }
    );
    let report = match kind {
        PluginKind::Sink => sluice_compliance::check_sink(&component, &settings, options).await,
        PluginKind::Filter => sluice_compliance::check_filter(&component, &settings, options).await,
    };
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    for check in &report.checks {
        match &check.outcome {
            Ok(detail) => println!("  ok      {}: {detail}", check.name),
            Err(why) => println!("  FAILED  {}: {why}", check.name),
        }
    }
    if report.rows > 0 {
        print!(
            "  {} rows in {:.2} s: {:.0} rows/s",
            report.rows,
            report.elapsed.as_secs_f64(),
            report.rows_per_sec()
        );
        match report.peak_memory_bytes {
            Some(m) => println!(", instance memory {} KiB", m.div_ceil(1024)),
            None => println!(),
        }
    }
    let failed = report.checks.iter().filter(|c| c.outcome.is_err()).count();
    if failed > 0 {
        bail!("{failed} of {} checks failed", report.checks.len());
    }
    println!("all {} checks passed", report.checks.len());
    Ok(())
}
