//! One connection to the server, as the configured URL and TLS settings
//! say (sqlx's URL, read for mysql_async), the text queries the set-up
//! runs on it, and the server's error numbers the source tells apart.

use std::time::Duration;

use mysql_async::prelude::Queryable as _;
use mysql_async::{ClientIdentity, Conn, OptsBuilder, Row, SslOpts, Value};

use crate::error::{Error, Result};
use crate::store::mysql::{MySqlSslMode, MysqlTls};

/// The server's error numbers the binlog source tells apart.
pub(super) const ACCESS_DENIED_FOR_OPERATION: u16 = 1227; // ER_SPECIFIC_ACCESS_DENIED_ERROR
pub(super) const ACCESS_DENIED: u16 = 1045; // ER_ACCESS_DENIED_ERROR
pub(super) const SYNTAX_ERROR: u16 = 1064;
pub(super) const FATAL_READING_BINLOG: u16 = 1236; // ER_MASTER_FATAL_ERROR_READING_BINLOG

/// The server's error number, if `e` is an error the server sent.
pub(super) fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

/// Connection options from the configured URL (sqlx's: its TLS parameters
/// are read here, any other one is left alone, since mysql_async refuses
/// parameters it does not know) and TLS settings. `tls` says TLS or not:
/// mysql_async has no "preferred" (TLS if offered); see [`connect`].
fn opts(url: &str, tls: &MysqlTls, with_tls: bool) -> Result<mysql_async::Opts> {
    let bad = |why: &str| Error::BinlogSetup(vec![format!("mysql.url: {why}")]);
    let u = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if u.scheme() != "mysql" && u.scheme() != "mariadb" {
        return Err(bad("not a mysql:// URL"));
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let host = u.host_str().ok_or_else(|| bad("no host"))?;
    let db = u.path().trim_start_matches('/');
    let mut builder = OptsBuilder::default()
        .ip_or_hostname(host.trim_start_matches('[').trim_end_matches(']'))
        .tcp_port(u.port().unwrap_or(3306))
        .user(Some(decode(u.username())).filter(|s| !s.is_empty()))
        .pass(u.password().map(decode))
        .db_name(Some(decode(db)).filter(|s| !s.is_empty()))
        // Where the URL says, not the server's socket on a local host.
        .prefer_socket(false);
    if with_tls {
        let param = |name: &str| {
            u.query_pairs()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.into_owned())
        };
        let mode = tls
            .mode
            .unwrap_or_else(|| url_mode(param("ssl-mode").as_deref()));
        let ca = tls
            .ca_file
            .clone()
            .or_else(|| param("ssl-ca").map(Into::into));
        let client = tls
            .client
            .clone()
            .or_else(|| Some((param("ssl-cert")?.into(), param("ssl-key")?.into())));
        let mut ssl = SslOpts::default();
        if let Some(ca) = ca {
            ssl = ssl.with_root_certs(vec![ca.into()]);
        }
        if let Some((cert, key)) = client {
            ssl = ssl.with_client_identity(Some(ClientIdentity::new(cert.into(), key.into())));
        }
        ssl = match mode {
            MySqlSslMode::VerifyIdentity => ssl,
            MySqlSslMode::VerifyCa => ssl.with_danger_skip_domain_validation(true),
            _ => ssl
                .with_danger_skip_domain_validation(true)
                .with_danger_accept_invalid_certs(true),
        };
        builder = builder.ssl_opts(ssl);
    }
    Ok(builder.into())
}

/// sqlx's `ssl-mode` URL parameter; its default is `PREFERRED`.
fn url_mode(value: Option<&str>) -> MySqlSslMode {
    value
        .and_then(|v| v.parse().ok())
        .unwrap_or(MySqlSslMode::Preferred)
}

/// One connection as `url` and `tls` say: TLS when the mode asks for it;
/// with `PREFERRED` (sqlx's default), TLS if the server offers it, else
/// plain text, as sqlx does.
pub(super) async fn connect(url: &str, tls: &MysqlTls, timeout: Duration) -> Result<Conn> {
    let u = url::Url::parse(url).ok();
    let url_param = u.as_ref().and_then(|u| {
        u.query_pairs()
            .find(|(k, _)| k == "ssl-mode")
            .map(|(_, v)| v.into_owned())
    });
    let mode = tls.mode.unwrap_or_else(|| url_mode(url_param.as_deref()));
    let within = |o: mysql_async::Opts| async move {
        tokio::time::timeout(timeout, Conn::new(o))
            .await
            .map_err(|_| Error::BinlogGap(format!("no connection within {timeout:?}")))?
            .map_err(Error::from)
    };
    match mode {
        MySqlSslMode::Disabled => within(opts(url, tls, false)?).await,
        MySqlSslMode::Preferred => match within(opts(url, tls, true)?).await {
            Err(Error::Binlog(mysql_async::Error::Driver(
                mysql_async::DriverError::NoClientSslFlagFromServer,
            ))) => within(opts(url, tls, false)?).await,
            other => other,
        },
        _ => within(opts(url, tls, true)?).await,
    }
}

/// A result row's columns as text (the text protocol's values are bytes).
fn texts(row: &Row) -> Vec<String> {
    (0..row.len())
        .map(|i| match row.as_ref(i) {
            Some(Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::Int(n)) => n.to_string(),
            Some(Value::UInt(n)) => n.to_string(),
            _ => String::new(),
        })
        .collect()
}

/// The first row of `query`'s result, as text columns.
pub(super) async fn first_row(conn: &mut Conn, query: &str) -> Result<Option<Vec<String>>> {
    let row: Option<Row> = conn.query_first(query).await?;
    Ok(row.as_ref().map(texts))
}

/// Every row of `query`, as text columns.
pub(super) async fn all_rows(conn: &mut Conn, query: &str) -> Result<Vec<Vec<String>>> {
    let rows: Vec<Row> = conn.query(query).await?;
    Ok(rows.iter().map(texts).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_gives_host_port_credentials_and_database_and_sqlx_parameters_are_left_out() {
        let o = opts(
            "mysql://rec%40x:p%2Fw@db.example:3307/seatflow?ssl-mode=disabled&statement-cache-capacity=10",
            &MysqlTls::default(),
            false,
        )
        .unwrap();
        assert_eq!(o.ip_or_hostname(), "db.example");
        assert_eq!(o.tcp_port(), 3307);
        assert_eq!(o.user(), Some("rec@x"));
        assert_eq!(o.pass(), Some("p/w"));
        assert_eq!(o.db_name(), Some("seatflow"));
        assert!(o.ssl_opts().is_none());
        assert!(!o.prefer_socket());
        let tls = opts("mysql://u@h/db", &MysqlTls::default(), true).unwrap();
        assert!(tls.ssl_opts().is_some());
        assert!(matches!(
            url_mode(Some("VERIFY_CA")),
            MySqlSslMode::VerifyCa
        ));
        assert!(matches!(url_mode(None), MySqlSslMode::Preferred));
    }
}
