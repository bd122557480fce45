use std::collections::HashMap;

use sluice_sdk::{Error, Filter, Op, Schemas, TableBatch, TableSchema, glob_match, host};

use crate::{Config, Rule};

/// Drops row changes by table pattern and kind.
#[derive(Debug)]
pub struct DropEvents {
    rules: Vec<Rule>,
    /// Per (table id, schema version): which kinds are dropped.
    ignored: HashMap<(u32, u32), Ignored>,
}

/// Whether inserts, updates and deletes of one table are dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Ignored {
    insert: bool,
    update: bool,
    delete: bool,
}

impl Ignored {
    fn for_table(rules: &[Rule], schema: &TableSchema) -> Self {
        let table = format!("{}.{}", schema.schema_name, schema.table_name);
        let mut ignored = Ignored::default();
        for rule in rules
            .iter()
            .filter(|r| r.matcher.iter().any(|m| glob_match(m, &table)))
        {
            for event in &rule.ignore_event {
                ignored.insert |= event.covers(Op::Insert);
                ignored.update |= event.covers(Op::Update);
                ignored.delete |= event.covers(Op::Delete);
            }
        }
        ignored
    }

    fn drops(self, op: Op) -> bool {
        match op {
            Op::Insert => self.insert,
            Op::Update => self.update,
            Op::Delete => self.delete,
        }
    }
}

impl Filter for DropEvents {
    type Config = Config;

    fn validate(config: &Config) -> Result<(), Error> {
        config.validate()
    }

    fn open(config: Config) -> Result<Self, Error> {
        Ok(Self {
            rules: config.rules,
            ignored: HashMap::new(),
        })
    }

    fn transform(
        &mut self,
        schemas: &Schemas,
        tables: Vec<TableBatch>,
    ) -> Result<Vec<TableBatch>, Error> {
        let mut dropped = 0;
        let mut out = Vec::with_capacity(tables.len());
        for table in tables {
            let schema = schemas.of(&table).ok_or_else(|| {
                Error::fatal(format!(
                    "no schema for table {} version {}",
                    table.table_id, table.schema_version
                ))
            })?;
            let ignored = *self
                .ignored
                .entry((table.table_id, table.schema_version))
                .or_insert_with(|| Ignored::for_table(&self.rules, schema));
            if ignored == Ignored::default() {
                out.push(table);
                continue;
            }
            let keep: Vec<bool> = table
                .ops
                .iter()
                .map(|&op| !ignored.drops(Op::from_code(op)))
                .collect();
            let kept = keep.iter().filter(|&&k| k).count();
            dropped += (keep.len() - kept) as u64;
            if kept == keep.len() && kept > 0 {
                out.push(table);
            } else if kept > 0 {
                out.push(table.select(&keep));
            }
        }
        if dropped > 0 {
            host::counter_add("dropped", dropped);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use sluice_sdk::testing::{FilterHarness, schema};
    use sluice_sdk::{ColumnType, Error, Op, TableBatch, TableBatchBuilder, TableSchema, Value};

    use super::DropEvents;

    use sluice_sdk::testing::ImageText as Image;

    fn rows(
        schema: &TableSchema,
        batch: &TableBatch,
    ) -> Vec<(Op, u64, Option<Image>, Option<Image>)> {
        sluice_sdk::testing::rows_as_text(schema, batch)
    }

    fn img(id: i64, text: Option<&str>) -> Option<Image> {
        Some(vec![Some(id.to_string()), text.map(str::to_string)])
    }

    fn table(id: u32, name: &str) -> TableSchema {
        schema(
            id,
            "app",
            name,
            &[
                ("id", ColumnType::Int, true),
                ("v", ColumnType::Text, false),
            ],
        )
    }

    /// insert 1, update 1, delete 2, insert 3, update 3 (NULL), delete 1 at ts base..base+5.
    fn mixed(schema: &TableSchema, base: u64) -> TableBatch {
        let mut b = TableBatchBuilder::new(schema);
        b.insert(base, &[Value::Int(1), Value::Text("a")]);
        b.update(
            base + 1,
            &[Value::Int(1), Value::Text("a")],
            &[Value::Int(1), Value::Text("b")],
        );
        b.delete(base + 2, &[Value::Int(2), Value::Text("x")]);
        b.insert(base + 3, &[Value::Int(3), Value::Null]);
        b.update(
            base + 4,
            &[Value::Int(3), Value::Null],
            &[Value::Int(3), Value::Text("c")],
        );
        b.delete(base + 5, &[Value::Int(1), Value::Text("b")]);
        b.finish()
    }

    #[test]
    fn drops_the_ignored_events_of_matching_tables_and_keeps_the_rest_in_order() {
        let (orders, audit) = (table(1, "orders"), table(2, "audit_log"));
        let config = r#"{"rules": [
            {"matcher": ["app.orders"], "ignore-event": ["delete"]},
            {"matcher": ["other.*", "app.audit_*"], "ignore-event": ["insert", "update"]}
        ]}"#;
        let mut filter = FilterHarness::<DropEvents>::open(config).unwrap();
        let out = filter
            .transform(
                &[&orders, &audit],
                vec![mixed(&orders, 100), mixed(&audit, 200)],
            )
            .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(
            rows(&orders, &out[0]),
            vec![
                (Op::Insert, 100, None, img(1, Some("a"))),
                (Op::Update, 101, img(1, Some("a")), img(1, Some("b"))),
                (Op::Insert, 103, None, img(3, None)),
                (Op::Update, 104, img(3, None), img(3, Some("c"))),
            ]
        );
        assert_eq!(
            rows(&audit, &out[1]),
            vec![
                (Op::Delete, 202, img(2, Some("x")), None),
                (Op::Delete, 205, img(1, Some("b")), None)
            ]
        );
        assert_eq!(out[1].table_id, 2);
        assert_eq!(
            sluice_sdk::host::native_counters().get("dropped"),
            Some(&(2 + 4))
        );
    }

