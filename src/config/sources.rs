//! Where settings come from, in order: `config/default.toml` (compiled in,
//! the single list of keys and defaults), `--config FILE`, then
//! `SEATFLOW__SECTION__KEY` variables. Environment values stay strings until
//! the typed settings ask for a number or a flag, so `00042` stays `00042`
//! where a string is wanted.

use std::collections::BTreeMap;
use std::path::Path;

use config::{Config, File, FileFormat, Map, Value, ValueKind};

use super::ConfigError;

/// The defaults, and the list of every valid key.
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

const ENV_PREFIX: &str = "SEATFLOW__";

/// Keys that no longer apply, and what replaced them: setting one is an
/// error that says so.
const RETIRED_KEYS: &[(&str, &str)] = &[(
    "pass.lease_ttl",
    "renamed pass.pass_lease_ttl (the pass lease; reconcile.lock_ttl is the showtime lease's)",
)];

/// Why the seat jobs' own schedules are read as the pass's, and until when.
const SEAT_SCHEDULES: &str = "0.3: the seat jobs share one pass";

/// Keys renamed one by one, old name first, read under the new name with a
/// warning at start until the release named, as renamed sections are.
/// Several old names may lead to one new key (the seat jobs' schedules, now
/// the one pass's): where more than one is set they must agree, so that no
/// schedule an operator set is silently dropped.
pub const RENAMED_KEYS: &[(&str, &str, &str)] = &[
    ("jobs.paid_seats.schedule", "pass.schedule", SEAT_SCHEDULES),
    (
        "jobs.missing_hashes.schedule",
        "pass.schedule",
        SEAT_SCHEDULES,
    ),
    (
        "jobs.orphan_locks.schedule",
        "pass.schedule",
        SEAT_SCHEDULES,
    ),
    (
        "jobs.sold_orphans.schedule",
        "pass.schedule",
        SEAT_SCHEDULES,
    ),
];

/// Sections renamed, old name first: the old name is still read, with a
/// warning at start (`Settings::renamed`), until the release named; then
/// it is refused like a retired key. Setting a key under both names is an
/// error naming both.
pub const RENAMED_SECTIONS: &[(&str, &str, &str)] = &[(
    "sweep",
    "pass",
    "0.3: the section holds the pass's settings (a sweep is what a pass reads of the showtimes)",
)];

/// Keys whose environment value is a comma-separated list.
const LIST_KEYS: &[&str] = &["redis.cluster_urls"];

/// Defaults, then `file`, then the `SEATFLOW__…` variables among `env`,
/// merged and checked for unknown keys; with a line for each key set under
/// a renamed section's old name.
pub fn merge(
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(Config, Vec<String>), ConfigError> {
    let mut renamed = Vec::new();
    let mut builder = Config::builder().add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml));
    if let Some(path) = file {
        if !path.exists() {
            return Err(ConfigError::new(
                "--config",
                format!("file {} does not exist", path.display()),
            ));
        }
        builder = match file_renamed(path, &mut renamed)? {
            Some(text) => builder.add_source(File::from_str(&text, FileFormat::Toml)),
            None => builder.add_source(File::from(path).format(FileFormat::Toml)),
        };
    }
    let env: Vec<(String, String)> = env
        .into_iter()
        .filter(|(name, _)| name.starts_with(ENV_PREFIX))
        .collect();
    let env_keys: Vec<String> = env.iter().filter_map(|(n, _)| env_key(n)).collect();
    let mut moves = Moves::default();
    for (name, value) in env {
        let Some(key) = env_key(&name) else { continue };
        let key = match new_name(&key) {
            Some(new) if env_keys.contains(&new) => {
                return Err(ConfigError::new(
                    &key,
                    format!("set as {new} too: keep {new}"),
                ));
            }
            Some(new) => {
                moves.agree(&key, &new, format!("{value:?}"))?;
                renamed.push(renamed_line(&key, &new));
                new
            }
            None => key,
        };
        builder = if LIST_KEYS.contains(&key.as_str()) {
            let items: Vec<String> = value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            builder.set_override(&key, items)
        } else {
            builder.set_override(&key, value)
        }
        .map_err(|e| ConfigError::new(&key, e.to_string()))?;
    }
    let merged = builder
        .build()
        .map_err(|e| ConfigError::new(error_key(&e), e.to_string()))?;
    validate_keys_and_types(&merged)?;
    Ok((merged, renamed))
}

/// The new name of a renamed key (`jobs.paid_seats.schedule` →
/// `pass.schedule`) or of a key under a renamed section (`sweep.schedule` →
/// `pass.schedule`).
fn new_name(key: &str) -> Option<String> {
    if let Some((_, new, _)) = RENAMED_KEYS.iter().find(|(old, _, _)| *old == key) {
        return Some(new.to_string());
    }
    RENAMED_SECTIONS.iter().find_map(|(old, new, _)| {
        let rest = key.strip_prefix(old)?.strip_prefix('.')?;
        Some(format!("{new}.{rest}"))
    })
}

