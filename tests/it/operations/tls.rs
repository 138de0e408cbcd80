//! TLS to Redis and MySQL with a private CA (docs/security.md, "TLS"): a repair goes
//! through both over TLS, with and without client certificates; a wrong CA,
//! a wrong host name, an expired certificate and plain text to a TLS-only
//! server are configuration errors (exit 2) that name the key and say what
//! failed. Every server is the test's own (a private `redis-server` with its
//! TLS port only, a private `mariadbd` with `require_secure_transport`), on
//! certificates the test makes with `openssl`; they are killed when the test
//! ends, whatever its outcome. Over TLS the sweep's own reader of seat
//! hashes reads as the crate does.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use seatflow_reconciler::config::Settings;
use seatflow_reconciler::model::SeatFields;
use seatflow_reconciler::ops::demo::fixtures::{self, Fixtures};
use seatflow_reconciler::run::context::Context;
use seatflow_reconciler::store::redis::{HashRead, RedisEndpoint, RedisStore, RedisTls};
use seatflow_test_support::servers::{PrivateServer, root_url};
use seatflow_test_support::tls::{Pki, tls_mariadb, tls_redis};

/// `once` of the real binary with these settings (and no `SEATFLOW__…`
/// variable of the caller's environment).
fn once(vars: &[(&str, String)], jobs: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_seatflow-reconciler"));
    for (name, _) in std::env::vars() {
        if name.starts_with("SEATFLOW__") || name == "SSL_CERT_FILE" {
            cmd.env_remove(name);
        }
    }
    cmd.arg("once").args(["--output", "json"]);
    for job in jobs {
        cmd.args(["--job", job]);
    }
    cmd.env("SEATFLOW__MYSQL__CONNECT_TIMEOUT", "5s")
        .env("SEATFLOW__REDIS__RESPONSE_TIMEOUT", "3s")
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("running seatflow-reconciler")
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// Asserts exit 2 and a message naming `key` and containing `what`.
fn assert_config_error(out: &Output, key: &str, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "expected exit 2: {stderr}");
    assert!(
        stderr.contains(&format!("`{key}`")),
        "the message should name {key}: {stderr}"
    );
    assert!(
        stderr.contains(what),
        "the message should say {what:?}: {stderr}"
    );
}

fn assert_success(out: &Output) -> serde_json::Value {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

fn mysql_url(db: &PrivateServer) -> String {
    format!("{}/seatflow", root_url(db))
}

fn rediss_url(redis: &PrivateServer) -> String {
    format!("rediss://127.0.0.1:{}", redis.port())
}

/// Creates the database, applies the schema and seeds one expired order
/// holding A-1, through the library over TLS with the private CA.
fn seed(vars: &[(&str, String)]) {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let env = vars.iter().map(|(k, v)| (k.to_string(), v.clone()));
        let settings = Settings::load_with_env(None, env).unwrap();
        // Preferred TLS, unverified: only to create the database.
        fixtures::recreate_database(settings.mysql.url.expose(), "seatflow")
            .await
            .unwrap();
        let ctx = Context::connect(settings).await.unwrap();
        ctx.mysql.migrate(true).await.unwrap();
        let fx = Fixtures {
            pool: ctx.mysql.pool().clone(),
            redis: ctx.redis.connection(),
            keys: ctx.redis.keys.clone(),
        };
        let seats = fx.hall(1, 1, 2).await.unwrap();
        fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
        fx.order(1, "PENDING", &["A-1"], -600).await.unwrap();
        fx.warm_all(1, &seats, &[("A-1", "1")]).await.unwrap();
    });
}

/// Replaces the certificate MariaDB presents and reloads it (`FLUSH SSL`).
fn present(db: &PrivateServer, pair: &seatflow_test_support::tls::Pair) {
    std::fs::copy(&pair.cert, db.dir().join("server.pem")).unwrap();
    std::fs::copy(&pair.key, db.dir().join("server.key")).unwrap();
    let url = format!("{}/", root_url(db));
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
        sqlx::raw_sql("FLUSH SSL").execute(&pool).await.unwrap();
        pool.close().await;
    });
}

