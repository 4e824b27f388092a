//! Who runs this command on the gateway host: the subject of the tokens the CLI mints
//! for itself (`outpost nodes approve`, `outpost call`, …) and for others (`outpost
//! token issue` without `--sub`), and the actor of the gateway audit entries a command
//! writes itself (`outpost trust add|rm`, `outpost enroll-token create|revoke`), so the
//! gateway's own audit log names a person, not a role (PROTOCOL §15.6).
//!
//! `local:<user>`: the user name of the real uid (`getpwuid_r`), else `$USER`, else
//! `uid:<n>`. Commands on a gateway host usually run as the service user (`sudo -u
//! outpost outpost nodes approve …`, its key is readable by it alone), which alone would
//! name every operator alike; so when sudo says another user ran it (`$SUDO_USER`), that
//! user comes first: `local:alice (sudo as outpost)`. It is what the system reports,
//! not a proof: whoever can read the gateway's key can mint any subject.

/// Longest user name taken as it is; a longer (or odd) one is named by its uid.
const MAX_NAME: usize = 64;

/// The actor of this process (see the module documentation).
pub fn local_actor() -> String {
    // SAFETY: getuid never fails and touches no memory.
    let uid = unsafe { libc::getuid() };
    let env = |k: &str| std::env::var(k).ok();
    actor(
        user_name(uid).as_deref(),
        env("USER").as_deref(),
        uid,
        env("SUDO_USER").as_deref(),
    )
}

/// [`local_actor`] from what the system said: the passwd name of `uid`, `$USER` and
/// `$SUDO_USER`.
fn actor(passwd: Option<&str>, env_user: Option<&str>, uid: u32, sudo: Option<&str>) -> String {
    let me = passwd
        .filter(|n| plain(n))
        .or(env_user.filter(|n| plain(n)))
        .map_or_else(|| format!("uid:{uid}"), str::to_string);
    match sudo.filter(|s| plain(s) && *s != me) {
        Some(by) => format!("local:{by} (sudo as {me})"),
        None => format!("local:{me}"),
    }
}

/// A name fit for a token's subject and a log line: short, no blanks, no controls.
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// The passwd entry's name of `uid`, if it has one.
fn user_name(uid: libc::uid_t) -> Option<String> {
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: `pwd` and `buf` outlive the call, `buf.len()` is its size, and the
        // name is read only when the call found an entry (`out` non-null), from `buf`.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let rc = unsafe {
            libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut out)
        };
        if rc == libc::ERANGE && buf.len() < 1 << 16 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || out.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
        return name.to_str().ok().map(str::to_string);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_passwd_name_then_user_then_the_uid() {
        assert_eq!(actor(Some("alice"), Some("bob"), 1000, None), "local:alice");
        assert_eq!(actor(None, Some("bob"), 1000, None), "local:bob");
        assert_eq!(actor(None, None, 1000, None), "local:uid:1000");
        assert_eq!(actor(None, Some(""), 7, None), "local:uid:7");
        assert_eq!(actor(Some("a b"), Some("x\ny"), 7, None), "local:uid:7");
        let long = "n".repeat(MAX_NAME + 1);
        assert_eq!(actor(Some(&long), None, 7, None), "local:uid:7");
    }

    #[test]
    fn who_ran_sudo_comes_first() {
        assert_eq!(
            actor(Some("outpost"), None, 998, Some("alice")),
            "local:alice (sudo as outpost)"
        );
        assert_eq!(actor(Some("root"), None, 0, Some("root")), "local:root");
        assert_eq!(actor(Some("outpost"), None, 998, Some("")), "local:outpost");
    }

    #[test]
    fn this_process_has_an_actor_a_token_takes() {
        let a = local_actor();
        assert!(a.starts_with("local:") && a.len() <= 256, "{a}");
    }
}
