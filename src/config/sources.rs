//! Where settings come from, in order: `config/default.toml` (compiled in,
//! the single list of keys and defaults), `--config FILE`, then
//! `SEATFLOW__SECTION__KEY` variables. Environment values stay strings until
//! the typed settings ask for a number or a flag, so `00042` stays `00042`
//! where a string is wanted.

use std::collections::BTreeSet;
use std::path::Path;

use config::{Config, File, FileFormat, Map, Value, ValueKind};

use super::ConfigError;

/// The defaults, and the list of every valid key.
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

const ENV_PREFIX: &str = "SEATFLOW__";

/// Keys whose environment value is a comma-separated list.
const LIST_KEYS: &[&str] = &["redis.cluster_urls"];

/// Defaults, then `file`, then the `SEATFLOW__…` variables among `env`,
/// merged and checked for unknown keys.
pub fn merge(
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, ConfigError> {
    let mut builder = Config::builder().add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml));
    if let Some(path) = file {
        if !path.exists() {
            return Err(ConfigError::new(
                "--config",
                format!("file {} does not exist", path.display()),
            ));
        }
        builder = builder.add_source(File::from(path).format(FileFormat::Toml));
    }
    for (name, value) in env {
        let Some(key) = env_key(&name) else { continue };
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
    reject_unknown_keys(&merged)?;
    Ok(merged)
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

fn flatten_keys(prefix: &str, table: &Map<String, Value>, out: &mut BTreeSet<String>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match &v.kind {
            ValueKind::Table(t) => flatten_keys(&key, t, out),
            _ => {
                out.insert(key);
            }
        }
    }
}

/// Every key set anywhere must be one of `default.toml`'s keys.
fn reject_unknown_keys(merged: &Config) -> Result<(), ConfigError> {
    let defaults = Config::builder()
        .add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml))
        .build()
        .expect("default.toml is valid");
    let mut known = BTreeSet::new();
    let defaults = defaults.cache.into_table().expect("defaults are a table");
    flatten_keys("", &defaults, &mut known);
    let mut seen = BTreeSet::new();
    let table = merged
        .cache
        .clone()
        .into_table()
        .map_err(|e| ConfigError::new(error_key(&e), e.to_string()))?;
    flatten_keys("", &table, &mut seen);
    match seen.difference(&known).next() {
        Some(key) => Err(ConfigError::new(key.clone(), "unknown key")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
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
