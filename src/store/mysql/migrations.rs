//! The reconciler's own tables, embedded in the binary and applied by sqlx's
//! `Migrator` (the `_sqlx_migrations` table, checksums, the lock).
//!
//! sqlx's `migrate!` macro would list the directory itself, but it needs
//! sqlx's `macros` feature, which compiles a second copy of sqlx, tokio and
//! rustls for the compiler: about a seventh of every clean build, three
//! times in CI (clippy, the release binary, the tests). Here a migration
//! costs one line, and a test checks the list against the directory.

use futures_util::future::BoxFuture;
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

/// `(version, file name)` of every file in `migrations/reconciler`, in order,
/// with its text. sqlx's rules apply: the version is the file name's prefix,
/// the description the rest with `_` as spaces, the checksum the text's.
const RECONCILER: &[(i64, &str, &str)] = &[
    (
        20261202000001,
        "20261202000001_audit.sql",
        include_str!("../../../migrations/reconciler/20261202000001_audit.sql"),
    ),
    (
        20261203000001,
        "20261203000001_audit_retention.sql",
        include_str!("../../../migrations/reconciler/20261203000001_audit_retention.sql"),
    ),
];

/// The migrator over [`RECONCILER`], ignoring versions a newer release
/// applied (an older binary rolled back must still start).
pub(super) async fn reconciler() -> Result<Migrator, sqlx::migrate::MigrateError> {
    let mut migrator = Migrator::new(Embedded).await?;
    migrator.set_ignore_missing(true);
    Ok(migrator)
}

#[derive(Debug)]
struct Embedded;

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> BoxFuture<'static, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async { Ok(RECONCILER.iter().map(migration).collect()) })
    }
}

fn migration(&(version, file, sql): &(i64, &'static str, &'static str)) -> Migration {
    let description = file
        .trim_end_matches(".sql")
        .split_once('_')
        .map_or("", |(_, rest)| rest)
        .replace('_', " ");
    Migration::new(
        version,
        description.into(),
        MigrationType::Simple,
        sqlx::SqlStr::from_static(sql),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_in_the_directory_is_listed_once_in_order() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/reconciler");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("the migrations directory")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|name| name.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<&str> = RECONCILER.iter().map(|(_, file, _)| *file).collect();
        assert_eq!(listed, files, "add the new migration to RECONCILER");
        for (version, file, _) in RECONCILER {
            assert!(
                file.starts_with(&format!("{version}_")),
                "{file}: version {version}"
            );
        }
    }

    #[test]
    fn migrations_read_as_sqlx_reads_the_directory() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/reconciler");
        let from_disk = sqlx::migrate::resolve_blocking(std::path::Path::new(dir))
            .expect("the migrations directory");
        let embedded: Vec<Migration> = RECONCILER.iter().map(migration).collect();
        assert_eq!(from_disk.len(), embedded.len());
        for ((disk, _), ours) in from_disk.iter().zip(&embedded) {
            assert_eq!(disk.version, ours.version);
            assert_eq!(disk.description, ours.description);
            assert_eq!(disk.checksum, ours.checksum, "{}", ours.description);
            assert_eq!(disk.no_tx, ours.no_tx);
        }
    }
}