    #[test]
    fn all_dml_drops_whole_table_batches_and_unmatched_tables_stay_whole() {
        let (tmp, keep) = (table(1, "tmp_import"), table(2, "orders"));
        let config = r#"{"rules": [{"matcher": ["*.tmp_*"], "ignore-event": ["all-dml"]}]}"#;
        let mut filter = FilterHarness::<DropEvents>::open(config).unwrap();
        let out = filter
            .transform(
                &[&tmp, &keep],
                vec![mixed(&tmp, 10), mixed(&keep, 20), mixed(&tmp, 30)],
            )
            .unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].table_id, 2);
        assert_eq!(rows(&keep, &out[0]), rows(&keep, &mixed(&keep, 20)));
        assert_eq!(rows(&keep, &out[0]).len(), 6);
        assert_eq!(
            sluice_sdk::host::native_counters().get("dropped"),
            Some(&12)
        );
    }

    #[test]
    fn a_matching_rule_that_ignores_none_of_the_ops_keeps_the_batch() {
        let orders = table(1, "orders");
        let config = r#"{"rules": [{"matcher": ["app.orders"], "ignore-event": ["delete"]}]}"#;
        let mut filter = FilterHarness::<DropEvents>::open(config).unwrap();
        let mut b = TableBatchBuilder::new(&orders);
        b.insert(7, &[Value::Int(9), Value::Text("z")]);
        let out = filter.transform(&[&orders], vec![b.finish()]).unwrap();
        assert_eq!(
            rows(&orders, &out[0]),
            vec![(Op::Insert, 7, None, img(9, Some("z")))]
        );
        assert_eq!(sluice_sdk::host::native_counters().get("dropped"), None);
    }

    #[test]
    fn rejects_bad_configs_with_config_errors() {
        let cases = [
            (r#"{"rules": []}"#, "rules is empty"),
            (r#"{}"#, "missing field `rules`"),
            (
                r#"{"rules": [{"matcher": ["a.b"], "ignore-event": ["truncate"]}]}"#,
                "unknown variant `truncate`, expected one of `insert`, `update`, `delete`, `all-dml`",
            ),
            (
                r#"{"rules": [{"matcher": [], "ignore-event": ["insert"]}]}"#,
                "rules[0].matcher has no patterns",
            ),
            (
                r#"{"rules": [{"matcher": ["a.b"], "ignore-event": ["insert"]}, {"matcher": ["a.c"], "ignore-event": []}]}"#,
                "rules[1].ignore-event is empty",
            ),
            (
                r#"{"rules": [{"matcher": ["a.b"], "ignore-events": ["insert"]}]}"#,
                "unknown field `ignore-events`",
            ),
        ];
        for (config, message) in cases {
            let err = FilterHarness::<DropEvents>::open(config).err().unwrap();
            assert!(matches!(err, Error::Config(_)), "{config}: {err}");
            assert!(err.message().contains(message), "{config}: {err}");
        }
    }
}
