//! `docs/configuration.md` and the schema stay in step: every key of every table
//! of the schema has a row in the doc's table for it and every row names a key the
//! schema takes (serde itself lists the keys, in its unknown-field error), and the
//! doc's example parses.

use std::collections::BTreeSet;

use sluice_config::RunConfig;

const DOC: &str = include_str!("../../../docs/configuration.md");

/// The smallest valid file; `extra` is added to the table named `at`.
fn file_with(at: &str, extra: &str) -> String {
    let mut sections = vec![
        ("", String::new()),
        ("changefeed", "id = \"doc\"\n".to_string()),
        ("source", "type = \"datagen\"\n".to_string()),
        (
            "source.mix",
            "insert = 1\nupdate = 1\ndelete = 1\n".to_string(),
        ),
        ("sink", "plugin = \"sink-file\"\n".to_string()),
        ("sink.limits", String::new()),
        ("sink.capabilities", String::new()),
        ("pipeline", String::new()),
        ("validator", String::new()),
        ("consistent", String::new()),
    ];
    for (name, body) in &mut sections {
        if *name == at {
            body.push_str(extra);
        }
    }
    sections
        .iter()
        .map(|(name, body)| {
            if name.is_empty() {
                body.clone()
            } else {
                format!("[{name}]\n{body}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The keys the schema takes in the table `at`, from serde's own error.
fn schema_keys(at: &str) -> BTreeSet<String> {
    let text = file_with(at, "zz-not-a-key = 1\n");
    let err = format!("{:#}", RunConfig::parse(&text).unwrap_err());
    let expected = err
        .split("expected one of ")
        .nth(1)
        .or_else(|| err.split("expected ").nth(1))
        .unwrap_or_else(|| panic!("no key list for [{at}] in: {err}"));
    let expected = expected
        .split('\n')
        .next()
        .unwrap()
        .replace("` or `", "`, `");
    expected
        .split(", ")
        .map(|k| k.trim().trim_matches('`').to_string())
        .filter(|k| !k.is_empty())
        .collect()
}

/// The keys in the first column of the table under the heading that starts with
/// `heading`, with `[`, `]` and a `prefix.` taken off.
fn doc_keys(heading: &str, prefix: &str) -> BTreeSet<String> {
    let start = DOC
        .find(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("no heading {heading}"));
    let rest = &DOC[start + 1..];
    let end = rest[1..].find("\n#").map_or(rest.len(), |i| i + 1);
    rest[..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split('`').nth(1))
        .map(|k| k.trim_matches(|c| c == '[' || c == ']'))
        .map(|k| k.strip_prefix(prefix).unwrap_or(k).to_string())
        .filter(|k| !k.contains('.'))
        .collect()
}

#[test]
fn every_table_of_the_schema_is_documented_key_for_key() {
    let tables = [
        ("", "## Top level", ""),
        ("changefeed", "## `[changefeed]`", ""),
        ("source", "### `type = \"datagen\"`", "source."),
        ("source.mix", "### `type = \"datagen\"`", "mix."),
        ("sink", "## Plugin tables", ""),
        ("sink.limits", "### `[sink.limits]`", ""),
        ("sink.capabilities", "### `[sink.capabilities]`", ""),
        ("pipeline", "## `[pipeline]`", ""),
        ("validator", "## `[validator]`", ""),
        ("consistent", "## `[consistent]`", ""),
    ];
    for (table, heading, prefix) in tables {
        let mut documented = doc_keys(heading, prefix);
        if table == "source.mix" {
            // The mix's keys are written `mix.insert`, ...
            documented = DOC
                .lines()
                .filter_map(|l| l.strip_prefix("| `mix."))
                .filter_map(|l| l.split('`').next())
                .map(str::to_string)
                .collect();
        }
        let mut schema = schema_keys(table);
        // The datagen table's tag.
        if table == "source" {
            schema.insert("type".into());
            documented.insert("type".into());
        }
        assert_eq!(
            documented, schema,
            "docs/configuration.md ({heading}) and the schema of [{table}] differ"
        );
    }
}

#[test]
fn the_documented_examples_parse() {
    // Every TOML block: a whole `sluice run` file, or a section that makes one
    // with a minimal source and sink around it.
    let minimal = "[changefeed]\nid = \"doc\"\n[source]\ntype = \"datagen\"\n[sink]\nplugin = \"sink-blackhole\"\n";
    let mut rest = DOC;
    let mut whole = 0;
    while let Some(at) = rest.find("```toml\n") {
        let start = at + "```toml\n".len();
        let end = start + rest[start..].find("```").expect("a closed block");
        let block = &rest[start..end];
        if block.contains("[changefeed]") {
            whole += 1;
            RunConfig::parse(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
        } else {
            let text = format!("{minimal}{block}");
            RunConfig::parse(&text).unwrap_or_else(|e| panic!("{e}\n{block}"));
        }
        rest = &rest[end..];
    }
    assert!(whole >= 1, "docs/configuration.md shows a whole file");
}

#[test]
fn every_example_parses_in_its_mode() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // A file with [changefeed] is for `sluice run`; one without, for a server.
        let parsed = if text.lines().any(|l| l.trim() == "[changefeed]") {
            RunConfig::parse(&text).map(|_| ())
        } else {
            sluice_config::ChangefeedConfig::parse(&text).map(|_| ())
        };
        parsed.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        seen += 1;
    }
    assert!(seen >= 4, "only {seen} examples");
}

/// Every `sluice:plugin/NAME@VERSION` the docs, the README, the SDK and its
/// templates name is a world or interface of `wit/plugin.wit`, at the package's
/// version (a doc naming a renamed interface or an old version fails here).
#[test]
fn documented_interface_names_match_the_wit() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let wit = std::fs::read_to_string(root.join("wit/plugin.wit")).unwrap();
    let version = wit
        .lines()
        .find_map(|l| l.trim().strip_prefix("package sluice:plugin@"))
        .map(|v| v.trim_end_matches(';').to_string())
        .expect("the WIT names its package");
    let names: BTreeSet<String> = wit
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("interface ")
                .or_else(|| l.strip_prefix("world "))
                .and_then(|rest| rest.split_whitespace().next())
                .map(str::to_string)
        })
        .collect();
    assert!(
        names.contains("sink-api") && names.contains("sink"),
        "{names:?}"
    );
    let mut files = vec![root.join("README.md")];
    for dir in [
        "docs",
        "sdk/rust/src",
        "sdk/templates/rust",
        "sdk/js/src",
        "sdk/js/bin",
    ] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            files.push(entry.path());
        }
    }
    let mut checked = 0;
    for file in files.iter().filter(|f| f.is_file()) {
        let text = std::fs::read_to_string(file).unwrap();
        for (at, _) in text.match_indices("sluice:plugin") {
            let rest = &text[at + "sluice:plugin".len()..];
            let word = |s: &str| -> String {
                s.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
                    .collect::<String>()
                    .trim_end_matches('.')
                    .to_string()
            };
            let (name, rest) = match rest.strip_prefix('/') {
                Some(r) => {
                    let name = word(r);
                    (Some(name.clone()), &r[name.len()..])
                }
                None => (None, rest),
            };
            // An empty name is a template (`sluice:plugin/${kind}@...`).
            if let Some(name) = name.as_ref().filter(|n| !n.is_empty()) {
                assert!(
                    names.contains(name),
                    "{}: `sluice:plugin/{name}` is not a world or interface of wit/plugin.wit",
                    file.display()
                );
            }
            if let Some(v) = rest.strip_prefix('@') {
                assert_eq!(
                    word(v),
                    version,
                    "{}: names version {} of sluice:plugin, the WIT is {version}",
                    file.display(),
                    word(v)
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} names found");
}
