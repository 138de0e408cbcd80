//! The sweep's reads of seat hashes on the fast reader (its own RESP2
//! connection, `store/redis/bulk_read.rs`) are the crate's reads: the same
//! hashes, byte for byte, the same wrong types, the same errors; and where
//! it cannot read (a closed connection, a reply cut off halfway, a refusal)
//! the read still succeeds or fails as it would through the crate.

use prometheus::core::Collector as _;
use proptest::prelude::*;
use proptest::strategy::ValueTree as _;
use proptest::test_runner::{Config, TestRunner};
use redis::IntoConnectionInfo as _;
use seatflow_reconciler::metrics::seat_reads::{self, SeatHashReadMetrics};
use seatflow_reconciler::model::{SeatFields, ShowtimeId};
use seatflow_reconciler::store::redis::{
    FastReads, HashRead, RedisEndpoint, RedisStore, RedisTls, ShowtimeRead, client_name,
};
use seatflow_test_support::{AclUser, TestEnv, property_cases, redis_url, test_settings};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// What one key holds before the read.
#[derive(Debug, Clone)]
enum Shape {
    Missing,
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A hash bigger than one socket read (64 KiB), so its reply arrives
    /// in parts.
    Big(usize),
    WrongType,
}

fn shape() -> impl Strategy<Value = Shape> {
    let bytes = |max| proptest::collection::vec(any::<u8>(), 0..max);
    prop_oneof![
        1 => Just(Shape::Missing),
        6 => proptest::collection::vec((bytes(10), bytes(5)), 1..30).prop_map(Shape::Hash),
        1 => (2_000usize..4_000).prop_map(Shape::Big),
        1 => Just(Shape::WrongType),
    ]
}

async fn write(env: &TestEnv, key: &str, shape: &Shape) {
    let _: () = env.redis(redis::cmd("DEL").arg(key)).await;
    match shape {
        Shape::Missing => {}
        Shape::Hash(pairs) => {
            let mut cmd = redis::cmd("HSET");
            cmd.arg(key);
            for (f, v) in pairs {
                cmd.arg(f).arg(v);
            }
            let _: () = env.redis(&cmd).await;
        }
        Shape::Big(n) => {
            let mut cmd = redis::cmd("HSET");
            cmd.arg(key);
            for i in 0..*n {
                cmd.arg(format!("R{i}-{}", "x".repeat(i % 40))).arg(i % 3);
            }
            let _: () = env.redis(&cmd).await;
        }
        Shape::WrongType => {
            let _: () = env.redis(redis::cmd("RPUSH").arg(key).arg("a")).await;
        }
    }
}

/// A read as comparable values.
fn comparable(reads: &[ShowtimeRead]) -> Vec<String> {
    reads
        .iter()
        .map(|r| {
            let mut suspects: Vec<_> = r.suspects.iter().collect();
            suspects.sort();
            format!("{:?} {:?} {}", r.hash, suspects, r.suspects_wrong_type)
        })
        .collect()
}

/// A store of its own on `url` (another user, another database).
async fn store_at(url: &str, prefix: &str) -> RedisStore {
    RedisStore::connect(
        RedisEndpoint::Single(url),
        &RedisTls::default(),
        prefix,
        Duration::from_secs(5),
        "fast-reads-test",
    )
    .await
    .unwrap()
}

fn fast(store: &RedisStore) -> FastReads {
    store
        .fast_reads()
        .expect("a single server has a fast reader")
}

/// On random hashes (binary fields, CRLF and `$` inside them, empty values,
/// hashes bigger than a socket read, missing keys, keys of the wrong type,
/// the suspects' keys too), the fast reader's read is the crate's, and it
/// was the fast reader that answered (it never stood aside).
#[tokio::test(flavor = "multi_thread")]
async fn the_fast_reader_reads_every_hash_as_the_crate_does() {
    let env = TestEnv::new().await;
    let through_crate = env.ctx.redis.clone().without_fast_reads();
    let mut runner = TestRunner::new(Config {
        cases: property_cases(24),
        ..Config::default()
    });
    let estate = proptest::collection::vec((shape(), shape()), 1..12);
    for _ in 0..runner.config().cases {
        let case = estate.new_tree(&mut runner).unwrap().current();
        let ids: Vec<ShowtimeId> = (1..=case.len() as i64).collect();
        let k = &env.ctx.redis.keys;
        for (&id, (seats, suspects)) in ids.iter().zip(&case) {
            write(&env, &k.seat(id), seats).await;
            write(&env, &k.suspect(id), suspects).await;
        }
        let before = fast(&env.ctx.redis);
        for with_suspects in [true, false] {
            let (_, crate_read) = through_crate
                .read_showtimes(&ids, with_suspects)
                .await
                .unwrap();
            let (_, fast_read) = env
                .ctx
                .redis
                .read_showtimes(&ids, with_suspects)
                .await
                .unwrap();
            assert_eq!(comparable(&fast_read), comparable(&crate_read), "{case:?}");
        }
        let after = fast(&env.ctx.redis);
        assert_eq!(after.served, before.served + 2, "{case:?}");
        assert_eq!(after.stood_aside, 0, "{case:?}");
    }
}

