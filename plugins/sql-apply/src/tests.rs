use super::*;
use sluice_sdk::{Column, ColumnType};

/// The plans are read in MySQL's spelling.
type Q = crate::Mysql;

/// An `int` column, part of the key or nullable.
fn col(name: &str, key: bool) -> Column {
    Column {
        name: name.into(),
        ty: ColumnType::Int,
        sql_type: "int".into(),
        nullable: !key,
        key,
    }
}

fn schema() -> Rc<TableSchema> {
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

fn shape(groups: &[Vec<Txn>]) -> Vec<Vec<u64>> {
    groups
        .iter()
        .map(|g| g.iter().map(|t| t.commit_ts).collect())
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
    let sql: Vec<String> = statements::<Q>(group, 2, false)
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

/// `(sql, params)` of `statements` in batch mode.
fn batched(group: Vec<Txn>, max_rows: usize) -> Vec<(String, Vec<SqlValue>)> {
    statements::<Q>(group, max_rows, true)
        .into_iter()
        .map(|s| (s.sql, s.params))
        .collect()
}

fn ints(values: &[i64]) -> Vec<SqlValue> {
    values.iter().map(|&v| SqlValue::Int(v)).collect()
}

#[test]
fn a_batched_group_deletes_every_row_it_touched_then_inserts_their_last_images() {
    // Row 1 updated twice, row 2 deleted and inserted again (sysbench's
    // write-only shape), row 3 inserted then deleted (nothing left), row 4
    // moves to key 8, row 5 deleted, row 6 inserted.
    let group = vec![
        txn(
            1,
            vec![
                change(Op::Update, Some((1, 10)), Some((1, 11)), false),
                change(Op::Delete, Some((2, 20)), None, false),
                change(Op::Insert, None, Some((2, 21)), false),
            ],
        ),
        txn(
            2,
            vec![
                change(Op::Insert, None, Some((3, 30)), false),
                change(Op::Update, Some((1, 11)), Some((1, 12)), false),
                change(Op::Update, Some((4, 40)), Some((8, 40)), false),
            ],
        ),
        txn(
            3,
            vec![
                change(Op::Delete, Some((3, 30)), None, false),
                change(Op::Delete, Some((5, 50)), None, false),
                change(Op::Insert, None, Some((6, 60)), false),
            ],
        ),
    ];
    assert_eq!(
        batched(group, 3),
        [
            (
                "DELETE FROM `s`.`t` WHERE `id` IN (?, ?, ?)".to_string(),
                ints(&[1, 2, 4])
            ),
            (
                "DELETE FROM `s`.`t` WHERE `id` IN (?)".to_string(),
                ints(&[5])
            ),
            (
                "INSERT INTO `s`.`t` (`id`, `v`) VALUES (?, ?), (?, ?), (?, ?)".to_string(),
                ints(&[1, 12, 2, 21, 8, 40])
            ),
            (
                "INSERT INTO `s`.`t` (`id`, `v`) VALUES (?, ?)".to_string(),
                ints(&[6, 60])
            ),
        ]
    );
}

#[test]
fn a_batched_group_with_a_replayed_row_replaces_and_a_key_that_comes_back_is_kept() {
    // Key 2 moves to 3 and back; a replayed insert makes the inserts
    // idempotent.
    let group = vec![txn(
        1,
        vec![
            change(Op::Update, Some((2, 1)), Some((3, 1)), false),
            change(Op::Update, Some((3, 1)), Some((2, 2)), false),
            change(Op::Insert, None, Some((7, 7)), true),
        ],
    )];
    assert_eq!(
        batched(group, 256),
        [
            (
                "DELETE FROM `s`.`t` WHERE `id` IN (?, ?)".to_string(),
                ints(&[2, 7])
            ),
            (
                "REPLACE INTO `s`.`t` (`id`, `v`) VALUES (?, ?), (?, ?)".to_string(),
                ints(&[2, 2, 7, 7])
            ),
        ]
    );
    // A replayed row inserted and deleted in the run may be downstream from
    // an earlier attempt cut at other flush boundaries: it is deleted.
    let group = vec![
        txn(1, vec![change(Op::Insert, None, Some((4, 4)), true)]),
        txn(2, vec![change(Op::Delete, Some((4, 4)), None, true)]),
    ];
    assert_eq!(
        batched(group, 256),
        [(
            "DELETE FROM `s`.`t` WHERE `id` IN (?)".to_string(),
            ints(&[4])
        )]
    );
    // Not replayed, nothing of it is written.
    let group = vec![
        txn(1, vec![change(Op::Insert, None, Some((4, 4)), false)]),
        txn(2, vec![change(Op::Delete, Some((4, 4)), None, false)]),
    ];
    assert_eq!(batched(group, 256), []);
}

#[test]
fn a_batched_group_keeps_keyless_tables_row_by_row_and_composite_keys_in_row_lists() {
    let table = |name: &str, columns: Vec<Column>| {
        Rc::new(TableSchema {
            table_name: name.into(),
            columns,
            ..(*schema()).clone()
        })
    };
    let pair = table("p", vec![col("a", true), col("b", true), col("v", false)]);
    let bare = table("n", vec![col("a", false), col("v", false)]);
    let mk = |schema: &Rc<TableSchema>,
              target: &str,
              op,
              before: Option<Vec<i64>>,
              after: Option<Vec<i64>>| Change {
        target: target.into(),
        schema: schema.clone(),
        uniques: Rc::new(Vec::new()),
        op,
        before: before.map(|v| ints(&v)),
        after: after.map(|v| ints(&v)),
        safe: false,
    };
    let group = vec![txn(
        1,
        vec![
            mk(
                &pair,
                "`s`.`p`",
                Op::Update,
                Some(vec![1, 2, 0]),
                Some(vec![1, 2, 5]),
            ),
            mk(
                &bare,
                "`s`.`n`",
                Op::Update,
                Some(vec![1, 0]),
                Some(vec![1, 1]),
            ),
            mk(&bare, "`s`.`n`", Op::Delete, Some(vec![1, 1]), None),
        ],
    )];
    let sql: Vec<String> = batched(group, 256).into_iter().map(|(s, _)| s).collect();
    assert_eq!(
        sql,
        [
            "DELETE FROM `s`.`p` WHERE (`a`, `b`) IN ((?, ?))",
            "INSERT INTO `s`.`p` (`a`, `b`, `v`) VALUES (?, ?, ?)",
            // A keyless row's update changes its "key" (every column).
            "DELETE FROM `s`.`n` WHERE `a` <=> ? AND `v` <=> ? LIMIT 1",
            "INSERT INTO `s`.`n` (`a`, `v`) VALUES (?, ?)",
            "DELETE FROM `s`.`n` WHERE `a` <=> ? AND `v` <=> ? LIMIT 1",
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
        // Keys of both: the two sets join, in commit order.
        txn(
            4,
            vec![
                change(Op::Delete, Some((1, 2)), None, false),
                change(Op::Delete, Some((2, 1)), None, false),
            ],
        ),
        txn(5, vec![change(Op::Insert, None, Some((7, 1)), false)]),
    ];
    assert_eq!(shape(&groups(txns, 4)), vec![vec![1, 2, 3, 4], vec![5]]);
}

#[test]
fn sets_go_to_the_least_loaded_group_largest_first() {
    // Sets of 3, 1, 1, 2 and 1 rows (by key) over 2 workers: the 3 and the 2
    // can't share a group; each group keeps commit order.
    let ins = |id| change(Op::Insert, None, Some((id, 0)), false);
    let upd = |id| change(Op::Update, Some((id, 0)), Some((id, 1)), false);
    let txns = vec![
        txn(1, vec![ins(1), ins(2)]),
        txn(2, vec![ins(3)]),
        txn(3, vec![upd(1)]),
        txn(4, vec![ins(4)]),
        txn(5, vec![ins(5), ins(6)]),
        txn(6, vec![ins(7)]),
    ];
    assert_eq!(shape(&groups(txns, 2)), vec![vec![1, 3, 4], vec![2, 5, 6]]);
    assert_eq!(shape(&groups(Vec::new(), 4)), Vec::<Vec<u64>>::new());
}

#[test]
fn calls_hold_whole_groups_up_to_the_bound_and_cut_longer_ones() {
    let group = |n: usize| vec![Statement::new("SELECT 1", Vec::new()); n];
    let sizes = |calls: Vec<Vec<Vec<Statement>>>| -> Vec<Vec<usize>> {
        calls
            .iter()
            .map(|c| c.iter().map(Vec::len).collect())
            .collect()
    };
    assert_eq!(
        sizes(calls(vec![group(3), group(2), group(4), group(9)], 5)),
        vec![vec![3, 2], vec![4], vec![5], vec![4]]
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
    assert_eq!(shape(&groups(txns, 4)), vec![vec![1, 2], vec![3]]);
    // Without the unique key the first two would spread.
    let txns = vec![
        txn(
            1,
            vec![change(Op::Update, Some((1, 5)), Some((1, 6)), false)],
        ),
        txn(2, vec![change(Op::Insert, None, Some((2, 5)), false)]),
    ];
    assert_eq!(shape(&groups(txns, 4)), vec![vec![1], vec![2]]);
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
    let out = statements::<Q>(vec![txn(1, changes)], 256, true);
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
