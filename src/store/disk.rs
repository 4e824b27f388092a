//! The one `statvfs(2)` of the crate: how much room the file system holding a
//! directory has (the store's free bytes, `outpost doctor`, the sysinfo tool, the
//! node's inventory).

/// A file system's size and room, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskUsage {
    pub total: u64,
    pub free: u64,
    pub available: u64,
}

/// `statvfs(2)` of the filesystem holding `dir`, or None if it cannot be read.
pub fn disk_usage(dir: &std::path::Path) -> Option<DiskUsage> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs only writes into the zeroed struct we own; `c` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    // The field widths differ between targets (u32 on armv7).
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    let (frsize, blocks, bfree, bavail) = (
        st.f_frsize as u64,
        st.f_blocks as u64,
        st.f_bfree as u64,
        st.f_bavail as u64,
    );
    Some(DiskUsage {
        total: blocks.saturating_mul(frsize),
        free: bfree.saturating_mul(frsize),
        available: bavail.saturating_mul(frsize),
    })
}