#[test]
fn a_repair_goes_through_tls_on_both_stores_and_mysql_certificate_errors_are_named() {
    let pki = Pki::new();
    let db = tls_mariadb(&pki);
    let redis = tls_redis(&pki, &pki.server, "optional");
    let mtls_redis = tls_redis(&pki, &pki.server, "yes");
    let good = vec![
        ("SEATFLOW__MYSQL__URL", mysql_url(&db)),
        ("SEATFLOW__MYSQL__TLS_CA_FILE", path(&pki.ca)),
        ("SEATFLOW__REDIS__URL", rediss_url(&redis)),
        ("SEATFLOW__REDIS__TLS_CA_FILE", path(&pki.ca)),
    ];
    seed(&good);

    // The repair, over TLS to both, verified against the private CA only
    // (no SSL_CERT_FILE).
    let report = assert_success(&once(&good, &["expired-orders"]));
    assert_eq!(report["fixed"]["expired_cancelled"], 1, "{report}");

    // Mutual TLS: a Redis that requires a client certificate refuses us
    // without one, and takes ours; MariaDB is given ours too.
    let mut mtls = good.clone();
    mtls[2] = ("SEATFLOW__REDIS__URL", rediss_url(&mtls_redis));
    let out = once(&mtls, &["expired-orders"]);
    assert_config_error(&out, "redis.tls_cert_file", "client certificate");
    mtls.extend([
        ("SEATFLOW__REDIS__TLS_CERT_FILE", path(&pki.client.cert)),
        ("SEATFLOW__REDIS__TLS_KEY_FILE", path(&pki.client.key)),
        ("SEATFLOW__MYSQL__TLS_CERT_FILE", path(&pki.client.cert)),
        ("SEATFLOW__MYSQL__TLS_KEY_FILE", path(&pki.client.key)),
    ]);
    assert_success(&once(&mtls, &["expired-orders"]));

    // A CA bundle that did not sign the server's certificate.
    let mut wrong_ca = good.clone();
    wrong_ca[1].1 = path(&pki.other_ca);
    let out = once(&wrong_ca, &["expired-orders"]);
    assert_config_error(&out, "mysql.tls_ca_file", "unknown issuer");

    // Plain text to a server that requires TLS: MariaDB refuses the login.
    let mut plain = good.clone();
    plain.retain(|(k, _)| !k.starts_with("SEATFLOW__MYSQL__TLS"));
    plain.push(("SEATFLOW__MYSQL__TLS_MODE", "disabled".into()));
    let out = once(&plain, &["expired-orders"]);
    assert_config_error(&out, "mysql.url", "TLS connections only");
    assert_config_error(&out, "mysql.url", "mysql.tls_mode");

    // A certificate for another host: refused by verify_identity (the
    // default with a CA), accepted by verify_ca, which skips the name.
    present(&db, &pki.wrong_name);
    let out = once(&good, &["expired-orders"]);
    assert_config_error(&out, "mysql.url", "name mismatch");
    let mut verify_ca = good.clone();
    verify_ca.push(("SEATFLOW__MYSQL__TLS_MODE", "verify_ca".into()));
    assert_success(&once(&verify_ca, &["expired-orders"]));

    // An expired certificate.
    present(&db, &pki.expired);
    let out = once(&good, &["expired-orders"]);
    assert_config_error(&out, "mysql.url", "expired");
}