fn renamed_line(old: &str, new: &str) -> String {
    let until = RENAMED_KEYS
        .iter()
        .find(|(o, _, _)| *o == old)
        .or_else(|| {
            RENAMED_SECTIONS
                .iter()
                .find(|(o, _, _)| old.strip_prefix(o).is_some_and(|r| r.starts_with('.')))
        })
        .map_or("", |(_, _, why)| *why);
    format!("{old} is now {new}; the old name is read until {until}")
}

/// The file's text with its renamed sections and keys under their new
/// names, when it has any (None: read the file as it is; a file that does
/// not parse is reported by that read, naming the file).
fn file_renamed(path: &Path, renamed: &mut Vec<String>) -> Result<Option<String>, ConfigError> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    let Ok(mut table) = text.parse::<toml::Table>() else {
        return Ok(None);
    };
    let mut moved = false;
    for (old, new, _) in RENAMED_SECTIONS {
        let Some(toml::Value::Table(old_table)) = table.remove(*old) else {
            continue;
        };
        moved = true;
        let target = table
            .entry(new.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(target) = target else {
            return Err(ConfigError::new(*new, "must be a table"));
        };
        for (key, value) in old_table {
            let (old_key, new_key) = (format!("{old}.{key}"), format!("{new}.{key}"));
            if target.contains_key(&key) {
                return Err(ConfigError::new(
                    &old_key,
                    format!("set as {new_key} too: keep {new_key}"),
                ));
            }
            renamed.push(renamed_line(&old_key, &new_key));
            target.insert(key, value);
        }
    }
    let mut moves = Moves::default();
    for (old, new, _) in RENAMED_KEYS {
        let Some(value) = take_key(&mut table, old) else {
            continue;
        };
        moved = true;
        if key_of(&table, new).is_some() && !moves.has(new) {
            return Err(ConfigError::new(
                *old,
                format!("set as {new} too: keep {new}"),
            ));
        }
        moves.agree(old, new, value.to_string())?;
        renamed.push(renamed_line(old, new));
        put_key(&mut table, new, value)?;
    }
    if !moved {
        return Ok(None);
    }
    toml::to_string(&table)
        .map(Some)
        .map_err(|e| ConfigError::new("--config", e.to_string()))
}

/// The old names read so far for each new key, with their values: several
/// old names of one key must agree.
#[derive(Default)]
struct Moves(BTreeMap<String, (String, String)>);

impl Moves {
    fn has(&self, new: &str) -> bool {
        self.0.contains_key(new)
    }

    /// `old` set to `value` (as written) is read as `new`: an error when
    /// another old name of `new` was set to something else.
    fn agree(&mut self, old: &str, new: &str, value: String) -> Result<(), ConfigError> {
        match self.0.get(new) {
            Some((first, was)) if *was != value => Err(ConfigError::new(
                old,
                format!("is {value} but {first} is {was}: both are {new} now; set {new} alone"),
            )),
            Some(_) => Ok(()),
            None => {
                self.0.insert(new.to_string(), (old.to_string(), value));
                Ok(())
            }
        }
    }
}

/// The value at a dotted key of a TOML table, if set.
fn key_of<'a>(table: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    let (parents, leaf) = key.rsplit_once('.')?;
    let mut t = table;
    for part in parents.split('.') {
        t = t.get(part)?.as_table()?;
    }
    t.get(leaf)
}

/// Removes a dotted key from a TOML table, returning its value.
fn take_key(table: &mut toml::Table, key: &str) -> Option<toml::Value> {
    let (parents, leaf) = key.rsplit_once('.')?;
    let mut t = table;
    for part in parents.split('.') {
        t = t.get_mut(part)?.as_table_mut()?;
    }
    t.remove(leaf)
}

/// Sets a dotted key of a TOML table, making the tables on its way.
fn put_key(table: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), ConfigError> {
    let (parents, leaf) = key.rsplit_once('.').unwrap_or(("", key));
    let mut t = table;
    for part in parents.split('.').filter(|p| !p.is_empty()) {
        t = t
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| ConfigError::new(part, "must be a table"))?;
    }
    t.insert(leaf.to_string(), value);
    Ok(())
}

/// `SEATFLOW__JOBS__PAID_SEATS__BATCH_SIZE` → `jobs.paid_seats.batch_size`.
fn env_key(name: &str) -> Option<String> {
    let rest = name.strip_prefix(ENV_PREFIX)?;
    Some(
        rest.split("__")
            .collect::<Vec<_>>()
            .join(".")
            .to_lowercase(),
    )
}

