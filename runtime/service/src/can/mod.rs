//! The `can` action (docs/rules.md#the-can-action): one raw SocketCAN frame per action.
//!
//! Sockets are opened lazily, one per interface, and dropped after a failed
//! write so the next frame reopens them. One write per frame, never retried:
//! a frame that did not go out is a failed action, not a queued one.

mod sys;

use rulecore::bundle::CanFrame;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

/// `CAN_EFF_FLAG`: the id is a 29-bit extended id.
const EFF_FLAG: u32 = 0x8000_0000;
/// `CAN_RTR_FLAG`: a remote transmission request.
const RTR_FLAG: u32 = 0x4000_0000;
const SFF_MASK: u32 = 0x7FF;
const EFF_MASK: u32 = 0x1FFF_FFFF;
/// `sizeof(struct can_frame)`.
const FRAME_LEN: usize = 16;

/// Encodes `frame` as the kernel's `struct can_frame`: `can_id` (host byte
/// order, with the EFF/RTR flags), `len`, three pad/reserved bytes, 8 data
/// bytes zero-filled.
fn encode_frame(frame: &CanFrame) -> [u8; FRAME_LEN] {
    let mut can_id = if frame.extended {
        (frame.id & EFF_MASK) | EFF_FLAG
    } else {
        frame.id & SFF_MASK
    };
    if frame.rtr {
        can_id |= RTR_FLAG;
    }
    let mut out = [0u8; FRAME_LEN];
    out[..4].copy_from_slice(&can_id.to_ne_bytes());
    let data_len = frame.data.len().min(8);
    // A remote frame carries no data but asks for `dlc` bytes.
    out[4] = if frame.rtr {
        frame.dlc.min(8)
    } else {
        data_len as u8
    };
    if !frame.rtr {
        out[8..8 + data_len].copy_from_slice(&frame.data[..data_len]);
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum CanError {
    #[error("cannot open a CAN socket on `{iface}`: {source}")]
    Open {
        iface: String,
        source: std::io::Error,
    },
    #[error("write failed: {0}")]
    Write(std::io::Error),
    #[error("short write: {0} of {FRAME_LEN} bytes")]
    Short(usize),
}

/// Lazily opened raw CAN sockets, one per interface.
#[derive(Debug, Clone, Default)]
pub struct CanSockets(Arc<Mutex<HashMap<String, File>>>);

impl CanSockets {
    /// Sends one frame. The socket is non-blocking: a full transmit queue is
    /// a failure, never a wait.
    pub fn send(&self, frame: &CanFrame) -> Result<(), CanError> {
        let bytes = encode_frame(frame);
        let mut sockets = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !sockets.contains_key(&frame.iface) {
            let fd = sys::open_raw(&frame.iface).map_err(|source| CanError::Open {
                iface: frame.iface.clone(),
                source,
            })?;
            sockets.insert(frame.iface.clone(), File::from(fd));
        }
        let Some(socket) = sockets.get_mut(&frame.iface) else {
            return Err(CanError::Write(std::io::ErrorKind::NotFound.into()));
        };
        let written = socket.write(&bytes);
        let outcome = match written {
            Ok(n) if n == FRAME_LEN => Ok(()),
            Ok(n) => Err(CanError::Short(n)),
            Err(e) => Err(CanError::Write(e)),
        };
        if outcome.is_err() {
            // Reopen on the next frame: the interface may have gone down
            // and come back with a new index.
            sockets.remove(&frame.iface);
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(id: u32, extended: bool, rtr: bool, dlc: u8, data: &[u8]) -> CanFrame {
        CanFrame {
            iface: "vcan0".into(),
            id,
            extended,
            rtr,
            dlc,
            data: data.to_vec(),
        }
    }

    #[test]
    fn standard_data_frame() {
        let bytes = encode_frame(&frame(0x123, false, false, 3, &[1, 2, 3]));
        assert_eq!(
            u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            0x123
        );
        assert_eq!(bytes[4], 3);
        assert_eq!(&bytes[5..8], &[0, 0, 0]);
        assert_eq!(&bytes[8..], &[1, 2, 3, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn extended_frame_sets_eff() {
        let bytes = encode_frame(&frame(0x1ABC_DEF0, true, false, 8, &[0xFF; 8]));
        assert_eq!(
            u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            0x1ABC_DEF0 | EFF_FLAG
        );
        assert_eq!(bytes[4], 8);
        assert_eq!(&bytes[8..], &[0xFF; 8]);
    }

    #[test]
    fn remote_frame_carries_dlc_not_data() {
        let bytes = encode_frame(&frame(0x7FF, false, true, 4, &[]));
        assert_eq!(
            u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            0x7FF | RTR_FLAG
        );
        assert_eq!(bytes[4], 4);
        assert_eq!(&bytes[8..], &[0; 8]);
    }

    #[test]
    fn empty_data_frame() {
        let bytes = encode_frame(&frame(0x10, false, false, 0, &[]));
        assert_eq!(bytes[4], 0);
        assert_eq!(&bytes[8..], &[0; 8]);
    }

    #[test]
    fn missing_interface_is_an_open_error() {
        let sockets = CanSockets::default();
        let mut f = frame(0x1, false, false, 0, &[]);
        f.iface = "nosuchcan9".into();
        assert!(matches!(sockets.send(&f), Err(CanError::Open { .. })));
    }

    /// The send path on a real `vcan0`; needs `ip link add vcan0 type vcan`
    /// (the vcan kernel module) and is skipped, saying why, where that fails.
    #[test]
    fn sends_on_vcan_when_available() {
        let up = std::process::Command::new("ip")
            .args(["link", "show", "vcan0"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !up {
            let made = std::process::Command::new("ip")
                .args(["link", "add", "vcan0", "type", "vcan"])
                .output();
            let ok = matches!(&made, Ok(o) if o.status.success());
            if !ok {
                eprintln!(
                    "SKIPPED sends_on_vcan_when_available: cannot create vcan0 ({}); \
                     needs the vcan kernel module and CAP_NET_ADMIN",
                    match &made {
                        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                        Err(e) => e.to_string(),
                    }
                );
                return;
            }
            let _ = std::process::Command::new("ip")
                .args(["link", "set", "up", "vcan0"])
                .status();
        }
        // A second raw socket on the interface sees what the first sends.
        let mut listener = File::from(sys::open_raw("vcan0").unwrap());
        let sent = [
            frame(0x123, false, false, 2, &[0xAB, 0xCD]),
            frame(0x1234_5678, true, true, 8, &[]),
        ];
        let sockets = CanSockets::default();
        for frame in &sent {
            sockets.send(frame).unwrap();
        }
        for frame in &sent {
            let mut got = [0u8; FRAME_LEN];
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            loop {
                match std::io::Read::read(&mut listener, &mut got) {
                    Ok(n) => {
                        assert_eq!(n, FRAME_LEN);
                        break;
                    }
                    Err(e)
                        if e.kind() == std::io::ErrorKind::WouldBlock
                            && std::time::Instant::now() < deadline =>
                    {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    Err(e) => panic!("reading the frame back from vcan0: {e}"),
                }
            }
            assert_eq!(got, encode_frame(frame), "{frame:?}");
        }
    }
}
