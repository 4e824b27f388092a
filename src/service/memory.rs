//! Keeping the resident set small on a 512 MiB device.
//!
//! glibc's malloc keeps freed memory in per-thread arenas and returns it to the kernel
//! only from the top of each heap. After a burst of calls served by several threads the
//! daemon would sit at its peak RSS forever. So: at most two arenas (the daemon's
//! threads mostly wait on I/O; contention is not the constraint), and when the daemon
//! goes idle after activity, `malloc_trim` hands every free page back.
//!
//! Other allocators / libcs: both calls are no-ops.

/// Called once at startup, before the runtime spawns its threads.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator tunable; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Returns free heap pages to the kernel.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim is thread-safe and only releases memory that is free.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Decides when to trim: once after each burst of activity, on the first quiet pass.
#[derive(Debug, Default)]
pub struct IdleTrim {
    last_seen: u64,
    dirty: bool,
}

impl IdleTrim {
    /// `activity` is any counter that moves while the daemon works (requests served).
    /// Returns true when the caller should release memory now.
    pub fn observe(&mut self, activity: u64) -> bool {
        if activity != self.last_seen {
            self.last_seen = activity;
            self.dirty = true;
            return false;
        }
        std::mem::take(&mut self.dirty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_after_each_burst_when_quiet() {
        let mut t = IdleTrim::default();
        assert!(!t.observe(0), "never trim a daemon that has done nothing");
        assert!(!t.observe(5), "busy");
        assert!(!t.observe(9), "still busy");
        assert!(t.observe(9), "first quiet pass");
        assert!(!t.observe(9), "only once per burst");
        assert!(!t.observe(10));
        assert!(t.observe(10));
    }
}
