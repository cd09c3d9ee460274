//! Editing one value of a config's TOML text in place, keeping comments and layout.
//!
//! The studio's form editor changes a field through [`set_value`]; the TOML text stays the
//! single source of truth, so a person's comments and ordering survive every edit.

use serde_json::Value as Json;
use toml_edit::{DocumentMut, Item, Table, TableLike, Value};

use crate::error::Error;

fn edit_error(path: &[&str], message: impl Into<String>) -> Error {
    Error::ConfigEdit {
        path: path.join("."),
        message: message.into(),
    }
}

/// Sets the key at `path` (keys from the root, e.g. `["rl", "lr"]`) to `new`, creating tables as
/// needed. The key's trailing comment and spacing are kept.
pub fn set_value(text: &str, path: &[&str], new: &Json) -> Result<String, Error> {
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|err| edit_error(path, format!("the TOML does not parse: {err}")))?;
    let Some((last, parents)) = path.split_last() else {
        return Err(edit_error(path, "an empty path names no key"));
    };
    let table = descend(doc.as_table_mut(), parents, path)?;
    let mut value = to_toml(new).map_err(|message| edit_error(path, message))?;
    match table.get_mut(last) {
        Some(Item::Value(old)) => {
            *value.decor_mut() = old.decor().clone();
            *old = value;
        }
        Some(_) => {
            return Err(edit_error(path, "is a table; set its keys one by one"));
        }
        None => {
            table.insert(last, Item::Value(value));
        }
    }
    Ok(doc.to_string())
}

/// Removes the key at `path`, if present (a cleared optional field).
pub fn remove_value(text: &str, path: &[&str]) -> Result<String, Error> {
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|err| edit_error(path, format!("the TOML does not parse: {err}")))?;
    let Some((last, parents)) = path.split_last() else {
        return Err(edit_error(path, "an empty path names no key"));
    };
    let mut table: &mut dyn TableLike = doc.as_table_mut();
    for key in parents {
        match table.get_mut(key).and_then(Item::as_table_like_mut) {
            Some(inner) => table = inner,
            None => return Ok(text.to_string()),
        }
    }
    table.remove(last);
    Ok(doc.to_string())
}

/// Walks to the table at `keys`, creating missing ones as `[a.b]` sections.
fn descend<'t>(
    root: &'t mut Table,
    keys: &[&str],
    full_path: &[&str],
) -> Result<&'t mut dyn TableLike, Error> {
    let mut table: &mut dyn TableLike = root;
    for (depth, key) in keys.iter().enumerate() {
        if table.get(key).is_none() {
            let mut section = Table::new();
            // A parent that only holds sub-tables gets no header of its own.
            section.set_implicit(depth + 1 < keys.len());
            table.insert(key, Item::Table(section));
        }
        table = match table.get_mut(key).and_then(Item::as_table_like_mut) {
            Some(inner) => inner,
            None => {
                return Err(edit_error(
                    full_path,
                    format!("`{}` is a value, not a table", keys[..=depth].join(".")),
                ));
            }
        };
    }
    Ok(table)
}

fn to_toml(json: &Json) -> Result<Value, String> {
    Ok(match json {
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(f)) => Value::from(f),
            (None, None) => return Err(format!("{n} does not fit a TOML number")),
        },
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(items) => {
            let mut array = toml_edit::Array::new();
            for item in items {
                array.push(to_toml(item)?);
            }
            Value::Array(array)
        }
        Json::Object(map) => {
            let mut table = toml_edit::InlineTable::new();
            for (key, item) in map {
                table.insert(key, to_toml(item)?);
            }
            Value::InlineTable(table)
        }
        Json::Null => return Err("TOML has no null; remove the key instead".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn setting_a_value_keeps_comments_and_creates_sections() {
        let text = "# top\n[run]\nname = \"x\" # the name\n\n[rl]\nlr = 1e-5 # keep me\n";
        let text = set_value(text, &["rl", "lr"], &json!(0.0003)).unwrap();
        let text = set_value(&text, &["model", "tiny", "n_layers"], &json!(6)).unwrap();
        let text = set_value(&text, &["env", "domains"], &json!(["retail", "airline"])).unwrap();
        expect_test::expect![[r#"
            # top
            [run]
            name = "x" # the name

            [rl]
            lr = 0.0003 # keep me

            [model.tiny]
            n_layers = 6

            [env]
            domains = ["retail", "airline"]
        "#]]
        .assert_eq(&text);
        let text = remove_value(&text, &["rl", "lr"]).unwrap();
        assert!(!text.contains("lr ="));
        assert!(text.contains("[rl]"));
    }

    #[test]
    fn bad_edits_name_the_path() {
        let err = set_value(
            "[run]\nname = \"x\"\n",
            &["run", "name", "first"],
            &json!(1),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot set run.name.first: `run.name` is a value, not a table"
        );
        let err = set_value("[run", &["run", "name"], &json!("x")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot set run.name: the TOML does not parse")
        );
        let err = set_value("", &["run", "seed"], &json!(null)).unwrap_err();
        assert!(err.to_string().contains("TOML has no null"));
    }
}