/// The server closes the fast reader's idle connection (a restart, its
/// `timeout`): the next read opens a new one and is still answered fast,
/// with the server's time.
#[tokio::test(flavor = "multi_thread")]
async fn a_connection_the_server_closed_is_replaced_and_the_read_stays_fast() {
    let env = TestEnv::new().await;
    let k = &env.ctx.redis.keys;
    write(
        &env,
        &k.seat(1),
        &Shape::Hash(vec![(b"A-1".to_vec(), b"0".to_vec())]),
    )
    .await;
    env.ctx.redis.read_showtimes(&[1], false).await.unwrap();
    // Its connection is the one of this name that last ran HGETALL.
    let clients: String = env.redis(&redis::cmd("CLIENT").arg("LIST").clone()).await;
    let name = client_name(&test_settings(&env.db_url, &env.prefix).reconcile.instance);
    let ours: Vec<&str> = clients
        .lines()
        .filter(|l| l.contains(&format!(" name={name} ")) && l.contains(" cmd=hgetall "))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .collect();
    assert!(!ours.is_empty(), "no fast connection in {clients}");
    for id in ours {
        let _: () = env
            .redis(redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id))
            .await;
    }
    let before = fast(&env.ctx.redis);
    let (now_ms, reads) = env.ctx.redis.read_showtimes(&[1], false).await.unwrap();
    assert_eq!(
        reads[0].hash,
        HashRead::Fields(SeatFields::from_items(&["A-1", "0"]))
    );
    let server_now = env.ctx.redis.server_time_ms().await.unwrap();
    assert!(
        (server_now - now_ms).abs() < 5_000,
        "{now_ms} vs {server_now}"
    );
    let after = fast(&env.ctx.redis);
    assert_eq!((after.served, after.stood_aside), (before.served + 1, 0));
}

/// A proxy in front of the test's Redis that forwards every byte both ways,
/// except that the first connection whose replies pass `cut_after` bytes is
/// closed right there, in the middle of a reply (once: later connections,
/// and the others, are forwarded whole). Its URL, and whether it cut.
async fn cutting_proxy(cut_after: usize) -> (String, Arc<AtomicBool>) {
    let url = redis_url();
    let info = url.as_str().into_connection_info().unwrap();
    let redis::ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
        panic!("the tests' Redis is over plain TCP");
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    let cut = Arc::new(AtomicBool::new(false));
    let cut_once = cut.clone();
    let target = format!("{host}:{port}");
    let proxied = url.replacen(&target, &proxy.to_string(), 1);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(target.as_str()).await.unwrap();
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            tokio::spawn(async move { tokio::io::copy(&mut from_client, &mut to_server).await });
            let cut = cut_once.clone();
            tokio::spawn(async move {
                let (mut buf, mut sent) = (vec![0u8; 16 * 1024], 0);
                loop {
                    let n = match from_server.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if sent + n > cut_after && !cut.swap(true, Ordering::SeqCst) {
                        // Part of this reply, then the connection drops.
                        let _ = to_client.write_all(&buf[..cut_after - sent]).await;
                        return;
                    }
                    if to_client.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    sent += n;
                }
            });
        }
    });
    (proxied, cut)
}

/// The connection drops in the middle of a reply (Redis restarting while a
/// pipeline's replies arrive): no part of it is used; the same keys are
/// read through the crate, whole, and the fast reader stands aside.
#[tokio::test(flavor = "multi_thread")]
async fn a_reply_cut_off_halfway_is_read_again_through_the_crate() {
    let env = TestEnv::new().await;
    let k = &env.ctx.redis.keys;
    write(&env, &k.seat(1), &Shape::Big(3_000)).await;
    write(
        &env,
        &k.seat(2),
        &Shape::Hash(vec![(b"A-1".to_vec(), b"2".to_vec())]),
    )
    .await;
    let (url, cut) = cutting_proxy(20_000).await;
    let store = store_at(&url, &env.prefix).await;
    let (_, through_proxy) = store.read_showtimes(&[1, 2], true).await.unwrap();
    assert!(cut.load(Ordering::SeqCst), "the big reply was cut");
    let (_, direct) = env.ctx.redis.read_showtimes(&[1, 2], true).await.unwrap();
    assert_eq!(comparable(&through_proxy), comparable(&direct));
    assert!(matches!(&direct[0].hash, HashRead::Fields(f) if f.len() == 3_000));
    let after = fast(&store);
    assert_eq!(
        (after.served, after.stood_aside, after.resting),
        (0, 1, true)
    );
    let reads = store.seat_hash_reads();
    assert_eq!((reads.fast, reads.through_crate), (0, 1));
}

