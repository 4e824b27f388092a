//! Binding the API socket and telling the world where it is.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;

/// Write `<data_dir>/api.addr` atomically (temp + fsync + rename), so scripts, tests and
/// `outpost status` find a daemon started on port 0 without parsing logs.
pub fn write_addr_file(data_dir: &Path, addr: SocketAddr) -> std::io::Result<()> {
    let tmp = data_dir.join(".api.addr.tmp");
    let dst = data_dir.join("api.addr");
    {
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(f, "{addr}")?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &dst)
}

pub fn remove_addr_file(data_dir: &Path) {
    let _ = std::fs::remove_file(data_dir.join("api.addr"));
}

/// Read a running daemon's address: `api.addr` if present, else the configured one.
pub fn read_addr_file(data_dir: &Path) -> Option<SocketAddr> {
    std::fs::read_to_string(data_dir.join("api.addr"))
        .ok()?
        .trim()
        .parse()
        .ok()
}
