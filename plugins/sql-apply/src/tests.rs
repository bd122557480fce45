use super::*;
use sluice_sdk::{Column, ColumnType};

/// The plans are read in MySQL's spelling.
type Q = crate::Mysql;

fn schema() -> Rc<TableSchema> {
    let col = |name: &str, key: bool| Column {
        name: name.into(),
        ty: ColumnType::Int,
        sql_type: "int".into(),
        nullable: !key,
        key,
    };
    Rc::new(TableSchema {
        table_id: 1,
        version: 1,
        schema_name: "s".into(),
        table_name: "t".into(),
        columns: vec![col("id", true), col("v", false)],
    })
}

fn change_with(
    uniques: UniqueKeys,
    op: Op,
    before: Option<(i64, i64)>,
    after: Option<(i64, i64)>,
    safe: bool,
) -> Change {
    let image = |(id, v): (i64, i64)| vec![SqlValue::Int(id), SqlValue::Int(v)];
    Change {
        target: "`s`.`t`".into(),
        schema: schema(),
        uniques: Rc::new(uniques),
        op,
        before: before.map(image),
        after: after.map(image),
        safe,
    }
}

fn change(op: Op, before: Option<(i64, i64)>, after: Option<(i64, i64)>, safe: bool) -> Change {
    change_with(Vec::new(), op, before, after, safe)
}

fn txn(ts: u64, changes: Vec<Change>) -> Txn {
    Txn {
        commit_ts: ts,
        changes,
    }
}

fn shape(rounds: &[Vec<Vec<Txn>>]) -> Vec<Vec<Vec<u64>>> {
    rounds
        .iter()
        .map(|r| {
            r.iter()
                .map(|g| g.iter().map(|t| t.commit_ts).collect())
                .collect()
        })
        .collect()
}

#[test]
fn inserts_batch_updates_split_on_key_change_and_safe_rows_replace() {
    let group = vec![
        txn(
            1,
            vec![
                change(Op::Insert, None, Some((1, 10)), false),
                change(Op::Insert, None, Some((2, 20)), false),
                change(Op::Insert, None, Some((3, 30)), false),
            ],
        ),
        txn(
            2,
            vec![change(Op::Update, Some((1, 10)), Some((1, 11)), false)],
        ),
        txn(
            3,
            vec![change(Op::Update, Some((2, 20)), Some((9, 20)), false)],
        ),
        txn(
            4,
            vec![change(Op::Update, Some((3, 30)), Some((3, 31)), true)],
        ),
        txn(5, vec![change(Op::Delete, Some((9, 20)), None, false)]),
    ];
    let sql: Vec<String> = statements::<Q>(group, 2)
        .into_iter()
        .map(|s| s.sql)
        .collect();
    assert_eq!(
        sql,
        [
            "INSERT INTO `s`.`t` (`id`, `v`) VALUES (?, ?), (?, ?)",
            "INSERT INTO `s`.`t` (`id`, `v`) VALUES (?, ?)",
            "UPDATE `s`.`t` SET `id` = ?, `v` = ? WHERE `id` = ? LIMIT 1",
            "DELETE FROM `s`.`t` WHERE `id` = ? LIMIT 1",
            "INSERT INTO `s`.`t` (`id`, `v`) VALUES (?, ?)",
            "DELETE FROM `s`.`t` WHERE `id` = ? LIMIT 1",
            "REPLACE INTO `s`.`t` (`id`, `v`) VALUES (?, ?)",
            "DELETE FROM `s`.`t` WHERE `id` = ? LIMIT 1",
        ]
    );
}

#[test]
fn transactions_on_different_keys_spread_and_conflicting_ones_keep_their_order() {
    let txns = vec![
        txn(1, vec![change(Op::Insert, None, Some((1, 1)), false)]),
        txn(2, vec![change(Op::Insert, None, Some((2, 1)), false)]),
        // Same key as txn 1: its group, after it.
        txn(
            3,
            vec![change(Op::Update, Some((1, 1)), Some((1, 2)), false)],
        ),
        // Keys of both groups: the next round.
        txn(
            4,
            vec![
                change(Op::Delete, Some((1, 2)), None, false),
                change(Op::Delete, Some((2, 1)), None, false),
            ],
        ),
        txn(5, vec![change(Op::Insert, None, Some((7, 1)), false)]),
    ];
    assert_eq!(
        shape(&rounds(txns, 4)),
        vec![vec![vec![1, 3], vec![2]], vec![vec![4], vec![5]]]
    );
}

#[test]
fn a_unique_key_orders_transactions_with_different_primary_keys() {
    // Column v is unique: txn 2 takes the value txn 1 gave up, so it must
    // follow txn 1; txn 3 shares nothing and spreads.
    let unique = || vec![vec![1]];
    let txns = vec![
        txn(
            1,
            vec![change_with(
                unique(),
                Op::Update,
                Some((1, 5)),
                Some((1, 6)),
                false,
            )],
        ),
        txn(
            2,
            vec![change_with(unique(), Op::Insert, None, Some((2, 5)), false)],
        ),
        txn(
            3,
            vec![change_with(unique(), Op::Insert, None, Some((3, 7)), false)],
        ),
    ];
    assert_eq!(shape(&rounds(txns, 4)), vec![vec![vec![1, 2], vec![3]]]);
    // Without the unique key the first two would spread.
    let txns = vec![
        txn(
            1,
            vec![change(Op::Update, Some((1, 5)), Some((1, 6)), false)],
        ),
        txn(2, vec![change(Op::Insert, None, Some((2, 5)), false)]),
    ];
    assert_eq!(shape(&rounds(txns, 4)), vec![vec![vec![1], vec![2]]]);
}

#[test]
fn unique_keys_map_names_to_positions_and_leave_out_the_primary_key() {
    let text = |s: &str| SqlValue::Text(s.into());
    let rows = vec![
        vec![text("PRIMARY"), text("id")],
        vec![text("u_v"), text("v")],
        // An index over a column the upstream table lacks is unusable.
        vec![text("u_gone"), text("gone")],
    ];
    assert_eq!(unique_keys_of(&schema(), rows), vec![vec![1]]);
}

#[test]
fn wide_tables_get_fewer_rows_per_statement() {
    let wide = Rc::new(TableSchema {
        columns: (0..1000)
            .map(|i| Column {
                name: format!("c{i}"),
                ty: ColumnType::Int,
                sql_type: "int".into(),
                nullable: i > 0,
                key: i == 0,
            })
            .collect(),
        ..(*schema()).clone()
    });
    let changes = (0..200)
        .map(|i| Change {
            target: "`s`.`w`".into(),
            schema: wide.clone(),
            uniques: Rc::new(Vec::new()),
            op: Op::Insert,
            before: None,
            after: Some(vec![SqlValue::Int(i); 1000]),
            safe: false,
        })
        .collect();
    let out = statements::<Q>(vec![txn(1, changes)], 256);
    // 65,535 parameters hold 65 rows of 1000 columns.
    let rows: Vec<usize> = out.iter().map(|s| s.params.len() / 1000).collect();
    assert_eq!(rows, [65, 65, 65, 5]);
}

#[test]
fn datetimes_are_text_both_databases_read() {
    assert_eq!(
        datetime_text(1_700_000_000_123_456),
        "2023-11-14 22:13:20.123456"
    );
    assert_eq!(datetime_text(-1_000_000), "1969-12-31 23:59:59");
    assert_eq!(date_text(0), "1970-01-01");
}
