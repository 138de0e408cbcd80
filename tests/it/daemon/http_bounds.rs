//! The daemon's HTTP server is bounded: a silent or idle client is cut off
//! after `http.header_timeout`, and at most `http.max_connections` are
//! served at once.

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