#[test]
fn redis_certificate_errors_and_plain_text_are_configuration_errors() {
    let pki = Pki::new();
    let redis = tls_redis(&pki, &pki.server, "optional");
    let wrong_name = tls_redis(&pki, &pki.wrong_name, "optional");
    let expired = tls_redis(&pki, &pki.expired, "optional");
    // The shared local MariaDB, no database: nothing is written there.
    let mysql = format!("{}/", seatflow_test_support::mysql_base_url());
    let with = |url: String, ca: &Path| {
        vec![
            ("SEATFLOW__MYSQL__URL", mysql.clone()),
            ("SEATFLOW__REDIS__URL", url),
            ("SEATFLOW__REDIS__TLS_CA_FILE", path(ca)),
        ]
    };

    let out = once(&with(rediss_url(&redis), &pki.other_ca), &["paid-seats"]);
    assert_config_error(&out, "redis.tls_ca_file", "unknown issuer");

    let out = once(&with(rediss_url(&wrong_name), &pki.ca), &["paid-seats"]);
    assert_config_error(&out, "redis.url", "name mismatch");

    let out = once(&with(rediss_url(&expired), &pki.ca), &["paid-seats"]);
    assert_config_error(&out, "redis.url", "expired");

    // The private CA is enough (no SSL_CERT_FILE): both stores connect, and
    // the job then fails on the empty server (exit 1), which is not ours.
    let out = once(&with(rediss_url(&redis), &pki.ca), &["paid-seats"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{stderr}");

    // A CA file with a plain redis:// URL is refused when the settings load.
    let plain = format!("redis://127.0.0.1:{}", redis.port());
    let out = once(&with(plain.clone(), &pki.ca), &["paid-seats"]);
    assert_config_error(&out, "redis.url", "rediss://");

    // Plain text to the TLS-only port: refused with a clear message.
    let out = once(
        &[
            ("SEATFLOW__MYSQL__URL", mysql.clone()),
            ("SEATFLOW__REDIS__URL", plain),
        ],
        &["paid-seats"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("redis"), "{stderr}");

    // A CA file that is no certificate: refused at load, naming the key.
    let not_pem = pki.dir().join("not-a-ca.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let out = once(&with(rediss_url(&redis), &not_pem), &["paid-seats"]);
    assert_config_error(&out, "redis.tls_ca_file", "no PEM certificate");
}

/// A store of the product's over TLS to `url`, its hash `seat:{1}` holding
/// one field, written through a connection of the crate's.
async fn tls_store(url: &str, tls: &RedisTls) -> RedisStore {
    let certs = tls.certificates().expect("a CA bundle");
    let mut conn = redis::Client::build_with_tls(url, certs)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let store = RedisStore::connect(
        RedisEndpoint::Single(url),
        tls,
        "tls:",
        Duration::from_secs(5),
        "tls-test",
    )
    .await
    .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(store.keys.seat(1))
        .arg("A-1")
        .arg("2")
        .query_async(&mut conn)
        .await
        .unwrap();
    store
}

/// Over TLS the sweep reads seat hashes on its fast reader too, verified as
/// the crate's connections are (the private CA alone; a client certificate
/// where the server requires one), and reads what the crate reads.
#[tokio::test(flavor = "multi_thread")]
async fn over_tls_the_fast_reader_reads_seat_hashes_as_the_crate_does() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pki = Pki::new();
    let redis = tls_redis(&pki, &pki.server, "optional");
    let mtls_redis = tls_redis(&pki, &pki.server, "yes");
    let ca_only = RedisTls {
        ca_pem: Some(std::fs::read(&pki.ca).unwrap()),
        client: None,
    };
    let with_client = RedisTls {
        client: Some((
            std::fs::read(&pki.client.cert).unwrap(),
            std::fs::read(&pki.client.key).unwrap(),
        )),
        ..ca_only.clone()
    };
    for (server, tls) in [(&redis, &ca_only), (&mtls_redis, &with_client)] {
        let store = tls_store(&rediss_url(server), tls).await;
        let (_, fast) = store.read_showtimes(&[1, 2], true).await.unwrap();
        let through_crate = store.clone().without_fast_reads();
        let (_, read) = through_crate.read_showtimes(&[1, 2], true).await.unwrap();
        assert_eq!(format!("{fast:?}"), format!("{read:?}"));
        assert_eq!(
            fast[0].hash,
            HashRead::Fields(SeatFields::from_items(&["A-1", "2"]))
        );
        let counts = store.fast_reads().expect("a fast reader over TLS");
        assert_eq!((counts.served, counts.stood_aside), (1, 0), "{tls:?}");
    }

    // The server presents a certificate for another host from now on (the
    // crate's connection, made before, stays up): the fast reader's new
    // connection refuses it, as the crate's would, and the read goes through
    // the crate.
    let url = rediss_url(&redis);
    let store = tls_store(&url, &ca_only).await;
    let certs = ca_only.certificates().expect("a CA bundle");
    let mut admin = redis::Client::build_with_tls(url.as_str(), certs)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("tls-cert-file")
        .arg(path(&pki.wrong_name.cert))
        .arg("tls-key-file")
        .arg(path(&pki.wrong_name.key))
        .query_async(&mut admin)
        .await
        .unwrap();
    let (_, read) = store.read_showtimes(&[1], false).await.unwrap();
    assert_eq!(
        read[0].hash,
        HashRead::Fields(SeatFields::from_items(&["A-1", "2"]))
    );
    let counts = store.fast_reads().unwrap();
    assert_eq!((counts.served, counts.stood_aside), (0, 1));
}
