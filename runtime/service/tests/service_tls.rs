//! `rediss://` end to end (docs/service.md#tls): a real `redis-server`
//! serving TLS only on its TCP port, with a CA and a server certificate
//! made for the test by `openssl`; `ruled` reaches it over TLS for both its
//! commands and its subscription. The test's own connection uses the
//! server's plain unix socket. Built only with the `tls` feature
//! (`required-features` in Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::bundles::{self, hazards, single};
use support::{free_port, wait_for, RedisServer, Ruled};

/// Runs `openssl` with `args` in `dir`; fails the test with its stderr.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (the TLS test makes its certificates with it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`ca.crt`) and a server certificate it signed for 127.0.0.1 and
/// localhost (`server.crt`, `server.key`), in `dir`.
fn certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=ruled test CA"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    openssl(dir, &ca);
    let mut csr = vec!["req", "-new", "-subj", "/CN=localhost"];
    csr.extend(ec);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n\
         extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
    );
}

/// A redis-server serving TLS on 127.0.0.1:`port` (no plain TCP port),
/// its certificates in `certs`, and that CA file.
struct TlsRedis {
    redis: RedisServer,
    port: u16,
    ca: PathBuf,
    _certs: tempfile::TempDir,
}

impl TlsRedis {
    fn start() -> Self {
        let certs = tempfile::tempdir().unwrap();
        certificates(certs.path());
        let file = |name: &str| certs.path().join(name).to_string_lossy().into_owned();
        let port = free_port();
        let redis = RedisServer::start_with(&[
            "--bind".into(),
            "127.0.0.1".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            file("server.crt"),
            "--tls-key-file".into(),
            file("server.key"),
            "--tls-ca-cert-file".into(),
            file("ca.crt"),
            "--tls-auth-clients".into(),
            "no".into(),
        ]);
        Self {
            redis,
            port,
            ca: certs.path().join("ca.crt"),
            _certs: certs,
        }
    }

    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    /// `CLIENT LIST` lines of clients connected to the TLS port.
    fn tls_clients(&self) -> Vec<String> {
        let list: String = self.redis.query(&["CLIENT", "LIST"]);
        let port = format!("laddr=127.0.0.1:{} ", self.port);
        list.lines()
            .filter(|line| line.contains(&port))
            .map(str::to_string)
            .collect()
    }
}

fn blinker(redis: &RedisServer) -> Vec<String> {
    let mut items: Vec<String> = redis.query(&["LRANGE", "scooter:blinker", "0", "-1"]);
    items.reverse();
    items
}

#[test]
fn a_rule_fires_over_tls_with_a_ca_file() {
    let server = TlsRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundles::write(dir.path(), "b", &single(hazards(300)));
    let ca = server.ca.to_string_lossy().into_owned();
    let ruled = Ruled::start_with(&server.url(), &bundle, &["--redis-ca-file", &ca], &[]);
    ruled.wait_ready();
    // Both of ruled's command connections and its subscription came in
    // on the TLS port (the server has no plain TCP port).
    wait_for("ruled's connections on the TLS port", || {
        let clients = server.tls_clients();
        clients.len() >= 3
            && clients
                .iter()
                .any(|c| c.contains(" psub=1 ") || c.contains(" sub=1 "))
    });
    let receivers: i64 = server.redis.query(&[
        "PUBLISH",
        "ev:alarm.triggered",
        r#"{"topic":"alarm.triggered"}"#,
    ]);
    assert_eq!(receivers, 1, "ruled subscribed; log:\n{}", ruled.log_text());
    wait_for("both, then off, pushed over TLS", || {
        blinker(&server.redis) == ["both", "off"]
    });
    ruled.wait_log(&["connected to redis", "rediss://127.0.0.1"]);
}

#[test]
fn a_server_certificate_the_roots_do_not_vouch_for_is_refused() {
    let server = TlsRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundles::write(dir.path(), "b", &single(hazards(300)));
    // No CA file: the compiled-in public roots, which do not know the
    // test's CA.
    let ruled = Ruled::start_with(&server.url(), &bundle, &[], &[]);
    let line = ruled.wait_log(&["cannot connect to redis"]);
    assert!(line.to_lowercase().contains("certificate"), "{line}");
    assert!(!ruled.log_text().contains("ruled ready"));
}

#[test]
fn an_unreadable_ca_file_stops_the_start_naming_it() {
    let server = TlsRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundles::write(dir.path(), "b", &single(hazards(300)));
    let missing = dir.path().join("no-such-ca.pem");
    let mut ruled = Ruled::start_with(
        &server.url(),
        &bundle,
        &["--redis-ca-file", &missing.to_string_lossy()],
        &[],
    );
    assert_eq!(ruled.wait_exit(), Some(1));
    let log = ruled.log_text();
    assert!(log.contains("no-such-ca.pem"), "{log}");
}
