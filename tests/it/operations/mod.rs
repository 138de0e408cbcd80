//! What an operator types and sets up: the command line (exit codes,
//! output, config errors, secrets), `demo`, `inspect`, and the stores as
//! deployments have them: TLS, least privilege (Redis ACL, MySQL grants),
//! Redis Cluster; and the documents kept complete (`docs`: every key,
//! metric family, alert, link and subcommand's help; `keys_table`: the
//! keys ARCHITECTURE.md lists, as the reconciler writes them). A test of a new CLI
//! option or subcommand goes in `cli` (of `demo` or `inspect` in theirs);
//! of a new store setting in the file of its setting.

mod cli;
mod cluster;
mod demo;
mod docs;
mod inspect;
mod keys_table;
mod least_privilege;
mod replica;
mod tls;
