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

/// A change of `target`, numbered 0 in its transaction.
fn change_of(
    target: &Rc<Target>,
    op: Op,
    before: Option<Vec<SqlValue>>,
    after: Option<Vec<SqlValue>>,
    safe: bool,
) -> Change {
    Change {
        target: target.clone(),
        op,
        before,
        after,
        replayed: safe,
        safe,
        seq: 0,
        txn_id: 0,
        no_fk_checks: false,
    }
}

fn target_with(uniques: UniqueKeys) -> Rc<Target> {
    Rc::new(Target::plain("`s`.`t`".into(), schema(), uniques))
}

fn change_with(
    uniques: UniqueKeys,
    op: Op,
    before: Option<(i64, i64)>,
    after: Option<(i64, i64)>,
    safe: bool,
) -> Change {
    let image = |(id, v): (i64, i64)| vec![SqlValue::Int(id), SqlValue::Int(v)];
    change_of(
        &target_with(uniques),
        op,
        before.map(image),
        after.map(image),
        safe,
    )
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
    let sql: Vec<String> = statements::<Q>(group, 2, false, true)
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
    statements::<Q>(group, max_rows, true, true)
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
    let targets = [
        Rc::new(Target::plain("`s`.`p`".into(), pair.clone(), Vec::new())),
        Rc::new(Target::plain("`s`.`n`".into(), bare.clone(), Vec::new())),
    ];
    let mk = |schema: &Rc<TableSchema>,
              target: &str,
              op,
              before: Option<Vec<i64>>,
              after: Option<Vec<i64>>| {
        let t = targets
            .iter()
            .find(|t| t.name == target && Rc::ptr_eq(&t.schema, schema))
            .unwrap();
        change_of(
            t,
            op,
            before.map(|v| ints(&v)),
            after.map(|v| ints(&v)),
            false,
        )
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
        sizes(calls::<Mysql>(
            vec![group(3), group(2), group(4), group(9)],
            5
        )),
        vec![vec![3, 2], vec![4], vec![5], vec![5]]
    );
    // The piece after a cut starts a session of its own (MySQL: its
    // sql_mode for rows).
    let cut = calls::<Mysql>(vec![group(9)], 5);
    assert_eq!(
        cut[1][0][0].sql,
        Mysql::row_session().unwrap().sql,
        "{:?}",
        cut[1][0]
    );
    // A piece cut while foreign key checks are off starts with them off.
    let off = Postgres::foreign_key_checks(false).unwrap();
    let on = Postgres::foreign_key_checks(true).unwrap();
    let mut long = group(2);
    long.push(off.clone());
    long.extend(group(3));
    long.push(on.clone());
    long.extend(group(3));
    let cut = calls::<Postgres>(vec![long], 4);
    let text: Vec<Vec<&str>> = cut
        .iter()
        .map(|c| c[0].iter().map(|s| s.sql.as_str()).collect())
        .collect();
    let (off, on) = (off.sql.as_str(), on.sql.as_str());
    assert_eq!(
        text,
        vec![
            vec!["SELECT 1", "SELECT 1", off, "SELECT 1"],
            vec![off, "SELECT 1", "SELECT 1", on],
            vec!["SELECT 1", "SELECT 1", "SELECT 1"],
        ]
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
    let target = Rc::new(Target::plain("`s`.`w`".into(), wide, Vec::new()));
    let changes = (0..200)
        .map(|i| {
            change_of(
                &target,
                Op::Insert,
                None,
                Some(vec![SqlValue::Int(i); 1000]),
                false,
            )
        })
        .collect();
    let out = statements::<Q>(vec![txn(1, changes)], 256, true, true);
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

/// A parent table `p (id, u)` referenced by `c (id, pid)` through `pid`, with
/// `cascade` as both rules; `u` is generated downstream in `p`.
fn family(cascade: bool) -> (Rc<Target>, Rc<Target>) {
    let text = |s: &str| SqlValue::Text(s.into());
    let rule = if cascade { "CASCADE" } else { "RESTRICT" };
    let p_schema = Rc::new(TableSchema {
        table_id: 1,
        table_name: "p".into(),
        columns: vec![col("id", true), col("u", false)],
        ..(*schema()).clone()
    });
    let c_schema = Rc::new(TableSchema {
        table_id: 2,
        table_name: "c".into(),
        columns: vec![col("id", true), col("pid", false)],
        ..(*schema()).clone()
    });
    let parent = target_of(
        "`s`.`p`".into(),
        p_schema,
        Facts {
            columns: vec![
                vec![text("id"), SqlValue::Int(0)],
                vec![text("u"), SqlValue::Int(1)],
            ],
            uniques: Vec::new(),
            parents: Vec::new(),
            children: vec![vec![text("s.c.fk"), text("id"), text(rule), text(rule)]],
            kind: vec![vec![text("BASE TABLE")]],
        },
        Q::table_name,
    );
    let child = target_of(
        "`s`.`c`".into(),
        c_schema,
        Facts {
            columns: vec![
                vec![text("id"), SqlValue::Int(0)],
                vec![text("pid"), SqlValue::Int(0)],
            ],
            uniques: Vec::new(),
            parents: vec![vec![
                text("fk"),
                text("pid"),
                text("s"),
                text("p"),
                text("id"),
            ]],
            children: Vec::new(),
            kind: vec![vec![text("BASE TABLE")]],
        },
        Q::table_name,
    );
    (Rc::new(parent), Rc::new(child))
}

fn at(
    target: &Rc<Target>,
    seq: u32,
    op: Op,
    before: Option<(i64, i64)>,
    after: Option<(i64, i64)>,
) -> Change {
    let image = |(a, b): (i64, i64)| vec![SqlValue::Int(a), SqlValue::Int(b)];
    Change {
        seq,
        ..change_of(target, op, before.map(image), after.map(image), false)
    }
}

#[test]
fn facts_of_the_target_name_generated_columns_and_both_ends_of_foreign_keys() {
    let (parent, child) = family(true);
    assert_eq!(parent.written, vec![0], "u is generated: never written");
    assert_eq!(parent.present, vec![0, 1], "but it may be read");
    assert_eq!(parent.referenced.len(), 1);
    assert!(parent.referenced[0].cascades_delete && parent.referenced[0].cascades_update);
    assert_eq!(child.parents.len(), 1);
    assert_eq!(child.parents[0].parent, "`s`.`p`");
    assert_eq!(child.parents[0].columns, vec![1]);
    assert!(parent.fk_linked() && child.fk_linked());
    let (parent, _) = family(false);
    assert!(!parent.referenced[0].cascades_delete);
    assert!(!target_with(Vec::new()).fk_linked());
}

#[test]
fn a_child_row_and_its_parent_row_are_in_one_group_in_commit_order() {
    let (parent, child) = family(false);
    let txns = vec![
        txn(1, vec![at(&parent, 0, Op::Insert, None, Some((7, 0)))]),
        // References parent 7: after it, in its group.
        txn(2, vec![at(&child, 0, Op::Insert, None, Some((1, 7)))]),
        // Another parent and a child of it: a set of their own.
        txn(3, vec![at(&parent, 0, Op::Insert, None, Some((8, 0)))]),
        txn(4, vec![at(&child, 0, Op::Insert, None, Some((2, 8)))]),
        // A child of parent 7 deleted, then parent 7.
        txn(5, vec![at(&child, 0, Op::Delete, Some((1, 7)), None)]),
        txn(6, vec![at(&parent, 0, Op::Delete, Some((7, 0)), None)]),
    ];
    assert_eq!(shape(&groups(txns, 4)), vec![vec![1, 2, 5, 6], vec![3, 4]]);
}

#[test]
fn a_transaction_that_cascades_applies_alone_between_the_others() {
    let (parent, child) = family(true);
    let txns = vec![
        txn(1, vec![at(&child, 0, Op::Insert, None, Some((1, 7)))]),
        txn(2, vec![at(&child, 0, Op::Insert, None, Some((2, 8)))]),
        // Deleting parent 7 deletes its children downstream too.
        txn(3, vec![at(&parent, 0, Op::Delete, Some((7, 0)), None)]),
        // Row 1 of c was deleted by the cascade upstream; inserted again here
        // with no parent: it must not overtake the cascade.
        txn(4, vec![at(&child, 0, Op::Insert, None, Some((1, 0)))]),
        // Changing a parent's other column cascades nothing.
        txn(
            5,
            vec![at(&parent, 0, Op::Update, Some((8, 0)), Some((8, 1)))],
        ),
        // Changing its key does (ON UPDATE CASCADE).
        txn(
            6,
            vec![at(&parent, 0, Op::Update, Some((8, 1)), Some((9, 1)))],
        ),
    ];
    let cut: Vec<Vec<u64>> = phases(txns)
        .iter()
        .map(|p| p.iter().map(|t| t.commit_ts).collect())
        .collect();
    assert_eq!(cut, vec![vec![1, 2], vec![3], vec![4, 5], vec![6]]);
    // Without cascading keys nothing is cut.
    let (parent, child) = family(false);
    let txns = vec![
        txn(1, vec![at(&child, 0, Op::Delete, Some((1, 7)), None)]),
        txn(2, vec![at(&parent, 0, Op::Delete, Some((7, 0)), None)]),
    ];
    assert_eq!(phases(txns).len(), 1);
}

#[test]
fn tables_tied_by_foreign_keys_are_written_in_upstream_order_and_updates_stay_updates() {
    let (parent, child) = family(true);
    // One transaction: parent 7 inserted, its child, a new parent 8, the child
    // moved to it, then parent 7's key changed (cascading), as written
    // upstream (seq order), though the host sends them per table.
    let group = vec![txn(
        1,
        vec![
            at(&parent, 0, Op::Insert, None, Some((7, 0))),
            at(&parent, 2, Op::Insert, None, Some((8, 0))),
            at(&parent, 4, Op::Update, Some((7, 0)), Some((6, 0))),
            at(&child, 1, Op::Insert, None, Some((1, 7))),
            at(&child, 3, Op::Update, Some((1, 7)), Some((1, 8))),
        ],
    )];
    let sql: Vec<(String, Vec<SqlValue>)> = batched(group, 256);
    assert_eq!(
        sql,
        [
            // `u` is generated in p: not written.
            (
                "INSERT INTO `s`.`p` (`id`) VALUES (?)".to_string(),
                ints(&[7])
            ),
            (
                "INSERT INTO `s`.`c` (`id`, `pid`) VALUES (?, ?)".to_string(),
                ints(&[1, 7])
            ),
            (
                "INSERT INTO `s`.`p` (`id`) VALUES (?)".to_string(),
                ints(&[8])
            ),
            (
                "UPDATE `s`.`c` SET `id` = ?, `pid` = ? WHERE `id` = ? LIMIT 1".to_string(),
                ints(&[1, 8, 1])
            ),
            (
                "UPDATE `s`.`p` SET `id` = ? WHERE `id` = ? LIMIT 1".to_string(),
                ints(&[6, 7])
            ),
        ]
    );
    // Delivered again without a record: upserts, never a delete-and-insert.
    let replayed = |mut c: Change| {
        c.safe = true;
        c
    };
    let group = vec![txn(
        1,
        vec![
            replayed(at(&parent, 0, Op::Insert, None, Some((7, 0)))),
            replayed(at(&parent, 1, Op::Update, Some((7, 0)), Some((7, 5)))),
        ],
    )];
    let sql: Vec<String> = batched(group, 256).into_iter().map(|(s, _)| s).collect();
    assert_eq!(
        sql,
        [
            "INSERT INTO `s`.`p` (`id`) VALUES (?) ON DUPLICATE KEY UPDATE `id` = `id`",
            "UPDATE `s`.`p` SET `id` = ? WHERE `id` = ? LIMIT 1",
            "INSERT INTO `s`.`p` (`id`) VALUES (?) ON DUPLICATE KEY UPDATE `id` = `id`",
        ]
    );
}

#[test]
fn rows_made_without_foreign_key_checks_upstream_run_so_downstream() {
    let (parent, child) = family(false);
    let mut orphan = at(&child, 0, Op::Insert, None, Some((1, 99)));
    orphan.no_fk_checks = true;
    let group = vec![
        txn(1, vec![orphan]),
        txn(2, vec![at(&parent, 0, Op::Insert, None, Some((99, 0)))]),
    ];
    let sql: Vec<String> = batched(group, 256).into_iter().map(|(s, _)| s).collect();
    assert_eq!(
        sql,
        [
            "SET SESSION foreign_key_checks = 0",
            "INSERT INTO `s`.`c` (`id`, `pid`) VALUES (?, ?)",
            "SET SESSION foreign_key_checks = 1",
            "INSERT INTO `s`.`p` (`id`) VALUES (?)",
        ]
    );
}

#[test]
fn a_group_records_the_rows_it_applied_by_transaction_id() {
    let progress = progress::Progress::new("sluice.apply_progress", "t/feed".into());
    let applied = [
        progress::Applied {
            txn: 77,
            lo: 0,
            hi: 2,
        },
        progress::Applied {
            txn: 78,
            lo: 1,
            hi: 1,
        },
    ];
    let record = progress.record::<Q>(5, 9, &applied).unwrap();
    assert_eq!(
        record.sql,
        "INSERT INTO `sluice`.`apply_progress` (changefeed, first_txn, first_seq, first_ts, last_ts, txns) \
         VALUES (?, ?, ?, ?, ?, ?)"
    );
    assert_eq!(
        record.params[..5],
        [
            SqlValue::Text("t/feed".into()),
            SqlValue::Int(77),
            SqlValue::Int(0),
            SqlValue::Int(5),
            SqlValue::Int(9),
        ]
    );
    assert_eq!(
        record.params[5],
        SqlValue::Bytes(progress::encode(&applied))
    );
    assert!(progress.record::<Q>(5, 9, &[]).is_none());
    // A transaction's id and its runs of seqs, for its record: the rows it
    // does not have (another capture's tables) are not claimed.
    let t = txn(
        3,
        vec![
            Change {
                seq: 4,
                txn_id: 41,
                ..change(Op::Insert, None, Some((1, 1)), false)
            },
            Change {
                seq: 2,
                txn_id: 41,
                ..change(Op::Insert, None, Some((2, 1)), false)
            },
        ],
    );
    let run = |lo, hi| progress::Applied { txn: 41, lo, hi };
    assert_eq!(t.applied(), [run(2, 2), run(4, 4)]);
    let mut t = t;
    for seq in [3, 5, 9] {
        t.changes.push(Change {
            seq,
            txn_id: 41,
            ..change(Op::Insert, None, Some((seq as i64, 1)), false)
        });
    }
    assert_eq!(t.applied(), [run(2, 5), run(9, 9)]);
    assert!(txn(4, Vec::new()).applied().is_empty());
}

#[test]
fn conflict_keys_fold_case_and_trailing_spaces_of_text() {
    let text_schema = Rc::new(TableSchema {
        columns: vec![
            Column {
                ty: sluice_sdk::ColumnType::Text,
                sql_type: "varchar(8)".into(),
                ..col("id", true)
            },
            col("v", false),
        ],
        ..(*schema()).clone()
    });
    let target = Rc::new(Target::plain("`s`.`t`".into(), text_schema, Vec::new()));
    let row = |k: &str| Some(vec![SqlValue::Text(k.into()), SqlValue::Int(0)]);
    let txns = vec![
        txn(
            1,
            vec![change_of(&target, Op::Insert, None, row("Ab "), false)],
        ),
        txn(
            2,
            vec![change_of(&target, Op::Delete, row("ab"), None, false)],
        ),
        txn(
            3,
            vec![change_of(&target, Op::Insert, None, row("abc"), false)],
        ),
    ];
    assert_eq!(shape(&groups(txns, 4)), vec![vec![1, 2], vec![3]]);
}

#[test]
fn a_system_versioned_table_gets_current_rows_only() {
    let text = |s: &str| SqlValue::Text(s.into());
    let schema = Rc::new(TableSchema {
        columns: vec![
            col("id", true),
            col("v", false),
            Column {
                ty: sluice_sdk::ColumnType::Datetime,
                sql_type: "timestamp(6)".into(),
                ..col("row_start", false)
            },
            Column {
                ty: sluice_sdk::ColumnType::Datetime,
                sql_type: "timestamp(6)".into(),
                key: true,
                ..col("row_end", false)
            },
        ],
        ..(*schema()).clone()
    });
    let target = target_of(
        "`s`.`sv`".into(),
        schema,
        Facts {
            columns: vec![
                vec![text("id"), SqlValue::Int(0)],
                vec![text("v"), SqlValue::Int(0)],
            ],
            uniques: Vec::new(),
            parents: Vec::new(),
            children: Vec::new(),
            kind: vec![vec![text("SYSTEM VERSIONED")]],
        },
        Q::table_name,
    );
    assert_eq!(target.history_end, Some(3));
    assert_eq!(target.key(), vec![0], "row_end is not in the target");
    let row = |v: i64, end: &str| {
        Some(vec![
            SqlValue::Int(1),
            SqlValue::Int(v),
            text("2026-01-01 00:00:00"),
            text(end),
        ])
    };
    let now = "2038-01-19 03:14:07.999999";
    let past = "2026-06-01 10:00:00.000001";
    // A history row written by an update: left out.
    assert!(
        target
            .current_change(Op::Insert, None, row(1, past))
            .is_none()
    );
    // A current row: kept.
    assert!(matches!(
        target.current_change(Op::Insert, None, row(1, now)),
        Some((Op::Insert, None, Some(_)))
    ));
    // A delete upstream is a current row turned into history: a delete.
    assert!(matches!(
        target.current_change(Op::Update, row(1, now), row(1, past)),
        Some((Op::Delete, Some(_), None))
    ));
    assert!(matches!(
        target.current_change(Op::Update, row(1, now), row(2, now)),
        Some((Op::Update, Some(_), Some(_)))
    ));
    // Deleting history (DELETE HISTORY): nothing downstream.
    assert!(
        target
            .current_change(Op::Delete, row(1, past), None)
            .is_none()
    );
}
