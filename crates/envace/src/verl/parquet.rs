//! A small Parquet writer for rows given as JSON values: a schema tree of optional fields
//! (strings, integers, floats, booleans, groups and standard three-level lists) and a
//! record shredder that turns each row into the leaf columns' values with their definition and
//! repetition levels, written through the `parquet` crate's column writers (no Arrow).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use serde_json::Value;

use crate::error::{Error, Result};

/// One field of a Parquet schema; every field is optional (nullable).
#[derive(Debug, Clone)]
pub enum Field {
    /// UTF-8 text (`binary (STRING)`).
    Str(&'static str),
    /// A 64-bit integer.
    Int(&'static str),
    /// A 64-bit float.
    Float(&'static str),
    /// A boolean.
    Bool(&'static str),
    /// A struct of fields.
    Group(&'static str, Vec<Field>),
    /// A list (the standard `LIST` layout: `list` / `element`) of one element type; the
    /// element's own name is ignored.
    List(&'static str, Box<Field>),
}

impl Field {
    fn name(&self) -> &'static str {
        match self {
            Field::Str(n)
            | Field::Int(n)
            | Field::Float(n)
            | Field::Bool(n)
            | Field::Group(n, _)
            | Field::List(n, _) => n,
        }
    }

    fn schema_text(&self, name: &str, indent: usize, out: &mut String) {
        let pad = " ".repeat(indent);
        match self {
            Field::Str(_) => {
                let _ = writeln!(out, "{pad}optional binary {name} (STRING);");
            }
            Field::Int(_) => {
                let _ = writeln!(out, "{pad}optional int64 {name};");
            }
            Field::Float(_) => {
                let _ = writeln!(out, "{pad}optional double {name};");
            }
            Field::Bool(_) => {
                let _ = writeln!(out, "{pad}optional boolean {name};");
            }
            Field::Group(_, fields) => {
                let _ = writeln!(out, "{pad}optional group {name} {{");
                for field in fields {
                    field.schema_text(field.name(), indent + 2, out);
                }
                let _ = writeln!(out, "{pad}}}");
            }
            Field::List(_, element) => {
                let _ = writeln!(out, "{pad}optional group {name} (LIST) {{");
                let _ = writeln!(out, "{pad}  repeated group list {{");
                element.schema_text("element", indent + 4, out);
                let _ = writeln!(out, "{pad}  }}");
                let _ = writeln!(out, "{pad}}}");
            }
        }
    }

    fn leaves<'a>(&'a self, out: &mut Vec<&'a Field>) {
        match self {
            Field::Group(_, fields) => fields.iter().for_each(|f| f.leaves(out)),
            Field::List(_, element) => element.leaves(out),
            leaf => out.push(leaf),
        }
    }

    fn leaf_count(&self) -> usize {
        let mut out = Vec::new();
        self.leaves(&mut out);
        out.len()
    }
}

/// The Parquet message type of `fields`, in Parquet's schema language.
pub fn schema_text(fields: &[Field]) -> String {
    let mut out = String::from("message schema {\n");
    for field in fields {
        field.schema_text(field.name(), 2, &mut out);
    }
    out.push_str("}\n");
    out
}

/// One leaf column being filled.
#[derive(Debug, Default)]
struct Column {
    strs: Vec<ByteArray>,
    ints: Vec<i64>,
    floats: Vec<f64>,
    bools: Vec<bool>,
    def: Vec<i16>,
    rep: Vec<i16>,
}

/// Levels of the position being shredded: definition so far, repetition of this value, and
/// how many repeated ancestors it has.
#[derive(Debug, Clone, Copy)]
struct Level {
    def: i16,
    rep: i16,
    depth: i16,
}

/// Shreds `value` of `field` into `columns[at..]`; returns the next leaf index. `what` names
/// the row and field for errors.
fn shred(
    field: &Field,
    value: Option<&Value>,
    level: Level,
    columns: &mut [Column],
    at: usize,
    what: &str,
) -> Result<usize> {
    let value = value.filter(|v| !v.is_null());
    let mismatch = |expected: &str| Error::Data {
        source_name: what.to_owned(),
        message: format!(
            "field {:?} should be {expected}, got {}",
            field.name(),
            value.map_or("null".to_owned(), |v| v.to_string())
        ),
    };
    let Some(value) = value else {
        let n = field.leaf_count();
        for column in &mut columns[at..at + n] {
            column.def.push(level.def);
            column.rep.push(level.rep);
        }
        return Ok(at + n);
    };
    match field {
        Field::Group(_, fields) => {
            let object = value.as_object().ok_or_else(|| mismatch("an object"))?;
            let inner = Level {
                def: level.def + 1,
                ..level
            };
            let mut next = at;
            for child in fields {
                next = shred(child, object.get(child.name()), inner, columns, next, what)?;
            }
            Ok(next)
        }
        Field::List(_, element) => {
            let items = value.as_array().ok_or_else(|| mismatch("an array"))?;
            let n = field.leaf_count();
            if items.is_empty() {
                for column in &mut columns[at..at + n] {
                    column.def.push(level.def + 1);
                    column.rep.push(level.rep);
                }
                return Ok(at + n);
            }
            for (idx, item) in items.iter().enumerate() {
                let inner = Level {
                    def: level.def + 2,
                    rep: if idx == 0 { level.rep } else { level.depth + 1 },
                    depth: level.depth + 1,
                };
                shred(element, Some(item), inner, columns, at, what)?;
            }
            Ok(at + n)
        }
        Field::Str(_) => {
            let text = value.as_str().ok_or_else(|| mismatch("a string"))?;
            let column = &mut columns[at];
            column.strs.push(ByteArray::from(text.as_bytes().to_vec()));
            Ok(push_levels(column, level, at))
        }
        Field::Int(_) => {
            let number = value.as_i64().ok_or_else(|| mismatch("an integer"))?;
            columns[at].ints.push(number);
            Ok(push_levels(&mut columns[at], level, at))
        }
        Field::Float(_) => {
            let number = value.as_f64().ok_or_else(|| mismatch("a number"))?;
            columns[at].floats.push(number);
            Ok(push_levels(&mut columns[at], level, at))
        }
        Field::Bool(_) => {
            let flag = value.as_bool().ok_or_else(|| mismatch("a boolean"))?;
            columns[at].bools.push(flag);
            Ok(push_levels(&mut columns[at], level, at))
        }
    }
}

/// Records the levels of a present leaf value; returns the next leaf index.
fn push_levels(column: &mut Column, level: Level, at: usize) -> usize {
    column.def.push(level.def + 1);
    column.rep.push(level.rep);
    at + 1
}

/// Writes `rows` (JSON objects, one per row) as one row group of a Parquet file at `path`,
/// uncompressed. Fields a row lacks are null; keys the schema lacks are ignored.
pub fn write_rows(path: &Path, fields: &[Field], rows: &[Value]) -> Result<()> {
    let pq = |err: parquet::errors::ParquetError| Error::Data {
        source_name: path.display().to_string(),
        message: format!("cannot write Parquet: {err}"),
    };
    let schema = parquet::schema::parser::parse_message_type(&schema_text(fields)).map_err(pq)?;
    let mut leaves = Vec::new();
    for field in fields {
        field.leaves(&mut leaves);
    }
    let mut columns: Vec<Column> = leaves.iter().map(|_| Column::default()).collect();
    for (idx, row) in rows.iter().enumerate() {
        let what = format!("{} row {idx}", path.display());
        let object = row.as_object().ok_or_else(|| Error::Data {
            source_name: what.clone(),
            message: "a row must be a JSON object".to_owned(),
        })?;
        let mut at = 0;
        for field in fields {
            let level = Level {
                def: 0,
                rep: 0,
                depth: 0,
            };
            at = shred(
                field,
                object.get(field.name()),
                level,
                &mut columns,
                at,
                &what,
            )?;
        }
    }
    let file = std::fs::File::create(path).map_err(|err| Error::io(path, err))?;
    let props = Arc::new(WriterProperties::builder().build());
    let mut writer = SerializedFileWriter::new(file, Arc::new(schema), props).map_err(pq)?;
    let mut group = writer.next_row_group().map_err(pq)?;
    for (leaf, column) in leaves.iter().zip(&columns) {
        let Some(mut out) = group.next_column().map_err(pq)? else {
            break;
        };
        let (def, rep) = (Some(column.def.as_slice()), Some(column.rep.as_slice()));
        match leaf {
            Field::Str(_) => out
                .typed::<ByteArrayType>()
                .write_batch(&column.strs, def, rep),
            Field::Int(_) => out.typed::<Int64Type>().write_batch(&column.ints, def, rep),
            Field::Float(_) => out
                .typed::<DoubleType>()
                .write_batch(&column.floats, def, rep),
            Field::Bool(_) => out.typed::<BoolType>().write_batch(&column.bools, def, rep),
            Field::Group(..) | Field::List(..) => Ok(0),
        }
        .map_err(pq)?;
        out.close().map_err(pq)?;
    }
    group.close().map_err(pq)?;
    writer.close().map_err(pq)?;
    Ok(())
}
