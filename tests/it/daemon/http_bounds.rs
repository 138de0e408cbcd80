//! The daemon's HTTP server is bounded: a silent or idle client is cut off
//! after `http.header_timeout`, and at most `http.max_connections` are
//! served at once; on the defaults, idle and slow clients cannot crowd out
//! the probes.

use std::time::Duration;

use seatflow_test_support::TestEnv;
use seatflow_test_support::daemon::InProcessDaemon;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn settings_env(header_timeout: Duration, max_connections: usize) -> TestEnv {
    TestEnv::with(|s| {
        for kind in seatflow_reconciler::model::Kind::ALL {
            s.job_mut(kind).enabled = false;
        }
        s.http.header_timeout = header_timeout;
        s.http.max_connections = max_connections;
    })
    .await
}

/// Reads until the server closes the connection; panics if it stays open
/// for `limit` (far longer than the configured timeout).
async fn closed_by_server(stream: &mut TcpStream, limit: Duration) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(limit, stream.read_to_end(&mut got))
        .await
        .expect("the server closes a connection that sends no complete request")
        .unwrap();
    got
}

async fn healthz(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Connections the kernel has completed on the listening socket at `addr`
/// that the server has not accepted yet: the LISTEN row's receive queue in
/// /proc/net/tcp (for a listener, the accept queue's length).
fn accept_queue(addr: std::net::SocketAddr) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("Linux: /proc/net/tcp");
    let port = format!(":{:04X}", addr.port());
    table.lines().skip(1).find_map(|row| {
        let cols: Vec<&str> = row.split_whitespace().collect();
        let listening = cols.get(3) == Some(&"0A");
        (listening && cols.get(1)?.ends_with(&port))
            .then(|| u64::from_str_radix(cols.get(4)?.split(':').nth(1)?, 16).ok())
            .flatten()
    })
}

#[tokio::test]
async fn silent_partial_and_idle_clients_are_cut_off() {
    let env = settings_env(Duration::from_secs(1), 64).await;
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    let addr = daemon.addr;

    let mut silent = TcpStream::connect(addr).await.unwrap();
    closed_by_server(&mut silent, Duration::from_secs(60)).await;

    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    closed_by_server(&mut partial, Duration::from_secs(60)).await;

    // A keep-alive connection that served a request, then went quiet.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    assert!(healthz(&mut idle).await.starts_with("HTTP/1.1 200"));
    closed_by_server(&mut idle, Duration::from_secs(60)).await;

    daemon.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_until_one_closes() {
    let env = settings_env(Duration::from_secs(60), 1).await;
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    let addr = daemon.addr;

    let mut first = TcpStream::connect(addr).await.unwrap();
    assert!(healthz(&mut first).await.starts_with("HTTP/1.1 200"));
    // `first` stays open (keep-alive): the only slot is taken.
    let second = tokio::spawn(async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        healthz(&mut s).await
    });
    // Judged by the server's own state, not by a pause: the kernel holds the
    // second connection in the listening socket's accept queue, and it is
    // still there after the server has answered another request on `first`
    // (so the server was running, and did not accept it).
    let queued_or_served = async {
        while accept_queue(addr) != Some(1) && !second.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), queued_or_served)
        .await
        .expect("hang guard: the second connection was neither queued nor served");
    assert!(healthz(&mut first).await.starts_with("HTTP/1.1 200"));
    assert_eq!(
        accept_queue(addr),
        Some(1),
        "a second connection was accepted while the only slot was taken"
    );
    assert!(!second.is_finished());
    drop(first);
    let reply = tokio::time::timeout(Duration::from_secs(60), second)
        .await
        .expect("the waiting connection is served once the slot frees")
        .unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");

    daemon.stop().await;
}

/// A probe's request on a connection of its own; the server's answer.
async fn probe(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// On the shipped defaults: several hundred idle connections and a client
/// that sends its request a byte at a time do not keep `/healthz`,
/// `/readyz` and `/metrics` from answering (each within a generous bound,
/// where the former 64-connection cap kept a probe waiting behind them for
/// tens of seconds), and the slow client is cut off before its request is
/// complete.
#[tokio::test]
async fn probes_answer_while_idle_and_slow_clients_hold_connections() {
    let env = TestEnv::with(|s| {
        for kind in seatflow_reconciler::model::Kind::ALL {
            s.job_mut(kind).enabled = false;
        }
    })
    .await;
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    let addr = daemon.addr;
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    let slow = tokio::spawn(async move {
        let (mut from, mut to) = TcpStream::connect(addr).await.unwrap().into_split();
        let send = async {
            for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" {
                if to.write_all(&[*byte]).await.is_err() {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        };
        let mut got = Vec::new();
        tokio::select! {
            () = send => "sent its whole request",
            _ = from.read_to_end(&mut got) => "cut off",
        }
    });
    for path in ["/healthz", "/readyz", "/metrics"] {
        let answer = tokio::time::timeout(Duration::from_secs(10), probe(addr, path))
            .await
            .unwrap_or_else(|_| panic!("{path} was not answered beside 300 idle connections"));
        // Answered: what /readyz says of the stores is not this test's.
        let expected = if path == "/readyz" {
            "HTTP/1.1 "
        } else {
            "HTTP/1.1 200"
        };
        assert!(answer.starts_with(expected), "{path}: {answer}");
    }
    let slow = tokio::time::timeout(Duration::from_secs(60), slow)
        .await
        .expect("hang guard")
        .unwrap();
    assert_eq!(slow, "cut off", "a request trickled over 9 s");
    drop(idle);
    daemon.stop().await;
}

/// A client that sends a whole request head and then only part of the body
/// it announced (a POST of `/jobs/<job>/run`, a GET with a body) is cut off
/// too: waiting for the rest is a wait on the client like any other.
#[tokio::test]
async fn a_client_that_never_sends_its_announced_body_is_cut_off() {
    let env = settings_env(Duration::from_secs(1), 64).await;
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    let addr = daemon.addr;
    for head in [
        "POST /jobs/orphan-locks/run HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\":",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    ] {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        closed_by_server(&mut stream, Duration::from_secs(60)).await;
    }
    daemon.stop().await;
}