/// The key a `config` error is about, when it says; otherwise the whole file.
pub fn error_key(e: &config::ConfigError) -> String {
    let text = e.to_string();
    text.rsplit_once("for key `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(key, _)| key.to_string())
        .unwrap_or_else(|| "<file>".to_string())
}

/// Every leaf of a table, by its dotted key.
fn leaves<'a>(
    prefix: &str,
    table: &'a Map<String, Value>,
    out: &mut BTreeMap<String, &'a ValueKind>,
) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match &v.kind {
            ValueKind::Table(t) => leaves(&key, t, out),
            kind => {
                out.insert(key, kind);
            }
        }
    }
}

/// Every key set anywhere must be one of `default.toml`'s keys, with a value
/// of its default's type: an integer where the default is an integer (`1.5`
/// is refused, not rounded), a string where it is a string. Environment
/// values arrive as strings and must spell the type exactly.
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "the built-in defaults are ours and parsed in tests"
)]
fn validate_keys_and_types(merged: &Config) -> Result<(), ConfigError> {
    let defaults = Config::builder()
        .add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml))
        .build()
        .expect("default.toml is valid")
        .cache
        .into_table()
        .expect("defaults are a table");
    let mut known = BTreeMap::new();
    leaves("", &defaults, &mut known);
    let table = merged
        .cache
        .clone()
        .into_table()
        .map_err(|e| ConfigError::new(error_key(&e), e.to_string()))?;
    let mut seen = BTreeMap::new();
    leaves("", &table, &mut seen);
    for (key, value) in seen {
        if let Some((_, replacement)) = RETIRED_KEYS.iter().find(|(k, _)| *k == key) {
            return Err(ConfigError::new(key, *replacement));
        }
        let Some(default) = known.get(&key) else {
            return Err(ConfigError::new(key, "unknown key"));
        };
        if let Err(reason) = same_type(default, value) {
            return Err(ConfigError::new(key, reason));
        }
    }
    Ok(())
}

fn same_type(default: &ValueKind, value: &ValueKind) -> Result<(), String> {
    use ValueKind::*;
    match (default, value) {
        (I64(_) | U64(_) | I128(_) | U128(_), I64(_) | U64(_) | I128(_) | U128(_)) => Ok(()),
        (I64(_) | U64(_) | I128(_) | U128(_), String(s)) if s.trim().parse::<i64>().is_ok() => {
            Ok(())
        }
        (I64(_) | U64(_) | I128(_) | U128(_), other) => {
            Err(format!("must be a whole number, got {}", shown(other)))
        }
        (Boolean(_), Boolean(_)) => Ok(()),
        (Boolean(_), String(s)) if s == "true" || s == "false" => Ok(()),
        (Boolean(_), other) => Err(format!("must be true or false, got {}", shown(other))),
        (String(_), String(_)) => Ok(()),
        (String(_), other) => Err(format!(
            "must be a string (in quotes), got {}",
            shown(other)
        )),
        (Array(_), Array(items)) if items.iter().all(|v| matches!(v.kind, String(_))) => Ok(()),
        (Array(_), other) => Err(format!("must be a list of strings, got {}", shown(other))),
        _ => Ok(()),
    }
}

/// A value as the user wrote it, for an error message.
fn shown(v: &ValueKind) -> std::string::String {
    match v {
        ValueKind::String(s) => format!("{s:?}"),
        ValueKind::Table(_) => "a table".into(),
        ValueKind::Array(_) => "a list".into(),
        ValueKind::Nil => "nothing".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use config::ValueKind;

    #[test]
    fn values_must_have_their_defaults_type() {
        let int = ValueKind::I64(4);
        assert!(super::same_type(&int, &ValueKind::I64(7)).is_ok());
        assert!(super::same_type(&int, &ValueKind::String("0009".into())).is_ok());
        assert!(super::same_type(&int, &ValueKind::Float(1.5)).is_err());
        assert!(super::same_type(&int, &ValueKind::String("1.5".into())).is_err());
        let flag = ValueKind::Boolean(false);
        assert!(super::same_type(&flag, &ValueKind::String("true".into())).is_ok());
        assert!(super::same_type(&flag, &ValueKind::String("yes".into())).is_err());
        let text = ValueKind::String(String::new());
        assert!(super::same_type(&text, &ValueKind::I64(42)).is_err());
    }

    #[test]
    fn environment_names_become_keys() {
        assert_eq!(
            super::env_key("SEATFLOW__JOBS__PAID_SEATS__BATCH_SIZE").as_deref(),
            Some("jobs.paid_seats.batch_size")
        );
        assert_eq!(super::env_key("SEATFLOW_X"), None);
        assert_eq!(super::env_key("PATH"), None);
    }
}
