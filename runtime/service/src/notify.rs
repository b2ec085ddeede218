//! systemd readiness (sd_notify protocol, at start and stop, see
//! docs/service.md#start-and-stop): with `Type=notify`, systemd considers ruled started once it is
//! subscribed, so units ordered after it do not publish events nobody hears
//! yet. A no-op outside systemd.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (`READY=1`, `STOPPING=1`) to `$NOTIFY_SOCKET`, if set.
/// Failures are logged and otherwise ignored: readiness is a courtesy.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sent = UnixDatagram::unbound().and_then(|socket| {
        let bytes = path.as_encoded_bytes();
        match bytes.strip_prefix(b"@") {
            // An abstract socket: Linux only.
            #[cfg(target_os = "linux")]
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                socket.send_to_addr(state.as_bytes(), &addr)
            }
            #[cfg(not(target_os = "linux"))]
            Some(_) => Err(std::io::ErrorKind::Unsupported.into()),
            None => socket.send_to(state.as_bytes(), &path),
        }
    });
    if let Err(e) = sent {
        tracing::warn!("cannot notify systemd ({state}): {e}");
    }
}
