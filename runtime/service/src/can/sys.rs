//! The one place that needs `unsafe`: opening a raw SocketCAN socket bound
//! to an interface. nix has no CAN socket address, so this goes to libc.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::OwnedFd;

#[cfg(target_os = "linux")]
pub fn open_raw(iface: &str) -> io::Result<OwnedFd> {
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd};

    let name = CString::new(iface).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    let ifindex =
        libc::c_int::try_from(index).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a plain syscall with constant arguments; no pointers.
    let raw = unsafe {
        libc::socket(
            libc::AF_CAN,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            libc::CAN_RAW,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh, valid descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: sockaddr_can is plain old data for which all-zero is valid.
    let mut addr: libc::sockaddr_can = unsafe { std::mem::zeroed() };
    addr.can_family = libc::AF_CAN as libc::sa_family_t;
    addr.can_ifindex = ifindex;
    // SAFETY: `addr` is an initialised sockaddr_can living across the call,
    // and the length passed is exactly its size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::addr_of!(addr).cast::<libc::sockaddr>(),
            std::mem::size_of::<libc::sockaddr_can>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

#[cfg(not(target_os = "linux"))]
pub fn open_raw(_iface: &str) -> io::Result<OwnedFd> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "SocketCAN exists only on Linux",
    ))
}
