//! The PostgreSQL and SQLite migrations describe one schema: the same files, and in each file the same
//! tables with the same columns. Types and constraints are dialect business and are not compared.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// Table name to column names.
type Schema = BTreeMap<String, BTreeSet<String>>;

/// Words that open a table constraint rather than a column definition.
const TABLE_CONSTRAINT_WORDS: [&str; 6] = [
    "CONSTRAINT",
    "PRIMARY",
    "UNIQUE",
    "FOREIGN",
    "CHECK",
    "EXCLUDE",
];

fn migrations_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations")
}

/// The `.sql` files of a dialect folder, by file name.
fn read_dialect(dir: &Path) -> BTreeMap<String, String> {
    fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display()))
        .map(|entry| entry.expect("folder entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
        .map(|path| {
            let name = path
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            let text =
                fs::read_to_string(&path).unwrap_or_else(|err| panic!("cannot read {name}: {err}"));
            (name, text)
        })
        .collect()
}

/// The SQL without `--` comments, as one line.
fn strip_comments(sql: &str) -> String {
    sql.lines()
        .map(|line| line.split_once("--").map_or(line, |(code, _)| code))
        .collect::<Vec<_>>()
        .join(" ")
}

/// An identifier without quotes, in lowercase.
fn ident(word: &str) -> String {
    word.trim_matches(|c| c == '"' || c == '`' || c == '[' || c == ']')
        .to_lowercase()
}

/// `text` split at commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut parts) = (0_i32, 0, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// Applies one statement's effect on tables and columns to `schema`.
fn apply_statement(schema: &mut Schema, statement: &str) {
    let words: Vec<&str> = statement.split_whitespace().collect();
    let upper: Vec<String> = words.iter().map(|w| w.to_uppercase()).collect();
    let upper: Vec<&str> = upper.iter().map(String::as_str).collect();
    match upper.as_slice() {
        ["CREATE", "TABLE", ..] => create_table(schema, statement),
        ["DROP", "TABLE", ..] => {
            schema.remove(&ident(words.last().expect("table name")));
        }
        ["ALTER", "TABLE", ..] => alter_table(schema, &words, &upper),
        _ => {}
    }
}

fn create_table(schema: &mut Schema, statement: &str) {
    let open = statement
        .find('(')
        .expect("CREATE TABLE without a column list");
    let close = statement
        .rfind(')')
        .expect("CREATE TABLE without a closing parenthesis");
    let head: Vec<&str> = statement[..open].split_whitespace().collect();
    let name = ident(head.last().expect("table name"));
    let columns = split_top_level(&statement[open + 1..close])
        .into_iter()
        .filter_map(|item| item.split_whitespace().next())
        .filter(|first| !TABLE_CONSTRAINT_WORDS.contains(&first.to_uppercase().as_str()))
        .map(ident)
        .collect();
    assert!(
        schema.insert(name.clone(), columns).is_none(),
        "table {name} created twice"
    );
}

fn alter_table(schema: &mut Schema, words: &[&str], upper: &[&str]) {
    let mut i = 2;
    if upper[i..].starts_with(&["IF", "EXISTS"]) {
        i += 2;
    }
    let table = ident(words[i]);
    let rest = &upper[i + 1..];
    let word_after = |skip: &[&str]| {
        let mut j = i + 1;
        for s in skip {
            if upper.get(j) == Some(s) {
                j += 1;
            }
        }
        ident(words[j])
    };
    let columns = schema.entry(table).or_default();
    match rest {
        ["ADD", what, ..] if !TABLE_CONSTRAINT_WORDS.contains(what) => {
            columns.insert(word_after(&["ADD", "COLUMN", "IF", "NOT", "EXISTS"]));
        }
        ["DROP", what, ..] if *what != "CONSTRAINT" => {
            columns.remove(&word_after(&["DROP", "COLUMN", "IF", "EXISTS"]));
        }
        ["RENAME", "COLUMN", ..] => {
            columns.remove(&ident(words[i + 3]));
            columns.insert(ident(words[i + 5]));
        }
        _ => {}
    }
}

/// The tables and columns that `sql`, run after `schema`, leaves.
fn apply_file(schema: &mut Schema, sql: &str) {
    for statement in strip_comments(sql).split(';') {
        apply_statement(schema, statement.trim());
    }
}

/// Every difference between two schemas, as sentences.
fn schema_differences(context: &str, postgres: &Schema, sqlite: &Schema) -> Vec<String> {
    let mut problems = Vec::new();
    let tables: BTreeSet<&String> = postgres.keys().chain(sqlite.keys()).collect();
    for table in tables {
        match (postgres.get(table), sqlite.get(table)) {
            (Some(_), None) => problems.push(format!("{context}: table {table} only in postgres")),
            (None, Some(_)) => problems.push(format!("{context}: table {table} only in sqlite")),
            (Some(pg), Some(lite)) => {
                for column in pg.difference(lite) {
                    problems.push(format!(
                        "{context}: column {table}.{column} only in postgres"
                    ));
                }
                for column in lite.difference(pg) {
                    problems.push(format!("{context}: column {table}.{column} only in sqlite"));
                }
            }
            (None, None) => unreachable!(),
        }
    }
    problems
}

/// Every way in which two dialects' migration folders (file name to SQL) are out of step.
fn differences(
    postgres: &BTreeMap<String, String>,
    sqlite: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let names: BTreeSet<&String> = postgres.keys().chain(sqlite.keys()).collect();
    for name in names {
        match (postgres.get(name), sqlite.get(name)) {
            (Some(pg_sql), Some(lite_sql)) => {
                let (mut pg, mut lite) = (Schema::new(), Schema::new());
                apply_file(&mut pg, pg_sql);
                apply_file(&mut lite, lite_sql);
                problems.extend(schema_differences(name, &pg, &lite));
            }
            (Some(_), None) => problems.push(format!("migration {name} only in postgres")),
            (None, Some(_)) => problems.push(format!("migration {name} only in sqlite")),
            (None, None) => unreachable!(),
        }
    }
    let apply_all = |files: &BTreeMap<String, String>| {
        let mut schema = Schema::new();
        files.values().for_each(|sql| apply_file(&mut schema, sql));
        schema
    };
    problems.extend(schema_differences(
        "after all migrations",
        &apply_all(postgres),
        &apply_all(sqlite),
    ));
    problems
}

#[test]
fn migration_folders_hold_the_same_schema() {
    let root = migrations_root();
    let postgres = read_dialect(&root.join("postgres"));
    let sqlite = read_dialect(&root.join("sqlite"));
    assert!(
        !postgres.is_empty(),
        "no postgres migrations in {}",
        root.display()
    );
    let problems = differences(&postgres, &sqlite);
    assert!(
        problems.is_empty(),
        "migrations drifted apart:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn migration_file_names_are_numbered() {
    for dialect in ["postgres", "sqlite"] {
        for name in read_dialect(&migrations_root().join(dialect)).keys() {
            let (number, rest) = name.split_once('_').unwrap_or((name, ""));
            assert!(
                number.len() == 4
                    && number.bytes().all(|b| b.is_ascii_digit())
                    && rest.ends_with(".sql"),
                "{dialect}/{name} is not named NNNN_description.sql"
            );
        }
    }
}

#[test]
fn the_schema_reader_sees_tables_and_columns() {
    let mut schema = Schema::new();
    apply_file(
        &mut schema,
        "-- a comment; with a semicolon\n\
         CREATE TABLE IF NOT EXISTS \"jobs\" (\n\
             id INTEGER PRIMARY KEY, -- trailing comment\n\
             spec TEXT NOT NULL CHECK (json_valid(spec)),\n\
             price NUMERIC(10, 2),\n\
             CONSTRAINT jobs_spec_key UNIQUE (spec, price)\n\
         );\n\
         CREATE INDEX jobs_spec ON jobs (spec);\n\
         ALTER TABLE jobs ADD COLUMN IF NOT EXISTS owner TEXT;\n\
         ALTER TABLE jobs DROP COLUMN price;\n\
         ALTER TABLE jobs RENAME COLUMN spec TO body;\n\
         CREATE TABLE gone (x INTEGER); DROP TABLE IF EXISTS gone;",
    );
    let expected: Schema = [(
        "jobs".to_owned(),
        ["id", "body", "owner"].map(str::to_owned).into(),
    )]
    .into();
    assert_eq!(schema, expected);
}

#[test]
fn drift_is_reported() {
    let files = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(n, s)| ((*n).to_owned(), (*s).to_owned()))
            .collect()
    };
    let postgres = files(&[
        (
            "0001_initial.sql",
            "CREATE TABLE a (id BIGINT, name TEXT); CREATE TABLE b (id BIGINT);",
        ),
        ("0002_more.sql", "ALTER TABLE a ADD COLUMN note TEXT;"),
    ]);
    let in_step = files(&[
        (
            "0001_initial.sql",
            "CREATE TABLE a (id INTEGER, name TEXT); CREATE TABLE b (id INTEGER);",
        ),
        ("0002_more.sql", "ALTER TABLE a ADD note TEXT;"),
    ]);
    assert_eq!(differences(&postgres, &in_step), Vec::<String>::new());

    let drifted = files(&[
        (
            "0001_initial.sql",
            "CREATE TABLE a (id INTEGER, title TEXT);",
        ),
        ("0003_more.sql", "ALTER TABLE a ADD COLUMN note TEXT;"),
    ]);
    assert_eq!(
        differences(&postgres, &drifted),
        [
            "0001_initial.sql: column a.name only in postgres",
            "0001_initial.sql: column a.title only in sqlite",
            "0001_initial.sql: table b only in postgres",
            "migration 0002_more.sql only in postgres",
            "migration 0003_more.sql only in sqlite",
            "after all migrations: column a.name only in postgres",
            "after all migrations: column a.title only in sqlite",
            "after all migrations: table b only in postgres",
        ]
    );
}