/// `seatflow_reconcile_seat_hash_reads_total` counts each read by the
/// reader that answered it, both series there from the start.
#[tokio::test(flavor = "multi_thread")]
async fn each_read_is_counted_by_the_reader_that_answered_it() {
    let env = TestEnv::new().await;
    let store = store_at(&redis_url(), &env.prefix).await;
    let counted = store.clone();
    let metrics = SeatHashReadMetrics::new(move || counted.seat_hash_reads());
    let exported = || -> Vec<(String, u64)> {
        let families = metrics.collect();
        assert_eq!(families.len(), 1);
        assert_eq!(families[0].name(), seat_reads::FAMILY);
        families[0]
            .get_metric()
            .iter()
            .map(|m| {
                let label = m.get_label()[0].value().to_string();
                (label, m.get_counter().get_value() as u64)
            })
            .collect()
    };
    let series = |fast, through_crate| vec![("crate".into(), through_crate), ("fast".into(), fast)];
    assert_eq!(exported(), series(0, 0));
    store.read_showtimes(&[1], false).await.unwrap();
    store.read_showtimes(&[1, 2], true).await.unwrap();
    let without = store.clone().without_fast_reads();
    without.read_showtimes(&[1], false).await.unwrap();
    assert_eq!(exported(), series(2, 1));
    assert_eq!(exported(), series(2, 1), "a second scrape adds nothing");
}

/// A read the server refuses (NOPERM on one of the keys) fails as it does
/// through the crate, with the crate's error, and the fast reader stands
/// aside; a read it may make, logged in as an ACL user, is answered fast.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_read_fails_with_the_crates_error_and_the_fast_reader_stands_aside() {
    let env = TestEnv::new().await;
    let user = AclUser::create(&env, &[1], &[]).await;
    let store = store_at(&user.url(), &env.prefix).await;
    store.read_showtimes(&[1], false).await.unwrap();
    assert_eq!(
        fast(&store).served,
        1,
        "logged in with the user's name and password"
    );
    let through_fast = store.read_showtimes(&[1, 2], false).await.unwrap_err();
    let through_crate = store
        .clone()
        .without_fast_reads()
        .read_showtimes(&[1, 2], false)
        .await
        .unwrap_err();
    assert_eq!(through_fast.to_string(), through_crate.to_string());
    assert!(
        through_fast.to_string().to_lowercase().contains("noperm"),
        "{through_fast}"
    );
    let after = fast(&store);
    assert_eq!(
        (after.served, after.stood_aside, after.resting),
        (1, 1, true)
    );
}

/// A database number in the URL: the fast reader selects it as the crate
/// does, so both read that database's keys.
#[tokio::test(flavor = "multi_thread")]
async fn the_fast_reader_reads_the_database_the_url_names() {
    let env = TestEnv::new().await;
    let url = format!("{}/3", redis_url().trim_end_matches('/'));
    let store = store_at(&url, &env.prefix).await;
    let key = store.keys.seat(1);
    let mut db3 = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("A-1")
        .arg("2")
        .query_async(&mut db3)
        .await
        .unwrap();
    let fast_read = store.read_showtimes(&[1], false).await;
    let crate_read = store
        .clone()
        .without_fast_reads()
        .read_showtimes(&[1], false)
        .await;
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut db3)
        .await
        .unwrap();
    let (fast_read, crate_read) = (fast_read.unwrap().1, crate_read.unwrap().1);
    assert_eq!(comparable(&fast_read), comparable(&crate_read));
    assert!(
        comparable(&fast_read)[0].starts_with("Fields("),
        "{fast_read:?}"
    );
    assert_eq!(fast(&store).served, 1);
}

/// `redis.fast_seat_reads = false`: no fast reader, every read through the
/// crate, and the sweep repairs as before.
#[tokio::test(flavor = "multi_thread")]
async fn fast_seat_reads_off_reads_everything_through_the_crate() {
    let env = TestEnv::with(|s| s.redis.fast_seat_reads = false).await;
    assert_eq!(env.ctx.redis.fast_reads(), None);
    let k = &env.ctx.redis.keys;
    write(
        &env,
        &k.seat(1),
        &Shape::Hash(vec![(b"A-1".to_vec(), b"2".to_vec())]),
    )
    .await;
    let (_, reads) = env.ctx.redis.read_showtimes(&[1], false).await.unwrap();
    assert_eq!(
        reads[0].hash,
        HashRead::Fields(SeatFields::from_items(&["A-1", "2"]))
    );
}
